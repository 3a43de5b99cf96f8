"""Aggregates of a perf.csv that every report shows: status counts, runs, per-result statistics.

One pass over all rows (100,000 rows in well under a second). A *run* is the value of ``run_id``,
or of ``started_at`` for rows without one (older files); rows with neither belong to no run and
are left out of the history. Runs are ordered by their earliest ``started_at`` when every run has
one, else in the order they first appear in the file (perf.csv is appended to in time order).

Rows are grouped by result identity (:mod:`madengine.results.identity`): model, tag configs and
environment (executor, GPU vendor and architecture, n_gpus, backend); a group's metric is its
current one (that of its latest SUCCESS row; for a group that never succeeded, the latest metric
named at all), so its statistics are those of one identity and figures of different units or
environments never mix. FAILURE rows, which name no metric, count in their group's status columns.
Figures are every sample of a row (``perf_samples``, else ``performance``); a run's figure in the
history is the median of its samples, as in ``report regressions``.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter

from madengine.reports.table import PerfTable
from madengine.results.columns import Status
from madengine.results.identity import ENVIRONMENT_FIELDS, ResultIdentity
from madengine.results.samples import parse_samples
from madengine.stats.summary import Summary as SampleSummary
from madengine.stats.summary import summarize as summarize_samples

OTHER = "other"
GROUP_FIELDS = ("model", "tag_configs", *ENVIRONMENT_FIELDS)  # the identity without its metric
RUN_LABEL_LIMIT = 24
_INF = float("inf")


@dataclasses.dataclass
class Run:
    key: str
    started_at: str
    first_row: int

    @property
    def label(self) -> str:
        """For chart axes and tooltips: the run id and its start time to the second."""
        key = self.key if len(self.key) <= RUN_LABEL_LIMIT else self.key[:RUN_LABEL_LIMIT - 1] + "…"
        started = self.started_at.replace("T", " ")[:19]
        if not started or started == self.key.replace("T", " ")[:19]:
            return key
        return f"{key} · {started}"


@dataclasses.dataclass
class ModelStats:
    """One result group: a model with its tag configs and environment (see the module docstring)."""

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
    mean: float | None = None  # of every sample
    minimum: float | None = None
    maximum: float | None = None
    history: list[tuple[int, float]] = dataclasses.field(default_factory=list)  # (run position, median)
    spread: list[tuple[int, float, float]] = dataclasses.field(default_factory=list)  # (run position, min, max)
    samples: SampleSummary | None = None  # of every sample of the SUCCESS rows in ``metric``
    group: tuple[str, ...] = ()  # GROUP_FIELDS values

    @property
    def identity(self) -> ResultIdentity:
        values = dict(zip(GROUP_FIELDS, self.group or (self.model,)))
        return ResultIdentity(**{**values, "metric": self.metric})

    @property
    def name(self) -> str:
        """The model with its tag configs beside it: ``numpy_matmul [size=64]``."""
        configs = self.group[1] if len(self.group) > 1 else ""
        return f"{self.model} [{configs}]" if configs else self.model

    @property
    def environment(self) -> str:
        """``docker · AMD gfx942 · 1 GPU`` (what the label adds to the name)."""
        label = self.identity.label()
        return label.split(" · ", 1)[1] if " · " in label else ""


@dataclasses.dataclass
class Summary:
    """What the summary cards, the per-result table and the charts show, over all rows."""

    total: int
    counts: dict[str, int]  # SUCCESS, FAILURE, SKIPPED, other
    models: list[ModelStats]  # by group (model name first)
    runs: list[Run]  # in time order
    machines: int
    first_started: str
    last_started: str

    @property
    def success_rate(self) -> float | None:
        return self.counts[Status.SUCCESS] / self.total if self.total else None

    @property
    def model_names(self) -> int:
        return len({stats.model for stats in self.models})


def as_float(text: str) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError, OverflowError):
        return None
    return value if math.isfinite(value) else None


def _samples(performance: str, samples_cell: str) -> list[float]:
    """A row's figures: its ``perf_samples`` when they parse, else its performance (a report never
    fails on a malformed cell)."""
    if samples_cell:
        try:
            values = parse_samples(samples_cell)
        except ValueError:
            values = []
        if values:
            return values
    value = as_float(performance)
    return [] if value is None else [value]


def summarize(table: PerfTable) -> Summary:
    """Aggregate every row of ``table``.

    Written as whole-column passes (comprehensions, Counter) rather than one loop doing
    everything: it is the hot path of a 100,000-row perf.html.
    """
    statuses = [s.upper() for s in table.column("status")]
    performances = table.column("performance")
    metrics = table.column("metric")
    started = table.column("started_at")
    run_ids = table.column("run_id")
    samples = table.column("perf_samples")
    machines = set(table.column("machine_name")) if table.index("machine_name") is not None else set()
    machines.discard("")
    groups = list(zip(*(table.column(name) for name in GROUP_FIELDS)))

    tally = Counter(statuses)
    counts = {name: tally.pop(name, 0) for name in (Status.SUCCESS, Status.FAILURE, Status.SKIPPED)}
    counts[OTHER] = sum(tally.values())
    runs, run_of_row = _runs(run_ids, started)
    order = _run_order(runs)
    position = {run: pos for pos, run in enumerate(order)}
    stats = _group_stats(groups, statuses, performances, samples, metrics, started, run_of_row, position)
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


def _group_stats(groups: list[tuple[str, ...]], statuses: list[str], performances: list[str], samples: list[str],
                 metrics: list[str], started: list[str], run_of_row: list[int | None],
                 position: dict[int, int]) -> list[ModelStats]:
    per_status = Counter(zip(groups, statuses))
    rows_of = Counter(groups)
    latest = {group: number for number, group in enumerate(groups)}
    metric_of = {group: metric for group, status, metric in zip(groups, statuses, metrics) if status == Status.SUCCESS}
    named_metric = {group: metric for group, metric in zip(groups, metrics) if metric}  # never succeeded
    figures, history = _figures(groups, statuses, performances, samples, metrics, run_of_row, metric_of, position)
    result = []
    for group in sorted(rows_of):
        last = latest[group]
        stats = ModelStats(group[0], metric_of.get(group, named_metric.get(group, "")), rows_of[group],
                           per_status[(group, Status.SUCCESS)], per_status[(group, Status.FAILURE)],
                           per_status[(group, Status.SKIPPED)], statuses[last], performances[last], started[last],
                           group=group)
        acc = figures.get(group)
        if acc:
            stats.count = acc[0]
            stats.samples = summarize_samples(acc[1])
            stats.mean, stats.minimum, stats.maximum = stats.samples.mean, stats.samples.minimum, stats.samples.maximum
            runs = sorted(history.get(group, {}).items())
            stats.history = [(run, _median(values)) for run, values in runs]
            stats.spread = [(run, min(values), max(values)) for run, values in runs if len(values) > 1]
        result.append(stats)
    return result


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else ordered[middle - 1] / 2 + ordered[middle] / 2


def _figures(groups: list[tuple[str, ...]], statuses: list[str], performances: list[str], samples: list[str],
             metrics: list[str], run_of_row: list[int | None], metric_of: dict[tuple[str, ...], str],
             position: dict[int, int]) -> tuple[dict[tuple[str, ...], list], dict[tuple[str, ...], dict[int, list]]]:
    """Per group, over its SUCCESS figures in its current metric: [rows, every sample], and per run
    position the samples of that run."""
    figures: dict[tuple[str, ...], list] = {}
    by_run: dict[tuple[str, ...], dict[int, list[float]]] = {}
    success = Status.SUCCESS
    for group, status, text, cell, metric, run in zip(groups, statuses, performances, samples, metrics, run_of_row):
        if status != success or metric != metric_of[group]:
            continue
        if cell:
            values = _samples(text, cell)
        else:  # the common case, kept free of calls: a 100,000-row page spends its time here
            try:
                value = float(text)
            except ValueError:
                continue
            if value != value or value in (_INF, -_INF):
                continue
            values = [value]
        if not values:
            continue
        acc = figures.get(group)
        if acc is None:
            figures[group] = [1, list(values)]
        else:
            acc[0] += 1
            acc[1].extend(values)
        if run is not None:
            by_run.setdefault(group, {}).setdefault(position[run], []).extend(values)
    return figures, by_run


def _run_order(runs: list[Run]) -> list[int]:
    """Indexes of ``runs`` in time order (see module docstring)."""
    if runs and all(run.started_at for run in runs):
        return sorted(range(len(runs)), key=lambda i: (runs[i].started_at, runs[i].first_row))
    return sorted(range(len(runs)), key=lambda i: runs[i].first_row)
