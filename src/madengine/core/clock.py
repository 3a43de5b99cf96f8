"""The one timestamp format of madengine's records: ISO-8601 UTC, whole seconds."""

from __future__ import annotations

import datetime


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def timestamp(moment: datetime.datetime) -> str:
    """``2026-11-21T23:19:08+00:00``: what ``started_at``, ``built_at`` and friends hold."""
    return moment.astimezone(datetime.timezone.utc).isoformat(timespec="seconds")


def utc_now() -> str:
    return timestamp(now())
