"""Who owns what a run starts: the madengine process, recorded so that a later process can tell
whether it is gone.

A pid alone cannot say it: pids are reused. The owner is recorded as its pid, the moment it started
(clock ticks after boot, from ``/proc/<pid>/stat``), the kernel's boot id and its pid namespace. A
later process judges an owner only when it shares that boot and pid namespace (the same host, the
same container); there the owner is gone when no process of that pid started at that moment.
Whatever was started from another host or container (a remote engine's other clients) is never
judged gone. Containers carry the owner as the label :data:`OWNER_LABEL`, local steps' processes as
the environment variable :data:`OWNER_ENV`.
"""

from __future__ import annotations

import dataclasses
import functools
import os

#: the labels of a run's containers: its run id, and its owner
RUN_LABEL = "madengine.run"
OWNER_LABEL = "madengine.owner"
OWNER_ENV = "MADENGINE_OWNER"


@dataclasses.dataclass(frozen=True)
class Owner:
    pid: int
    started: int  # clock ticks after boot
    boot: str
    pidns: str

    def __str__(self) -> str:
        return f"{self.pid}:{self.started}:{self.boot}:{self.pidns}"

    @classmethod
    def parse(cls, text: str) -> "Owner | None":
        """The owner a label or variable names; None for anything else (never judged)."""
        parts = str(text).split(":")
        if len(parts) != 4 or not (parts[0].isascii() and parts[0].isdigit() and parts[1].isascii()
                                   and parts[1].isdigit()) or not parts[2] or not parts[3]:
            return None
        return cls(int(parts[0]), int(parts[1]), parts[2], parts[3])

    def same_host(self, other: "Owner") -> bool:
        """Whether pids of ``other``'s host and namespace mean the same processes as this owner's."""
        return self.boot == other.boot and self.pidns == other.pidns

    def alive(self) -> bool:
        """Whether the owner still runs (as seen from the same host and pid namespace); a zombie,
        dead but not yet waited for by its parent, does not."""
        fields = _stat_fields(self.pid)
        return fields is not None and fields[0] not in (b"Z", b"X") and _start_field(fields) == self.started


def this_process() -> Owner | None:
    """This process as an owner; None where ``/proc`` cannot tell (then nothing is judged gone)."""
    return _owner_of(os.getpid())  # by pid: a forked child is an owner of its own


@functools.lru_cache(maxsize=4)
def _owner_of(pid: int) -> Owner | None:
    return process_owner(pid)


def process_owner(pid: int) -> Owner | None:
    """Process ``pid`` (seen from this process's pid namespace) as an owner; None if there is none."""
    started = started_at(pid)
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            boot = handle.read().strip()
        pidns = os.readlink("/proc/self/ns/pid").removeprefix("pid:").strip("[]")
    except (OSError, UnicodeDecodeError):
        return None
    return Owner(pid, started, boot, pidns) if started is not None and boot and pidns else None


def started_at(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks after boot); None when there is none."""
    fields = _stat_fields(pid)
    return None if fields is None else _start_field(fields)


def _stat_fields(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (the state first); None when there
    is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    # the command name (2nd field) may hold spaces and parentheses: fields after its last ')'
    return stat[stat.rfind(b")") + 2:].split()


def _start_field(fields: list[bytes]) -> int | None:
    try:
        return int(fields[19])  # field 22 of the whole line
    except (IndexError, ValueError):
        return None


def gone(owner: Owner | None, me: Owner | None) -> bool:
    """Whether ``owner`` is known to be gone: recorded on this host and namespace, no longer running."""
    return owner is not None and me is not None and owner.same_host(me) and not owner.alive()
