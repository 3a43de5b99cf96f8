"""A result's history as a series: one point per run, in time order, and the changes found in it.

What ``report regressions``, perf.html's charts, the dashboard and the results database's change
detection share (docs/statistics.md). Within an identity, one :class:`Point` per run: every sample
of that run's SUCCESS rows (``perf_samples``, else ``performance``), its value their median. Points
are in time order: by ``started_at`` (runs that started in the same second: in the order their rows
came) when every run has a start time, else in the order the rows came. :func:`changes_of` runs :func:`madengine.stats.changepoint.detect` over the values and
makes each change point a :class:`Change`: a ``regression`` or an ``improvement`` by the metric's
direction (:func:`madengine.results.direction.lower_is_better`).
"""

from __future__ import annotations

import dataclasses
import math
import operator
import shlex
from typing import Any, Iterable, Mapping, Sequence

from madengine.results.columns import Status
from madengine.results.direction import lower_is_better
from madengine.results.figures import with_figures
from madengine.results.identity import ResultIdentity
from madengine.results.samples import parse_samples, row_samples
from madengine.stats.changepoint import ChangePoint, detect
from madengine.stats.summary import Summary

TRACE_DIFF = "madengine report trace-diff"


@dataclasses.dataclass(slots=True)  # a dashboard keeps the latest 100 of thousands of series
class Point:
    """One run of one identity."""

    run: str  #: run id (else the start time, else the row's position)
    started_at: str
    samples: list[float]
    order: int  #: first row of the run, for files without start times

    @property
    def value(self) -> float:
        if len(self.samples) == 1:
            return self.samples[0]
        ordered = sorted(self.samples)
        middle = len(ordered) // 2
        return ordered[middle] if len(ordered) % 2 else ordered[middle - 1] / 2 + ordered[middle] / 2


@dataclasses.dataclass
class Change:
    identity: ResultIdentity
    lower_is_better: bool
    index: int  #: position of the first run after the change in the identity's series
    point: ChangePoint
    before_run: Point  #: the last run before the change
    after_run: Point  #: the first run after it
    latest: bool  #: the identity's most recent change (still in effect)

    @property
    def kind(self) -> str:
        return change_kind(self.point.size, self.lower_is_better)

    def trace_diff(self) -> str:
        """Where to look next: the command comparing the traces of the runs either side."""
        return " ".join([TRACE_DIFF, *(shlex.quote(p) for p in (self.before_run.run, self.after_run.run,
                                                                 self.identity.model))])

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.identity.model, "metric": self.identity.metric, "tag_configs": self.identity.tag_configs,
            "identity": self.identity.label(), "identity_key": self.identity.key(),
            "lower_is_better": self.lower_is_better, "kind": self.kind, "latest": self.latest, "index": self.index,
            "size_percent": None if self.point.size is None else round(self.point.size * 100, 3),
            "confidence": round(self.point.confidence, 6), "p_value": self.point.p_value,
            "before": _side(self.before_run, self.point.before), "after": _side(self.after_run, self.point.after),
            "trace_diff": self.trace_diff(),
        }


def change_kind(size: float | None, lower: bool) -> str:
    """``regression``, ``improvement`` or ``change`` (no relative size) of a change of ``size``."""
    if size is None or size == 0:
        return "change"
    return "regression" if (size > 0) == lower else "improvement"


def _side(run: Point, summary: Summary) -> dict[str, Any]:
    return {"run_id": run.run, "started_at": run.started_at, "runs": summary.n, "mean": summary.mean,
            "median": summary.median, "stddev": summary.stddev, "min": summary.minimum, "max": summary.maximum}


def numbered_points(numbered: Iterable[tuple[int, Mapping[str, str]]]) -> list[Point]:
    """The points of one identity's (row number, row) pairs: the number orders runs without start
    times and names runs with neither run id nor start time (``#number+1``)."""
    return points_of(_entry(number, row) for number, row in numbered
                     if (row.get("status") or "").strip().upper() == Status.SUCCESS)


def _entry(number: int, row: Mapping[str, str]) -> tuple[int, str, str, list[float]]:
    started = (row.get("started_at") or "").strip()
    return number, (row.get("run_id") or "").strip() or started or f"#{number + 1}", started, _figures(row)


def points_of(entries: Iterable[tuple[int, str, str, list[float]]]) -> list[Point]:
    """The points of one identity's SUCCESS rows, each given as (row number, run, start time, its
    figures): the rows of one run make one point (rows without figures none), in time order."""
    points: dict[str, Point] = {}
    for number, run, started, values in entries:
        if not values:
            continue
        point = points.get(run)
        if point is None:
            points[run] = Point(run, started, list(values), number)
        else:
            point.samples.extend(values)
            if started and (not point.started_at or started < point.started_at):
                point.started_at = started
    return in_time_order(list(points.values()))


def _figures(row: Mapping[str, str]) -> list[float]:
    return figures_of(row.get("perf_samples") or "", row.get("performance") or "")


def figures_of(perf_samples: str, performance: str) -> list[float]:
    """A row's figures: ``row_samples`` of its ``perf_samples`` and ``performance`` cells, with the
    common case (no ``perf_samples``, a plain number) made cheap."""
    if perf_samples:
        try:
            values = parse_samples(perf_samples)
        except ValueError:
            values = []  # as row_samples reads a malformed cell: the performance instead
        return values or row_samples({"performance": performance})
    try:
        value = float(performance)
    except (TypeError, ValueError, OverflowError):
        return row_samples({"performance": performance})
    return [value] if math.isfinite(value) else []


def series_from_rows(rows: Iterable[Mapping[str, str]]) -> dict[ResultIdentity, list[Point]]:
    """Per identity, its runs in time order (see the module docstring); SUCCESS rows with figures only,
    each figure a row names in ``figures`` a series of its own (:mod:`madengine.results.figures`)."""
    grouped: dict[ResultIdentity, list[tuple[int, Mapping[str, str]]]] = {}
    for number, row in enumerate(with_figures(rows)):
        if (row.get("status") or "").strip().upper() == Status.SUCCESS:
            grouped.setdefault(ResultIdentity.from_row(row), []).append((number, row))
    series = {identity: numbered_points(numbered) for identity, numbered in grouped.items()}
    return {identity: points for identity, points in series.items() if points}


#: the order of points in time: their start times (runs started in one second: as written)
TIME_ORDER = operator.attrgetter("started_at", "order", "run")
ROW_ORDER = operator.attrgetter("order")  #: points without start times: as written
STARTED = operator.attrgetter("started_at")


def in_time_order(points: list[Point]) -> list[Point]:
    if points and all(map(STARTED, points)):
        return sorted(points, key=TIME_ORDER)
    return sorted(points, key=ROW_ORDER)


def changes_of(identity: ResultIdentity, points: Sequence[Point], offset: int = 0, extra_left: int = 0,
               values: Sequence[float] | None = None) -> list[Change]:
    """The detected changes of one identity's series (``offset``: where ``points`` start in it;
    ``extra_left``: runs of the same segment before them, see :func:`madengine.stats.changepoint.detect`;
    ``values``: the points' values when the caller has them)."""
    found = detect([p.value for p in points] if values is None else list(values), extra_left=extra_left)
    lower = lower_is_better(identity.metric)
    return [Change(identity, lower, cp.index + offset, dataclasses.replace(cp, index=cp.index + offset),
                   points[cp.index - 1], points[cp.index], k == len(found) - 1)
            for k, cp in enumerate(found)]
