"""One row per distributed job: the figures of its nodes become the job's figure.

A job of several nodes (Slurm, Kubernetes) yields one figure per node; each node's comes from its
own output (the last ``performance:`` line, as for any run). :func:`aggregate` turns them into
the job's row, pure and independent of the order the nodes are given in:

* how nodes combine depends on the metric (the unit the script printed after its number), by the
  reference's name rules (:func:`aggregation_rule`): **sum** for throughput-like metrics (a rate
  per unit of time: ``samples/s``, ``tokens_per_second``, ``GB/s``; ``throughput``, ``qps``,
  ``fps``, ``tflops``, ``bandwidth``), **mean** for latency-like ones (a time: ``ms``, ``s``,
  ``ms/token``; ``latency``, ``ttft``, ``duration``; and accuracy, loss, perplexity, scores, %),
  **max** for memory (``bytes``, ``MB``, ``GiB``; ``memory``, ``mem``, ``rss``); a name that
  matches none is summed (the reference's choice);
* figures from every node are combined; a figure from node 0 alone is the job's (scripts that
  reduce across ranks and print on global rank 0); any other set of nodes is no figure at all,
  with a reason naming the nodes that printed none, as is a metric the nodes disagree on;
* the row records each node's value by node rank (``node_performance``, a JSON list, ``null`` for
  a node without a figure), how many counted (``node_n``), their spread (``node_cv``: sample
  standard deviation / |mean|, empty below 2 nodes), the rule (``node_aggregation``), and the
  job's shape: ``launcher``, ``world_size``, ``nnodes``, ``nproc_per_node``.

Precision: sums and means are ``math.fsum`` (correctly rounded, so the order of the nodes never
changes the last digit); one node's figure is kept as the text it printed.

:func:`last_performance` finds a log's figure reading from its end (a figure is the last line of a
long log), so 64 nodes' logs aggregate in milliseconds whatever their length
(``benchmarks/aggregate_nodes.py``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from typing import Any, Iterable, Mapping, Sequence

from madengine.results.columns import JOB_COLUMNS
from madengine.results.parsing import Performance, as_number, parse_performance
from madengine.stats.summary import summarize

SUM, MEAN, MAX = "sum", "mean", "max"

_TIME_UNITS = frozenset({"s", "sec", "secs", "second", "seconds", "ms", "msec", "msecs", "millisecond",
                         "milliseconds", "us", "usec", "usecs", "µs", "microsecond", "microseconds", "ns", "nsec",
                         "nanosecond", "nanoseconds", "min", "mins", "minute", "minutes", "h", "hr", "hrs", "hour",
                         "hours", "day", "days"})
_THROUGHPUT_WORDS = frozenset({"throughput", "qps", "fps", "tps", "rps", "ips", "sps", "flops", "kflops", "mflops",
                               "gflops", "tflops", "pflops", "bandwidth", "bw", "bps", "kbps", "mbps", "gbps", "tbps",
                               "iops"})
_MEMORY_WORDS = frozenset({"memory", "mem", "rss", "vram", "hbm", "bytes", "byte", "b", "kb", "mb", "gb", "tb",
                           "kib", "mib", "gib", "tib", "ki", "mi", "gi", "ti", "footprint"})
_LATENCY_WORDS = frozenset({"latency", "lat", "time", "duration", "elapsed", "wall", "runtime", "ttft", "tpot",
                            "itl", "e2e", "p50", "p90", "p95", "p99", "p999", "accuracy", "acc", "loss",
                            "perplexity", "ppl", "score", "error", "err", "f1", "bleu", "rouge", "wer", "cer",
                            "precision", "recall", "auc", "map", "%", "percent", "pct", "top1", "top5"})
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_WORD = re.compile(r"[a-z0-9%µ]+")
#: how far back :func:`last_performance` reads at a time
_CHUNK = 1 << 16
_MARK = b"performance:"
#: how much of a log after a ``performance:`` mark its figure may take (number, unit, metric)
_LOOKAHEAD = 4096


# -- the rule of a metric ------------------------------------------------------------------------
def _segments(metric: str) -> list[list[str]]:
    """A metric as its words, split where it divides: ``tokens_per_second`` → [[tokens], [second]]."""
    text = _CAMEL.sub("_", metric).lower()
    segments: list[list[str]] = []
    for part in text.split("/"):
        words: list[str] = []
        for word in _WORD.findall(part):
            if word == "per":
                segments.append(words)
                words = []
            else:
                words.append(word)
        segments.append(words)
    return segments


def aggregation_rule(metric: str) -> str:
    """How nodes' figures of ``metric`` combine: :data:`SUM`, :data:`MEAN` or :data:`MAX` (see the
    module's documentation; an unknown name is summed)."""
    segments = _segments(metric)
    numerator, divisors = segments[0], segments[1:]
    if any(part and part[0] in _TIME_UNITS for part in divisors):
        return SUM  # something per unit of time
    words = {word for part in segments for word in part}
    if words & _THROUGHPUT_WORDS:
        return SUM
    if words & _MEMORY_WORDS:
        return MAX
    if (numerator and numerator[0] in _TIME_UNITS) or words & _LATENCY_WORDS:
        return MEAN
    return SUM


# -- one job -------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class JobShape:
    """A distributed job as launched: its launcher and how many nodes and ranks per node."""

    launcher: str
    nnodes: int
    nproc_per_node: int

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    def columns(self) -> dict[str, Any]:
        return {"launcher": self.launcher, "world_size": self.world_size, "nnodes": self.nnodes,
                "nproc_per_node": self.nproc_per_node}


@dataclasses.dataclass(frozen=True)
class NodeFigure:
    """What one node reported: its figure (``None``: it printed none) and metric."""

    node: int
    value: float | None
    metric: str = ""

    @classmethod
    def of(cls, node: int, performance: Performance | None) -> "NodeFigure":
        return cls(node, None) if performance is None else cls(node, performance.value, performance.metric)


@dataclasses.dataclass(frozen=True)
class JobFigure:
    """The job's figure and how it was made; ``problem`` says why there is none ('' when there is)."""

    shape: JobShape
    value: float | None
    metric: str
    rule: str
    node_values: tuple[float | None, ...]
    cv: float | None = None
    problem: str = ""

    @property
    def ok(self) -> bool:
        return not self.problem

    @property
    def n(self) -> int:
        """The nodes whose figure counted."""
        return sum(value is not None for value in self.node_values) if self.ok else 0

    def columns(self) -> dict[str, Any]:
        """The job's row fields (:data:`JOB_COLUMNS`; ``performance`` and ``metric`` are the caller's)."""
        values = self.shape.columns()
        values.update(node_aggregation=self.rule if self.ok else "", node_n=self.n,
                      node_cv="" if self.cv is None else repr(self.cv),
                      node_performance=json.dumps([None if v is None else float(v) for v in self.node_values]))
        return values


def _problem(shape: JobShape, values: tuple[float | None, ...], metric: str, problem: str) -> JobFigure:
    return JobFigure(shape, None, metric, "", values, problem=problem)


def _nodes(ranks: Iterable[int]) -> str:
    listed = sorted(ranks)
    return ("node " if len(listed) == 1 else "nodes ") + ", ".join(str(rank) for rank in listed)


def _by_node(figures: Iterable[NodeFigure], shape: JobShape) -> dict[int, NodeFigure] | str:
    """Each node's figure by node rank, or why the list is not one job's."""
    nodes: dict[int, NodeFigure] = {}
    for figure in figures:
        if not 0 <= figure.node < shape.nnodes:
            return f"node rank {figure.node} is outside a job of {shape.nnodes} node(s)"
        if figure.node in nodes:
            return f"node {figure.node} reported twice"
        if figure.value is not None and not math.isfinite(figure.value):
            return f"node {figure.node} reported {figure.value}, not a finite number"
        nodes[figure.node] = figure
    return nodes


def _combine(rule: str, values: list[float]) -> float:
    """The rule applied; ``inf`` when a sum overflows (the caller refuses it)."""
    if len(values) == 1:
        return values[0]  # kept as printed (a Figure keeps its text)
    if rule == MAX:
        return max(values)
    try:
        total = math.fsum(values)
    except OverflowError:
        total = math.inf
    if rule == SUM:
        return total
    if math.isfinite(total):
        return total / len(values)
    return math.fsum(value / len(values) for value in values)  # no overflow: each is at most max/n


def aggregate(figures: Iterable[NodeFigure], shape: JobShape) -> JobFigure:
    """The job's figure from its nodes' (pure; the order of ``figures`` does not matter)."""
    nodes = _by_node(figures, shape)
    if isinstance(nodes, str):
        return _problem(shape, (), "", nodes)
    values = tuple(nodes[rank].value if rank in nodes else None for rank in range(shape.nnodes))
    counted = [rank for rank, value in enumerate(values) if value is not None]
    if not counted:
        return _problem(shape, values, "", "no node printed a 'performance: <number> <metric>' line")
    if counted != [0] and len(counted) != shape.nnodes:
        missing = [rank for rank, value in enumerate(values) if value is None]
        return _problem(shape, values, nodes[counted[0]].metric,
                        f"{_nodes(missing)} of {shape.nnodes} printed no performance figure while "
                        f"{_nodes(counted)} did: a job's figure comes from every node, or from node 0 alone")
    metrics = {nodes[rank].metric for rank in counted}
    if len(metrics) > 1:
        said = ", ".join(f"{nodes[rank].metric} (node {rank})" for rank in counted)
        return _problem(shape, values, "", f"the nodes report different metrics: {said}")
    metric = metrics.pop()
    rule = aggregation_rule(metric)
    numbers = [nodes[rank].value for rank in counted]
    value = _combine(rule, numbers)  # type: ignore[arg-type]
    if not math.isfinite(value):
        return _problem(shape, values, metric, f"the {rule} of the nodes' figures is not a finite number")
    cv = summarize(numbers).cv if len(numbers) > 1 else None  # type: ignore[arg-type]
    return JobFigure(shape, value, metric, rule, values, cv=cv)


# -- logs ----------------------------------------------------------------------------------------
def last_performance(path: str | os.PathLike[str], chunk: int = _CHUNK) -> Performance | None:
    """The figure of a log file, as :func:`parse_performance` finds it in the whole text (the last
    ``performance:`` line), read from the end: a long log costs what its tail costs. A figure's
    line is found by its ``performance:`` mark, so colour codes inside that word hide it."""
    with open(path, "rb") as handle:
        end = handle.seek(0, os.SEEK_END)
        data = b""
        searched = 0  # bytes at the end of ``data`` whose lines were searched already
        while end > 0:
            start = max(0, end - chunk)
            handle.seek(start)
            data = handle.read(end - start) + data
            end = start
            head = 0 if start == 0 else data.find(b"\n") + 1  # where the complete lines begin
            if head == 0 and start > 0:
                continue  # no line begins in what was read yet
            found = _last_figure(data, head, len(data) - searched)
            if found is not None:
                return found
            searched = len(data) - head
    return None


def _last_figure(data: bytes, head: int, stop: int) -> Performance | None:
    """The last figure of a line beginning in ``data[head:stop]`` (its text may run on after stop)."""
    mark = data.rfind(_MARK, head, stop)
    while mark >= 0:
        line = data.rfind(b"\n", head, mark) + 1 or head
        found = parse_performance(data[line:mark + _LOOKAHEAD].decode("utf-8", "replace"))
        if found is not None:
            return found
        mark = data.rfind(_MARK, head, line)
    return None


def aggregate_logs(logs: Mapping[int, str | os.PathLike[str]], shape: JobShape) -> JobFigure:
    """The job's figure from each node's log file, by node rank (a missing file: no figure)."""
    figures = []
    for node, path in logs.items():
        try:
            figures.append(NodeFigure.of(node, last_performance(path)))
        except FileNotFoundError:
            figures.append(NodeFigure(node, None))
    return aggregate(figures, shape)


# -- the rows of a job's nodes ----------------------------------------------------------------------
#: a node failure that follows another's: a peer that went away, a stop from outside
_FOLLOWS = ("interrupted", "closed by peer", "reset by peer", "remote worker", "Broken pipe")
_NAMES_A_RANK = re.compile(r"\brank \d+ \(node \d+")
_REASON_LIMIT = 600
_NO_ROW = "wrote no result row (see the job's log)"


def job_rows(node_rows: Mapping[int, Sequence[Mapping[str, str]]], shape: JobShape) -> list[dict[str, str]]:
    """The rows of a job from those each node wrote (its perf.csv rows, by node rank): one per
    result (``model``), in first-seen order. A result fails when a node's row failed (the reason
    says which node failed first, then the others) or a node wrote none; else its figure is
    :func:`aggregate` of the nodes' figures, and the row records them (:data:`JOB_COLUMNS`)."""
    order: list[str] = []
    results: dict[str, dict[int, Mapping[str, str]]] = {}
    for node in sorted(node_rows):
        for row in node_rows[node]:
            name = row.get("model", "")
            if name not in results:
                order.append(name)
                results[name] = {}
            results[name][node] = row  # a node's last row of a result counts
    return [_job_row(results[name], shape) for name in order]


def _job_row(rows: Mapping[int, Mapping[str, str]], shape: JobShape) -> dict[str, str]:
    first = min(rows)
    row = dict(rows[first])
    row.update({key: str(value) for key, value in shape.columns().items()})
    artifacts = [a for node in sorted(rows) for a in rows[node].get("artifacts", "").split(",") if a]
    row["artifacts"] = ",".join(dict.fromkeys(artifacts))
    durations = [number for r in rows.values() if (number := as_number(r.get("test_duration", ""))) is not None]
    if durations:
        row["test_duration"] = f"{max(durations):.3f}"  # the job took as long as its slowest node
    failed = {node: r.get("reason", "") for node, r in rows.items() if r.get("status") == "FAILURE"}
    missing = [node for node in range(shape.nnodes) if node not in rows]
    if failed:
        failed.update({node: _NO_ROW for node in missing})
        return _failed(row, _failure_reason(failed))
    if all(r.get("status") == "SKIPPED" for r in rows.values()):
        return row
    if missing:
        return _failed(row, f"{_nodes(missing)} of {shape.nnodes} wrote no result row")
    job = aggregate([NodeFigure(node, as_number(r.get("performance", "")), r.get("metric", ""))
                     for node, r in rows.items()], shape)
    row.update({key: str(value) for key, value in job.columns().items()})
    if not job.ok:
        return _failed(row, job.problem)
    row.update(status="SUCCESS", reason="", performance=repr(job.value), metric=job.metric)
    return row


def _failed(row: dict[str, str], reason: str) -> dict[str, str]:
    row.update(status="FAILURE", reason=reason, performance="")
    return row


def _failure_reason(failed: Mapping[int, str]) -> str:
    """The failed nodes' reasons, the first failure first, whatever the order the nodes ended in:
    one that names a rank (a rank that failed, or still ran when the job was ended: the hung one),
    then one that does not follow another's (a peer gone, a stop from outside), then a node that
    wrote no row (it could not even record, or was killed once a peer had failed: Slurm's
    --kill-on-bad-exit ends a node's madengine before it records when it takes longer than
    KillWait), then by node rank."""
    def order(node: int) -> tuple[bool, bool, bool, int]:
        reason = failed[node]
        return (not _NAMES_A_RANK.search(reason), any(m in reason for m in _FOLLOWS), reason == _NO_ROW,
                node)

    def said(node: int) -> str:
        reason = failed[node] or "failed"
        return reason if _NAMES_A_RANK.match(reason) else f"node {node}: {reason}"

    nodes = sorted(failed, key=order)
    text = said(nodes[0])
    if len(nodes) > 1:
        text += " (also " + "; ".join(said(node) for node in nodes[1:]) + ")"
    return text if len(text) <= _REASON_LIMIT else text[:_REASON_LIMIT - 1] + "…"


__all__ = ["JOB_COLUMNS", "MAX", "MEAN", "SUM", "JobFigure", "JobShape", "NodeFigure", "aggregate",
           "aggregate_logs", "aggregation_rule", "job_rows", "last_performance"]
