"""Redaction of secret values from every text that leaves the process.

Secrets are registered by value (credentials, tokens, passwords, credential user names) when they
are loaded; every
writer of logs, perf rows, reports and error messages passes its text through :func:`redact`.
Redacting by value rather than by key catches a secret wherever a script echoes it.

Independently of what was registered, the password of every URL (``scheme://user:password@host``)
in a text is masked too: a URL met anywhere (a model's ``url``, a data provider's endpoint, a
registry, a database URL) and quoted back by a library's error message never shows its password.
"""

from __future__ import annotations

import re
import threading
from urllib.parse import unquote

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


#: words that make a variable's name look like it holds a secret (``HF_TOKEN``, ``AWS_SECRET_ACCESS_KEY``),
#: and endings of one word that do (``HFTOKEN``, ``APIKEY``; ``KEY`` alone ends too many words: ``MONKEY``)
SECRET_WORDS = ("TOKEN", "KEY", "PASSWORD", "PASSWD", "SECRET", "CREDENTIAL", "CREDENTIALS")
_SECRET_ENDINGS = ("TOKEN", "PASSWORD", "PASSWD", "SECRET", "APIKEY", "ACCESSKEY")


def looks_secret(name: str) -> bool:
    """Whether variable ``name`` looks like it holds a secret, by its ``_``-separated words."""
    words = [word for word in name.upper().replace("-", "_").replace(".", "_").split("_") if word]
    return any(word in SECRET_WORDS or word.endswith(_SECRET_ENDINGS) for word in words)


#: account names every system or service has by default: they tell nothing, and masking them would
#: mask ordinary text (``/root``, ``git@host``, ``docker rm``, every ``madengine:`` line, the
#: ``minio`` provider type of a row)
COMMON_USERNAMES = frozenset({
    "root", "admin", "administrator", "user", "guest", "nobody", "anonymous", "test", "testing", "git", "docker",
    "madengine", "ubuntu", "debian", "centos", "ec2-user", "jenkins", "runner", "x-access-token", "x-token-auth",
    "oauth2", "token", "minio", "minioadmin", "local", "custom", "mysql", "postgres", "mongo",
})


def register_username(value: object) -> None:
    """Remember a credential's user name so that :func:`redact` masks it like a password (who may log
    in where is not for a CI log), unless it is one of :data:`COMMON_USERNAMES`."""
    text = "" if value is None else str(value)
    if text.strip().lower() not in COMMON_USERNAMES:
        register_secret(text)


#: ``scheme://user:password@``: the password is everything up to the last ``@`` of the authority
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^\s/?#@:\"'<>]*):(?P<password>[^\s/?#\"'<>]*)@")


def _mask_url_password(match: re.Match) -> str:
    return f"{match['head']}:{MASK}@" if match["password"] else match[0]


def url_passwords(text: str) -> list[str]:
    """The passwords of the URLs in ``text`` (as written, and percent-decoded when that differs)."""
    if "@" not in text or "://" not in text:  # "@" first: a memchr, where ":" is in every JSON text
        return []
    found = []
    for match in _URL_PASSWORD.finditer(text):
        password = match["password"]
        if password:
            found.append(password)
            if unquote(password) != password:
                found.append(unquote(password))
    return found


def url_usernames(text: str) -> list[str]:
    """The user names of the URLs in ``text`` that carry a password (a credential, not an address)."""
    if "@" not in text or "://" not in text:
        return []
    found = []
    for match in _URL_PASSWORD.finditer(text):
        user = match["head"].split("://", 1)[1]
        if match["password"] and user:
            found.append(user)
            if unquote(user) != user:
                found.append(unquote(user))
    return found


def register_url_secrets(text: object) -> None:
    """Register the password and user name of every URL inside ``text`` (a model's ``url``, an
    endpoint, ...)."""
    if isinstance(text, str):
        for password in url_passwords(text):
            register_secret(password)
        for user in url_usernames(text):
            register_username(user)


def redact(text: str) -> str:
    """Return ``text`` with every registered secret and every URL password replaced by a mask."""
    if not text:
        return text
    if "@" in text and "://" in text:  # "@" first: a memchr, where ":" is in every JSON text
        text = _URL_PASSWORD.sub(_mask_url_password, text)
    if not _ordered:
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
