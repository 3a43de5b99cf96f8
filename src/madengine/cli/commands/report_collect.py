"""``madengine report collect``: merge the result rows of a Slurm job into perf.csv.

Registered by ``madengine report``; owned by the distributed-execution part.
"""

from __future__ import annotations

import argparse


def add_subparser(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``collect`` subcommand to ``madengine report``'s subparsers."""
