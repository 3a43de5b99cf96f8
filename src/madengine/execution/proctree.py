"""Ending a run's processes, all of them: what a launcher started in sessions of its own too.

torchrun and DeepSpeed start their workers with sessions of their own, so ending the step's process
group misses them (and they keep the step's output pipe open). A run's processes are found two
ways, and collected before anything is signalled:

* the tree under the main process of its step in flight (``psutil`` ``children(recursive=True)``);
* every process whose environment carries the run's cookie (``MADENGINE_RUN_COOKIE=<id>``, in the run's
  environment, so every process of every step inherits it): those whose parent already died and
  who were re-parented are found too, as Jenkins finds a build's processes. ``/proc/<pid>/environ`` is the environment a
  process started with, readable for the processes of this user (all of them for root); a
  container's processes are found this way when its engine runs on this host.

Then SIGTERM to every one, a grace period, SIGKILL to those left, and again until none is found.

The ranks of a distributed job are its processes with ``RANK`` and ``LOCAL_RANK`` in their
environment (torchrun and DeepSpeed set both for each worker): :func:`running_ranks` says which were
still running when a step was ended, which names the rank that hung. A stop from outside may reach
the ranks in the same instant it reaches madengine (Slurm signals every process of a job step), so a
:class:`RankWatch` notes the ranks while the step runs, and a stop names those seen running just before.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from typing import Iterable

import psutil

COOKIE_VAR = "MADENGINE_RUN_COOKIE"
GRACE = 5.0
#: rounds of collect-and-signal before giving up on processes that will not die (uninterruptible sleep)
_ROUNDS = 6


def new_cookie() -> str:
    """A value of :data:`COOKIE_VAR` that marks one run's processes."""
    return uuid.uuid4().hex


def run_cookie(env: dict[str, str]) -> str:
    """The cookie of the run whose environment is ``env`` (``RunSpec.env``), made on first use."""
    return env.setdefault(COOKIE_VAR, new_cookie())


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


def _rank_processes(root: psutil.Process | int | None, cookie: str) -> list[tuple[int, psutil.Process]]:
    """(global rank, process) of the step's live ranks (a rank's own children, such as data-loader
    workers, are not ranks)."""
    processes = step_processes(root, cookie)
    ranks = []
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
        ranks.append((found[0], process))
    return ranks


def running_ranks(root: psutil.Process | int | None, cookie: str) -> tuple[int, ...]:
    """The global ranks among the step's live processes; call it before the step is ended."""
    return tuple(sorted({rank for rank, _ in _rank_processes(root, cookie)}))


#: how often a :class:`RankWatch` looks at the ranks it knows (a status read each)
WATCH_INTERVAL = 0.5
#: a search of every process for new ranks (a launcher's restart) every this many looks
_SEARCH_EVERY = 10
#: a rank known to run this long before a stop from outside ran when the stop came: the time
#: madengine may take on a loaded host to act on a signal that reached the rank in the same instant
WATCH_WINDOW = 1.0


class RankWatch:
    """The ranks of a step in flight, looked at every :data:`WATCH_INTERVAL` seconds in a thread of
    its own, so that a stop that reached the ranks too (Slurm's SIGTERM to every process of its step)
    still names the rank that hung: by the time madengine acts on the signal, that rank may be gone.
    A rank is known to run until the look that finds it gone, so one that ended well before the stop
    is not named. Use it as a context manager around the step."""

    def __init__(self, root: psutil.Process | int | None, cookie: str, interval: float = WATCH_INTERVAL) -> None:
        self._root = root
        self._cookie = cookie
        self._interval = interval
        self._known: list[tuple[int, psutil.Process]] = []
        #: rank -> until when (time.monotonic()) it is known to run: the last look that saw it
        #: running, or the first that found it gone
        self._running_until: dict[int, float] = {}
        self._gone: set[int] = set()
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="rank-watch", daemon=True)

    def __enter__(self) -> "RankWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()

    def _watch(self) -> None:
        looks = 0
        while not self._done.is_set():
            if not self._known or looks % _SEARCH_EVERY == 0:
                self._known = _rank_processes(self._root, self._cookie)
            self._look()
            looks += 1
            self._done.wait(self._interval)

    def _look(self) -> None:
        now = time.monotonic()
        # is_running: the pid is still the rank's (not another process's that got it since)
        running = {rank for rank, process in self._known if process.is_running() and _alive(process)}
        with self._lock:
            for rank in running:
                self._running_until[rank] = now
            self._gone.difference_update(running)  # a rank restarted under a new process
            for rank in self._running_until.keys() - running - self._gone:
                self._running_until[rank] = now
                self._gone.add(rank)

    def ranks_at_stop(self) -> tuple[int, ...]:
        """The ranks running now, and those known to run in the :data:`WATCH_WINDOW` seconds before;
        call it before the step is ended."""
        since = time.monotonic() - WATCH_WINDOW
        with self._lock:
            recent = {rank for rank, until in self._running_until.items() if until >= since}
        return tuple(sorted(recent.union(running_ranks(self._root, self._cookie))))


__all__ = ["COOKIE_VAR", "RankWatch", "end_step", "handle", "marked_pids", "new_cookie", "run_cookie", "running_ranks",
           "step_processes"]
