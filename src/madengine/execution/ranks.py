"""A distributed job's ranks on this node: their logs, and what a failed or hung rank said.

Launchers write each rank's output under the node's rank log folder (``MAD_RANK_LOG_DIR``,
``<work>/madengine_ranks/node-<node rank>``); torchrun (``PET_LOG_DIR``, ``PET_TEE``) as
``<its run id>/attempt_<n>/<local rank>/{stdout,stderr}.log``. After the steps they are kept in the
run folder apart from the node's log (``run.log``), one folder per rank by global rank::

    madengine_runs/<run id>/<key>/run.log                        the node's output, all ranks
    madengine_runs/<run id>/<key>/ranks/node-0/rank-1/stderr.log  rank 1's own stderr (stdout.log too)

anything else a launcher wrote there is kept as it was, under ``ranks/node-<n>/``.

A failed job's reason names the rank that failed first, its node and local rank, and ends with
the last line its own stderr said (its exception), not the launcher's summary: torchrun's "Root
Cause" block says which rank it was. A job ended at its timeout names the ranks still running then.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
from pathlib import Path
from typing import Any

from madengine.launch import NodeLaunch, rank_log_subdir
from madengine.execution.streams import StepResult
from madengine.results.aggregate import JobShape, NodeFigure, aggregate
from madengine.results.parsing import PERFORMANCE_LINE

RANKS_FOLDER = "ranks"
#: what torchrun writes per rank (its own files; the error file only for @record entry points)
_RANK_FILES = ("stdout.log", "stderr.log", "error.json")
_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):.*?rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)"
                         r".*?exitcode\s*:\s*(-?\d+)", re.DOTALL)
#: the prefix torch puts before each line of a rank's exception ("[rank1]: "), and torchrun
#: before each line a rank prints when it tees them to the console ("[default1]:")
_RANK_PREFIX = re.compile(r"^(?:\[(?:rank|default)\d+\]:\s?)+")
#: torchrun's own lines around a failure, which say nothing about the error itself
_LAUNCHER_NOISE = re.compile(r"To enable traceback see|ChildFailedError|^\S+ FAILED$|^Root Cause|^Failures:|"
                             r"<NO_OTHER_FAILURES>|^\[\d+\]:$|^(time|host|rank|exitcode|error_file|traceback)\s*:|"
                             r"torch\.distributed\.elastic|^[=-]{8,}$")


def _attempts(node_folder: Path) -> list[Path]:
    """torchrun's attempt folders under a node's rank log folder, the latest last."""
    found = [p for p in node_folder.glob("*/attempt_*") if p.is_dir() and p.name[8:].isdigit()]
    return sorted(found, key=lambda p: (int(p.name[8:]), p.stat().st_mtime))


def rank_files(node_folder: Path, launch: NodeLaunch) -> dict[int, dict[str, Path]]:
    """Each global rank's files in a node's rank log folder (torchrun's layout; the last attempt)."""
    ranks: dict[int, dict[str, Path]] = {}
    for attempt in _attempts(node_folder):
        for local in attempt.iterdir():
            if not (local.is_dir() and local.name.isdigit()):
                continue
            rank = launch.global_ranks.start + int(local.name)
            ranks[rank] = {name: local / name for name in _RANK_FILES if (local / name).is_file()}
    return ranks


def collect_rank_logs(workdir: Path, artifacts_dir: Path, launch: NodeLaunch) -> list[Path]:
    """Copy the node's rank logs from the work folder into ``<artifacts>/ranks/node-<n>/``:
    ``rank-<global rank>/<file>`` for torchrun's, everything else as it was. The copies' paths."""
    source = workdir / rank_log_subdir(launch.node_rank)
    if not source.is_dir():
        return []
    target = artifacts_dir / RANKS_FOLDER / f"node-{launch.node_rank}"
    copied = []
    taken: set[Path] = set()
    for rank, files in sorted(rank_files(source, launch).items()):
        for name, path in files.items():
            copied.append(_copy(path, target / f"rank-{rank}" / name))
            taken.add(path)
    for path in sorted(source.rglob("*")):
        if path.is_file() and path not in taken and not _is_torchrun_file(path, source):
            copied.append(_copy(path, target / path.relative_to(source)))
    return copied


def _is_torchrun_file(path: Path, source: Path) -> bool:
    """A file of an earlier attempt (the last attempt's are copied by rank)."""
    parts = path.relative_to(source).parts
    return len(parts) == 4 and parts[1].startswith("attempt_") and parts[2].isdigit()


def _copy(source: Path, target: Path) -> Path:
    """A rank log in the run folder: a hard link where it can be (long training logs are not
    written twice; the work folder's name goes with the work folder), else a copy."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)
    return target


# -- why a job failed --------------------------------------------------------------------------------
def _clean(line: str) -> str:
    return _RANK_PREFIX.sub("", line).strip()


def tail_line(text: str, limit: int = 300) -> str:
    """The last line of a rank's output that says something: its exception, an error line (not a
    traceback's frames, torchrun's failure summary or a figure)."""
    for raw in reversed(text.splitlines()):
        line = _clean(raw)
        if not line or line.startswith(("File \"", "Traceback", "^", "~")) or not any(c.isalnum() for c in line) \
                or _LAUNCHER_NOISE.search(line) or PERFORMANCE_LINE.search(line):
            continue
        return line if len(line) <= limit else line[:limit - 1] + "…"
    return ""


def _read(path: Path | None) -> str:
    if path is None:
        return ""
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _console_lines(output: str, local_rank: int) -> str:
    """What one local rank printed to the node's log (torchrun prefixes it ``[default<n>]:``)."""
    prefix = f"[default{local_rank}]:"
    return "\n".join(line[len(prefix):] for line in output.splitlines() if line.startswith(prefix))


def _rank_words(rank: int, launch: NodeLaunch) -> str:
    return f"rank {rank} (node {launch.node_rank}, local rank {rank - launch.global_ranks.start})"


def _how_it_ended(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def failed_rank(output: str, workdir: Path, launch: NodeLaunch) -> str:
    """'rank 1 (node 0, local rank 1) exited with code 3: <its stderr's last line>' from the
    launcher's account of the first failure; '' when it gave none."""
    found = None
    for found in _ROOT_CAUSE.finditer(output):
        pass  # the last summary: a restarted job's final one
    if found is None:
        return ""
    rank, code = int(found.group(1)), int(found.group(3))
    local = int(found.group(2))
    files = rank_files(workdir / rank_log_subdir(launch.node_rank), launch).get(rank, {})
    said = tail_line(_read(files.get("stderr.log"))) or tail_line(_console_lines(output, local))
    return f"{_rank_words(rank, launch)} {_how_it_ended(code)}" + (f": {said}" if said else "")


def still_running(ranks: tuple[int, ...], launch: NodeLaunch) -> str:
    """'rank 1 (node 0, local rank 1) was still running' for the ranks a timeout ended."""
    if not ranks:
        return ""
    names = [_rank_words(rank, launch) for rank in ranks]
    return ", ".join(names) + (" was" if len(names) == 1 else " were") + " still running"


def job_failure(launch: NodeLaunch, workdir: Path, result: StepResult, step: str, timeout: int | None) -> str:
    """Why a distributed job's model step failed, naming its ranks; '' to use the general reason."""
    if result.timed_out:
        running = still_running(result.ranks_running, launch)
        return f"timeout: {step} ran longer than {timeout} s; " + (f"{running}; " if running else "") + \
            "every process of the job was ended"
    if result.exit_code not in (None, 0) and not result.error:
        return failed_rank(result.output, workdir, launch)
    return ""


def job_shape(launch: NodeLaunch) -> JobShape:
    return JobShape(launch.launcher, launch.nnodes, launch.nproc_per_node)


def one_node_columns(launch: NodeLaunch, record: Any) -> dict[str, Any]:
    """The job columns of a SUCCESS row of a one-node job: its figure is the job's (a node of a
    multi-node job has only the job's shape here; merging the nodes' rows aggregates them)."""
    if launch.nnodes != 1 or not record.ok:
        return {}
    return aggregate([NodeFigure(0, record.performance, record.metric)], job_shape(launch)).columns()
