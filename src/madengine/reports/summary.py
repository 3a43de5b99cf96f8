"""Aggregates of a perf.csv that every report shows: status counts, runs, per-model statistics.

One pass over all rows (100,000 rows in well under a second). A *run* is the value of ``run_id``,
or of ``started_at`` for rows without one (older files); rows with neither belong to no run and
are left out of the history. Runs are ordered by their earliest ``started_at`` when every run has
one, else in the order they first appear in the file (perf.csv is appended to in time order).
Performance statistics use SUCCESS rows with a numeric performance, in the model's current
metric (the metric of its latest SUCCESS row; for a model that never succeeded, the latest metric
named at all), so that figures of different units never mix.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter

from madengine.reports.table import PerfTable
from madengine.results.columns import Status

OTHER = "other"


@dataclasses.dataclass
class Run:
    key: str
    started_at: str
    first_row: int

    @property
    def label(self) -> str:
        """A short label for chart axes: the start time to the minute, else the id."""
        if self.started_at:
            return self.started_at.replace("T", " ")[:16]
        return self.key if len(self.key) <= 20 else self.key[:19] + "…"


@dataclasses.dataclass
class ModelStats:
    model: str
    metric: str = ""
    rows: int = 0
    success: int = 0
    failure: int = 0
    skipped: int = 0
    latest_status: str = ""
    latest_performance: str = ""
    latest_started: str = ""
    count: int = 0  # SUCCESS rows with a number in ``metric``
    mean: float | None = None
    minimum: float | None = None
    maximum: float | None = None
    history: list[tuple[int, float]] = dataclasses.field(default_factory=list)  # (run position, mean)


@dataclasses.dataclass
class Summary:
    """What the summary cards, the per-model table and the charts show, over all rows."""

    total: int
    counts: dict[str, int]  # SUCCESS, FAILURE, SKIPPED, other
    models: list[ModelStats]  # by model name
    runs: list[Run]  # in time order
    machines: int
    first_started: str
    last_started: str

    @property
    def success_rate(self) -> float | None:
        return self.counts[Status.SUCCESS] / self.total if self.total else None

    @property
    def has_history(self) -> bool:
        return len(self.runs) >= 2


def as_float(text: str) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError, OverflowError):
        return None
    return value if math.isfinite(value) else None


def summarize(table: PerfTable) -> Summary:
    """Aggregate every row of ``table``.

    Written as whole-column passes (comprehensions, Counter) rather than one loop doing
    everything: it is the hot path of a 100,000-row perf.html.
    """
    models = table.column("model")
    statuses = [s.upper() for s in table.column("status")]
    performances = table.column("performance")
    metrics = table.column("metric")
    started = table.column("started_at")
    run_ids = table.column("run_id")
    machines = set(table.column("machine_name")) if table.index("machine_name") is not None else set()
    machines.discard("")

    tally = Counter(statuses)
    counts = {name: tally.pop(name, 0) for name in (Status.SUCCESS, Status.FAILURE, Status.SKIPPED)}
    counts[OTHER] = sum(tally.values())
    runs, run_of_row = _runs(run_ids, started)
    order = _run_order(runs)
    position = {run: pos for pos, run in enumerate(order)}
    stats = _model_stats(models, statuses, performances, metrics, started, run_of_row, position)
    dated = [s for s in started if s]
    return Summary(len(table.rows), counts, stats, [runs[i] for i in order], len(machines),
                   min(dated, default=""), max(dated, default=""))


def _runs(run_ids: list[str], started: list[str]) -> tuple[list[Run], list[int | None]]:
    """The runs in first-seen order, and each row's run (an index into them, None for no run)."""
    keys = [run or start for run, start in zip(run_ids, started)]
    ids: dict[str, int] = {}
    run_of_row: list[int | None] = [ids.setdefault(key, len(ids)) if key else None for key in keys]
    first_row: dict[str, int] = {}
    earliest: dict[str, str] = {}
    for number, (key, start) in enumerate(zip(keys, started)):
        if not key:
            continue
        first_row.setdefault(key, number)
        if start and (key not in earliest or start < earliest[key]):
            earliest[key] = start
    runs = [Run(key, earliest.get(key, ""), first_row[key]) for key in ids]
    return runs, run_of_row


def _model_stats(models: list[str], statuses: list[str], performances: list[str], metrics: list[str],
                 started: list[str], run_of_row: list[int | None], position: dict[int, int]) -> list[ModelStats]:
    per_status = Counter(zip(models, statuses))
    rows_of = Counter(models)
    latest = {model: number for number, model in enumerate(models)}
    metric_of = {model: metric for model, status, metric in zip(models, statuses, metrics) if status == Status.SUCCESS}
    named_metric = {model: metric for model, metric in zip(models, metrics) if metric}  # models that never succeeded
    figures, history = _figures(models, statuses, performances, metrics, run_of_row, metric_of, position)
    result = []
    for model in sorted(rows_of):
        last = latest[model]
        stats = ModelStats(model, metric_of.get(model, named_metric.get(model, "")), rows_of[model],
                           per_status[(model, Status.SUCCESS)], per_status[(model, Status.FAILURE)],
                           per_status[(model, Status.SKIPPED)], statuses[last], performances[last], started[last])
        acc = figures.get(model)
        if acc:
            stats.count, stats.minimum, stats.maximum = acc[0], acc[2], acc[3]
            stats.mean = mean_of(acc[1], acc[4], acc[0])
            stats.history = sorted(history.get(model, []))
        result.append(stats)
    return result


def _figures(models: list[str], statuses: list[str], performances: list[str], metrics: list[str],
             run_of_row: list[int | None], metric_of: dict[str, str], position: dict[int, int]
             ) -> tuple[dict[str, list], dict[str, list[tuple[int, float]]]]:
    """Per model, over its SUCCESS figures in its current metric: [count, sum, min, max, scaled sum], and the
    mean per run as (run position, mean)."""
    figures: dict[str, list] = {}
    by_run: dict[tuple[str, int], list] = {}  # (model, run) -> [sum, n]
    success = Status.SUCCESS
    for model, status, text, metric, run in zip(models, statuses, performances, metrics, run_of_row):
        if status != success or metric != metric_of[model]:
            continue
        value = as_float(text)
        if value is None:
            continue
        acc = figures.get(model)
        if acc is None:
            figures[model] = [1, value, value, value, value * SCALED]
        else:
            acc[0] += 1
            acc[1] += value
            acc[4] += value * SCALED
            if value < acc[2]:
                acc[2] = value
            elif value > acc[3]:
                acc[3] = value
        if run is not None:
            cell = by_run.get((model, run))
            if cell is None:
                by_run[(model, run)] = [value, 1, value * SCALED]
            else:
                cell[0] += value
                cell[1] += 1
                cell[2] += value * SCALED
    history: dict[str, list[tuple[int, float]]] = {}
    for (model, run), (total, n, scaled) in by_run.items():
        history.setdefault(model, []).append((position[run], mean_of(total, scaled, n)))
    return figures, history


#: figures are also summed scaled down by 2**64, for means of figures whose plain sum overflows
SCALED = 2.0 ** -64


def mean_of(total: float, scaled_total: float, count: int) -> float:
    """``total / count``; when the plain sum overflowed (figures near 1.8e308), the same mean from
    the sum of the figures scaled by :data:`SCALED` (exact for such figures)."""
    mean = total / count
    return mean if math.isfinite(mean) else math.ldexp(scaled_total / count, 64)


def _run_order(runs: list[Run]) -> list[int]:
    """Indexes of ``runs`` in time order (see module docstring)."""
    if runs and all(run.started_at for run in runs):
        return sorted(range(len(runs)), key=lambda i: (runs[i].started_at, runs[i].first_row))
    return sorted(range(len(runs)), key=lambda i: runs[i].first_row)
