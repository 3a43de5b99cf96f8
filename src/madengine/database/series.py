"""One result series at a time: what an import keeps up to date per identity, in one pass.

Every import (``update-table``, ``run --db-url``, the migration of ``create-table``) ends with one
:func:`advance` per result identity it touched. The state of a series (:class:`SeriesState`, stored
beside the rows: ``<table>_series``) holds what the next import needs so that it never reads a
series' whole history again:

* ``tail``: its latest ``TAIL`` (100) points, one per run (``results.series.Point``: run, start, samples);
* ``changes``: the position of every change point found in it (the first run after each);
* ``baseline``: the figures the next row's ``relative_change`` compares with;
* ``statuses``: the statuses of its latest ``STATUS_WINDOW`` rows (flaky or newly failing);
* ``verdict``: its latest run judged against its history (:func:`madengine.stats.history.judge_latest`).

**Incremental change detection.** The new points are appended to the tail and the change points of
that region are found again (:func:`madengine.results.series.changes_of`, E-divisive means): the
region is the whole series on a first import (the same changes ``report regressions`` finds) and
the latest 100 runs plus the new ones after that. A change more than ``MIN_SEGMENT`` runs before the
region is kept as it was found (frozen); one inside it is found again, moved or withdrawn. A new row
that belongs to a run before the tail, or that reorders it, makes the series be read whole again
(rare: a perf.csv of old runs imported late).

**relative_change** of a new SUCCESS row: its figure against the mean of the latest
``BASELINE_WINDOW`` (5) points before its run in its segment (after the last change point before
it; the first run of a segment is compared with the segment before). The import first writes the
value a running window gives (the same unless a change point is found among the new rows) and
this pass corrects the rows where they differ.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import operator
from typing import Any, Callable, Mapping, NamedTuple, Sequence

from madengine.database.rows import BASELINE_WINDOW
from madengine.results.columns import Status
from madengine.results.direction import lower_is_better
from madengine.results.identity import ResultIdentity
from madengine.results.series import (ROW_ORDER, STARTED, TIME_ORDER, Change, Point, changes_of, figures_of,
                                      points_of)
from madengine.stats.changepoint import MIN_SEGMENT
from madengine.stats.history import MAX_HISTORY, judge_latest

TAIL = 100  #: points a series state keeps: the region re-examined when runs are appended
FROZEN = 25  #: the region's first points, whose changes stay as found earlier (too little context before them)
STATUS_WINDOW = 50  #: rows whose statuses a series state keeps
STATUS_CODES = {Status.SUCCESS: "S", Status.FAILURE: "F", Status.SKIPPED: "K"}
#: the columns :func:`advance` reads of each new row
ROW_COLUMNS = ("id", "status", "performance", "perf_samples", "run_id", "started_at", "relative_change")


class SeriesRow(NamedTuple):
    """What :func:`advance` uses of one row (:func:`series_row` makes it from the ``ROW_COLUMNS``
    cells; an import makes it from the rows it wrote, :mod:`madengine.database.kept`)."""

    id: int
    code: str  #: its status as ``STATUS_CODES`` says (``S``: SUCCESS)
    performance: float | None  #: :func:`figure` of its ``performance``
    samples: list[float]  #: its figures (``results.series.figures_of``; SUCCESS rows only, else [])
    run: str  #: its run: run id, else start time, else ``#id+1``
    started: str  #: its start time
    relative_change: str | None  #: as stored; None: not at hand (the import looks it up to compare)


_ID, _CODE = operator.attrgetter("id"), operator.attrgetter("code")  # of a SeriesRow, in C


def status_code(status: str | None) -> str:
    return STATUS_CODES.get((status or "").strip().upper(), "?")


def series_row(row: Mapping[str, Any]) -> SeriesRow:
    """The :class:`SeriesRow` of a row's ``ROW_COLUMNS`` cells (None cells read as '')."""
    row_id = int(row["id"])
    code = status_code(row.get("status"))
    performance = row.get("performance") or ""
    started = (row.get("started_at") or "").strip()
    return SeriesRow(row_id, code, figure(performance),
                     figures_of(row.get("perf_samples") or "", performance) if code == "S" else [],
                     (row.get("run_id") or "").strip() or started or f"#{row_id + 1}", started,
                     row.get("relative_change") or "")


@dataclasses.dataclass
class SeriesState:
    """What is kept of one identity's series between imports (see the module docstring)."""

    key: str  #: identity_key
    n_points: int = 0
    n_rows: int = 0
    covered: int = 0  #: the newest row id (MongoDB: seq) it has seen
    timed: bool = True  #: every point has a start time (points are in time order, else in row order)
    tail: list[Point] = dataclasses.field(default_factory=list)
    changes: list[int] = dataclasses.field(default_factory=list)
    baseline: list[float] = dataclasses.field(default_factory=list)
    statuses: str = ""
    verdict: dict[str, Any] | None = None
    _positions: dict[str, int] | None = dataclasses.field(default=None, repr=False, compare=False)
    _values: list[float] | None = dataclasses.field(default=None, repr=False, compare=False)

    def values(self) -> list[float]:
        """The tail's point values, made once."""
        if self._values is None:
            self._values = [p.value for p in self.tail]
        return self._values

    def position(self, run: str) -> int | None:
        """Where run ``run`` is in the tail (None: not among its runs); the index is made once."""
        if self._positions is None:
            self._positions = {p.run: k for k, p in enumerate(self.tail)}
        return self._positions.get(run)

    def to_record(self) -> dict[str, Any]:
        return {"n_points": self.n_points, "n_rows": self.n_rows, "covered": self.covered, "timed": self.timed,
                "tail": [[p.run, p.started_at, p.samples, p.order] for p in self.tail],
                "changes": self.changes, "baseline": self.baseline}

    @classmethod
    def from_record(cls, key: str, record: Mapping[str, Any], statuses: str = "",
                    verdict: dict[str, Any] | None = None) -> "SeriesState":
        return cls(key, int(record["n_points"]), int(record["n_rows"]), int(record["covered"]), bool(record["timed"]),
                   [Point(str(r), str(s), [float(v) for v in samples], int(o)) for r, s, samples, o in record["tail"]],
                   [int(c) for c in record["changes"]], [float(v) for v in record["baseline"]], statuses, verdict)


@dataclasses.dataclass
class Advance:
    """What :func:`advance` found: the new state, the changes of the re-examined region, where the
    frozen part ends, and the ``relative_change`` cells to correct."""

    state: SeriesState
    changes: list[Change]
    frozen_before: int  #: changes at positions below this were not looked at again
    updates: list[tuple[int, str]]  #: (row id, relative_change)
    whole: bool  #: the series was read whole
    #: (row id, relative_change) of rows whose stored cell was not at hand: an update where it differs
    unsure: list[tuple[int, str]] = dataclasses.field(default_factory=list)


def relative_change_text(value: float, baseline: Sequence[float]) -> str:
    """The JSON ``relative_change`` of ``value`` against the mean of ``baseline`` ('' for none)."""
    if not baseline:
        return ""
    try:
        mean = math.fsum(baseline) / len(baseline)
    except OverflowError:
        mean = math.inf
    if not math.isfinite(mean):  # figures near the float range: the mean of the scaled figures
        scale = max(abs(v) for v in baseline)
        mean = math.fsum(v / scale for v in baseline) / len(baseline) * scale
    change = (value - mean) / mean * 100 if mean != 0 else math.nan
    if not math.isfinite(change):
        return ""
    # what json.dumps(sort_keys=True) wrote in earlier releases, many times faster to make
    return f'{{"baseline_avg": {rounded_text(mean, 6)}, "pct_change": {rounded_text(change, 4)}, ' \
           f'"sample_count": {len(baseline)}}}'


_FIXED = {4: "{:.4f}".format, 6: "{:.6f}".format}  #: the decimal texts rounded_text starts from


def rounded_text(value: float, digits: int) -> str:
    """``repr(round(value, digits))``, from one decimal text where that is the same text (an import
    writes two a row). Both round the exact binary value to ``digits`` places the same way (``round``
    then converts that decimal back to a float); a decimal of at most 15 significant digits
    (``digits`` <= 6 below 1e9) is the shortest text of the float nearest to it, and repr writes it
    positionally from 1e-4 on."""
    fixed = _FIXED.get(digits)
    if fixed is None or not 1e-4 <= abs(value) < 1e9:
        return repr(round(value, digits))
    text = fixed(value).rstrip("0")
    return text + "0" if text[-1] == "." else text


def figure(text: str) -> float | None:
    """The finite number of a ``performance`` cell, or None (``results.parsing.as_number``'s value)."""
    try:
        value = float(text)
    except (TypeError, ValueError, OverflowError):
        return None
    return value if math.isfinite(value) else None


def _region(state: SeriesState, new_points: list[Point]) -> tuple[list[Point], bool] | None:
    """The tail with the new points in their place, and whether they simply follow it (no new
    point merged into a tail point, none sorted before one); None when they do not fit after the
    tail's first point (the series must be read whole)."""
    tail = list(state.tail)
    at = {p.run: k for k, p in enumerate(tail)}
    fresh = []
    for point in new_points:
        k = at.get(point.run)
        if k is None:
            fresh.append(point)
            continue
        known = tail[k] = Point(tail[k].run, tail[k].started_at, [*tail[k].samples, *point.samples], tail[k].order)
        if point.started_at and (not known.started_at or point.started_at < known.started_at):
            known.started_at = point.started_at
    region = tail + fresh
    timed = state.timed and all(map(STARTED, region))
    region.sort(key=TIME_ORDER if timed else ROW_ORDER)
    starts_before = bool(tail) and region[0] is not tail[0]
    whole_series = state.n_points == len(state.tail)
    if (starts_before or timed != state.timed) and not whole_series:
        return None
    appended = len(fresh) == len(new_points) and all(a is b for a, b in zip(region, tail)) and _in_row_order(fresh)
    return region, appended


def _in_row_order(points: Sequence[Point]) -> bool:
    """The points' time order is their rows' order (the order the running window saw them in)."""
    return all(a.order < b.order for a, b in zip(points, points[1:]))


def _baseline(values: Sequence[float], positions: Sequence[int], offset: int, j: int) -> list[float]:
    """The figures point ``j`` (absolute) is compared with: up to BASELINE_WINDOW points before it,
    after the last change at or before its previous point (``values`` start at ``offset``;
    ``positions`` ascending)."""
    k = bisect.bisect_right(positions, j - 1)
    start = positions[k - 1] if k else 0
    return list(values[max(start, j - BASELINE_WINDOW, offset) - offset:j - offset])


def advance(state: SeriesState | None, key: str, new_rows: Sequence[SeriesRow | Mapping[str, Any]],
            read_all: Callable[[], Sequence[Mapping[str, Any]]] | None, since: int = 0) -> Advance:
    """The series of identity ``key`` after ``new_rows`` (:class:`SeriesRow`, or ``ROW_COLUMNS``
    cells, in row order) were added. ``state`` None: a series without a state yet; ``read_all``
    gives every row of the identity when the series must be read whole (None: ``new_rows`` are every
    row it has). Rows up to id ``since`` were stored by earlier imports: their ``relative_change`` is
    never rewritten."""
    identity = ResultIdentity.from_key(key)
    rows = [row if isinstance(row, SeriesRow) else series_row(row) for row in new_rows]
    found = _region(state, _points(rows)) if state is not None and state.n_rows else None
    whole = found is None
    if whole:
        appended = state is None and read_all is None  # a new series: the running window saw it all
        if read_all is not None and (state is None or state.n_rows):
            rows = [series_row(row) for row in read_all()]
        region = _points(rows)
        appended = appended and _in_row_order(region)
        state, offset, cut = SeriesState(key), 0, 0
    else:
        region, appended = found  # type: ignore[misc]
        offset = state.n_points - len(state.tail)  # type: ignore[union-attr]
        cut = offset + FROZEN if offset else 0
    values = [p.value for p in region]
    changes = _live_changes(identity, region, values, offset, cut, state.changes)
    known = [c for c in state.changes if c < cut]
    positions = sorted(known + [c.index for c in changes])
    for change in changes:
        change.latest = change.index == positions[-1]
    window = _Window(values, positions, offset, state.changes if appended else None, state.n_points)
    updates, unsure = _corrections([r for r in rows if r.id > since], region, window)
    verdict = judge_latest(values, [c - offset for c in positions if c >= offset],
                           lower_is_better=lower_is_better(identity.metric)) if values else None
    n_points = offset + len(region)
    codes = "".join(map(_CODE, rows))
    after = SeriesState(
        state.key, n_points, state.n_rows + len(rows), max(state.covered, max(map(_ID, rows), default=0)),
        all(map(STARTED, region)) and (state.timed or whole), region[-TAIL:], positions,
        _baseline(values, positions, offset, n_points), (state.statuses + codes)[-STATUS_WINDOW:],
        None if verdict is None else {**verdict.to_json(), "run_id": region[-1].run})
    return Advance(after, changes, cut, updates, whole, unsure)


def _points(rows: Sequence[SeriesRow]) -> list[Point]:
    return points_of((r.id, r.run, r.started, r.samples) for r in rows if r.code == "S")


def _live_changes(identity: ResultIdentity, region: Sequence[Point], values: Sequence[float], offset: int, cut: int,
                  known: Sequence[int]) -> list[Change]:
    """The changes at positions from ``cut`` on, found in the region from its last known change
    before ``cut`` (else its start, held to the bar of the segment that began before it)."""
    inside = [c for c in known if offset <= c < cut]
    anchor = max(inside, default=offset)
    extra = 0 if inside else anchor - max((c for c in known if c < anchor), default=0)
    points = region[anchor - offset:]
    if len(points) < 2 * MIN_SEGMENT:
        return []
    return [c for c in changes_of(identity, points, anchor, extra, values[anchor - offset:]) if c.index >= cut]


@dataclasses.dataclass
class _Window:
    """Where the baseline of each point starts, now and as the running window of the insert saw it."""

    values: Sequence[float]
    positions: Sequence[int]
    offset: int
    seen: Sequence[int] | None  #: the change positions the running window knew (None: it cannot be trusted)
    first_new: int  #: the first point the running window computed
    #: the running window knew every change point (most series: none found or moved): no search a point
    known_all: bool = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.known_all = self.seen is not None and list(self.seen) == list(self.positions)

    def baseline(self, j: int) -> list[float]:
        return _baseline(self.values, self.positions, self.offset, j)

    def as_running(self, j: int) -> bool:
        """The running window gave point ``j`` this very baseline (no change point it did not know)."""
        if self.seen is None or j < self.first_new:
            return False
        if self.known_all:
            return True
        now = bisect.bisect_right(self.positions, j - 1)
        then = bisect.bisect_right(self.seen, j - 1)
        start_now = self.positions[now - 1] if now else 0
        start_then = self.seen[then - 1] if then else 0
        return max(start_now, j - BASELINE_WINDOW) == max(start_then, j - BASELINE_WINDOW)


def _corrections(rows: Sequence[SeriesRow], region: Sequence[Point],
                 window: _Window) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(row id, relative_change) of the rows whose stored cell is not what their series says, and
    of those whose stored cell is not at hand (to compare). Where the rows simply extend the series
    one run each, only the points after a change the running window did not know are looked at."""
    at = {p.run: window.offset + k for k, p in enumerate(region)}
    updates, unsure = [], []
    success = [r for r in rows if r.code == "S"]
    if window.seen is not None and len({r.run for r in success}) < len(success):
        window.seen = None  # two rows of one run: the running window saw two figures where the series has one
    for row in rows:
        text = ""
        if row.code == "S":
            value = row.performance
            j = at.get(row.run)
            if value is not None and j is not None:
                if window.as_running(j) and value == window.values[j - window.offset]:
                    continue
                text = relative_change_text(value, window.baseline(j))
        if row.relative_change is None:
            unsure.append((row.id, text))
        elif text != row.relative_change:
            updates.append((row.id, text))
    return updates, unsure


def reference_values(state: SeriesState, run: str) -> list[float] | None:
    """The figures of the series' stable segment up to and including ``run`` (every run after the last
    change point at or before it, at most the latest ``MAX_HISTORY``, as many as the tail keeps): what
    a single new figure is judged against (:func:`madengine.stats.history.judge`). None when ``run``
    is not among the tail's runs."""
    offset = state.n_points - len(state.tail)
    k = state.position(run)
    if k is None:
        return None
    j = offset + k
    found = bisect.bisect_right(state.changes, j)
    start = state.changes[found - 1] if found else 0
    return state.values()[max(start, j + 1 - MAX_HISTORY, offset) - offset:k + 1]


class RunningBaselines:
    """``relative_change`` as rows are inserted: per identity, the mean of the latest figures after
    its last known change point (``SeriesState.baseline``, then each new SUCCESS figure). What
    :func:`advance` computes for rows in time order, one per run, when no new change point is found
    among them; the series pass corrects the others."""

    def __init__(self, seeds: Mapping[str, Sequence[float]]) -> None:
        self._recent: dict[str, list[float]] = {}
        self.seed(seeds)

    def seed(self, seeds: Mapping[str, Sequence[float]]) -> None:
        """The figures of identities met for the first time in this import."""
        for key, values in seeds.items():
            self._recent.setdefault(key, list(values)[-BASELINE_WINDOW:])

    def after(self, group: str, value: float) -> str:
        """The ``relative_change`` of a SUCCESS row of ``group`` with the figure ``value``."""
        recent = self._recent.setdefault(group, [])
        text = relative_change_text(value, recent)
        recent.append(value)
        if len(recent) > BASELINE_WINDOW:
            del recent[0]
        return text
