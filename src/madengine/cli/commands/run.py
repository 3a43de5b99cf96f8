"""madengine run: build and run the selected models, record one perf row per result."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from madengine.cli.commands.discover import add_tags_argument
from madengine.cli.env import CliReporter, Environment
from madengine.cli.flags import add_flags, add_perf_csv_argument, add_trace_arguments, argparse_type
from madengine.cli.perf_html import write_html
from madengine.core.errors import ExitStatus, InputError
from madengine.core.flagtable import option_values, timeout, whole
from madengine.cli.commands import SUMMARIES
from madengine.distributed.options import TRANSPORT_FLAGS
from madengine.execution.options import (CONTEXT_FLAGS, IMAGE_FLAGS, LIVE_OUTPUT, NO_HTML, REPEAT, RUN_FLAGS,
                                         RUN_OPTION_FLAGS, TIMEOUT, WARMUP_RUNS)


#: ``k8s render --timeout`` reads the run's timeout
_timeout = argparse_type(timeout)
_positive = argparse_type(whole(1))


def add_context_arguments(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, CONTEXT_FLAGS)


def add_image_arguments(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, IMAGE_FLAGS)


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    add_tags_argument(parser)
    add_flags(parser, (REPEAT, WARMUP_RUNS, TIMEOUT, LIVE_OUTPUT, *IMAGE_FLAGS, *CONTEXT_FLAGS, *RUN_FLAGS))
    add_perf_csv_argument(parser, "-o", "--output")


def add_distributed_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("build/run split, Slurm and parallel scheduling")
    add_flags(group, TRANSPORT_FLAGS)
    group.add_argument("--parallel", type=_positive, default=1, metavar="N",
                       help="run up to N models at once on disjoint GPUs/CPUs (default 1)")
    group.add_argument("--partition", default=None, help="Slurm partition")
    group.add_argument("--nodes", type=_positive, default=None, help="Slurm nodes per task")
    group.add_argument("--gpus-per-node", type=int, default=None, help="Slurm GPUs per node")
    group.add_argument("--time", default=None, metavar="LIMIT", help="Slurm time limit (e.g. 01:00:00)")
    group.add_argument("--slurm-args", default=None, metavar="ARGS", help="extra sbatch options")
    group.add_argument("--no-wait", action="store_true", help="Slurm: submit, print the job id, do not wait")
    group.add_argument("--dry-run", action="store_true",
                       help="Slurm: print the sbatch script; k8s: write the objects' YAML into the run folder and "
                            "print their paths; submit nothing")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("run", help=SUMMARIES["run"],
                                   description="Build each selected model's image, run it, and append one row per "
                                               "result to perf.csv. Exit 1 when any model failed.")
    add_run_arguments(parser)
    add_distributed_arguments(parser)
    add_flags(parser, (NO_HTML,))
    parser.add_argument("--db-url", default=None, metavar="URL",
                        help="also record each row into this results database as it lands (default: MADENGINE_DB_URL "
                             "when set); perf.csv stays the primary record and a database that is down is a warning")
    add_trace_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the run summary as JSON on stdout")
    parser.set_defaults(handler=handle)


#: flags that mean something only with another flag: (flag, its argparse dest, when it applies)
_SLURM_ONLY = (("--partition", "partition"), ("--nodes", "nodes"), ("--gpus-per-node", "gpus_per_node"),
               ("--time", "time"), ("--slurm-args", "slurm_args"), ("--no-wait", "no_wait"))
_MANIFEST_ONLY = (("--registry", "registry"), ("--image-archive", "image_archive"))


def _given(args: argparse.Namespace, dest: str) -> bool:
    value = getattr(args, dest)
    return value is not None and value is not False


def check_flags_apply(args: argparse.Namespace) -> None:
    """A flag that does nothing for the chosen executor or mode is an error, never ignored."""
    if args.dry_run and args.executor not in ("slurm", "k8s"):
        raise InputError("--dry-run applies only with --executor slurm or k8s", path="--dry-run")
    if args.executor == "k8s" and args.parallel > 1:
        raise InputError("--parallel applies to docker and local runs; a k8s run submits every job at once",
                         path="--parallel")
    if args.executor != "slurm":
        for flag, dest in _SLURM_ONLY:
            if _given(args, dest):
                raise InputError(f"{flag} applies only with --executor slurm", path=flag)
    elif args.parallel > 1:
        raise InputError("--parallel applies to docker and local runs; Slurm runs every task at once", path="--parallel")
    elif getattr(args, "db_url", None):
        raise InputError("--db-url records the rows of docker and local runs as they land", path="--db-url",
                         hint="import a Slurm run's perf.csv with 'madengine database update-table'")
    if not args.manifest_file:
        for flag, dest in _MANIFEST_ONLY:
            if _given(args, dest):
                raise InputError(f"{flag} applies only with --manifest-file (images of a build manifest)", path=flag)


def run_options(args: argparse.Namespace):
    from madengine.execution import RunOptions

    return RunOptions(tags=tuple(args.tags), output=Path(args.perf_csv), db_url=getattr(args, "db_url", None),
                      **option_values(RUN_OPTION_FLAGS, args))


def run_request(args: argparse.Namespace):
    """The typed request of ``madengine run`` (flags checked first)."""
    from madengine.distributed import ParallelOptions, SlurmOptions, TransportOptions
    from madengine.execution import BuildOptions
    from madengine.pipeline import RunRequest

    check_flags_apply(args)
    return RunRequest(
        run=run_options(args),
        build=BuildOptions(live_output=args.live_output, **option_values(IMAGE_FLAGS, args)),
        transport=TransportOptions(**option_values(TRANSPORT_FLAGS, args)),
        parallel=ParallelOptions(workers=args.parallel),
        slurm=SlurmOptions(partition=args.partition, nodes=args.nodes, gpus_per_node=args.gpus_per_node,
                           time=args.time, slurm_args=args.slurm_args, no_wait=args.no_wait, dry_run=args.dry_run))


def print_summary(env: Environment, records) -> None:
    """The results table (reasons wrapped, never cut), then where each failed model's log is."""
    from madengine.cli.progress import colour_enabled
    from madengine.cli.render import status_painter, table

    rows = []
    for r in records:
        perf = f"{r.performance:g}" if isinstance(r.performance, float) else (r.performance or "")
        if str(r.perf_n) not in ("", "1") and r.perf_cv not in ("", None):
            perf += f" (n={r.perf_n}, cv {float(r.perf_cv):.1%})"
        duration = f"{r.test_duration:.2f}" if isinstance(r.test_duration, float) else ""
        label = r.model + (f" [{r.tag_configs}]" if getattr(r, "tag_configs", "") else "")
        rows.append((label, r.docker_image or r.executor, r.status, perf, r.metric, duration, r.reason))
    colour = _is_tty(env.stderr) and colour_enabled(env.environ, env.no_color)
    print(table(("model", "image", "status", "performance", "metric", "test_s", "reason"), rows, max_width=70,
                wrap=(6,), paint=status_painter(2) if colour else None), file=env.stderr, flush=True)
    for r in records:
        log = _run_log(r)
        if r.status == "FAILURE" and log:
            print(f"  {r.model}: log {log}", file=env.stderr, flush=True)
    warned = [(r.model, warning) for r in records for warning in r.warning_list()]
    if warned:
        print(f"madengine: {len({m for m, _ in warned})} row(s) with warnings (perf.csv column 'warnings'):",
              file=env.stderr, flush=True)
        for model, warning in warned:
            print(f"  {model}: {warning}", file=env.stderr, flush=True)


def _run_log(record) -> str:
    artifacts = record.artifacts if isinstance(record.artifacts, list) else str(record.artifacts or "").split(",")
    return next((a for a in artifacts if a.endswith("run.log")), "")


def _is_tty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def exit_status(summary) -> int:
    """130 after Ctrl-C (128 + N after signal N), 1 when any model failed or any row could not be
    written to perf.csv, else 0."""
    if summary.interrupted:
        return 128 + summary.signal if summary.signal else ExitStatus.INTERRUPTED
    return ExitStatus.FAILED if summary.failed or summary.unrecorded else ExitStatus.OK


def handle(args: argparse.Namespace, env: Environment) -> ExitStatus:
    from madengine.pipeline import run

    reporter = CliReporter(env)
    try:
        summary = run(run_request(args), env.host(), reporter)
    finally:
        reporter.close()
    print_summary(env, summary.records)
    if summary.records and not args.no_html:
        write_html(env, summary.perf_csv)
    if args.json:
        env.data(json.dumps(summary.to_json(), indent=1, default=str))
    print_totals(env, summary)
    return exit_status(summary)


def print_totals(env: Environment, summary) -> None:
    """The last line (shown with --quiet too): counts, where rows, logs and the trace went."""
    counts = summary.counts()
    trace = getattr(summary.trace, "path", None)
    print(f"madengine: {counts['SUCCESS']} succeeded, {counts['FAILURE']} failed, {counts['SKIPPED']} skipped; "
          f"{_rows_where(summary)}; logs in {summary.run_dir}" + (f"; trace {trace}" if trace else ""),
          file=env.stderr, flush=True)


def _rows_where(summary) -> str:
    """Where the rows are: perf.csv, and those it did not take with the command that adds them."""
    missing = len(summary.unrecorded)
    if not missing:
        return f"rows in {summary.perf_csv}"
    written = len(summary.records) - missing
    files = summary.unrecorded_files()
    adds = " and ".join(f"'madengine report update-perf --single-result {path} --perf-csv {summary.perf_csv}'"
                        for path in files)
    kept = f"kept in {', '.join(files)}; add {'them' if missing > 1 else 'it'} with {adds}" if files else ""
    lost = missing - sum(1 for path in summary.unrecorded if path)
    if lost:
        kept += ("; " if kept else "") + f"{lost} printed above only (nowhere to keep them)"
    return f"{_rows(written)} in {summary.perf_csv}, {_rows(missing)} NOT in it: {kept}"


def _rows(n: int) -> str:
    return f"{n} row" + ("" if n == 1 else "s")
