"""A NumPy model: time dense float32 matrix multiplication and report GFLOP/s."""

import argparse
import time

import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("--size", type=int, default=384)
parser.add_argument("--repeats", type=int, default=10)
parser.add_argument("--batch-size", type=int, default=1)
args = parser.parse_args()

rng = np.random.default_rng(0)
a = rng.standard_normal((args.batch_size, args.size, args.size), dtype=np.float32)
b = rng.standard_normal((args.size, args.size), dtype=np.float32)
a @ b  # warm-up
times = []
for _ in range(args.repeats):
    start = time.perf_counter()
    a @ b
    times.append(time.perf_counter() - start)
best = sorted(times)[len(times) // 2]
flops = 2.0 * args.batch_size * args.size ** 3
print(f"matmul {args.batch_size}x{args.size}^3 median {best * 1e3:.3f} ms")
print(f"performance: {flops / best / 1e9:.3f} GFLOPS")
