"""The one timestamp format of madengine's records: ISO-8601 UTC, whole seconds."""

from __future__ import annotations

import datetime


def utc_now() -> str:
    """``2026-11-21T23:19:08+00:00``: what ``started_at``, ``built_at`` and friends hold."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
