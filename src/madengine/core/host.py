"""What a command reads from the process it runs in: variables, arguments, stdin, the clock, and
how busy the machine is.

Injected (the CLI builds one from its ``Environment``) so that a command run in-process, as the
tests and the Python API do, records and behaves exactly as it does from a shell.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import shlex
import sys
import time
from typing import Callable, Mapping, Sequence, TextIO

from madengine.core import clock as clocks

_LOAD_READS = 3
_LOAD_INTERVAL = 0.005


def runnable_per_cpu() -> float | None:
    """The machine's load right now: the tasks running or waiting for a CPU (what the load average
    averages), less the one reading it, per logical CPU. Above 1 the machine is busier than its
    CPUs. The median of 3 reads 5 ms apart, so one passing burst does not count; None where
    ``/proc/loadavg`` cannot be read."""
    reads = []
    for n in range(_LOAD_READS):
        if n:
            time.sleep(_LOAD_INTERVAL)
        try:
            with open("/proc/loadavg", encoding="ascii") as handle:
                running = int(handle.read().split()[3].split("/")[0])
        except (OSError, ValueError, IndexError):
            return None
        reads.append(max(running - 1, 0))
    return sorted(reads)[len(reads) // 2] / (os.cpu_count() or 1)


@dataclasses.dataclass(frozen=True)
class Host:
    environ: Mapping[str, str] = dataclasses.field(default_factory=lambda: os.environ)
    #: the arguments after the program name, exactly as given
    argv: Sequence[str] = ()
    stdin: TextIO = dataclasses.field(default_factory=lambda: sys.stdin)
    clock: Callable[[], datetime.datetime] = clocks.now
    #: the machine's load per logical CPU now (:func:`runnable_per_cpu`); None when unknown
    load: Callable[[], float | None] = runnable_per_cpu

    @property
    def command_line(self) -> str:
        """The command that produced a record, as a user can paste it back."""
        return shlex.join(["madengine", *self.argv])

    def now(self) -> str:
        """The current time in the records' format (:func:`madengine.core.clock.timestamp`)."""
        return clocks.timestamp(self.clock())

    def get(self, name: str, default: str = "") -> str:
        return self.environ.get(name, default)
