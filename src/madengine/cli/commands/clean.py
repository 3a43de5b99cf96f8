"""madengine clean: remove what runs whose madengine process is gone left behind on this host."""

from __future__ import annotations

import argparse
import json

from madengine.cli.commands import SUMMARIES
from madengine.cli.env import CliReporter, Environment
from madengine.core.errors import ExitStatus

DESCRIPTION = """\
Every container a run starts carries its run id and its owner (the madengine process, told apart
from a later process of the same pid); so does every process a local run starts. A run that ends
removes them itself; after a SIGKILL, or an engine that could not remove a container in time, they
stay. 'madengine clean' (and every 'madengine run' before it starts) removes the containers and stops
the processes whose owner is gone on this host. Containers without an owner (other tools',
--keep-alive) and those of other hosts are never touched. Exit 1 when something could not be
removed."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("clean", help=SUMMARIES["clean"], description=DESCRIPTION)
    parser.add_argument("--json", action="store_true", help="print what was found and done as JSON")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace, env: Environment) -> ExitStatus:
    from madengine.pipeline.clean import clean

    summary = clean(env.host().environ, CliReporter(env))
    if summary.containers_unchecked:
        env.message(f"madengine: containers not checked: {summary.containers_unchecked}")
    if args.json:
        env.data(json.dumps(summary.to_json(), indent=1))
    containers = sum(1 for leftover in summary.leftovers if leftover.kind == "container" and leftover.removed)
    processes = sum(1 for leftover in summary.leftovers if leftover.kind == "process" and leftover.removed)
    failed = len(summary.failed)
    print(f"madengine: clean: {containers} container(s) removed, {processes} process(es) stopped"
          + (f", {failed} could not be removed" if failed else "")
          + ("" if summary.leftovers else "; nothing was left by ended runs"), file=env.stderr, flush=True)
    return ExitStatus.FAILED if failed else ExitStatus.OK
