"""What runs whose madengine process is gone left behind: containers and local step processes.

A run that ends, however it ends short of SIGKILL, removes its containers and stops its processes
itself. After a SIGKILL (or a crash of the host's engine connection) they may stay: a container
whose main process is the model, a container the engine could not remove, a local step's process
tree. Each carries its owner (:mod:`madengine.core.owner`); the next ``madengine run`` and
``madengine clean`` remove those whose owner is gone *on this host*. Containers without an owner
label (other tools', ``--keep-alive``), and those of owners on other hosts or in other pid
namespaces, are never touched.
"""

from __future__ import annotations

import dataclasses
import os
import signal
from typing import Any, Iterator

from madengine.core.owner import OWNER_ENV, OWNER_LABEL, RUN_LABEL, Owner, gone, this_process


@dataclasses.dataclass
class Leftover:
    """One container or process of a run whose owner is gone, and what was done about it."""

    kind: str  # container | process
    name: str  # the container's name, or 'pid N (command)'
    run_id: str
    owner_pid: int
    removed: bool = False
    error: str = ""

    def describe(self) -> str:
        done = ("removed" if self.kind == "container" else "stopped") if self.removed \
            else f"could not remove ({self.error})"
        run = f" of run {self.run_id}" if self.run_id else ""
        return f"{done} {self.kind} {self.name}{run} (its madengine process {self.owner_pid} is gone)"

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def remove_containers(engine: Any, me: Owner | None = None) -> list[Leftover]:
    """Kill and remove every container whose owner is gone (``engine``: an execution Engine)."""
    from madengine.execution.engine import EngineError

    me = me or this_process()
    found = []
    for summary in engine.containers(OWNER_LABEL):
        labels = summary.get("Labels") or {}
        owner = Owner.parse(labels.get(OWNER_LABEL, ""))
        if not gone(owner, me):
            continue
        names = [n.lstrip("/") for n in summary.get("Names") or []]
        leftover = Leftover("container", names[0] if names else summary["Id"][:12], labels.get(RUN_LABEL, ""),
                            owner.pid if owner else 0)
        try:
            engine.remove(summary["Id"])
            leftover.removed = True
        except EngineError as exc:
            leftover.removed = exc.status == 404  # removed meanwhile (another clean)
            leftover.error = "" if leftover.removed else exc.message
        found.append(leftover)
    return found


def stop_processes(me: Owner | None = None) -> list[Leftover]:
    """SIGKILL every process (a local step's, and its children's) whose owner is gone."""
    me = me or this_process()
    if me is None:
        return []
    spared = _ancestors(os.getpid())
    found = []
    for pid, environ in _marked_processes():
        owner = Owner.parse(environ.get(OWNER_ENV, ""))
        if pid in spared or not gone(owner, me):
            continue
        leftover = Leftover("process", f"pid {pid} ({_command(pid)})", environ.get("MAD_RUN_ID", ""),
                            owner.pid if owner else 0)
        try:
            os.kill(pid, signal.SIGKILL)
            leftover.removed = True
        except ProcessLookupError:
            continue  # ended meanwhile
        except PermissionError as exc:
            leftover.error = exc.strerror or "permission denied"
        found.append(leftover)
    return found


def _marked_processes() -> Iterator[tuple[int, dict[str, str]]]:
    """Every readable process whose environment carries an owner, with that environment."""
    marker = OWNER_ENV.encode() + b"="
    try:
        entries = os.scandir("/proc")
    except OSError:
        return
    with entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/environ", "rb") as handle:
                    data = handle.read()
            except OSError:  # gone, or another user's
                continue
            if marker not in data:
                continue
            pairs = (item.partition(b"=") for item in data.split(b"\0") if item)
            yield int(entry.name), {k.decode("utf-8", "replace"): v.decode("utf-8", "replace") for k, _, v in pairs}


def _ancestors(pid: int) -> set[int]:
    """``pid`` and every process above it: a madengine started by a step is never its own reaper."""
    seen = set()
    while pid > 0 and pid not in seen:
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                stat = handle.read()
            pid = int(stat[stat.rfind(b")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return seen


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            text = handle.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return "?"
    return text if len(text) <= 60 else text[:59] + "…"
