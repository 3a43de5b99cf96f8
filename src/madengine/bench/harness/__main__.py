"""The harness as a model program: ``python3 -m <harness folder> MODEL.onnx [options]``.

Used by models.json entries with ``"onnx"`` (inside the model's container or on the host). It
benchmarks one model, writes the full result as JSON (``--json-out``), prints a short summary and,
last, the line madengine parses: ``performance: <value> <metric>``.
Exit status: 0 done, 1 the model failed to load or run, 2 bad options or inputs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .engine import DEFAULT_WARMUP, BenchOptions, benchmark, metric_value, sha256_file
from .errors import HarnessError, HarnessInputError
from .inputs import parse_axes, parse_shapes


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="madengine-onnx-harness", description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--provider", default="cpu")
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--shape", action="append", default=[])
    parser.add_argument("--axes", action="append", default=[])
    parser.add_argument("--warmup", type=int, default=DEFAULT_WARMUP)
    parser.add_argument("--iterations", type=int, default=None)
    parser.add_argument("--min-time", type=float, default=None)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--metric", default="throughput", choices=("throughput", "p50"))
    parser.add_argument("--json-out", default="onnx_bench.json")
    parser.add_argument("--artifacts", default="onnx_profile", help="folder for profile files")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        options = BenchOptions(provider=args.provider, threads=args.threads, warmup=args.warmup,
                               iterations=args.iterations, min_time=args.min_time, seed=args.seed,
                               batch_size=args.batch_size, shapes=parse_shapes(args.shape),
                               axes=parse_axes(args.axes), profile=args.profile, artifacts_dir=args.artifacts)
        result = benchmark(args.model, options)
        result["model_sha256"] = sha256_file(args.model)
        result["metric"] = args.metric
        value, metric = metric_value(result["stats"], args.metric)
    except HarnessInputError as exc:
        print(f"onnx harness: error: {exc}", file=sys.stderr, flush=True)
        return 2
    except HarnessError as exc:
        print(f"onnx harness: error: {exc}", file=sys.stderr, flush=True)
        return 1
    Path(args.json_out).write_text(json.dumps(result, indent=1), encoding="utf-8")
    stats = result["stats"]
    print(f"onnx harness: {args.model} on {result['provider']} (onnxruntime {result['environment']['ort_version']}), "
          f"inputs {result['input_shapes']}, batch {result['batch_size']}")
    print(f"onnx harness: n={stats['n']} p50={stats['p50_ms']:.4f} ms ({stats['median_samples_per_second']:.2f} "
          f"samples/s) p99={stats['p99_ms']:.4f} ms mean={stats['mean_ms']:.4f} ms cv={stats['cv']:.2%}")
    for warning in result["warnings"]:
        print(f"onnx harness: warning: {warning}")
    print(f"performance: {value:.6g} {metric}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
