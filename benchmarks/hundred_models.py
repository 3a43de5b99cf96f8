"""100 models sharing one image, run one after another, against 100 bare `docker run --rm`.

Side by side in one run, alternating, ROUNDS times, on one cached image:
  A. `madengine run --tags hundred` (one process; 100 models whose Dockerfile, context and build
     args are the same, so the image is built once, ever, and each model costs one container)
  B. 100 × `docker run --rm` of the same script in the same image
Prints the medians and A / B. Target: A ≤ 1.1 × B.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bytecode import compile_madengine

BASE = os.environ.get("MADENGINE_BASE_IMAGE", "madengine-base:bookworm")
ROUNDS = int(os.environ.get("ROUNDS", "3"))
MODELS = int(os.environ.get("MODELS", "100"))
TARGET = 1.1


def make_repo(root: Path) -> None:
    (root / "docker").mkdir()
    (root / "docker" / "hundred.Dockerfile").write_text(f"ARG BASE_DOCKER={BASE}\nFROM ${{BASE_DOCKER}}\n"
                                                        "LABEL madengine.benchmark=hundred_models\n")
    (root / "scripts").mkdir()
    (root / "scripts" / "run.sh").write_text("#!/usr/bin/env bash\necho 'performance: 1 ops'\n")
    models = [{"name": f"hundred_{i:03d}", "dockerfile": "docker/hundred", "scripts": "scripts/run.sh",
               "tags": ["hundred"]} for i in range(MODELS)]
    (root / "models.json").write_text(json.dumps(models))


def timed(argv: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    compile_madengine()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_repo(root)
        madengine = [sys.executable, "-m", "madengine", "run", "--tags", "hundred", "--no-html", "-o", "p.csv",
                     "--executor", "docker"]
        image = "ci-hundred_000_hundred"
        bare = ["docker", "run", "--rm", "-v", f"{root}/scripts:/myworkspace", "-w", "/myworkspace", image,
                "bash", "run.sh"]
        timed(madengine, root)  # warm: the one build
        ours, theirs = [], []
        for _ in range(ROUNDS):
            ours.append(timed(madengine, root))
            start = time.perf_counter()
            for _ in range(MODELS):
                timed(bare, root)
            theirs.append(time.perf_counter() - start)
        names = [f"ci-hundred_{i:03d}_hundred" for i in range(MODELS)]
        subprocess.run(["docker", "rmi", "-f", *names], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    a, b = statistics.median(ours), statistics.median(theirs)
    print(f"rounds                              : {ROUNDS} (alternating), {MODELS} models each")
    print(f"madengine run (one process)         : {a:7.2f} s median  ({a / MODELS * 1000:.0f} ms per model)")
    print(f"{MODELS} x docker run --rm              : {b:7.2f} s median  ({b / MODELS * 1000:.0f} ms per model)")
    print(f"ratio A / B                         : {a / b:7.2f}  (target ≤ {TARGET})")
    print("PASS" if a / b <= TARGET else "FAIL")


if __name__ == "__main__":
    main()
