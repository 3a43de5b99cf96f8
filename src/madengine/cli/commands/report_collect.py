"""``madengine report collect``: merge the result rows of a Slurm job into perf.csv.

Registered by ``madengine report``; owned by the distributed-execution part. For runs submitted
with ``madengine run --executor slurm --no-wait``: waits until the job's tasks end, then merges
their rows (a FAILURE row for each task that wrote none) into the run's perf.csv, once.
"""

from __future__ import annotations

import argparse
import json

from madengine.cli.env import Environment
from madengine.core.errors import ExitStatus


def add_subparser(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``collect`` subcommand to ``madengine report``'s subparsers."""
    parser = subparsers.add_parser(
        "collect", help="merge the rows of a Slurm job (submitted with --no-wait) into perf.csv",
        description="Wait for the Slurm job a 'madengine run --executor slurm --no-wait' submitted, then merge "
                    "every task's rows into perf.csv (a FAILURE row for each task that wrote none: cancelled, "
                    "timeout, node failure). Exit 1 when any task failed.")
    parser.add_argument("--job", required=True, metavar="ID", help="the Slurm job id the run printed")
    parser.add_argument("--results-dir", default="slurm_results", metavar="DIR",
                        help="the shared folder the run wrote its job folder in (default: slurm_results)")
    parser.add_argument("--perf-csv", "-o", "--output", dest="perf_csv", default=None, metavar="CSV",
                        help="perf.csv to merge into (default: the one the run named)")
    parser.add_argument("--live-output", "-l", action="store_true", help="stream the tasks' logs while waiting")
    parser.add_argument("--poll-interval", type=float, default=None, metavar="SECONDS",
                        help="seconds between squeue polls (default: the run's slurm.poll_interval or 10)")
    parser.add_argument("--force", action="store_true", help="merge again although the rows were merged before")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace, env: Environment) -> ExitStatus:
    from madengine.cli.commands.run import exit_status, print_summary
    from madengine.cli.env import CliReporter
    from madengine.distributed.slurm import collect_by_job_id

    summary = collect_by_job_id(args.job, env.host(), results_dir=args.results_dir, output=args.perf_csv,
                                reporter=CliReporter(env), live_output=args.live_output, force=args.force,
                                poll_interval=args.poll_interval)
    print_summary(env, summary.records)
    if args.json:
        env.data(json.dumps(summary.to_json(), indent=1, default=str))
    counts = summary.counts()
    env.message(f"madengine: {counts['SUCCESS']} succeeded, {counts['FAILURE']} failed, {counts['SKIPPED']} skipped; "
                f"rows merged into {summary.perf_csv}; job folder {summary.run_dir}")
    return exit_status(summary)
