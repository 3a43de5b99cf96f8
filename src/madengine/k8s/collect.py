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

import base64
import binascii
import json
import re
from pathlib import Path, PurePosixPath
from typing import Any, Mapping, Sequence

from madengine.catalog import Model
from madengine.core.errors import MadEngineError
from madengine.core.spec import RunSpec
from madengine.k8s.pods import JobState, PodState
from madengine.k8s.render import ENTRY_FAILURE, JobPlan
from madengine.results import PerfRecord, RecordFactory, Status
from madengine.results.aggregate import JobShape, aggregate_logs
from madengine.results.verdict import (exit_reason, last_meaningful_line, model_records, precision_columns,
                                       read_table, reported_precision, step_reason)

#: how much of a log's end a failure's last words are looked for in
_TAIL = 1 << 16
_TABLE = re.compile(r"^=== madengine: multiple_results begin\n(.*?)^=== madengine: multiple_results end$",
                    re.MULTILINE | re.DOTALL)
#: a step around the model step that failed (the entry script's line)
_STEP_FAILED = re.compile(r"^=== madengine: step ([^\n]+) failed with exit code (\d+)$", re.MULTILINE)
#: a tool's output file, base64, between the entry script's lines
_OUTPUT = re.compile(r"^=== madengine: output ([^\n]+) begin\n(.*?)^=== madengine: output end$",
                     re.MULTILINE | re.DOTALL)
_FIELDS = frozenset(PerfRecord.__dataclass_fields__) - {"extra"}


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
            step = _STEP_FAILED.findall(output)
            if step:  # a step around the model step: a tool, a pre/post script
                return f"{_who(pod, multi)}: {step_reason(step[0][0], int(step[0][1]))}"
            if pod.exit_code == ENTRY_FAILURE and "=== madengine: pod " not in output:
                said = last_meaningful_line(output)
                return f"{_who(pod, multi)}: madengine's entry script could not prepare the run (exit code " \
                       f"{ENTRY_FAILURE})" + (f": {said}" if said else "")
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


def outputs_of(log: Path | None, folder: Path) -> list[Path]:
    """The tools' outputs a pod printed into its log (base64), written into ``folder`` by name."""
    written = []
    for match in _OUTPUT.finditer(read_tail(log, None)):
        name = PurePosixPath(match.group(1)).name
        try:
            content = base64.b64decode("".join(match.group(2).split()), validate=True)
        except (binascii.Error, ValueError):
            continue  # cut short (a pod killed while printing it): the copy on the results volume stays
        if name not in ("", ".", ".."):
            folder.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(content)
            written.append(folder / name)
    return written


def summarised(plan: JobPlan, model: Model, folder: Path) -> dict[str, Any]:
    """The tools' summaries of the outputs in ``folder``: their row values (standard columns, and
    the others under ``extra``), as a docker run's finalizers give them."""
    spec = RunSpec(key=plan.name, model=model, workdir=folder, log_path=folder / "run.log", artifacts_dir=folder,
                   env={}, steps=[])
    values: dict[str, Any] = {"extra": {}}
    for finalize in plan.finalizers:
        try:
            produced = finalize(spec) or {}
        except MadEngineError as exc:
            produced = {"finalize_error": str(exc)}
        for key, value in produced.items():
            if key in _FIELDS:
                values[key] = value
            else:
                values["extra"][key] = value
    return values


def job_records(factory: RecordFactory, model: Model, plan: JobPlan, state: JobState, pods: Mapping[int, PodState],
                logs: Mapping[int, Path], *, folder: Path, timeout: int | None, verdict: str = "",
                duration: float | None = None, notes: Sequence[str] = ()) -> list[PerfRecord]:
    """The rows of one ended job (one, or one per result of a ``multiple_results`` model);
    ``duration``: its containers' time (``test_duration``), when known; ``notes``: warnings of the
    job (a pod Kubernetes stopped and made again)."""
    values = job_columns(plan, pods, logs)
    if duration is not None:
        values["test_duration"] = round(duration, 3)
    values["artifacts"] = [*values["artifacts"], *map(str, outputs_of(logs.get(0), folder / "outputs"))]
    if plan.finalizers:
        summary = summarised(plan, model, folder / "outputs")
        values["extra"].update(summary.pop("extra"))
        values.update(summary)
    records = _records(factory, model, plan, state, pods, logs, folder, timeout, verdict, values)
    for record in records:
        record.add_warnings(list(notes))
    return records


def _records(factory: RecordFactory, model: Model, plan: JobPlan, state: JobState, pods: Mapping[int, PodState],
             logs: Mapping[int, Path], folder: Path, timeout: int | None, verdict: str,
             values: dict[str, Any]) -> list[PerfRecord]:
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


__all__ = ["failure_reason", "job_columns", "job_records", "outputs_of", "read_tail", "summarised", "table_of"]
