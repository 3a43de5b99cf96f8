"""Redaction of secret values from every text that leaves the process.

Secrets are registered by value (credentials, tokens, passwords) when they are loaded; every
writer of logs, perf rows, reports and error messages passes its text through :func:`redact`.
Redacting by value rather than by key catches a secret wherever a script echoes it.
"""

from __future__ import annotations

import threading

MASK = "******"
_MIN_SECRET_LEN = 4  # shorter values would mask ordinary words and numbers

_lock = threading.Lock()
_secrets: set[str] = set()
_ordered: tuple[str, ...] = ()


def register_secret(value: object) -> None:
    """Remember ``value`` so that :func:`redact` masks it from now on."""
    global _ordered
    text = "" if value is None else str(value)
    if len(text) < _MIN_SECRET_LEN:
        return
    with _lock:
        if text in _secrets:
            return
        _secrets.add(text)
        # longest first, so a secret that contains another is masked whole
        _ordered = tuple(sorted(_secrets, key=len, reverse=True))


def redact(text: str) -> str:
    """Return ``text`` with every registered secret replaced by a mask."""
    if not _ordered or not text:
        return text
    for secret in _ordered:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def clear_secrets() -> None:
    """Forget every registered secret (tests use this between cases)."""
    global _ordered
    with _lock:
        _secrets.clear()
        _ordered = ()
