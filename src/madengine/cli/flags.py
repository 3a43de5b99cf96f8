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
