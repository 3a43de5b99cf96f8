"""madengine build (placeholder parser; the command is added by its own issue)."""

from __future__ import annotations

import argparse


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    subparsers.add_parser("build", help="(build: in progress)")
