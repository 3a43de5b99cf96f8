"""One row per Kubernetes job, from its pods' logs and states: the figure is found in each pod's
log as the docker path finds it (:func:`~madengine.results.parsing.parse_performance`, the last
``performance:`` line), and a job of several nodes is aggregated by
:func:`madengine.results.aggregate.aggregate_logs`, the one aggregation of the Slurm path too.

A failed job is a FAILURE row whose reason says what Kubernetes or the model said, naming the node
rank, pod and node: OOMKilled (with the memory limit), an image that cannot be pulled, a pod no
node can take, the job's deadline, or the model's exit code and its last words.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Mapping

from madengine.catalog import Model
from madengine.core.errors import MadEngineError
from madengine.execution.provenance import precision_columns, reported_precision
from madengine.execution.runner import last_meaningful_line
from madengine.k8s.pods import JobState, PodState
from madengine.k8s.render import JobPlan
from madengine.results import PerfRecord, RecordFactory, Status
from madengine.results.aggregate import JobShape, aggregate_logs
from madengine.results.parsing import as_number, parse_multiple_results, parse_performance

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
            said = last_meaningful_line(read_tail(logs.get(pod.rank)))
            cause = f"{_who(pod, multi)}: model script exited with code {pod.exit_code}" if multi else \
                f"model script exited with code {pod.exit_code} ({pod.where()})"
            return f"{cause}: {said}" if said else cause
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


def _success(factory: RecordFactory, model: Model, plan: JobPlan, logs: Mapping[int, Path],
             values: dict[str, Any]) -> PerfRecord:
    """The row of a job whose pods all ended well: its figure, or FAILURE when there is none."""
    text = read_tail(logs.get(0))
    if plan.distributed:
        figure = aggregate_logs(dict(logs), JobShape(plan.launcher, plan.nnodes, plan.nproc_per_node))
        values.update(figure.columns())
        if not figure.ok:
            return factory.failure(model, figure.problem, **values)
        record = factory.for_model(model, Status.SUCCESS, performance=figure.value, metric=figure.metric, **values)
    else:
        found = parse_performance(read_tail(logs.get(0), None))
        if found is None:
            return factory.failure(model, "no performance figure: the script printed no 'performance: <number> "
                                          "<metric>' line", **values)
        record = factory.for_model(model, Status.SUCCESS, performance=found.value, metric=found.metric, **values)
    columns, notes = precision_columns(model.training_precision, reported_precision(text))
    for key, value in columns.items():
        setattr(record, key, value)
    record.add_warnings(notes)
    return record


def table_of(log: Path | None, folder: Path, name: str) -> Path | None:
    """The ``multiple_results`` CSV the pod printed into its log, written to ``folder``."""
    text = read_tail(log, None)
    found = list(_TABLE.finditer(text))
    if not found:
        return None
    path = folder / Path(name).name
    path.write_text(found[-1].group(1), encoding="utf-8")
    return path


def _tables(factory: RecordFactory, model: Model, plan: JobPlan, logs: Mapping[int, Path], folder: Path,
            values: dict[str, Any]) -> list[PerfRecord]:
    """One row per result of a ``multiple_results`` model's CSV (node rank 0's)."""
    path = table_of(logs.get(0), folder, model.multiple_results)
    if path is None:
        return [factory.failure(model, f"multiple_results: the model wrote no {model.multiple_results}", **values)]
    try:
        rows = parse_multiple_results(path)
    except MadEngineError as exc:
        return [factory.failure(model, f"multiple_results: {exc}", **values)]
    if not rows:
        return [factory.failure(model, f"multiple_results: {model.multiple_results} has no rows", **values)]
    records = []
    for row in rows:
        mine = dict(values, extra={**values["extra"], **{k: v for k, v in row.items()
                                                         if k not in ("model", "performance", "metric", "status")}},
                    artifacts=[*values["artifacts"], str(path)])
        number = as_number(row.get("performance", ""))
        record = factory.for_model(model, Status.SUCCESS if number is not None else Status.FAILURE,
                                   performance=number, metric=row.get("metric", ""), **mine)
        record.model = f"{model.name}_{row.get('model', '')}"
        if number is None:
            record.reason = "multiple_results row has no performance number"
        records.append(record)
    return records


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
    if model.multiple_results and not plan.distributed:
        return _tables(factory, model, plan, logs, folder, values)
    return [_success(factory, model, plan, logs, values)]


__all__ = ["failure_reason", "job_columns", "job_records", "read_tail", "table_of"]
