"""madengine scorecard: run each model of a suite on every backend, check its outputs, compare the timings."""

from __future__ import annotations

import argparse
from pathlib import Path

from madengine.cli.commands.bench import add_precision_argument, add_timing_arguments, tolerance, trace_note
from madengine.cli.env import CliReporter, Environment
from madengine.cli.flags import add_perf_csv_argument, add_trace_arguments, trace_settings
from madengine.core.errors import ExitStatus
from madengine.cli.commands import SUMMARIES

DESCRIPTION = """\
Run every ONNX model of a suite on several backends (ONNX Runtime CPU at graph optimisation
disabled and all, OpenVINO, TVM Relax; ONNX Runtime CUDA/TensorRT and OpenVINO GPU where present)
with the same seeded inputs; check each backend's outputs against the reference (ONNX Runtime CPU
without optimisation, or onnx's reference evaluator) with per-model tolerances; time each with
the harness of 'madengine bench'. Every backend computes at f32 unless a cell asks for another
precision (openvino-cpu:bf16, or --precision), checked with that precision's tolerance; a precision
a backend has no mode for is bad input (exit 2), one this CPU cannot compute natively an UNSUPPORTED
cell. Outputs are compared at the reference's scale (atol is a fraction of its RMS); a reference
output that is ~0, constant, NaN or infinite cannot tell right from wrong: INCONCLUSIVE, never PASS.
A cell is PASS, MISMATCH, INCONCLUSIVE, UNSUPPORTED or ERROR. Prints a grid (models x cells: status, the precision the runtime computed in,
p50, ratio to the reference), appends one perf.csv row per cell (and
imports them into the results database with --db-url or MADENGINE_DB_URL), writes an HTML page
with --html. Exit 0 no MISMATCH or ERROR, 1 a MISMATCH or ERROR (FAILURE rows), 2 bad input."""

EXAMPLES = """\
examples:
  madengine scorecard models.yaml
  madengine scorecard models.yaml --backends onnxruntime-cpu-opt-all,openvino-cpu --iterations 100 --threads 1
  madengine scorecard models.yaml --html scorecard.html --json > scorecard.json
  madengine scorecard models.yaml --backends onnxruntime-cpu-opt-all,openvino-cpu,openvino-cpu:bf16
  madengine scorecard models.yaml --backends openvino-cpu --precision f32,bf16   # at both
  madengine scorecard models.yaml --image my-backends:latest     # each cell in a container of that image
"""


def _names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError("names no backend")
    return names


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("scorecard", help=SUMMARIES["scorecard"],
                                   description=DESCRIPTION, epilog=EXAMPLES,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("suite", metavar="SUITE.yaml",
                        help="model list (YAML or JSON), the 'bench --suite' format plus per-model backends, "
                             "tolerance {atol, rtol} and reference")
    parser.add_argument("--backends", type=_names, metavar="A,B,...",
                        help="backends to run (default: each model's own list, else every CPU backend and the GPU "
                             "backends of this host's GPUs): onnxruntime-cpu-opt-disabled, onnxruntime-cpu-opt-all, "
                             "openvino-cpu, tvm-relax-llvm, onnxruntime-cuda, onnxruntime-tensorrt, openvino-gpu; "
                             "BACKEND:PRECISION for a cell at a precision of its own (openvino-cpu:bf16)")
    add_precision_argument(parser, "precision of every cell that names none: f32 (default), tf32, bf16, fp16, int8; "
                                   "several make one cell per backend and precision. The reference stays f32")
    add_timing_arguments(parser, threads_help="intra-op threads of every backend (default: each backend's own)")
    parser.add_argument("--atol", type=tolerance, metavar="X",
                        help="absolute tolerance for models that set none (default 1e-4)")
    parser.add_argument("--rtol", type=tolerance, metavar="X",
                        help="relative tolerance for models that set none (default 1e-4)")
    parser.add_argument("--metric", choices=("throughput", "p50"), default="throughput",
                        help="perf.csv 'performance' of a PASS cell: samples/s at the median latency (default) "
                             "or p50 latency in ms")
    parser.add_argument("--image", metavar="IMAGE",
                        help="run each cell in a container of IMAGE (docker executor; never pulled); the image needs "
                             "python3, numpy and the backends' packages (docs/scorecard.md)")
    add_perf_csv_argument(parser, "-o", "--output")
    parser.add_argument("--html", metavar="FILE", help="also write the scorecard as a self-contained HTML page")
    parser.add_argument("--db-url", metavar="URL", default=None,
                        help="also import the rows into this results database (default: MADENGINE_DB_URL when set)")
    parser.add_argument("--runs-dir", default="madengine_runs", metavar="DIR",
                        help="folder for per-run files (default: madengine_runs)")
    parser.add_argument("--json", action="store_true", help="print the scorecard as JSON on stdout")
    add_trace_arguments(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace, env: Environment) -> ExitStatus:
    from madengine.bench.scorecard import ScorecardRequest, run_scorecard

    request = ScorecardRequest(
        suite=args.suite, backends=args.backends, warmup=args.warmup, iterations=args.iterations,
        min_time=args.min_time, threads=args.threads, seed=args.seed, metric=args.metric, atol=args.atol,
        rtol=args.rtol, image=args.image, precisions=args.precision or ["f32"], output=Path(args.perf_csv),
        runs_dir=Path(args.runs_dir),
        command_line=env.host().command_line, environ=dict(env.environ), load=env.host().load,
        **trace_settings(args))
    db_url = args.db_url or env.environ.get("MADENGINE_DB_URL") or None
    if db_url:
        from madengine.database.urls import parse_url

        parse_url(db_url, origin="--db-url" if args.db_url else "MADENGINE_DB_URL")  # bad URL: exit 2 before running
    summary = run_scorecard(request, CliReporter(env))
    grid = render_grid(summary)
    env.result(grid, summary.to_json(), args.json)
    if args.html:
        from madengine.reports.scorecard import write_scorecard_html

        write_scorecard_html(summary.to_json(), Path(args.html))
        env.message(f"madengine: scorecard page {args.html}")
    if db_url:
        _import_rows(summary, db_url, env)
    counts = summary.counts()
    env.message("madengine: " + ", ".join(f"{counts[s]} {s}" for s in counts)
                + f"; rows in {summary.perf_csv}; files in {summary.run_dir}" + trace_note(summary))
    return ExitStatus.FAILED if summary.failed else ExitStatus.OK


def _import_rows(summary, db_url: str, env: Environment) -> None:
    """This run's rows (only) into the results database, through its perf.csv importer."""
    from madengine.database import update_table
    from madengine.results import append_records

    rows_file = summary.run_dir / "scorecard_perf.csv"
    append_records(rows_file, [cell.record for _, cell in summary.cells if cell.record is not None])
    result = update_table(rows_file, db_url, env.environ)
    env.message(f"madengine: {result.inserted} row(s) imported into {result.url} (table {result.table})")


def render_grid(summary) -> str:
    """Models × cells: status, precision, p50 and the ratio to the reference; then one line per cell
    that is not a PASS, with its reason."""
    from madengine.cli.render import table

    backends = summary.backends
    rows, notes = [], []
    for card in summary.models:
        by_backend = {cell.backend: cell for cell in card.cells}
        rows.append([card.entry.name, *[_grid_cell(by_backend.get(b)) for b in backends]])
        for cell in card.cells:
            if cell.status != "PASS":
                notes.append(f"  {card.entry.name} × {cell.backend}: {cell.status}: {cell.reason}")
    text = table(("model", *backends), rows, max_width=40)
    legend = ("cells: status, the precision the runtime computed in, p50 latency, ratio to onnxruntime-cpu-opt-disabled's "
              "p50 (below 1 = faster); R = reference")
    return "\n".join([text, legend, *notes])


def _grid_cell(cell) -> str:
    if cell is None:
        return "-"
    parts = [cell.status + (" R" if cell.is_reference else "")]
    if cell.precision:
        parts.append(cell.precision)
    if cell.p50_ms is not None:
        parts.append(f"{cell.p50_ms:.3g}ms")
    if cell.ratio is not None:
        parts.append(f"{cell.ratio:.2f}x")
    if cell.status == "UNSUPPORTED" and "not installed" in cell.reason:
        parts.append("(not installed)")
    return " ".join(parts)
