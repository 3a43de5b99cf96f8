"""``madengine bench SCRIPT.py``'s ORT timing against a bare ``session.run`` loop on the exported model.

A PyTorch MLP (built here, random weights, seeded) goes through the same build as a script's model
(``madengine.benchmark_model(..., build_only=True)``: torch.onnx.export, ORT extended
optimisation, build cache). Then, side by side in alternating blocks (A B B A ...), each block on a
fresh single-threaded session of the built file:

  A. the harness: ``madengine.bench.backends.measure_backend(OnnxRuntimeBackend("cpu"), ...)``,
     exactly what the ``onnxruntime-cpu`` row of ``madengine bench SCRIPT.py`` runs;
  B. a bare loop: ``onnxruntime.InferenceSession`` (ORT_ENABLE_ALL, 1 intra-op thread), then
     ``t0 = perf_counter_ns(); session.run(None, feeds); t1 = ...`` per run.

Prints each side's p50 and the ratio A/B (target <= 1.02; exit 1 above it). The model takes more
than 1 ms per inference on one core (raise --hidden/--layers on a fast machine).

    python3 benchmarks/script_harness_overhead.py [--rounds 20] [--block 50] [--hidden 768] [--layers 8]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

TARGET = 1.02


def bare_block(path: str, feeds: dict, count: int) -> list[float]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads, options.inter_op_num_threads = 1, 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    for _ in range(10):
        session.run(None, feeds)
    clock, samples = time.perf_counter_ns, []
    for _ in range(count):
        started = clock()
        session.run(None, feeds)
        samples.append((clock() - started) / 1e6)
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--block", type=int, default=50, help="timed runs per block")
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()

    import numpy
    import torch

    import madengine
    from madengine.bench.backends import measure_backend
    from madengine.bench.backends.onnxruntime import OnnxRuntimeBackend

    torch.manual_seed(0)
    layers = []
    for _ in range(args.layers):
        layers += [torch.nn.Linear(args.hidden, args.hidden), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers)
    example = torch.rand(args.batch, args.hidden)
    with tempfile.TemporaryDirectory() as folder:
        built = madengine.benchmark_model(model, example, name="mlp", build_only=True, cache_dir=folder)
        path = str(built.build.onnx_path)
        with numpy.load(Path(built.build.folder) / "inputs.npz") as saved:
            feeds = {name: saved[name] for name in saved.files}
        shapes = {name: value.shape for name, value in feeds.items()}
        harness_ms: list[float] = []
        bare_ms: list[float] = []
        for index in range(args.rounds):
            for side in (("harness", "bare") if index % 2 == 0 else ("bare", "harness")):
                if side == "harness":
                    run = measure_backend(OnnxRuntimeBackend("cpu"), path, feeds, shapes, threads=1, warmup=10,
                                          iterations=args.block, batch_size=args.batch)
                    harness_ms += run.latencies_ms
                else:
                    bare_ms += bare_block(path, feeds, args.block)
    p50_h, p50_b = statistics.median(harness_ms), statistics.median(bare_ms)
    ratio = p50_h / p50_b
    print(f"model: PyTorch MLP {args.layers}x{args.hidden} batch {args.batch} exported by madengine's build, "
          f"1 thread; {args.rounds} rounds x {args.block} runs per side, alternating")
    print(f"harness (measure_backend, onnxruntime-cpu) p50 {p50_h:.4f} ms  (n={len(harness_ms)})")
    print(f"bare session.run loop                     p50 {p50_b:.4f} ms  (n={len(bare_ms)})")
    print(f"ratio p50 harness/bare: {ratio:.4f} (target <= {TARGET})")
    if p50_b < 1.0:
        print("note: the model ran under 1 ms here; raise --hidden or --layers")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
