"""One row per Kubernetes job, from its pods' logs and states: a one-node job's log makes its rows
by the rules of every executor (:func:`madengine.results.verdict.model_records`: the last
``performance:`` line, a ``multiple_results`` CSV, the precision the model reported), and a job of
several nodes is aggregated by :func:`madengine.results.aggregate.aggregate_logs`, the one
aggregation of the Slurm path too.

A failed job is a FAILURE row whose reason says what Kubernetes or the model said, naming the node
rank, pod and node: OOMKilled (with the memory limit), an image that cannot be pulled, a pod no
node can take, the job's deadline, or the model's exit code and its last words
(:func:`madengine.results.verdict.exit_reason`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Mapping

from madengine.catalog import Model
from madengine.k8s.pods import JobState, PodState
from madengine.k8s.render import JobPlan
from madengine.results import PerfRecord, RecordFactory, Status
from madengine.results.aggregate import JobShape, aggregate_logs
from madengine.results.verdict import exit_reason, model_records, precision_columns, read_table, reported_precision

#: how much of a log's end a failure's last words are looked for in
_TAIL = 1 << 16
_TABLE = re.compile(r"^=== madengine: multiple_results begin\n(.*?)^=== madengine: multiple_results end$",
                    re.MULTILINE | re.DOTALL)


def read_tail(path: Path | None, size: int | None = _TAIL) -> str:
    """The end of a log (``size`` bytes; None: all of it), '' when there is none."""
    if path is None:
        return ""
    try:
        with open(path, "rb") as handle:
            handle.seek(0 if size is None else max(0, handle.seek(0, 2) - size))
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _who(pod: PodState, multi_node: bool) -> str:
    return f"node rank {pod.rank} ({pod.where()})" if multi_node else pod.where()


def failure_reason(plan: JobPlan, state: JobState, pods: Mapping[int, PodState], logs: Mapping[int, Path],
                   timeout: int | None, verdict: str = "") -> str:
    """Why the job failed, most telling first: madengine's own verdict (blocked too long,
    interrupted), OOMKilled, the deadline, a blocked pod, a model that exited non-zero."""
    multi = plan.nnodes > 1
    if verdict:
        return verdict
    for pod in sorted(pods.values(), key=lambda p: p.rank):
        if pod.terminated == "OOMKilled":
            limit = f" ({pod.memory_limit})" if pod.memory_limit else ""
            return f"OOMKilled: {_who(pod, multi)} went over its memory limit{limit}"
    if state.reason == "DeadlineExceeded":
        return f"timeout: the job ran longer than {timeout} s (activeDeadlineSeconds); Kubernetes stopped its pods"
    for pod in sorted(pods.values(), key=lambda p: p.rank):
        if pod.blocked():
            return f"{_who(pod, multi)}: {pod.blocked()}"
    for pod in sorted(pods.values(), key=lambda p: p.rank):
        if pod.phase == "Failed" and pod.exit_code not in (None, 0):
            output = read_tail(logs.get(pod.rank))
            if multi:
                return f"{_who(pod, multi)}: {exit_reason(pod.exit_code, output)}"
            return exit_reason(pod.exit_code, output, where=pod.where())
    detail = f"{state.reason}: {state.message}" if state.message else state.reason or "no reason given"
    return f"the Job failed ({detail})"


def job_columns(plan: JobPlan, pods: Mapping[int, PodState], logs: Mapping[int, Path]) -> dict[str, Any]:
    """What every row of the job carries: its pods and nodes by node rank, logs as artifacts."""
    ranks = range(plan.nnodes)
    extra = {"k8s_job": plan.name, "k8s_namespace": plan.namespace,
             "k8s_pods": json.dumps([pods[r].name if r in pods else None for r in ranks]),
             "k8s_nodes": json.dumps([pods[r].node if r in pods else None for r in ranks])}
    node0 = pods.get(0)
    shape = JobShape(plan.launcher, plan.nnodes, plan.nproc_per_node).columns() if plan.distributed else {}
    return {**shape, "extra": extra, "docker_image": plan.image, "docker_file": plan.dockerfile,
            "image_id": plan.image_id, "machine_name": node0.node if node0 and node0.node else "",
            "artifacts": [str(logs[r]) for r in ranks if r in logs], "n_gpus": str(plan.gpu_count * plan.nnodes)}


def _distributed(factory: RecordFactory, model: Model, plan: JobPlan, logs: Mapping[int, Path],
                 values: dict[str, Any]) -> PerfRecord:
    """The row of a job of several nodes whose pods all ended well: its nodes' figures aggregated."""
    figure = aggregate_logs(dict(logs), JobShape(plan.launcher, plan.nnodes, plan.nproc_per_node))
    values.update(figure.columns())
    if not figure.ok:
        return factory.failure(model, figure.problem, **values)
    record = factory.for_model(model, Status.SUCCESS, performance=figure.value, metric=figure.metric, **values)
    columns, notes = precision_columns(model.training_precision, reported_precision(read_tail(logs.get(0))))
    for key, value in columns.items():
        setattr(record, key, value)
    record.add_warnings(notes)
    return record


def table_of(log: Path | None, folder: Path, name: str) -> Path:
    """Where the ``multiple_results`` CSV the pod printed into its log is written in ``folder``
    (not written when the log has none)."""
    path = folder / Path(name).name
    found = list(_TABLE.finditer(read_tail(log, None)))
    if found:
        path.write_text(found[-1].group(1), encoding="utf-8")
    return path


def job_records(factory: RecordFactory, model: Model, plan: JobPlan, state: JobState, pods: Mapping[int, PodState],
                logs: Mapping[int, Path], *, folder: Path, timeout: int | None, verdict: str = "",
                duration: float | None = None) -> list[PerfRecord]:
    """The rows of one ended job (one, or one per result of a ``multiple_results`` model);
    ``duration``: its containers' time (``test_duration``), when known."""
    values = job_columns(plan, pods, logs)
    if duration is not None:
        values["test_duration"] = round(duration, 3)
    if verdict or state.failed:
        return [factory.failure(model, failure_reason(plan, state, pods, logs, timeout, verdict), **values)]
    if plan.distributed:
        return [_distributed(factory, model, plan, logs, values)]
    tables: list[list[dict[str, str]]] = []
    if model.multiple_results:
        path = table_of(logs.get(0), folder, model.multiple_results)
        rows = read_table(path, model.multiple_results)
        if isinstance(rows, str):
            return [factory.failure(model, rows, **values)]
        tables.append(rows)
        values["artifacts"] = [*values["artifacts"], str(path)]
    return model_records(factory, model, [read_tail(logs.get(0), None)], values, tables=tables)


__all__ = ["failure_reason", "job_columns", "job_records", "read_tail", "table_of"]
