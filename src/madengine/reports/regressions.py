"""Regressions over history: change points per result identity (``madengine report regressions``).

Input: a perf.csv holding many runs, or the results database (every SUCCESS row). Rows are grouped by
:class:`~madengine.results.identity.ResultIdentity`; within an identity, one point per run: the
median of every sample of that run's rows (``perf_samples``, else ``performance``). Points are in
time order: by (``started_at``, ``run_id``) when every run has a start time, else in the order the
rows were written. :func:`madengine.stats.changepoint.detect` (E-divisive means with a Student's
t-test, as Apache Otava/hunter) finds the changes; each is a ``regression`` or an ``improvement``
by the metric's direction (:func:`madengine.reports.metrics.lower_is_better`).

A change is reported once ``MIN_SEGMENT`` (3) runs exist on each side of it. The perf.html charts
and the database's ``relative_change`` use the same detection.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from madengine.reports.metrics import lower_is_better
from madengine.results.columns import Status
from madengine.results.identity import ResultIdentity
from madengine.results.samples import row_samples
from madengine.stats.changepoint import MIN_SEGMENT, ChangePoint, detect
from madengine.stats.summary import Summary

if TYPE_CHECKING:
    from madengine.reports.summary import Summary as ReportSummary

TRACE_DIFF = "madengine report trace-diff"


@dataclasses.dataclass
class Point:
    """One run of one identity."""

    run: str  #: run id (else the start time, else the row's position)
    started_at: str
    samples: list[float]
    order: int  #: first row of the run, for files without start times

    @property
    def value(self) -> float:
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
        size = self.point.size
        if size is None or size == 0:
            return "change"
        return "regression" if (size > 0) == self.lower_is_better else "improvement"

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


def _side(run: Point, summary: Summary) -> dict[str, Any]:
    return {"run_id": run.run, "started_at": run.started_at, "runs": summary.n, "mean": summary.mean,
            "median": summary.median, "stddev": summary.stddev, "min": summary.minimum, "max": summary.maximum}


@dataclasses.dataclass
class RegressionReport:
    source: str
    series: int  #: identities with enough runs to look for changes
    too_short: int  #: identities with fewer than 2·MIN_SEGMENT runs
    changes: list[Change]

    def counts(self) -> dict[str, int]:
        tally = {"regression": 0, "improvement": 0, "change": 0}
        for change in self.changes:
            tally[change.kind] += 1
        return tally

    @property
    def current_regressions(self) -> list[Change]:
        """Regressions that are their identity's latest change: still in effect."""
        return [c for c in self.changes if c.latest and c.kind == "regression"]


def series_from_rows(rows: Iterable[Mapping[str, str]]) -> dict[ResultIdentity, list[Point]]:
    """Per identity, its runs in time order (see the module docstring); SUCCESS rows with figures only."""
    series: dict[ResultIdentity, dict[str, Point]] = {}
    for number, row in enumerate(rows):
        if (row.get("status") or "").strip().upper() != Status.SUCCESS:
            continue
        values = row_samples(row)
        if not values:
            continue
        started = (row.get("started_at") or "").strip()
        run = (row.get("run_id") or "").strip() or started or f"#{number + 1}"
        points = series.setdefault(ResultIdentity.from_row(row), {})
        point = points.get(run)
        if point is None:
            points[run] = Point(run, started, list(values), number)
        else:
            point.samples.extend(values)
            if started and (not point.started_at or started < point.started_at):
                point.started_at = started
    return {identity: _in_time_order(list(points.values())) for identity, points in series.items()}


def _in_time_order(points: list[Point]) -> list[Point]:
    if points and all(p.started_at for p in points):
        return sorted(points, key=lambda p: (p.started_at, p.run, p.order))
    return sorted(points, key=lambda p: p.order)


def changes_of(identity: ResultIdentity, points: Sequence[Point]) -> list[Change]:
    """The detected changes of one identity's series."""
    found = detect([p.value for p in points])
    lower = lower_is_better(identity.metric)
    return [Change(identity, lower, cp.index, cp, points[cp.index - 1], points[cp.index], k == len(found) - 1)
            for k, cp in enumerate(found)]


def find_regressions(rows: Iterable[Mapping[str, str]], source: str = "", models: Sequence[str] = ()
                     ) -> RegressionReport:
    """Change points of every identity of ``rows`` (of ``models`` only, when given)."""
    wanted = set(models)
    changes: list[Change] = []
    series = too_short = 0
    for identity, points in sorted(series_from_rows(rows).items()):
        if wanted and identity.model not in wanted:
            continue
        if len(points) < 2 * MIN_SEGMENT:
            too_short += 1
            continue
        series += 1
        changes.extend(changes_of(identity, points))
    return RegressionReport(source, series, too_short, changes)


def regressions_in_csv(path: Path, models: Sequence[str] = ()) -> RegressionReport:
    from madengine.reports.table import bulk, load_table

    with bulk():
        return find_regressions(load_table(Path(path)).dicts(), str(path), models)


def regressions_in_database(db_url: str | None, environ: Mapping[str, str] | None = None, table: str | None = None,
                            models: Sequence[str] = ()) -> RegressionReport:
    """The history of the results database (``--db-url``, else ``MADENGINE_DB_URL``/``TUNA_DB_*``/madengine.db)."""
    from madengine.database import DEFAULT_TABLE, fetch_history, resolve_sql_url

    environ = os.environ if environ is None else environ
    rows = fetch_history(db_url, environ, table or DEFAULT_TABLE, tuple(models))
    return find_regressions(rows, resolve_sql_url(db_url, environ).shown, models)


MAX_PAGE_RUNS = 200  #: perf.html looks for changes in the latest runs of a result (report regressions: all)


def changes_in_summary(summary: "ReportSummary") -> dict[tuple[str, ...], list[Change]]:
    """The changes perf.html marks and lists: per result group of a report summary, over its per-run
    figures (the same series and detection as :func:`find_regressions`)."""
    found: dict[tuple[str, ...], list[Change]] = {}
    for stats in summary.models:
        history = stats.history[-MAX_PAGE_RUNS:]
        if len(history) < 2 * MIN_SEGMENT:
            continue
        offset = len(stats.history) - len(history)
        points = [Point(summary.runs[position].key, summary.runs[position].started_at, [value], position)
                  for position, value in history]
        changes = [dataclasses.replace(c, index=c.index + offset) for c in changes_of(stats.identity, points)]
        if changes:
            found[stats.group] = changes
    return found
