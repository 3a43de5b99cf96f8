"""The ``madengine`` command line: parse, call one core function, print, exit.

Each subcommand lives in ``madengine.cli.commands.<name>`` with ``add_parser(subparsers)`` and
``handle(args, env) -> ExitStatus``. Handlers are imported only when their command runs, so
``madengine --help`` stays fast.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import signal
import sys
import threading
from typing import Iterator, Sequence

from madengine.core.version import __version__
from madengine.cli.env import Environment
from madengine.cli.render import one_line
from madengine.core.errors import ExitStatus, Interrupted, MadEngineError, interrupt_status, interruption
from madengine.core.redact import redact
from madengine.core.values import PART_LIMIT

COMMANDS = ("run", "build", "discover", "doctor", "report", "database", "bench", "scorecard", "serve-bench", "cache",
            "clean",
            "k8s", "completion")

EXIT_CODES_HELP = """exit codes:
  0    success: everything selected ran (or was skipped on purpose) and succeeded
  1    a model, build, task or check failed (its FAILURE row says why), or a row could not be
       written to perf.csv (the last line says where it is kept and how to add it)
  2    bad input: usage, a malformed file, an unknown tag, a bad context, bad credentials,
       a service that cannot be reached
  3    internal error in madengine (rerun with --debug for the traceback)
  129  stopped by SIGHUP; 143 stopped by SIGTERM (a CI system's cancel or timeout): as Ctrl-C
  130  interrupted (Ctrl-C); results recorded before it are kept, models not yet run get
       "not run" rows, containers and processes are ended

environment:
  MODEL_DIR         model repository to discover models in (default: current directory)
  MADENGINE_DEBUG   1 shows tracebacks of errors
"""


#: what CI systems send on cancel and timeout; handled like Ctrl-C
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def signals_interrupt() -> Iterator[None]:
    """While a command runs, SIGTERM and SIGHUP stop it as Ctrl-C does (rows recorded, containers
    and processes ended, perf.html written, exit 128 + N). A second signal during that clean-up
    is ignored; the previous handlers come back afterwards. A signal the command was started
    ignoring stays ignored: ``nohup madengine run ...`` survives the terminal's hangup (as Python
    leaves an ignored SIGINT ignored)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:
        for number in STOP_SIGNALS:
            signal.signal(number, signal.SIG_IGN)
        raise Interrupted(signum)

    previous = {number: signal.signal(number, stop) for number in STOP_SIGNALS
                if signal.getsignal(number) is not signal.SIG_IGN}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


class _Parser(argparse.ArgumentParser):
    """argparse, with usage errors rendered as one line (exit 2)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(int(ExitStatus.BAD_INPUT), f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser(argv: Sequence[str] | None = None, *, full: bool = False) -> argparse.ArgumentParser:
    """The parser of the command line ``argv``: only the command it names is imported and built,
    and the others are left out (without a command they are listed with their one-line help), so
    ``madengine --help`` and ``discover`` start fast. ``full`` builds every command (shell
    completion needs them all)."""
    from madengine.cli.commands import SUMMARIES

    parser = _Parser(prog="madengine", description="Run AI models reliably in containers and measure them.",
                     epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--version", action="version", version=f"madengine {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    subparsers = parser.add_subparsers(dest="command", metavar="{" + ",".join(COMMANDS) + "}",
                                       parser_class=_Parser)
    wanted = _command_of(argv or [])
    for name in COMMANDS:
        if full or name == wanted:
            importlib.import_module(f"madengine.cli.commands.{name.replace('-', '_')}").add_parser(subparsers)
        elif wanted not in COMMANDS:  # the listing of --help, or the choices of an unknown command's error
            subparsers.add_parser(name, help=SUMMARIES[name])
    for command in _commands(parser):
        add_output_flags(command)
    return parser


def _command_of(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names: its first word that is not an option (the top-level options
    take no values)."""
    return next((word for word in argv if not word.startswith("-")), None)


def _commands(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """Every (sub)command parser below ``parser``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                yield child
                yield from _commands(child)


def add_output_flags(parser: argparse.ArgumentParser) -> None:
    """The flags every command takes about how much it says and how."""
    group = parser.add_argument_group("output")
    loudness = group.add_mutually_exclusive_group()
    loudness.add_argument("--quiet", "-q", action="store_true", help="print errors and the final summary only")
    loudness.add_argument("--verbose", action="store_true", help="also print each step's command and timings")
    group.add_argument("--no-color", action="store_true", help="no colour (also: the NO_COLOR variable)")


def main(argv: Sequence[str] | None = None, env: Environment | None = None) -> int:
    owns_process = env is None  # the madengine program itself, not a caller with its own process
    env = env or Environment()
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    try:
        # argparse writes help and usage errors to sys.stdout/sys.stderr: route them to the injected streams
        with contextlib.redirect_stdout(env.stdout), contextlib.redirect_stderr(env.stderr):
            args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, usage errors
        return int(exc.code or 0)
    env.argv = argv  # the exact command line, recorded with every result
    env.quiet = env.quiet or getattr(args, "quiet", False)
    env.verbose = env.verbose or getattr(args, "verbose", False)
    env.no_color = env.no_color or getattr(args, "no_color", False)
    if not args.command:
        parser.print_help(env.stderr)
        return int(ExitStatus.BAD_INPUT)
    if owns_process:
        from madengine.core.gcpause import own_the_process

        own_the_process()
    debug = args.debug or env.debug
    handler = args.handler
    try:
        with signals_interrupt():
            return int(handler(args, env))
    except MadEngineError as exc:
        if debug:
            _print_traceback(env)
        print(f"madengine: error: {exc}", file=env.stderr, flush=True)  # one line: see MadEngineError
        return int(exc.exit_status)
    except KeyboardInterrupt as exc:
        print(f"madengine: {interruption(exc)}", file=env.stderr, flush=True)
        return interrupt_status(exc)
    except BrokenPipeError:
        return int(ExitStatus.OK)
    except Exception as exc:  # a bug: one line, the traceback only on request
        if debug:
            _print_traceback(env)
        print(f"madengine: internal error: {type(exc).__name__}: {one_line(redact(str(exc)), PART_LIMIT)} "
              "(rerun with --debug for the traceback)",
              file=env.stderr, flush=True)
        return int(ExitStatus.INTERNAL)


def _print_traceback(env: Environment) -> None:
    import traceback  # only when asked for: --help must start fast

    traceback.print_exc(file=env.stderr)
