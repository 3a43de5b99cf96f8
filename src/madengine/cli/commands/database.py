"""madengine database (placeholder parser; the command is added by its own issue)."""

from __future__ import annotations

import argparse


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    subparsers.add_parser("database", help="(database: in progress)")
