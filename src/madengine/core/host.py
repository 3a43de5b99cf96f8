"""What a command reads from the process it runs in: variables, arguments, stdin and the clock.

Injected (the CLI builds one from its ``Environment``) so that a command run in-process, as the
tests and the Python API do, records and behaves exactly as it does from a shell.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import shlex
import sys
from typing import Callable, Mapping, Sequence, TextIO

from madengine.core import clock as clocks

@dataclasses.dataclass(frozen=True)
class Host:
    environ: Mapping[str, str] = dataclasses.field(default_factory=lambda: os.environ)
    #: the arguments after the program name, exactly as given
    argv: Sequence[str] = ()
    stdin: TextIO = dataclasses.field(default_factory=lambda: sys.stdin)
    clock: Callable[[], datetime.datetime] = clocks.now

    @property
    def command_line(self) -> str:
        """The command that produced a record, as a user can paste it back."""
        return shlex.join(["madengine", *self.argv])

    def now(self) -> str:
        """The current time in the records' format (:func:`madengine.core.clock.timestamp`)."""
        return clocks.timestamp(self.clock())

    def get(self, name: str, default: str = "") -> str:
        return self.environ.get(name, default)
