"""`madengine run` of one model on a cached image against the bare Docker commands it stands for.

Side by side in one run, alternating, on one cached image:
  A. `madengine run --tags bench_model` (a process; the image is up to date, so no build call)
  B. `docker build` of the same Dockerfile (cached) + `docker run --rm` of the same script
Prints the medians, A − B and A / B (target: ratio ≤ 1.0), and A against the `docker run --rm`
alone: madengine skips the build call, so that difference is its own cost over the engine's.

The Dockerfile is shaped like a model's (a dozen instructions, COPYs of files from the context):
what a cached `docker build` costs depends on it. DOCKERFILE=from-only measures the degenerate
one-line Dockerfile too (a cached build of it is nearly free, so only the Python start-up and the
engine calls are compared).
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

BASE = os.environ.get("MADENGINE_BASE_IMAGE", "madengine-base:bookworm")
ROUNDS = int(os.environ.get("ROUNDS", "7"))
IMAGE = "ci-bench_model_bench"


MODEL_LIKE = """ARG BASE_DOCKER={base}
FROM ${{BASE_DOCKER}}
LABEL org.opencontainers.image.title="madengine overhead benchmark"
ARG DEBIAN_FRONTEND=noninteractive
ENV PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
ENV MODEL_HOME=/opt/model
RUN mkdir -p /opt/model/cache /opt/model/data
WORKDIR /opt/model
COPY requirements.txt /opt/model/requirements.txt
COPY setup.cfg /opt/model/setup.cfg
RUN echo configured > /opt/model/configured && chmod -R a+rwX /opt/model
RUN python3 -c "import sys; print(sys.version)" > /opt/model/python.txt
RUN ln -s /opt/model /model
WORKDIR /
"""
DOCKERFILE = os.environ.get("DOCKERFILE", "model-like")


def make_repo(root: Path) -> None:
    (root / "docker").mkdir()
    text = MODEL_LIKE.format(base=BASE) if DOCKERFILE == "model-like" else f"ARG BASE_DOCKER={BASE}\nFROM ${{BASE_DOCKER}}\n"
    (root / "docker" / "bench.Dockerfile").write_text(text)
    (root / "docker" / "requirements.txt").write_text("numpy\n")
    (root / "docker" / "setup.cfg").write_text("[metadata]\nname = bench\n")
    (root / "scripts").mkdir()
    (root / "scripts" / "run.sh").write_text("#!/usr/bin/env bash\necho 'performance: 1 ops'\n")
    (root / "models.json").write_text(json.dumps([{"name": "bench_model", "dockerfile": "docker/bench",
                                                   "scripts": "scripts/run.sh", "tags": ["bench"]}]))


def timed(argv: list[str], cwd: Path, env: dict | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env={**os.environ, **(env or {})})
    return time.perf_counter() - start


def main() -> None:
    compile_madengine()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_repo(root)
        madengine = [sys.executable, "-m", "madengine", "run", "--tags", "bench_model", "--no-html", "-o", "p.csv",
                     "--executor", "docker"]
        build = ["docker", "build", "-q", "-t", IMAGE, "-f", "docker/bench.Dockerfile", "docker"]
        run = ["docker", "run", "--rm", "-v", f"{root}/scripts:/myworkspace", "-w", "/myworkspace", IMAGE,
               "bash", "run.sh"]
        legacy = {"DOCKER_BUILDKIT": "0"}  # the same (classic) builder madengine drives through the API
        timed(madengine, root)  # warm: builds the image once
        timed(build, root, legacy)
        ours, bare, run_only = [], [], []
        for _ in range(ROUNDS):
            ours.append(timed(madengine, root))
            build_took, run_took = timed(build, root, legacy), timed(run, root)
            bare.append(build_took + run_took)
            run_only.append(run_took)
        subprocess.run(["docker", "rmi", "-f", IMAGE], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(root, ignore_errors=True)
    a, b, c = statistics.median(ours), statistics.median(bare), statistics.median(run_only)
    print(f"Dockerfile                      : {DOCKERFILE}")
    print(f"rounds                          : {ROUNDS} (alternating)")
    print(f"madengine run (cached image)    : {a:6.3f} s median")
    print(f"docker build (cached) + run --rm: {b:6.3f} s median")
    print(f"difference                      : {a - b:+6.3f} s")
    print(f"ratio A / B                     : {a / b:6.2f}  (target ≤ 1.0)")
    print(f"docker run --rm alone           : {c:6.3f} s median  (madengine's own cost: {a - c:+.3f} s)")
    print("PASS" if a / b <= 1.0 else "FAIL")


if __name__ == "__main__":
    main()
