"""Flags several commands share, spelled one way everywhere.

The perf.csv a command reads or writes is ``--perf-csv`` in every command; the spellings each
command had before (``-o/--output`` for run, bench and scorecard; ``--csv-file-path`` as in the
original madengine) keep working as aliases.
"""

from __future__ import annotations

import argparse

PERF_CSV = "perf.csv"


def add_perf_csv_argument(parser: argparse.ArgumentParser, *aliases: str, default: str | None = PERF_CSV,
                          help: str = "perf.csv to append results to", required: bool = False) -> None:
    """``--perf-csv CSV`` (and ``aliases``), stored as ``args.perf_csv``."""
    parser.add_argument("--perf-csv", *aliases, dest="perf_csv", default=default, required=required, metavar="CSV",
                        help=help + (f" (default: {default})" if default else "")
                        )


def add_trace_arguments(parser: argparse.ArgumentParser) -> None:
    """``--trace FILE`` / ``--no-trace`` (run, bench, scorecard); the command turns them into its
    request's ``trace`` and ``trace_file`` with :func:`trace_settings`."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--trace", default=None, metavar="FILE",
                       help="write the command's trace (Chrome trace-event JSON, opens in ui.perfetto.dev) to FILE "
                            "instead of <runs dir>/<run id>/trace.json")
    group.add_argument("--no-trace", action="store_true", help="record no trace (the trace_id column stays empty)")


def trace_settings(args: argparse.Namespace) -> dict:
    """The request fields of ``--trace`` / ``--no-trace``: ``trace`` and ``trace_file``."""
    from pathlib import Path

    return {"trace": not args.no_trace, "trace_file": Path(args.trace) if args.trace else None}
