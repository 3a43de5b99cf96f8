"""Overhead of the scorecard's timing against a bare loop over each backend's own API.

For every CPU backend, side by side in one run, on ONE prepared single-threaded model of at least
1 ms per inference (an MLP built with onnx.helper, as benchmarks/onnx_overhead.py does; ``--bert``: a
BERT-shaped encoder from a transformers config, which TVM 0.27's frontend cannot import), in alternating blocks (A B B A ...) so drift and other work on the
machine fall on both sides alike:

  A. the harness: ``madengine.bench.harness.engine.measure`` over ``session.bind(feeds)`` (what
     ``madengine scorecard`` times), its per-run latencies;
  B. a bare loop over the backend's own call, written out here: ``session.run(None, feeds)``
     (onnxruntime), ``request.infer(feeds, share_inputs=True)`` (OpenVINO), ``vm_main(*tensors)`` (TVM).

Prints each backend's p50 on both sides and the ratio A/B (target <= 1.05 for every backend).

    python3 benchmarks/scorecard_overhead.py [--rounds 16] [--block 16] [--bert] [--hidden 512 --batch 8 --layers 8]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

TARGET = 1.05


def bare_call(backend_id: str, session):
    """The backend's own inference call, written out against its own API (not via ``bind``); for TVM,
    the conversion of the inputs to TVM tensors, after which the loop calls ``vm["main"]``."""
    if backend_id.startswith("onnxruntime"):
        ort_session = session.session
        return lambda feeds: ort_session.run(None, feeds)
    if backend_id.startswith("openvino"):
        request = session.request
        return lambda feeds: request.infer(feeds, share_inputs=True)
    if backend_id.startswith("tvm"):
        import tvm

        names = session.input_names
        # the inputs become TVM tensors once (as bind does); the loop then calls the VM function
        return lambda feeds: [tvm.runtime.tensor(feeds[name], tvm.cpu()) for name in names]
    raise ValueError(backend_id)


def bare_loop(backend_id: str, session, feeds, count: int) -> list[float]:
    clock = time.perf_counter_ns
    samples = []
    if backend_id.startswith("tvm"):
        main, arguments = session.main, bare_call(backend_id, session)(feeds)
        for _ in range(count):
            started = clock()
            main(*arguments)
            samples.append((clock() - started) / 1e6)
        return samples
    call = bare_call(backend_id, session)
    for _ in range(count):
        started = clock()
        call(feeds)
        samples.append((clock() - started) / 1e6)
    return samples


def build_model(folder: Path, use_bert: bool, hidden: int, batch: int, layers: int) -> tuple[Path, str]:
    if use_bert:
        try:
            from madengine.bench.scorecard.examples import build_bert

            # note: TVM 0.27's ONNX frontend cannot import this export (a 0-d ConstantOfShape in the mask)
            return (build_bert(folder / "bert.onnx", layers=2, hidden=256, heads=4, sequence=64, dynamic=False),
                    "BERT 2 layers x 256, sequence 64")
        except SystemExit as exc:  # torch/transformers missing
            print(f"note: {exc}; using an MLP", file=sys.stderr)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from onnx_overhead import build_model as build_mlp

    path = folder / "mlp.onnx"
    build_mlp(path, hidden, batch, layers)
    return path, f"MLP {layers}x{hidden} batch {batch}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--block", type=int, default=16, help="runs per block")
    parser.add_argument("--bert", action="store_true", help="a BERT encoder (torch + transformers) instead of the MLP")
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--backends", default="onnxruntime-cpu-opt-disabled,onnxruntime-cpu-opt-all,openvino-cpu,"
                                               "tvm-relax-llvm")
    args = parser.parse_args()

    from madengine.bench.backends import get_backend
    from madengine.bench.harness import engine
    from madengine.bench.harness.inputs import generate, resolve_shapes
    from madengine.bench.runner import declared_signature

    worst = 0.0
    with tempfile.TemporaryDirectory() as folder:
        model, label = build_model(Path(folder), args.bert, args.hidden, args.batch, args.layers)
        signature = declared_signature(model)
        shapes = resolve_shapes(signature)
        feeds = generate(signature, shapes)
        print(f"model: {label}; 1 thread; {args.rounds} rounds x {args.block} runs per side, alternating")
        print(f"{'backend':30s} {'harness p50':>12s} {'bare p50':>10s} {'ratio':>7s}")
        for backend_id in args.backends.split(","):
            backend = get_backend(backend_id)
            if backend.missing():
                print(f"{backend_id:30s} not installed ({backend.missing()})")
                continue
            session = backend.prepare(model, shapes, threads=1)
            run_once = session.bind(feeds)
            bare_loop(backend_id, session, feeds, 10)  # warm-up for both sides
            harness: list[float] = []
            bare: list[float] = []
            for index in range(args.rounds):
                for side in (("harness", "bare") if index % 2 == 0 else ("bare", "harness")):
                    if side == "harness":
                        harness += engine.measure(run_once, warmup=0, iterations=args.block).latencies_ms
                    else:
                        bare += bare_loop(backend_id, session, feeds, args.block)
            p50_h, p50_b = statistics.median(harness), statistics.median(bare)
            ratio = p50_h / p50_b
            worst = max(worst, ratio)
            note = "" if p50_b >= 1.0 else "  (under 1 ms: use a larger model)"
            print(f"{backend_id:30s} {p50_h:10.4f}ms {p50_b:8.4f}ms {ratio:7.4f}{note}")
            session.close()
    print(f"worst ratio p50 harness/bare: {worst:.4f} (target <= {TARGET})")
    return 0 if worst <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
