"""The Slurm commands madengine uses — ``sbatch``, ``squeue``, ``scontrol``, ``scancel`` — and the
parsing of their output. Never ``sacct``: many clusters disable accounting.

Every command is an argv list; nothing goes through a shell.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from typing import Iterable

from madengine.core.errors import ServiceError
from madengine.core.redact import redact

COMMAND_TIMEOUT = 120
_FIELD = re.compile(r"(?:^|\s)(\w+)=(\S*)")
_ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
          "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED")


#: pending reasons that no amount of waiting changes: the job asks for more than its partition,
#: QOS or account allows, or for resources that do not exist
UNRUNNABLE = frozenset({
    "PartitionConfig", "PartitionNodeLimit", "PartitionTimeLimit", "BadConstraints", "InvalidAccount",
    "InvalidQOS", "DependencyNeverSatisfied", "QOSMaxWallDurationPerJobLimit", "QOSMaxCpuPerJobLimit",
    "QOSMaxNodePerJobLimit", "QOSMaxGRESPerJob", "QOSMaxMemoryPerJob", "AssocMaxWallDurationPerJobLimit",
    "AssocMaxCpuPerJobLimit", "AssocMaxNodePerJobLimit", "AssocMaxGRESPerJob", "AssocMaxMemPerJob",
})


class SubmissionRejected(Exception):
    """sbatch refused a job; the message is sbatch's own."""


@dataclasses.dataclass
class QueueEntry:
    """One line of ``squeue``: a job, an array task, or a range of pending array tasks."""

    job_id: str
    state: str
    reason: str


def split_queue_id(text: str) -> tuple[str, list[int] | None]:
    """``'7_[0-3]'`` → ``('7', [0, 1, 2, 3])``; ``'7_2'`` → ``('7', [2])``; ``'8'`` → ``('8', None)``."""
    job_id, sep, tasks = text.partition("_")
    if not sep:
        return job_id, None
    return job_id, parse_index_list(tasks.strip("[]"))


@dataclasses.dataclass
class JobRecord:
    """What ``scontrol show job`` says about one job or array task."""

    job_id: str
    array_job_id: str
    array_tasks: list[int]
    state: str
    reason: str
    exit_code: str
    node: str
    time_limit: str
    start_time: str

    @property
    def ended(self) -> bool:
        return self.state in _ENDED


def parse_index_list(text: str) -> list[int]:
    """``'0-3,7'`` or ``'2-6:2%4'`` (step, throttle) → the indices."""
    indices: list[int] = []
    for part in text.split("%")[0].split(","):
        part = part.strip()
        if not part:
            continue
        span, _, step = part.partition(":")
        lo, sep, hi = span.partition("-")
        try:
            indices.extend(range(int(lo), int(hi) + 1, int(step or 1)) if sep else [int(lo)])
        except ValueError:
            continue
    return indices


def parse_squeue(text: str) -> list[QueueEntry]:
    entries = []
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 2 and parts[0]:
            entries.append(QueueEntry(parts[0], parts[1], parts[2] if len(parts) > 2 else ""))
    return entries


def parse_scontrol_jobs(text: str) -> list[JobRecord]:
    """Records of ``scontrol -o show job`` (one line per job or array task)."""
    records = []
    for line in text.splitlines():
        fields = dict(_FIELD.findall(line))
        if "JobId" not in fields:
            continue
        array_job = fields.get("ArrayJobId", "")
        tasks = parse_index_list(fields.get("ArrayTaskId", "")) if array_job else []
        node = fields.get("BatchHost", "")
        if node in ("", "(null)"):
            node = fields.get("NodeList", "")
        records.append(JobRecord(
            job_id=fields["JobId"], array_job_id=array_job, array_tasks=tasks,
            state=fields.get("JobState", "UNKNOWN"), reason=fields.get("Reason", ""),
            exit_code=fields.get("ExitCode", ""), node="" if node == "(null)" else node,
            time_limit=fields.get("TimeLimit", ""), start_time=fields.get("StartTime", "")))
    return records


def parse_job_id(text: str) -> str:
    """``sbatch --parsable`` prints ``<id>`` or ``<id>;<cluster>``."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    job_id = first.split(";")[0].strip()
    if not job_id.isdigit():
        raise ServiceError(f"sbatch printed no job id ({first[:200]!r})")
    return job_id


class SlurmCommands:
    """Runs the Slurm client commands of this host (they find the cluster through its slurm.conf)."""

    def __init__(self, timeout: float = COMMAND_TIMEOUT) -> None:
        self.timeout = timeout

    def _run(self, argv: list[str], cwd: str | None = None) -> subprocess.CompletedProcess:
        if shutil.which(argv[0]) is None:
            raise ServiceError(f"the Slurm command '{argv[0]}' is not installed here",
                               hint="run on a login node of the cluster (or install slurm-client)")
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout, cwd=cwd,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise ServiceError(f"'{argv[0]}' did not answer within {self.timeout:.0f} s",
                               hint="is slurmctld reachable?") from None

    def submit(self, script: str, extra_args: list[str], cwd: str) -> str:
        result = self._run(["sbatch", "--parsable", *extra_args, script], cwd=cwd)
        if result.returncode != 0:
            raise SubmissionRejected(_one_line(result.stderr or result.stdout) or f"exit code {result.returncode}")
        return parse_job_id(result.stdout)

    def queue(self, job_ids: Iterable[str]) -> list[QueueEntry]:
        """Jobs (and array tasks) of ``job_ids`` still pending, running or completing."""
        ids = ",".join(job_ids)
        if not ids:
            return []
        result = self._run(["squeue", "-h", "-j", ids, "-o", "%i|%T|%r"])
        if result.returncode != 0:
            if "invalid job id" in (result.stderr + result.stdout).lower():
                return []  # the controller forgot the jobs: they ended long ago
            raise ServiceError(f"squeue failed: {_one_line(result.stderr) or result.returncode}")
        return parse_squeue(result.stdout)

    def records(self, job_id: str) -> list[JobRecord]:
        """Final (or current) records of a job; [] when the controller no longer knows it."""
        result = self._run(["scontrol", "-o", "show", "job", job_id])
        if result.returncode != 0:
            return []
        return parse_scontrol_jobs(result.stdout)

    def cancel(self, job_ids: Iterable[str]) -> None:
        ids = list(job_ids)
        if ids:
            self._run(["scancel", *ids])

    def partition_known(self, name: str) -> bool | None:
        """True/False when the controller answers; None when it cannot tell."""
        try:
            result = self._run(["scontrol", "-o", "show", "partition", name])
        except ServiceError:
            return None
        if result.returncode == 0:
            return True
        text = (result.stderr + result.stdout).lower()
        return False if "not found" in text or "invalid" in text else None

    def partitions(self) -> list[str]:
        try:
            result = self.sinfo("%R")
        except ServiceError:
            return []
        return sorted({line.strip() for line in result.stdout.splitlines() if line.strip()})

    def sinfo(self, output_format: str) -> subprocess.CompletedProcess:
        """``sinfo -h -o FORMAT``: the controller's view of partitions and nodes (ServiceError when
        sinfo is missing or hangs)."""
        return self._run(["sinfo", "-h", "-o", output_format])


def _one_line(text: str) -> str:
    lines = [line.strip() for line in redact(text or "").splitlines() if line.strip()]
    return " ".join(lines)[:500]
