"""The ``madengine`` command line: parse, call one core function, print, exit.

Each subcommand lives in ``madengine.cli.commands.<name>`` with ``add_parser(subparsers)`` and
``handle(args, env) -> ExitStatus``. Handlers are imported only when their command runs, so
``madengine --help`` stays fast.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys
import traceback
from typing import Sequence

from madengine import __version__
from madengine.cli.env import Environment
from madengine.cli.render import one_line
from madengine.core.errors import ExitStatus, MadEngineError
from madengine.core.redact import redact

COMMANDS = ("run", "build", "discover", "report", "database", "bench")

EXIT_CODES_HELP = """exit codes:
  0    success: everything selected ran (or was skipped on purpose) and succeeded
  1    a model, build, task or check failed (its FAILURE row says why)
  2    bad input: usage, a malformed file, an unknown tag, a bad context, bad credentials,
       a service that cannot be reached
  3    internal error in madengine (rerun with --debug for the traceback)
  130  interrupted (Ctrl-C); results recorded before it are kept

environment:
  MODEL_DIR         model repository to discover models in (default: current directory)
  MADENGINE_DEBUG   1 shows tracebacks of errors
"""


class _Parser(argparse.ArgumentParser):
    """argparse, with usage errors rendered as one line (exit 2)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(int(ExitStatus.BAD_INPUT), f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="madengine", description="Run AI models reliably in containers and measure them.",
                     epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--version", action="version", version=f"madengine {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    subparsers = parser.add_subparsers(dest="command", metavar="{" + ",".join(COMMANDS) + "}",
                                       parser_class=_Parser)
    for name in COMMANDS:
        importlib.import_module(f"madengine.cli.commands.{name}").add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None, env: Environment | None = None) -> int:
    env = env or Environment()
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        # argparse writes help and usage errors to sys.stdout/sys.stderr: route them to the injected streams
        with contextlib.redirect_stdout(env.stdout), contextlib.redirect_stderr(env.stderr):
            args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, usage errors
        return int(exc.code or 0)
    args.argv = argv  # the exact command line, recorded with every result
    if not args.command:
        parser.print_help(env.stderr)
        return int(ExitStatus.BAD_INPUT)
    debug = args.debug or env.debug
    handler = args.handler
    try:
        return int(handler(args, env))
    except MadEngineError as exc:
        if debug:
            traceback.print_exc(file=env.stderr)
        print(f"madengine: error: {one_line(redact(str(exc)))}", file=env.stderr, flush=True)
        return int(exc.exit_status)
    except KeyboardInterrupt:
        print("madengine: interrupted", file=env.stderr, flush=True)
        return int(ExitStatus.INTERRUPTED)
    except BrokenPipeError:
        return int(ExitStatus.OK)
    except Exception as exc:  # a bug: one line, the traceback only on request
        if debug:
            traceback.print_exc(file=env.stderr)
        print(f"madengine: internal error: {type(exc).__name__}: {one_line(redact(str(exc)))} "
              "(rerun with --debug for the traceback)",
              file=env.stderr, flush=True)
        return int(ExitStatus.INTERNAL)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
