"""Ending a step's processes, all of them: what a launcher started in sessions of its own too.

torchrun and DeepSpeed start their workers with sessions of their own, so ending the step's process
group misses them (and they keep the step's output pipe open). A step's processes are found two
ways, and collected before anything is signalled:

* the tree under its main process (``psutil`` ``children(recursive=True)``);
* every process whose environment carries the step's cookie (``MADENGINE_STEP=<id>``, which every
  process the step starts inherits): those whose parent already died and who were re-parented are
  found too, as Jenkins finds a build's processes. ``/proc/<pid>/environ`` is the environment a
  process started with, readable for the processes of this user (all of them for root); a
  container's processes are found this way when its engine runs on this host.

Then SIGTERM to every one, a grace period, SIGKILL to those left, and again until none is found.

The ranks of a distributed job are its processes with ``RANK`` and ``LOCAL_RANK`` in their
environment (torchrun and DeepSpeed set both for each worker): :func:`running_ranks` says which were
still running when a step was ended, which names the rank that hung.
"""

from __future__ import annotations

import os
import signal
import uuid
from typing import Iterable

import psutil

COOKIE_VAR = "MADENGINE_STEP"
GRACE = 5.0
#: rounds of collect-and-signal before giving up on processes that will not die (uninterruptible sleep)
_ROUNDS = 6


def new_cookie() -> str:
    """A value of :data:`COOKIE_VAR` that marks one step's processes."""
    return uuid.uuid4().hex


def _environ(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return handle.read()
    except OSError:  # gone, or another user's
        return b""


def marked_pids(cookie: str) -> list[int]:
    """The processes whose environment carries ``cookie`` (not this process)."""
    needle = f"{COOKIE_VAR}={cookie}".encode()
    own = os.getpid()
    try:
        entries = os.listdir("/proc")
    except OSError:  # no procfs: only the tree is found
        return []
    found = []
    for entry in entries:
        if entry.isdigit() and int(entry) != own:
            data = _environ(int(entry))
            if needle in data and (b"\0" + needle + b"\0" in b"\0" + data):
                found.append(int(entry))
    return found


def handle(pid: int) -> psutil.Process | None:
    """The process ``pid`` as it is now: a handle that knows when it started, so a later call never
    mistakes another process that got the pid for it."""
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


def step_processes(root: psutil.Process | int | None, cookie: str) -> dict[int, psutil.Process]:
    """Every live process of a step: the tree under ``root`` (a handle from :func:`handle`, when it
    still runs: never a process that reused its pid) and the processes carrying ``cookie``."""
    found: dict[int, psutil.Process] = {}
    parent = handle(root) if isinstance(root, int) else root
    if parent is not None and parent.is_running():
        try:
            for process in [parent, *parent.children(recursive=True)]:
                found[process.pid] = process
        except psutil.Error:
            pass
    for pid in marked_pids(cookie):
        if pid not in found:
            try:
                found[pid] = psutil.Process(pid)
            except psutil.Error:
                pass
    return {pid: p for pid, p in found.items() if _alive(p)}


def _alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _signal(processes: Iterable[psutil.Process], signum: int) -> None:
    for process in processes:
        try:
            process.send_signal(signum)
        except psutil.Error:
            pass


def end_step(root: psutil.Process | int | None, cookie: str, grace: float = GRACE) -> int:
    """SIGTERM every process of the step, SIGKILL what is left after ``grace``, again until none
    is found; returns how many processes were signalled."""
    signalled: set[int] = set()
    for round_ in range(_ROUNDS):
        processes = step_processes(root, cookie)
        if not processes:
            break
        signalled.update(processes)
        _signal(processes.values(), signal.SIGTERM if round_ == 0 else signal.SIGKILL)
        psutil.wait_procs(list(processes.values()), timeout=grace if round_ == 0 else 1.0)
    return len(signalled)


def _rank_of(pid: int) -> tuple[int, int] | None:
    """(RANK, LOCAL_RANK) from a process's environment; None unless it has both (a launcher such as
    torchrun has neither of its own: a ``RANK`` it inherited from the host alone does not count)."""
    values = {}
    for item in _environ(pid).split(b"\0"):
        name, _, value = item.partition(b"=")
        if name in (b"RANK", b"LOCAL_RANK"):
            values[name] = value
    rank, local = values.get(b"RANK", b""), values.get(b"LOCAL_RANK", b"")
    if not (rank.isdigit() and local.isdigit()):
        return None
    return int(rank), int(local)


def running_ranks(root: psutil.Process | int | None, cookie: str) -> tuple[int, ...]:
    """The global ranks among the step's live processes (a rank's own children count once);
    call it before the step is ended."""
    processes = step_processes(root, cookie)
    ranks = set()
    for pid, process in processes.items():
        found = _rank_of(pid)
        if found is None:
            continue
        try:
            parent = process.ppid()
        except psutil.Error:
            parent = 0
        if parent in processes and _rank_of(parent) == found:
            continue  # a data-loader worker of the rank, not the rank
        ranks.add(found[0])
    return tuple(sorted(ranks))


__all__ = ["COOKIE_VAR", "end_step", "handle", "marked_pids", "new_cookie", "running_ranks", "step_processes"]
