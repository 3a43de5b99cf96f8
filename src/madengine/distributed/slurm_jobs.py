"""A submitted Slurm run on disk, and how it ends: waiting, live logs, merging rows into perf.csv.

Each submission has a job folder (``<results_dir>/<run_id>/``, on a filesystem the nodes share)
with ``job.json`` (what was submitted: models, job ids, where each task writes), the rendered
scripts, ``logs/`` and ``tasks/<NNN>-<model>/perf.csv`` — the rows each task wrote. Merging
reads every task's rows into the user's perf.csv once; a task that wrote no row gets a FAILURE
row that says why (its Slurm state: cancelled, timeout, node failure, exit code). So a run whose
tasks could not run never reads as a success.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any, Callable

from madengine.core.version import __version__
from madengine.catalog import Model
from madengine.core.clock import utc_now
from madengine.core.host import Host
from madengine.core.errors import ConfigError, InputError, MadEngineError, ServiceError
from madengine.core.redact import redact
from madengine.distributed.manifest import model_of_entry
from madengine.distributed.slurm_commands import UNRUNNABLE, JobRecord, SlurmCommands, split_queue_id
from madengine.core.events import Reporter
from madengine.results import PerfRecord, Provenance, RecordFactory, RunSummary, Status, append_records, read_rows
from madengine.core.spec import WORK_FOLDER
from madengine.execution.ranks import RANKS_FOLDER
from madengine.launch import RANK_LOG_FOLDER
from madengine.results.aggregate import JobShape, job_rows

JOB_FILE = "job.json"
FORMAT = "madengine-slurm-job"
MAX_QUERY_FAILURES = 20
_STATE_REASONS = {
    "CANCELLED": "cancelled (scancel, preemption or the job's dependencies)",
    "NODE_FAIL": "node failure",
    "OUT_OF_MEMORY": "out of memory",
    "PREEMPTED": "preempted",
    "BOOT_FAIL": "the node failed to boot",
    "DEADLINE": "the job's deadline passed",
    "REVOKED": "revoked by a sibling cluster",
}




@dataclasses.dataclass
class SlurmTask:
    """One model of the run: which job runs it and where its rows and log go."""

    index: int
    model: str
    tag: str
    result_dir: str  # absolute
    model_entry: dict[str, Any]
    nodes: int = 1
    job_id: str = ""  # the array job or the model's own multi-node job
    array_index: int | None = None
    log: str = ""  # absolute; '%A'/'%a'/'%j' filled once the job id is known
    rejected: str = ""  # sbatch's message when the job carrying the task was refused
    recorded: bool = False  # its rows are already in perf.csv (a refused task, recorded at once)
    unrunnable: str = ""  # the pending reason for which madengine cancelled the task (it could never start)
    traceparent: str = ""  # the W3C trace context the task continues ('' with --no-trace)
    master_port: int = 0  # a multi-node task's rendezvous port
    node_context: str = ""  # a multi-node task's context string for its nodes (--nodes as the job's nnodes)

    def trace_files(self) -> list[Path]:
        """The trace.json files the task wrote (one per node of a multi-node task)."""
        folder = Path(self.result_dir)
        return sorted(folder.glob("trace.json")) + sorted(folder.glob("node-*/trace.json"), key=_node_number)

    def node_folders(self) -> list[Path]:
        """A multi-node task's folder of each node (``node-<node rank>``), by node rank."""
        return sorted(Path(self.result_dir).glob("node-*"), key=_node_number)

    @property
    def slurm_id(self) -> str:
        return f"{self.job_id}_{self.array_index}" if self.array_index is not None else self.job_id


@dataclasses.dataclass
class SlurmJob:
    run_id: str
    job_dir: Path
    output: str  # the perf.csv rows are merged into
    command_line: str
    context: dict[str, Any]  # the user's context overrides (what the rows of unrun tasks report)
    tasks: list[SlurmTask]
    submitted_at: str = ""
    madengine_version: str = __version__
    collected_at: str = ""
    collected_into: str = ""

    @property
    def job_ids(self) -> list[str]:
        return sorted({t.job_id for t in self.tasks if t.job_id}, key=int)

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "run_id": self.run_id, "job_dir": str(self.job_dir), "output": self.output,
                "command_line": self.command_line, "context": self.context, "submitted_at": self.submitted_at,
                "madengine_version": self.madengine_version, "job_ids": self.job_ids,
                "collected_at": self.collected_at, "collected_into": self.collected_into,
                "tasks": [dataclasses.asdict(t) for t in self.tasks]}

    def save(self) -> Path:
        path = self.job_dir / JOB_FILE
        tmp = path.with_name(f".{JOB_FILE}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)
        return path


def load_job(path: Path) -> SlurmJob:
    shown = str(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError("Slurm job file not found", path=shown) from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the Slurm job file ({exc})", path=shown) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ConfigError("not a madengine Slurm job file", path=shown)
    try:
        names = {f.name for f in dataclasses.fields(SlurmTask)}
        tasks = [SlurmTask(**{k: v for k, v in t.items() if k in names}) for t in data["tasks"]]
        return SlurmJob(run_id=data["run_id"], job_dir=path.parent, output=data["output"],
                        command_line=data.get("command_line", ""), context=data.get("context", {}), tasks=tasks,
                        submitted_at=data.get("submitted_at", ""),
                        madengine_version=data.get("madengine_version", ""),
                        collected_at=data.get("collected_at", ""), collected_into=data.get("collected_into", ""))
    except (KeyError, TypeError) as exc:
        raise ConfigError(f"malformed Slurm job file ({exc})", path=shown) from None


def find_job(job_id: str, results_dir: Path) -> SlurmJob:
    """The job of ``results_dir`` that submitted Slurm job ``job_id`` (a job or array id)."""
    wanted = job_id.split("_")[0].strip()
    if not wanted.isdigit():
        raise InputError(f"'{job_id}' is not a Slurm job id", path="--job")
    if not results_dir.is_dir():
        raise InputError("Slurm results folder not found", path=str(results_dir),
                         hint="give the folder the run used (--results-dir, the context's slurm.results_dir)")
    for path in sorted(results_dir.glob(f"*/{JOB_FILE}"), reverse=True):
        try:
            job = load_job(path)
        except MadEngineError:
            continue
        if wanted in job.job_ids:
            return job
    raise InputError(f"no madengine run in {results_dir} submitted Slurm job {wanted}", path="--job",
                     hint="give the folder the run used with --results-dir")


# -- waiting -----------------------------------------------------------------------------------
_TASK_PREFIX = re.compile(r"^\[[^\]\s]+\] ")
#: a row whose first failure is the stop Slurm sent (a multi-node row may name a node first)
_STOPPED_FIRST = re.compile(r"^(node \d+: )?interrupted by SIG")


class LogFollower:
    """Streams what the tasks append to their Slurm logs, line by line, per model."""

    def __init__(self, job: SlurmJob, emit: Callable[[str, str], None]) -> None:
        self.job = job
        self.emit = emit
        self.offsets: dict[str, int] = {}
        self.partial: dict[str, str] = {}

    def pump(self, final: bool = False) -> None:
        for task in self.job.tasks:
            if not task.log:
                continue
            path = Path(task.log)
            try:
                with open(path, "rb") as handle:
                    handle.seek(self.offsets.get(task.log, 0))
                    data = handle.read()
                    self.offsets[task.log] = handle.tell()
            except OSError:
                continue
            text = self.partial.pop(task.log, "") + data.decode("utf-8", "replace")
            lines = text.split("\n")
            if not final:
                self.partial[task.log] = lines.pop()
            for line in lines:
                if line or not final:
                    # the task's own `madengine run --live-output` already prefixed its lines with
                    # "[<image key>] "; the model prefix the submitter adds replaces it
                    self.emit(task.model, redact(_TASK_PREFIX.sub("", line.rstrip("\r"), count=1)))


def _progress(entries: list[Any]) -> str:
    """``'1 running, 2 pending (Resources)'``: a pending range of array tasks counts once."""
    counts: dict[str, int] = {}
    for entry in entries:
        label = entry.state.lower()
        if entry.state == "PENDING" and entry.reason not in ("", "None"):
            label += f" ({entry.reason})"
        counts[label] = counts.get(label, 0) + 1
    return ", ".join(f"{n} {label}" for label, n in sorted(counts.items()))


def wait_for_job(job: SlurmJob, commands: SlurmCommands, reporter: Reporter, poll_interval: float,
                 follower: LogFollower | None = None, sleep: Callable[[float], None] = time.sleep) -> None:
    """Poll ``squeue`` until none of the job's jobs is pending or running any more."""
    last = ""
    failures = 0
    ids = job.job_ids
    while ids:
        try:
            entries = commands.queue(ids)
            failures = 0
        except ServiceError as exc:
            failures += 1
            if failures >= MAX_QUERY_FAILURES:
                raise
            reporter.message(f"madengine: squeue failed ({exc}); retrying")
            sleep(poll_interval)
            continue
        if follower is not None:
            follower.pump()
        _cancel_unrunnable(job, entries, commands, reporter)
        progress = _progress(entries)
        if progress and progress != last:
            reporter.message(f"madengine: slurm job {','.join(ids)}: {progress}")
            last = progress
        if not entries:
            break
        sleep(poll_interval)
    if follower is not None:
        follower.pump(final=True)


def _cancel_unrunnable(job: SlurmJob, entries: list[Any], commands: SlurmCommands, reporter: Reporter) -> None:
    """Cancel tasks Slurm keeps pending for a reason that never clears, instead of waiting forever."""
    doomed = []
    for entry in entries:
        if entry.state != "PENDING" or entry.reason not in UNRUNNABLE:
            continue
        job_id, indices = split_queue_id(entry.job_id)
        for task in job.tasks:
            if task.job_id == job_id and (indices is None or task.array_index in indices) and not task.unrunnable:
                task.unrunnable = entry.reason
                doomed.append(task)
    if doomed:
        reporter.message(f"madengine: Slurm can never start {', '.join(t.model for t in doomed)} "
                         f"({doomed[0].unrunnable}); cancelling")
        commands.cancel(sorted({t.slurm_id for t in doomed}))
        job.save()


# -- merging -----------------------------------------------------------------------------------
def _record_for(records: list[JobRecord], task: SlurmTask) -> JobRecord | None:
    for record in records:
        if task.array_index is None or task.array_index in record.array_tasks:
            return record
    return None


def state_reason(record: JobRecord | None, task: SlurmTask) -> str | None:
    """Why a task failed, from its final Slurm state; None when it completed."""
    if task.unrunnable:
        return (f"never started: Slurm kept the job pending ({task.unrunnable}: it asks for more than the "
                "partition, QOS or account allows); madengine cancelled it")
    if record is None:
        return "final Slurm state unknown (the controller no longer knows the job)"
    state = record.state
    if state == "COMPLETED":
        return None
    if state == "TIMEOUT":
        return f"timeout: the Slurm time limit ({record.time_limit}) was reached; the task was killed"
    if state == "FAILED":
        code, _, signal = record.exit_code.partition(":")
        if signal not in ("", "0"):
            return f"task killed by signal {signal}"
        return f"task exited with code {code}"
    if state in _STATE_REASONS:
        where = f" on {record.node}" if record.node and state == "NODE_FAIL" else ""
        return _STATE_REASONS[state] + where
    return f"Slurm state {state}" + (f" ({record.reason})" if record.reason not in ("", "None") else "")


def _stopped_by_slurm(record: JobRecord | None) -> bool:
    """Whether Slurm itself ended the task (its time limit, scancel, a node's failure): a task that
    FAILED ended with its own exit status, which follows from what its rows already say (a node
    Slurm stopped because another failed: ``srun --kill-on-bad-exit``)."""
    return record is not None and record.state not in ("COMPLETED", "FAILED")


def _node_number(path: Path) -> int:
    number = path.name.partition("-")[2]
    return int(number) if number.isdigit() else -1


def _task_rows(task: SlurmTask) -> list[dict[str, str]]:
    """The task's rows; a multi-node task's are one row per result of the job, merged from the
    rows of its nodes (:func:`madengine.results.aggregate.job_rows`)."""
    folder = Path(task.result_dir)
    if task.nodes <= 1:
        path = folder / "perf.csv"
        return read_rows(path) if path.is_file() else []
    nodes = {_node_number(node): read_rows(node / "perf.csv") for node in task.node_folders()
             if (node / "perf.csv").is_file() and 0 <= _node_number(node) < task.nodes}
    if not nodes:
        return []
    return job_rows(nodes, _job_shape(task, nodes))


def _job_shape(task: SlurmTask, nodes: dict[int, list[dict[str, str]]]) -> JobShape:
    """The job as its nodes' rows describe it (its launcher and ranks per node); a model without a
    ``distributed`` block runs one process per node."""
    row = next((r for rows in nodes.values() for r in rows if r.get("launcher")), {})
    per_node = row.get("nproc_per_node", "")
    return JobShape(row.get("launcher", ""), task.nodes, int(per_node) if per_node.isdigit() else 1)


def remove_left_work(task: SlurmTask) -> list[Path]:
    """The work folders the task's nodes left (a node's madengine that Slurm killed before it
    could clean up: ``--kill-on-bad-exit`` SIGKILLs the other nodes KillWait seconds after one
    failed), removed once the job has ended; the rank logs in one are kept beside its run.log
    (``ranks/``, as the launcher wrote them) unless the node collected them itself. The removed
    folders."""
    removed = []
    for node in task.node_folders():
        for work in sorted(node.glob(f"runs/*/*/{WORK_FOLDER}")):
            ranks, kept = work / RANK_LOG_FOLDER, work.parent / RANKS_FOLDER
            if ranks.is_dir() and not kept.exists():
                os.replace(ranks, kept)
            shutil.rmtree(work, ignore_errors=True)
            removed.append(work)
    return removed


def _last_error(log: str) -> str:
    try:
        lines = Path(log).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    for line in reversed(lines[-50:]):
        if "error" in line.lower():
            return redact(line.strip())[:300]
    return ""


def _as_float(value: Any) -> Any:
    try:
        return float(value)
    except (TypeError, ValueError):
        return value


class JobCollector:
    """Turns the tasks' rows and final states into perf.csv rows of the submitting run."""

    def __init__(self, job: SlurmJob, output: Path, host: Host) -> None:
        self.job = job
        self.output = output
        # rows of tasks that never ran say what the user asked for: the context they gave
        self.records = RecordFactory(Provenance.of(
            run_id=job.run_id, executor="slurm", command_line=job.command_line, environ=host.environ,
            context={k: v for k, v in job.context.items() if k != "slurm"}), host.now)

    def _model(self, task: SlurmTask) -> Model:
        return model_of_entry(task.model_entry, task.model, str(self.job.job_dir / JOB_FILE))

    def failure(self, task: SlurmTask, reason: str, node: str = "") -> PerfRecord:
        record = self.records.failure(self._model(task), reason, machine_name=node,
                                      artifacts=[task.log] if task.log else [])
        record.extra["slurm_job_id"] = task.slurm_id
        return record

    def from_row(self, task: SlurmTask, row: dict[str, str]) -> PerfRecord:
        record = PerfRecord.from_row(row)
        record.run_id = self.job.run_id
        record.executor = "slurm"
        record.command_line = self.job.command_line
        record.test_duration = _as_float(record.test_duration)
        record.build_duration = _as_float(record.build_duration)
        if task.log and task.log not in str(record.artifacts):
            record.artifacts = ",".join(a for a in (str(record.artifacts), task.log) if a)
        record.extra["slurm_job_id"] = task.slurm_id
        return record

    def task_records(self, task: SlurmTask, state: JobRecord | None) -> list[PerfRecord]:
        if task.rejected:
            return [self.failure(task, f"not submitted: sbatch refused the job: {task.rejected}")]
        records = [self.from_row(task, row) for row in _task_rows(task)]
        remove_left_work(task)
        reason = state_reason(state, task)
        node = state.node if state else ""
        if reason is not None and _stopped_by_slurm(state):  # (time limit, scancel): its rows say so first
            for record in records:
                if record.status == Status.FAILURE and _STOPPED_FIRST.match(record.reason):
                    record.reason = f"{reason} ({record.reason})"
        if reason is None and not records:
            reason = "the task ended without writing a result row"
        if reason is not None and not any(r.status == Status.FAILURE for r in records):
            detail = _last_error(task.log) if not records and state is not None and state.state == "FAILED" else ""
            records.append(self.failure(task, f"{reason}: {detail}" if detail else reason, node))
        return records

    def collect(self, commands: SlurmCommands, tasks: list[SlurmTask] | None = None) -> list[PerfRecord]:
        states: dict[str, list[JobRecord]] = {}
        records: list[PerfRecord] = []
        for task in tasks if tasks is not None else self.job.tasks:
            if task.recorded:
                continue
            if task.job_id and task.job_id not in states:
                states[task.job_id] = commands.records(task.job_id)
            state = _record_for(states.get(task.job_id, []), task) if task.job_id else None
            batch = self.task_records(task, state)
            append_records(self.output, batch)
            task.recorded = True
            records.extend(batch)
        return records


def ensure_not_collected(job: SlurmJob, force: bool) -> None:
    if job.collected_at and not force:
        raise InputError(f"the rows of this run were already merged into {job.collected_into} at "
                         f"{job.collected_at}", path=str(job.job_dir / JOB_FILE), hint="--force merges them again")


def collect_job(job: SlurmJob, commands: SlurmCommands, host: Host, output: Path | None = None, *,
                force: bool = False) -> RunSummary:
    """Merge every task's rows (and a FAILURE row per task that wrote none) into perf.csv, once."""
    target = Path(output or job.output)
    ensure_not_collected(job, force)
    if force:
        for task in job.tasks:
            task.recorded = False
    summary = RunSummary(run_id=job.run_id, executor="slurm", perf_csv=target, run_dir=job.job_dir,
                         details={"slurm": {"job_ids": job.job_ids, "job_dir": str(job.job_dir)}})
    summary.records = JobCollector(job, target, host).collect(commands)
    job.collected_at, job.collected_into = utc_now(), str(target)
    job.save()
    return summary
