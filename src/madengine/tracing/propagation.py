"""Trace and span ids in OpenTelemetry's format, and W3C Trace Context (``traceparent``) text.

A child process continues its parent's trace when the parent puts ``TRACEPARENT`` (and
``TRACESTATE``, when there is one) in its environment: ``00-<trace id>-<span id>-<flags>``.
https://www.w3.org/TR/trace-context/#traceparent-header
"""

from __future__ import annotations

import random
from typing import NamedTuple

_HEX = frozenset("0123456789abcdef")
_INVALID_TRACE_ID = "0" * 32
_INVALID_SPAN_ID = "0" * 16
SAMPLED = 0x01

# Ids need to be unique, not secret (the OpenTelemetry SDK makes them the same way). The module's
# generator is reseeded in a forked child, so forked workers never repeat their parent's ids.


def new_trace_id() -> str:
    """32 lowercase hex digits, never all zero (an invalid id in OpenTelemetry)."""
    return f"{random.getrandbits(128) or 1:032x}"


def new_span_id() -> str:
    """16 lowercase hex digits, never all zero."""
    return f"{random.getrandbits(64) or 1:016x}"


def is_trace_id(text: object) -> bool:
    return isinstance(text, str) and len(text) == 32 and _is_hex(text) and text != _INVALID_TRACE_ID


def is_span_id(text: object) -> bool:
    return isinstance(text, str) and len(text) == 16 and _is_hex(text) and text != _INVALID_SPAN_ID


def _is_hex(text: str) -> bool:
    return _HEX.issuperset(text)


class TraceParent(NamedTuple):
    """A parsed ``traceparent``: the remote parent a new span continues."""

    trace_id: str
    span_id: str
    sampled: bool = True

    def text(self) -> str:
        return format_traceparent(self.trace_id, self.span_id, self.sampled)


def format_traceparent(trace_id: str, span_id: str, sampled: bool = True) -> str:
    return f"00-{trace_id}-{span_id}-{SAMPLED if sampled else 0:02x}"


def parse_traceparent(text: str | None) -> TraceParent | None:
    """The parent in a ``traceparent`` value, or None when it is absent or malformed.

    Follows the W3C rules: version ``ff`` is invalid; version 00 has exactly four fields; a
    later version may append fields, which are ignored. Surrounding white space is tolerated
    (values copied from shells); upper-case hex is not (the specification forbids it).
    """
    if not text:
        return None
    fields = text.strip().split("-")
    if len(fields) < 4:
        return None
    version, trace_id, span_id, flags = fields[:4]
    if len(version) != 2 or not _is_hex(version) or version == "ff":
        return None
    if version == "00" and len(fields) != 4:
        return None
    if not is_trace_id(trace_id) or not is_span_id(span_id) or len(flags) != 2 or not _is_hex(flags):
        return None
    return TraceParent(trace_id, span_id, bool(int(flags, 16) & SAMPLED))
