"""The environment a command runs in: its streams and variables.

Injected so that the CLI runs in-process in tests exactly as it does in a shell.
Data goes to ``stdout``; progress and messages go to ``stderr``; both pass through secret
redaction (registered secrets and URL passwords), so no command prints a credential.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Mapping, TextIO

from madengine.core.redact import redact


@dataclasses.dataclass
class Environment:
    stdout: TextIO = dataclasses.field(default_factory=lambda: sys.stdout)
    stderr: TextIO = dataclasses.field(default_factory=lambda: sys.stderr)
    environ: Mapping[str, str] = dataclasses.field(default_factory=lambda: os.environ)
    quiet: bool = False

    def message(self, text: str) -> None:
        """A progress line or notice, on stderr."""
        if not self.quiet:
            print(redact(text), file=self.stderr, flush=True)

    def data(self, text: str) -> None:
        """Machine- or human-readable output of the command, on stdout."""
        print(redact(text), file=self.stdout, flush=True)

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
        print(redact(f"[{key}] {line}"), file=self.env.stderr, flush=True)

    def data(self, text: str) -> None:
        self.env.data(text)
