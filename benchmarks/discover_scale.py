"""`madengine discover --tags <tag-on-all> --json` on a 10,000-model catalog, as a process.

The catalog: a root models.json plus 100 scripts/<dir>/models.json files (10,000 models in all).
Target: ≤ 0.2 s wall on the 2-core development machine. Printed next to a bare `python -c pass`,
for the usual case (the catalog unchanged since the last command, its validated files cached)
and with the cache off (MADENGINE_CATALOG_CACHE=0: every file validated again).

The madengine package is byte-compiled first (compileall), as installing a wheel does: from a
checkout with PYTHONDONTWRITEBYTECODE=1 every command would otherwise compile each module again.
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

ROOT_MODELS = 100
DIRS = 100
PER_DIR = 99


def model(name: str, prefix: str = "") -> dict:
    return {"name": name, "dockerfile": f"{prefix}docker/base", "scripts": f"{prefix}scripts/run.sh",
            "args": "--batch-size 8", "n_gpus": "1", "tags": ["everything", f"g{hash(name) % 10}"],
            "owner": "bench", "training_precision": "fp16", "timeout": 600}


def make_catalog(root: Path) -> int:
    (root / "models.json").write_text(json.dumps([model(f"root_{i}") for i in range(ROOT_MODELS)]))
    for d in range(DIRS):
        folder = root / "scripts" / f"dir{d:03d}"
        folder.mkdir(parents=True)
        (folder / "models.json").write_text(json.dumps([model(f"m{i}", "../../") for i in range(PER_DIR)]))
    return ROOT_MODELS + DIRS * PER_DIR


def wall(argv: list[str], cwd: Path, repeats: int = 7, **env: str) -> tuple[float, str]:
    times, out = [], ""
    for _ in range(repeats):
        start = time.perf_counter()
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=True,
                              env={**os.environ, "MODEL_DIR": str(cwd), **env})
        times.append(time.perf_counter() - start)
        out = done.stdout
    return statistics.median(times), out


def main() -> None:
    compile_madengine()
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory() as cache:
        root = Path(tmp)
        count = make_catalog(root)
        discover = [sys.executable, "-m", "madengine", "discover", "--tags", "everything", "--json"]
        bare, _ = wall([sys.executable, "-c", "pass"], root)
        cold, _ = wall(discover, root, MADENGINE_CATALOG_CACHE="0")
        wall(discover, root, repeats=1, MADENGINE_CACHE_DIR=cache)  # the first command fills the cache
        took, out = wall(discover, root, MADENGINE_CACHE_DIR=cache)
        selected = len(json.loads(out))
    print(f"catalog models         : {count} (root + {DIRS} sub-folders)")
    print(f"selected               : {selected}")
    print(f"python -c pass         : {bare * 1000:7.1f} ms")
    print(f"discover, cache off    : {cold * 1000:7.1f} ms  (every file validated)")
    print(f"discover --json        : {took * 1000:7.1f} ms  (target ≤ 200 ms; catalog unchanged, cached)")
    print("PASS" if took <= 0.2 and selected == count else "FAIL")


if __name__ == "__main__":
    main()
