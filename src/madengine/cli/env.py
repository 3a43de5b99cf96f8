"""The environment a command runs in: its streams and variables.

Injected so that the CLI runs in-process in tests exactly as it does in a shell.
Data goes to ``stdout``; progress and messages go to ``stderr``; both pass through secret
redaction (registered secrets and URL passwords), so no command prints a credential.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence, TextIO

from madengine.core import clock as clocks
from madengine.core.redact import redact

if TYPE_CHECKING:
    import datetime

    from madengine.core.host import Host


class Environment:
    """Streams, variables, arguments and clock of a command (a plain class: ``--help`` must start
    fast, and a dataclass costs its import)."""

    def __init__(self, stdout: TextIO | None = None, stderr: TextIO | None = None, stdin: TextIO | None = None,
                 environ: Mapping[str, str] | None = None, argv: Sequence[str] = (),
                 clock: "Callable[[], datetime.datetime] | None" = None, quiet: bool = False,
                 verbose: bool = False, no_color: bool = False,
                 load: "Callable[[], float | None] | None" = None) -> None:
        self.stdout = stdout if stdout is not None else sys.stdout
        self.stderr = stderr if stderr is not None else sys.stderr
        self.stdin = stdin if stdin is not None else sys.stdin
        self.environ = environ if environ is not None else os.environ
        #: the command's arguments (after the program name); ``main`` sets them
        self.argv = argv
        self.clock = clock or clocks.now
        #: --quiet: errors, warnings and the final summary only
        self.quiet = quiet
        #: --verbose: every step's command and timings too
        self.verbose = verbose
        #: --no-color (NO_COLOR in ``environ`` also turns colour off)
        self.no_color = no_color
        #: how busy the machine is (``core.host.runnable_per_cpu`` when None)
        self.load = load

    def __repr__(self) -> str:
        return f"Environment(argv={list(self.argv)!r}, quiet={self.quiet}, verbose={self.verbose})"

    def host(self) -> "Host":
        """What the core may read of this environment (variables, arguments, stdin, clock)."""
        from madengine.core.host import Host

        return Host(environ=self.environ, argv=tuple(self.argv), stdin=self.stdin, clock=self.clock,
                    **({"load": self.load} if self.load is not None else {}))

    def message(self, text: str) -> None:
        """A progress line or notice, on stderr."""
        if not self.quiet:
            print(redact(text), file=self.stderr, flush=True)

    def data(self, text: str) -> None:
        """Machine- or human-readable output of the command, on stdout."""
        print(redact(text), file=self.stdout, flush=True)

    def result(self, text: str, document: Any, as_json: bool) -> None:
        """A command's result: its table on stdout; with ``--json`` the document on stdout and the
        table on stderr, where a person still sees it (redacted either way)."""
        if not as_json:
            self.data(text)
            return
        import json

        print(redact(text), file=self.stderr, flush=True)
        self.data(json.dumps(document, indent=1, default=str))

    @property
    def debug(self) -> bool:
        return self.environ.get("MADENGINE_DEBUG", "") not in ("", "0", "false", "False")


class CliReporter:
    """The core's progress (``core.events.Reporter``) as the terminal shows it: messages, live
    output and progress on stderr through a view (:mod:`madengine.cli.progress`: a live line on a
    TTY, timestamped lines elsewhere); data (job ids, rendered scripts) on stdout."""

    def __init__(self, env: Environment) -> None:
        from madengine.cli.progress import make_view

        self.env = env
        self.view = make_view(env, verbose=env.verbose, quiet=env.quiet, no_color=env.no_color)

    def message(self, text: str) -> None:
        self.view.message(redact(text))

    def output(self, key: str, line: str) -> None:
        self.view.output(key, redact(line))

    def data(self, text: str) -> None:
        self.env.data(text)

    def progress(self, event) -> None:
        self.view.progress(event)

    def close(self) -> None:
        """End the live line (before the command prints its summary)."""
        self.view.close()
