"""A torchrun job of 2 ranks launched by madengine in docker, against bare ``torchrun`` of the same
script in the same image.

Side by side in one run, alternating, on one image (the repository's torch image, docker/pyt, built
by the first madengine run from the wheels of scripts/pyt-wheels.sh):

  A. ``madengine run --tags bench_ddp --executor docker`` (a process: the image up to date, so no
     build; one container holding both ranks, torchrun started by ``$MAD_MULTI_NODE_RUNNER``)
  B. ``docker run --rm`` of the same image with the same shared memory, running
     ``torchrun --standalone --nproc_per_node=2`` of the same script with the same arguments

The job is a fixed amount of work (matrix products and an all-reduce over gloo each iteration),
sized once at the start so that B takes about ``JOB_SECONDS`` (default 30) on this machine. Prints the
medians and A / B (target ≤ 1.05).

    scripts/pyt-wheels.sh && python3 benchmarks/torchrun_docker.py     [ROUNDS=5 JOB_SECONDS=30]
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

REPO = Path(__file__).resolve().parents[1]
ROUNDS = int(os.environ.get("ROUNDS", "5"))
JOB_SECONDS = float(os.environ.get("JOB_SECONDS", "30"))
IMAGE = "ci-bench_ddp_pyt"
TARGET = 1.05
SCRIPT = '''"""A fixed amount of data-parallel work: matrix products, then an all-reduce, per iteration."""
import argparse, os, sys, time
import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--iterations", type=int, default=100)
args = parser.parse_args()
dist.init_process_group("gloo")
torch.manual_seed(dist.get_rank())
a = torch.randn(192, 192, dtype=torch.float32)
grad = torch.zeros(64 * 1024)
started = time.perf_counter()
for _ in range(args.iterations):
    for _ in range(4):
        a = torch.tanh(a @ a)
    dist.all_reduce(grad)
elapsed = time.perf_counter() - started
if dist.get_rank() == 0:
    print(f"performance: {args.iterations * dist.get_world_size() / elapsed:.3f} iterations_per_second", flush=True)
dist.barrier()
dist.destroy_process_group()
sys.stdout.flush()
os._exit(0)  # no interpreter teardown: torch's threads can abort a finished rank there (SIGABRT)
'''


def make_repo(root: Path, iterations: int) -> None:
    (root / "docker").mkdir(exist_ok=True)
    shutil.copy2(REPO / "docker" / "pyt.Dockerfile", root / "docker" / "pyt.Dockerfile")
    (root / "scripts" / "ddp").mkdir(parents=True, exist_ok=True)
    (root / "scripts" / "ddp" / "work.py").write_text(SCRIPT)
    (root / "scripts" / "ddp" / "run.sh").write_text('#!/bin/bash\nset -e\n$MAD_MULTI_NODE_RUNNER work.py "$@"\n')
    (root / "models.json").write_text(json.dumps([{
        "name": "bench_ddp", "dockerfile": "docker/pyt", "dockercontext": str(REPO / "wheels" / "pyt"),
        "scripts": "scripts/ddp", "args": f"--iterations {iterations}", "tags": ["bench"],
        "distributed": {"launcher": "torchrun", "nproc_per_node": 2}}]))


def timed(argv: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def bare(root: Path, iterations: int) -> list[str]:
    """The same job without madengine: what its docker executor gives the container, by hand."""
    return ["docker", "run", "--rm", "--ipc=private", "--shm-size=2g", "--init", "-u", f"{os.getuid()}:{os.getgid()}",
            "-v", f"{root}/scripts/ddp:/myworkspace", "-w", "/myworkspace", IMAGE,
            "torchrun", "--standalone", "--nproc_per_node=2", "work.py", "--iterations", str(iterations)]


def job_size(root: Path, probe: int = 200) -> int:
    """Iterations for about JOB_SECONDS of bare torchrun: the script's own rate (its loop alone),
    and the start-up around it (the probe's wall time less its loop)."""
    start = time.perf_counter()
    out = subprocess.run(bare(root, probe), cwd=root, check=True, capture_output=True, text=True).stdout
    wall = time.perf_counter() - start
    rate = float(out.split("performance:")[-1].split()[0]) / 2  # iterations per second (2 ranks)
    startup = max(0.0, wall - probe / rate)
    return max(probe, int((JOB_SECONDS - startup) * rate))


def main() -> int:
    if not (REPO / "wheels" / "pyt" / ".complete").is_file():
        print("run scripts/pyt-wheels.sh first (the torch image's build context)", file=sys.stderr)
        return 2
    compile_madengine()
    with tempfile.TemporaryDirectory(prefix="madengine-torchrun-bench-") as tmp:
        root = Path(tmp)
        make_repo(root, 100)
        madengine = [sys.executable, "-m", "madengine", "run", "--tags", "bench", "--executor", "docker",
                     "--no-html", "--no-trace", "-o", "p.csv"]
        timed(madengine, root)  # builds the image once (from the torch image's cached layers)
        iterations = job_size(root)
        make_repo(root, iterations)
        ours, theirs = [], []
        for _ in range(ROUNDS):
            ours.append(timed(madengine, root))
            theirs.append(timed(bare(root, iterations), root))
        rows = (root / "p.csv").read_text().splitlines()
        subprocess.run(["docker", "rmi", "-f", IMAGE], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    a, b = statistics.median(ours), statistics.median(theirs)
    print(f"job                               : 2 ranks over gloo, {iterations} iterations, "
          f"{ROUNDS} rounds (alternating)")
    print(f"madengine run --executor docker   : {a:7.3f} s median  {sorted(round(t, 2) for t in ours)}")
    print(f"docker run --rm ... torchrun      : {b:7.3f} s median  {sorted(round(t, 2) for t in theirs)}")
    print(f"difference                        : {a - b:+7.3f} s")
    print(f"ratio A / B                       : {a / b:7.3f}  (target ≤ {TARGET})")
    print(f"rows recorded                     : {len(rows) - 1}")
    print("PASS" if a / b <= TARGET else "FAIL")
    return 0 if a / b <= TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())
