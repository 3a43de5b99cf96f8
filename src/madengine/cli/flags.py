"""Flags several commands share, spelled one way everywhere, and the parser of a flag table.

The perf.csv a command reads or writes is ``--perf-csv`` in every command; the spellings each
command had before (``-o/--output`` for run, bench and scorecard; ``--csv-file-path`` as in the
original madengine) keep working as aliases. :func:`add_flags` adds the rows of a
:mod:`madengine.core.flagtable` table (the flags that are also written back as argv).
"""

from __future__ import annotations

import argparse
from typing import Any, Callable, Sequence

from madengine.core.flagtable import Flag, option_values
from madengine.execution.options import TRACE_FLAGS

PERF_CSV = "perf.csv"


def argparse_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """A table's parser as argparse's ``type``: its ValueError's message is the usage error."""
    def typed(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    typed.__name__ = parse.__name__
    return typed


def add_flags(target: argparse.ArgumentParser | argparse._ArgumentGroup, flags: Sequence[Flag]) -> None:
    """Each row of ``flags`` as an argument of ``target`` (a parser, or a group of one)."""
    for flag in flags:
        options: dict[str, Any] = {"dest": flag.dest, "help": flag.help}
        if flag.switch:
            options["action"] = "store_true"
        else:
            options.update(default=flag.default, metavar=flag.metavar, choices=flag.choices)
            if flag.parse is not None:
                options["type"] = argparse_type(flag.parse)
            if flag.repeat:
                options["action"] = "append"
            if flag.bare is not None:
                options.update(nargs="?", const=flag.bare)
        target.add_argument(*flag.names, **options)


def add_perf_csv_argument(parser: argparse.ArgumentParser, *aliases: str, default: str | None = PERF_CSV,
                          help: str = "perf.csv to append results to", required: bool = False) -> None:
    """``--perf-csv CSV`` (and ``aliases``), stored as ``args.perf_csv``."""
    parser.add_argument("--perf-csv", *aliases, dest="perf_csv", default=default, required=required, metavar="CSV",
                        help=help + (f" (default: {default})" if default else "")
                        )


def add_trace_arguments(parser: argparse.ArgumentParser) -> None:
    """``--trace FILE`` / ``--no-trace`` (run, bench, scorecard); the command turns them into its
    request's ``trace`` and ``trace_file`` with :func:`trace_settings`."""
    add_flags(parser.add_mutually_exclusive_group(), TRACE_FLAGS)


def trace_settings(args: argparse.Namespace) -> dict:
    """The request fields of ``--trace`` / ``--no-trace``: ``trace`` and ``trace_file``."""
    return option_values(TRACE_FLAGS, args)
