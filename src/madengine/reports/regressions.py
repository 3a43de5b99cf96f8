"""Regressions over history: change points per result identity (``madengine report regressions``).

Input: a perf.csv holding many runs, or the results database (every SUCCESS row). Rows are grouped by
:class:`~madengine.results.identity.ResultIdentity`; within an identity, one point per run
(:mod:`madengine.results.series`: the median of every sample of that run's rows, in time order).
:func:`madengine.stats.changepoint.detect` (E-divisive means with a Student's t-test, as Apache
Otava/hunter) finds the changes; each is a ``regression`` or an ``improvement`` by the metric's
direction (:func:`madengine.results.direction.lower_is_better`).

A change is reported once ``MIN_SEGMENT`` (3) runs exist on each side of it. The perf.html charts
and the database's ``relative_change`` use the same detection.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

from madengine.results.series import Change, Point, changes_of, series_from_rows
from madengine.stats.changepoint import MIN_SEGMENT

if TYPE_CHECKING:
    from madengine.reports.summary import Summary as ReportSummary


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
