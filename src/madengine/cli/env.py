"""The environment a command runs in: its streams and variables.

Injected so that the CLI runs in-process in tests exactly as it does in a shell.
Data goes to ``stdout``; progress and messages go to ``stderr``.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import sys
from typing import Callable, Mapping, Sequence, TextIO

from madengine.core import clock
from madengine.core.host import Host


@dataclasses.dataclass
class Environment:
    stdout: TextIO = dataclasses.field(default_factory=lambda: sys.stdout)
    stderr: TextIO = dataclasses.field(default_factory=lambda: sys.stderr)
    stdin: TextIO = dataclasses.field(default_factory=lambda: sys.stdin)
    environ: Mapping[str, str] = dataclasses.field(default_factory=lambda: os.environ)
    #: the command's arguments (after the program name); ``main`` sets them
    argv: Sequence[str] = ()
    clock: Callable[[], datetime.datetime] = clock.now
    quiet: bool = False

    def host(self) -> Host:
        """What the core may read of this environment (variables, arguments, stdin, clock)."""
        return Host(environ=self.environ, argv=tuple(self.argv), stdin=self.stdin, clock=self.clock)

    def message(self, text: str) -> None:
        """A progress line or notice, on stderr."""
        if not self.quiet:
            print(text, file=self.stderr, flush=True)

    def data(self, text: str) -> None:
        """Machine- or human-readable output of the command, on stdout."""
        print(text, file=self.stdout, flush=True)

    @property
    def debug(self) -> bool:
        return self.environ.get("MADENGINE_DEBUG", "") not in ("", "0", "false", "False")


class CliReporter:
    """The core's progress (``execution.events.Reporter``) as the terminal shows it: messages and
    ``[key] line`` live output on stderr, data (job ids, rendered scripts) on stdout."""

    def __init__(self, env: Environment) -> None:
        self.env = env

    def message(self, text: str) -> None:
        self.env.message(text)

    def output(self, key: str, line: str) -> None:
        print(f"[{key}] {line}", file=self.env.stderr, flush=True)

    def data(self, text: str) -> None:
        self.env.data(text)
