"""Appending one result to a 100,000-row perf.csv through ``madengine report update-perf``.

Measures, side by side in one run: the core function the CLI calls (in-process), the whole CLI
in-process (``madengine.cli.main``), and ``python -m madengine`` as a process (interpreter start
included); and, for scale, what rewriting the whole file costs (what the original tool did for
every append: read perf.csv, concat, write it all back). Then proves that appending did not
rewrite the file: same inode, the old bytes unchanged (SHA-256 of the old length), and the file
grew by exactly the appended rows. Target: in-process append ≤ 50 ms (median).

    python3 benchmarks/update_perf_append.py [--rows 100000] [--repeat 15]
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from madengine.cli import main as cli_main
from madengine.cli.env import Environment
from madengine.reports.update_perf import update_perf
from madengine.results.columns import ALL_COLUMNS

TARGET_MS = 50.0


def write_perf_csv(path: Path, rows: int) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(ALL_COLUMNS)
        for n in range(rows):
            values = {"model": f"model_{n % 50}", "n_gpus": "8", "performance": f"{1000 + n % 97:.3f}",
                      "metric": "samples_per_second", "status": "SUCCESS", "tags": "pyt,perf",
                      "run_id": f"run-{n // 50:06d}", "started_at": "2024-01-01T00:00:00+00:00",
                      "context": json.dumps({"gpu_vendor": "AMD"}), "test_duration": "12.500"}
            writer.writerow([values.get(column, "") for column in ALL_COLUMNS])


def fingerprint(path: Path, length: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        remaining = length
        while remaining:
            chunk = handle.read(min(remaining, 1 << 20))
            if not chunk:
                break
            digest.update(chunk)
            remaining -= len(chunk)
    return digest.hexdigest()


def timed(action, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        times.append((time.perf_counter() - start) * 1000)
    return times


def rewrite_whole_file(path: Path, result: dict) -> None:
    """The original tool's way (pandas read_csv + concat + to_csv), with the stdlib csv module."""
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    rows.append([str(result.get(name.strip(), "")) for name in rows[0]])
    tmp = path.with_suffix(".rewrite.tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle, lineterminator="\n").writerows(rows)
    os.replace(tmp, path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        perf_csv = folder / "perf.csv"
        write_perf_csv(perf_csv, args.rows)
        result = {"model": "appended", "performance": 1234.5, "metric": "samples_per_second",
                  "tags": ["bench", "append"], "n_gpus": "8"}
        result_json = folder / "result.json"
        result_json.write_text(json.dumps(result))

        before_size, before_inode = perf_csv.stat().st_size, perf_csv.stat().st_ino
        before_hash = fingerprint(perf_csv, before_size)
        print(f"perf.csv: {args.rows:,} rows, {before_size / 1e6:.1f} MB")

        core = timed(lambda: update_perf(perf_csv, single_result=result_json), args.repeat)
        quiet = Environment(stdout=io.StringIO(), stderr=io.StringIO())
        argv = ["report", "update-perf", "--perf-csv", str(perf_csv), "--single_result", str(result_json)]
        in_process = timed(lambda: cli_main(argv, quiet), args.repeat)
        process = timed(lambda: subprocess.run([sys.executable, "-m", "madengine", *argv], check=True,
                                               capture_output=True), max(3, args.repeat // 5))
        appended = args.repeat * 2 + max(3, args.repeat // 5)

        after = perf_csv.stat()
        same_inode = after.st_ino == before_inode
        prefix_kept = fingerprint(perf_csv, before_size) == before_hash
        with open(perf_csv, "rb") as handle:
            handle.seek(before_size)
            tail = handle.read().decode("utf-8").splitlines()
        grew_by_rows = len(tail) == appended and all(line.startswith("appended,") for line in tail)

        scratch = folder / "rewrite.csv"
        scratch.write_bytes(perf_csv.read_bytes())
        rewrite = timed(lambda: rewrite_whole_file(scratch, result), 3)

        def line(label: str, times: list[float]) -> str:
            return f"{label:<44} median {statistics.median(times):8.1f} ms   min {min(times):8.1f} ms  (n={len(times)})"

        print(line("update_perf() core function, in-process", core))
        print(line("madengine report update-perf, in-process", in_process))
        print(line("python -m madengine report update-perf", process))
        print(line("rewrite the whole file (original's way)", rewrite))
        print(f"rewrite / in-process append: {statistics.median(rewrite) / statistics.median(core):.0f}x")
        print(f"not rewritten: same inode {same_inode}; first {before_size:,} bytes unchanged {prefix_kept}; "
              f"grew by exactly the {appended} appended rows {grew_by_rows}")
        ok = statistics.median(core) <= TARGET_MS and same_inode and prefix_kept and grew_by_rows
        print(f"target: in-process append <= {TARGET_MS:.0f} ms and file not rewritten: {'met' if ok else 'MISSED'}")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
