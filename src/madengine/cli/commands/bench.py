"""madengine bench: benchmark ONNX models on ONNX Runtime and record the results in perf.csv."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from madengine.cli.env import CliReporter, Environment
from madengine.core.errors import ExitStatus

DESCRIPTION = """\
Benchmark ONNX models on ONNX Runtime with generated inputs: warm-up runs, then timed runs
(a count, or a minimum time). Reports n, mean, stddev, CV, min, p50/p90/p95/p99, max latency and
inferences/s and samples/s, appends one row per model and provider to perf.csv, and prints a
table (stdout; with --json the JSON goes to stdout and the table to stderr).
Exit 0 all ran, 1 a model failed to load or run (FAILURE row), 2 bad input (a missing file,
a sha256 mismatch, an unresolved dynamic dimension, a provider this onnxruntime lacks)."""

EXAMPLES = """\
examples:
  madengine bench model.onnx --iterations 200 --threads 1
  madengine bench bert.onnx --axes batch=8 --axes seq=128 --provider cuda --json
  madengine bench --suite models.yaml --min-time 5 --profile
"""


def _count(minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be {minimum} or more")
        return value

    return parse


def _seconds(text: str) -> float:
    from madengine.core.values import MAX_TIMEOUT, seconds

    value = seconds(text)
    if not value:  # None (not a finite number up to MAX_TIMEOUT) or 0
        raise argparse.ArgumentTypeError(f"'{text}' is not a number of seconds (more than 0, at most {MAX_TIMEOUT})")
    return value


def _assignment(text: str) -> str:
    name, sep, value = text.partition("=")
    if not sep or not name.strip() or not value.strip():
        raise argparse.ArgumentTypeError(f"'{text}' is not NAME=VALUE")
    return text


def _providers(text: str) -> list[str]:
    names = [p.strip() for p in text.split(",") if p.strip()]
    if not names:
        raise argparse.ArgumentTypeError("names no provider")
    return names


def add_timing_arguments(parser: argparse.ArgumentParser, *, threads_help: str) -> None:
    """--warmup, --iterations | --min-time, --threads, --seed: the harness's timing (bench and scorecard)."""
    parser.add_argument("--warmup", type=_count(0), default=10, metavar="N", help="un-timed runs first (default 10)")
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--iterations", "-n", type=_count(1), metavar="N", help="timed runs: exactly N")
    length.add_argument("--min-time", type=_seconds, metavar="SECONDS",
                        help="timed runs: for at least SECONDS and 10 runs (default: 1 second)")
    parser.add_argument("--threads", type=_count(1), metavar="N", help=threads_help)
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated inputs (default 0)")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("bench", help="benchmark ONNX models on ONNX Runtime, record them in perf.csv",
                                   description=DESCRIPTION, epilog=EXAMPLES,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", metavar="MODEL.onnx", help="ONNX model files")
    parser.add_argument("--suite", metavar="FILE",
                        help="model list (YAML or JSON): entries {set, name, version, path, sha256, shapes, $axes, "
                             "providers, batch_size}")
    parser.add_argument("--provider", type=_providers, action="append", metavar="NAME",
                        help="execution provider: cpu (default), cuda, tensorrt, rocm, migraphx, openvino, ... "
                             "(repeat or comma-separate for several)")
    parser.add_argument("--batch-size", type=_count(1), metavar="N",
                        help="batch size: fills a dynamic dimension 0; samples/s = inferences/s × N "
                             "(default: dimension 0 of the first input)")
    parser.add_argument("--shape", type=_assignment, action="append", default=[], metavar="NAME=D0,D1,...",
                        help="whole shape of one input (command-line models)")
    parser.add_argument("--axes", type=_assignment, action="append", default=[], metavar="NAME=N",
                        help="size of one named dynamic axis (command-line models)")
    add_timing_arguments(parser, threads_help="intra-op threads (default: onnxruntime's, one per physical core)")
    parser.add_argument("--profile", action="store_true",
                        help="also profile each node (separate session) and print the per-operator table")
    parser.add_argument("--metric", choices=("throughput", "p50"), default="throughput",
                        help="perf.csv 'performance': samples/s (throughput, default) or p50 latency in ms")
    parser.add_argument("--no-cache", action="store_true", help="do not use or fill the prepared-model cache")
    parser.add_argument("-o", "--output", default="perf.csv", metavar="CSV", help="perf.csv to append results to")
    parser.add_argument("--runs-dir", default="madengine_runs", metavar="DIR",
                        help="folder for per-run result JSON and profiles (default: madengine_runs)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace, env: Environment) -> ExitStatus:
    from madengine.bench import BenchRequest, run_bench

    request = BenchRequest(
        models=list(args.models), suite=args.suite,
        providers=[p for group in (args.provider or [["cpu"]]) for p in group],
        batch_size=args.batch_size, shapes=args.shape, axes=args.axes, warmup=args.warmup,
        iterations=args.iterations, min_time=args.min_time, threads=args.threads, seed=args.seed,
        profile=args.profile, metric=args.metric, output=Path(args.output), runs_dir=Path(args.runs_dir),
        use_cache=not args.no_cache, command_line=env.host().command_line,
        environ=dict(env.environ))
    summary = run_bench(request, CliReporter(env))
    tables = render_tables(summary)
    if args.json:
        print(tables, file=env.stderr, flush=True)
        env.data(json.dumps(summary.to_json(), indent=1, default=str))
    else:
        env.data(tables)
    env.message(f"madengine: {len(summary.outcomes) - len(summary.failed)} succeeded, {len(summary.failed)} failed; "
                f"rows in {summary.perf_csv}; results in {summary.run_dir}")
    return ExitStatus.FAILED if summary.failed else ExitStatus.OK


PROFILE_ROWS = 20


def render_tables(summary) -> str:
    """The results table, then one per-operator table per profiled result."""
    from madengine.cli.render import table

    rows = []
    for outcome in summary.outcomes:
        record, stats = outcome.record, (outcome.result or {}).get("stats")
        if stats:
            rows.append((record.model, outcome.provider, stats["batch_size"], stats["n"], _ms(stats["mean_ms"]),
                         _ms(stats["stddev_ms"]), f"{stats['cv']:.1%}", _ms(stats["min_ms"]), _ms(stats["p50_ms"]),
                         _ms(stats["p90_ms"]), _ms(stats["p95_ms"]), _ms(stats["p99_ms"]), _ms(stats["max_ms"]),
                         f"{stats['inferences_per_second']:.2f}", f"{stats['samples_per_second']:.2f}", record.status))
        else:
            rows.append((record.model, outcome.provider, "", "", "", "", "", "", "", "", "", "", "", "", "",
                         f"{record.status}: {record.reason}"))
    parts = [table(("model", "provider", "batch", "n", "mean_ms", "std_ms", "cv", "min_ms", "p50_ms", "p90_ms",
                    "p95_ms", "p99_ms", "max_ms", "infer/s", "samples/s", "status"), rows, max_width=60)]
    for outcome in summary.outcomes:
        profile = (outcome.result or {}).get("profile")
        if not profile:
            continue
        nodes = profile["nodes"]
        shown = [(r["op_type"], r["node"], r["calls"], f"{r['total_ms']:.3f}", f"{r['mean_ms']:.4f}",
                  f"{r['share']:.1%}") for r in nodes[:PROFILE_ROWS]]
        title = (f"\nper-operator profile: {outcome.record.model} [{outcome.provider}], {profile['runs']} profiled "
                 f"run(s), {profile['total_ms']:.3f} ms in kernels"
                 + (f" (top {PROFILE_ROWS} of {len(nodes)} nodes)" if len(nodes) > PROFILE_ROWS else ""))
        parts.append(title)
        parts.append(table(("op_type", "node", "calls", "total_ms", "mean_ms", "share"), shown, max_width=50))
    return "\n".join(parts)


def _ms(value: float) -> str:
    return f"{value:.4f}" if value < 10 else f"{value:.2f}"
