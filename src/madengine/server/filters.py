"""The query parameters of the dashboard's pages and API: every view's state lives in its URL.

:func:`parse` turns the query string's parameters into a :class:`Filters` (or an
:class:`~madengine.core.errors.InputError` naming the parameter: a 400 answer), and
:meth:`Filters.query` turns them back into a query string, so links keep the filters a person chose.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import re
from typing import Any, Mapping
from urllib.parse import urlencode

from madengine.core.errors import InputError
from madengine.results.columns import Status
from madengine.results.identity import FIELDS as IDENTITY_FIELDS

MAX_TEXT = 200  # a filter text longer than this is no search anyone typed
MAX_PAGE = 1_000_000
PER_PAGE = 100
MAX_PER_PAGE = 500
MAX_THRESHOLD = 1000.0  # percent
DEFAULT_THRESHOLD = 3.0  # percent, as `report compare`
_DATE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")
_DATETIME = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}(:[0-9]{2})?$")
KINDS = ("regression", "improvement", "change")
VERDICTS = ("slower", "faster", "inconclusive", "new", "missing", "unchanged")
STATES = ("untriaged", "acknowledged", "expected", "invalid", "fixed")  # madengine.database.alerts.STATES
#: what the paged tables sort by (the overview's results, compare, alerts); each table takes its own
SORTS = ("result", "metric", "status", "performance", "n", "cv", "vs_baseline", "run", "started", "machine", "rows",
         "old", "new", "ratio", "change", "verdict", "weight", "size", "confidence", "state", "kind")
ORDERS = ("asc", "desc")

#: text filters and what they match
TEXT_FIELDS = ("model", "tag", "gpu_architecture", "executor", "machine", "old", "new", "run")


@dataclasses.dataclass(frozen=True)
class Filters:
    """What a view is narrowed to. Empty text means no filter."""

    model: str = ""  #: part of the model name (case-insensitive)
    tag: str = ""  #: one of the row's tags, or one of its tag configs (``size=64`` or ``size``)
    status: str = ""  #: SUCCESS | FAILURE | SKIPPED: the latest row's status (overview), a row's (run)
    gpu_architecture: str = ""
    executor: str = ""
    machine: str = ""
    since: str = ""  #: normalized ``YYYY-MM-DDTHH:MM:SS`` (inclusive)
    until: str = ""  #: normalized, inclusive (a bare date means to the end of that day)
    identity: str = ""  #: an ``identity_key`` (JSON array of the eight identity fields)
    kind: str = ""  #: changes: regression | improvement | change
    run: str = ""  #: a run id (run detail)
    old: str = ""  #: compare: the old run id
    new: str = ""  #: compare: the new run id
    threshold: float = DEFAULT_THRESHOLD  #: compare: minimum effect size, percent
    across: bool = False  #: compare across environments
    verdict: str = ""  #: compare: only results with this verdict
    state: str = ""  #: alerts: only this triage state
    sort: str = ""  #: the column a paged table is sorted by ('' for its own order)
    order: str = ""  #: asc | desc ('' for the column's natural order)
    page: int = 1
    per_page: int = PER_PAGE

    def query(self, **changes: Any) -> str:
        """The query string of these filters (with ``changes``), defaults left out: for links."""
        values = dataclasses.replace(self, **changes)
        pairs = []
        for field in dataclasses.fields(values):
            value = getattr(values, field.name)
            if value == field.default:
                continue
            if field.name in ("since", "until"):
                value = str(value)
            elif isinstance(value, bool):
                value = "1"
            elif isinstance(value, float):
                value = f"{value:g}"
            pairs.append((field.name, str(value)))
        return urlencode(pairs)

    def time_window(self) -> tuple[str, str]:
        return self.since, self.until


def _text(params: Mapping[str, str], name: str) -> str:
    value = (params.get(name) or "").strip()
    if len(value) > MAX_TEXT:
        raise InputError(f"at most {MAX_TEXT} characters", path=name)
    if any(ord(c) < 32 for c in value):
        raise InputError("control characters are not allowed", path=name)
    return value


def _integer(params: Mapping[str, str], name: str, default: int, high: int) -> int:
    text = (params.get(name) or "").strip()
    if not text:
        return default
    if not text.isascii() or not text.isdigit() or len(text) > 9 or not 1 <= int(text) <= high:
        raise InputError(f"must be a whole number from 1 to {high}, got {text[:40]!r}", path=name)
    return int(text)


def normalize_time(text: str, name: str, *, end: bool = False) -> str:
    """``YYYY-MM-DD`` or ``YYYY-MM-DD[T ]HH:MM[:SS]`` as ``YYYY-MM-DDTHH:MM:SS`` ('' for '');
    a bare date ends at 23:59:59 when ``end``."""
    text = text.strip()
    if not text:
        return ""
    given = text
    if _DATE.match(text):
        text += "T23:59:59" if end else "T00:00:00"
    elif _DATETIME.match(text):
        text = text.replace(" ", "T")
        if len(text) == 16:
            text += ":59" if end else ":00"
    else:
        raise InputError(f"expected YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS], got {text[:40]!r}", path=name)
    try:
        datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S")  # a real day: no February 30th, no hour 24
    except ValueError:
        raise InputError(f"no such date and time: {given!r}", path=name) from None
    return text


def row_time(row: Mapping[str, str]) -> str:
    """A row's time as ``YYYY-MM-DDTHH:MM:SS`` (its ``started_at``, else when it was imported), for
    comparing with :class:`Filters` ``since``/``until``; '' when it has neither."""
    value = (row.get("started_at") or row.get("created_date") or "").strip()
    return value[:19].replace(" ", "T")


def _identity(params: Mapping[str, str]) -> str:
    text = (params.get("identity") or "").strip()
    if not text:
        return ""
    if len(text) > 4 * MAX_TEXT * len(IDENTITY_FIELDS):
        raise InputError("too long", path="identity")
    try:
        values = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: arrays nested deeper than the parser goes
        values = None
    if not isinstance(values, list) or len(values) != len(IDENTITY_FIELDS) or not all(isinstance(v, str) for v in values):
        raise InputError(f"must be an identity_key: a JSON array of the {len(IDENTITY_FIELDS)} identity fields "
                         f"({', '.join(IDENTITY_FIELDS)})", path="identity")
    return json.dumps(values, ensure_ascii=False, separators=(",", ":"))


def _threshold(params: Mapping[str, str]) -> float:
    text = (params.get("threshold") or "").strip().rstrip("%").strip()
    if not text:
        return DEFAULT_THRESHOLD
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= MAX_THRESHOLD:  # also refuses nan and inf
        raise InputError(f"must be a percentage from 0 to {MAX_THRESHOLD:g}, got {text[:40]!r}", path="threshold")
    return value


def _choice(params: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str:
    value = (params.get(name) or "").strip()
    if not value:
        return ""
    for choice in choices:
        if value.lower() == choice.lower():
            return choice
    raise InputError(f"must be one of {', '.join(choices)}, got {value[:40]!r}", path=name)


def parse(params: Mapping[str, str]) -> Filters:
    """The filters of a request's query parameters (unknown parameters are ignored)."""
    values: dict[str, Any] = {name: _text(params, name) for name in TEXT_FIELDS}
    values["status"] = _choice(params, "status", Status.ALL)
    values["kind"] = _choice(params, "kind", KINDS)
    values["verdict"] = _choice(params, "verdict", VERDICTS)
    values["state"] = _choice(params, "state", STATES)
    values["sort"] = _choice(params, "sort", SORTS)
    values["order"] = _choice(params, "order", ORDERS)
    values["since"] = normalize_time(_text(params, "since"), "since")
    values["until"] = normalize_time(_text(params, "until"), "until", end=True)
    if values["since"] and values["until"] and values["since"] > values["until"]:
        raise InputError("the time range ends before it starts", path="until")
    values["identity"] = _identity(params)
    values["threshold"] = _threshold(params)
    values["across"] = (params.get("across") or "").strip().lower() in ("1", "true", "yes", "on")
    values["page"] = _integer(params, "page", 1, MAX_PAGE)
    values["per_page"] = _integer(params, "per_page", PER_PAGE, MAX_PER_PAGE)
    return Filters(**values)
