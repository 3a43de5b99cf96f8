"""Speed-up of `madengine run --parallel 2` over a sequential run on this host.

Eight CPU models, each one core of busy work for about a second (calibrated in the interpreter the
models run in), run side by side in one
process of this script, alternating, ROUNDS times:
  A. `madengine run --tags busy --parallel 2`
  B. `madengine run --tags busy` (sequential)
Prints the medians and A / B. Target on a 2-core machine: wall ratio <= 0.55 (the ideal is 0.5
plus madengine's own start-up, which both pay once). EXECUTOR=docker runs the models in
containers instead of host processes (each model then also pays its container's start).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bytecode import compile_madengine

ROUNDS = int(os.environ.get("ROUNDS", "3"))
MODELS = int(os.environ.get("MODELS", "8"))
WORK_SECONDS = float(os.environ.get("WORK_SECONDS", "1.0"))
EXECUTOR = os.environ.get("EXECUTOR", "local")
BASE = os.environ.get("MADENGINE_BASE_IMAGE", "madengine-base:bookworm")
TARGET = 0.55

#: a fixed amount of single-threaded work (iterations calibrated once), so both modes do the same
BUSY = r'''
import sys
n = int(sys.argv[1])
x = 0
for i in range(n):
    x += i * i
print(f"performance: {n / 1e6:.1f} Miterations")
'''


#: BUSY's loop alone, timed by itself (an interpreter's start-up is not the model's work)
LOOP_TIME = r"""
import sys, time
n = int(sys.argv[1])
start = time.perf_counter()
x = 0
for i in range(n):
    x += i * i
print(time.perf_counter() - start)
"""


def calibrate(seconds: float) -> int:
    """Iterations of BUSY's loop that take ``seconds`` of one core where the models run: the
    host's interpreter for local, the base image's for docker (the two builds of CPython differ
    in speed, here by ~1.7×)."""
    python = ["docker", "run", "--rm", BASE, "python3"] if EXECUTOR == "docker" else [sys.executable]
    n = 200_000
    while True:
        took = float(subprocess.run([*python, "-c", LOOP_TIME, str(n)], check=True, capture_output=True,
                                    text=True).stdout)
        if took > 0.3:
            return int(n * seconds / took)
        n *= 4


def make_repo(root: Path, iterations: int) -> None:
    (root / "scripts").mkdir()
    (root / "docker").mkdir()
    (root / "scripts" / "busy.py").write_text(BUSY)
    (root / "docker" / "busy.Dockerfile").write_text(f"ARG BASE_DOCKER={BASE}\nFROM ${{BASE_DOCKER}}\n"
                                                     "LABEL madengine.benchmark=parallel_speedup\n")
    models = [{"name": f"busy_{i}", "dockerfile": "docker/busy", "scripts": "scripts/busy.py",
               "args": str(iterations), "n_gpus": "0", "n_cpus": 1, "tags": ["busy"]} for i in range(MODELS)]
    (root / "models.json").write_text(json.dumps(models))


def timed(argv: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    result = subprocess.run(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"madengine failed ({result.returncode}):\n{result.stderr[-2000:]}")
    return elapsed


def main() -> None:
    compile_madengine()
    iterations = calibrate(WORK_SECONDS)
    root = Path(tempfile.mkdtemp(prefix="madengine-parallel-"))
    try:
        make_repo(root, iterations)
        run = [sys.executable, "-m", "madengine", "run", "--tags", "busy", "--no-html", "--executor", EXECUTOR]
        if EXECUTOR == "docker":
            timed(run + ["-o", "warm.csv"], root)  # build the images once, outside the measurement
        parallel, sequential = [], []
        for i in range(ROUNDS):
            parallel.append(timed(run + ["--parallel", "2", "-o", f"par{i}.csv"], root))
            sequential.append(timed(run + ["-o", f"seq{i}.csv"], root))
    finally:
        if EXECUTOR == "docker":
            images = [f"ci-busy_{i}_busy" for i in range(MODELS)]
            subprocess.run(["docker", "rmi", "-f", *images], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(root, ignore_errors=True)
    a, b = statistics.median(parallel), statistics.median(sequential)
    ratio = a / b
    print(f"{MODELS} one-core models of ~{WORK_SECONDS:.1f} s, {EXECUTOR} executor, {os.cpu_count()} CPUs, "
          f"{ROUNDS} rounds")
    print(f"A --parallel 2: median {a:.2f} s  ({', '.join(f'{t:.2f}' for t in parallel)})")
    print(f"B sequential:   median {b:.2f} s  ({', '.join(f'{t:.2f}' for t in sequential)})")
    print(f"wall ratio A/B: {ratio:.3f}  (target <= {TARGET}) {'OK' if ratio <= TARGET else 'MISSED'}")


if __name__ == "__main__":
    main()
