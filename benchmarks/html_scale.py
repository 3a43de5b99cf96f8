"""perf.html at scale: build the page of a 100,000-row perf.csv; print its time and size.

Side by side, in the same run: the original tool's output (a bare ``<table>`` of every row and
column, made here with the standard library, as pandas ``DataFrame.to_html`` would) for its size
and build time, and ours. Targets: page ≤ 5 MB, built ≤ 3 s.

    python3 benchmarks/html_scale.py [--rows 100000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import csv
import html
import json
import random
import sys
import tempfile
import time
from pathlib import Path

from madengine.reports.html import csv_to_html
from madengine.results.columns import ALL_COLUMNS

SIZE_LIMIT = 5 * 1024 * 1024
TIME_LIMIT = 3.0


def write_perf_csv(path: Path, rows: int, models: int = 60, seed: int = 7) -> None:
    """A realistic perf.csv: ``models`` models re-run in many runs, ~8 % failures, a few skips."""
    rng = random.Random(seed)
    names = [f"pyt_{family}_{size}" for family in ("bert", "llama", "resnet", "vit", "gpt", "t5")
             for size in ("tiny", "small", "base", "large", "xl", "2b", "7b", "13b", "70b", "moe")][:models]
    base = {name: rng.uniform(50, 20000) for name in names}
    header = list(ALL_COLUMNS)
    runs = max(rows // len(names), 1)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(header)
        written = 0
        for run in range(runs + 1):
            started = f"2024-{1 + run // 600 % 12:02d}-{1 + run // 20 % 28:02d}T{run % 20:02d}:{run % 60:02d}:00+00:00"
            for name in names:
                if written == rows:
                    return
                roll = rng.random()
                status = "SUCCESS" if roll > 0.09 else ("FAILURE" if roll > 0.01 else "SKIPPED")
                perf = base[name] * (1 + run / runs * 0.2) * rng.uniform(0.95, 1.05) if status == "SUCCESS" else None
                metric = "ms" if name.endswith("moe") else "samples_per_second"
                values = {
                    "model": name, "n_gpus": "8", "training_precision": "fp16", "args": "--batch-size 64",
                    "tags": "pyt,perf", "docker_file": f"docker/{name}.ubuntu.amd.Dockerfile",
                    "base_docker": "rocm/pytorch:latest", "docker_image": f"ci-{name}_{name}.ubuntu.amd",
                    "docker_sha": "sha256:" + "ab" * 32, "git_commit": "%040x" % rng.getrandbits(160),
                    "machine_name": f"node{run % 7:02d}", "gpu_architecture": "gfx942",
                    "performance": "" if perf is None else f"{perf:.4f}", "metric": metric, "status": status,
                    "build_duration": f"{rng.uniform(1, 300):.3f}", "test_duration": f"{rng.uniform(5, 900):.3f}",
                    "build_number": str(run), "reason": "" if status != "FAILURE" else "model script exited with code 1",
                    "run_id": f"20240101-{run:06d}", "executor": "docker", "started_at": started,
                    "gpu_vendor": "AMD", "context": json.dumps({"gpu_vendor": "AMD", "guest_os": "UBUNTU"}),
                    "madengine_version": "2.0.0", "command_line": f"madengine run --tags {name}",
                    "artifacts": f"madengine_runs/{run}/{name}/run.log",
                }
                writer.writerow([values.get(column, "") for column in header])
                written += 1


def original_style_table(csv_path: Path, output: Path) -> None:
    """What the original ``report to-html`` writes: one bare table row per CSV row, every column."""
    with open(csv_path, newline="", encoding="utf-8") as source, open(output, "w", encoding="utf-8") as out:
        reader = csv.reader(source)
        header = next(reader)
        out.write('<table border="1" class="dataframe">\n  <thead>\n    <tr style="text-align: right;">\n')
        out.write("".join(f"      <th>{html.escape(h)}</th>\n" for h in header))
        out.write("    </tr>\n  </thead>\n  <tbody>\n")
        for row in reader:
            out.write("    <tr>\n" + "".join(f"      <td>{html.escape(c)}</td>\n" for c in row) + "    </tr>\n")
        out.write("  </tbody>\n</table>")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--keep", type=Path, default=None, help="write the files here instead of a temporary folder")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        perf_csv = folder / "perf.csv"
        write_perf_csv(perf_csv, args.rows)
        print(f"perf.csv: {args.rows:,} rows, {perf_csv.stat().st_size / 1e6:.1f} MB")

        start = time.perf_counter()
        original_style_table(perf_csv, folder / "perf_bare.html")
        bare_seconds = time.perf_counter() - start
        bare_size = (folder / "perf_bare.html").stat().st_size

        start = time.perf_counter()
        page = csv_to_html(perf_csv)
        seconds = time.perf_counter() - start
        size = page.stat().st_size

        print(f"bare table of every row (original's output, stdlib): {bare_seconds:6.2f} s  {bare_size / 1e6:7.2f} MB")
        print(f"madengine perf.html:                                  {seconds:6.2f} s  {size / 1e6:7.2f} MB")
        print(f"size ratio bare/ours: {bare_size / size:.1f}x")
        ok = size <= SIZE_LIMIT and seconds <= TIME_LIMIT
        print(f"targets: size <= {SIZE_LIMIT / 1e6:.2f} MB, time <= {TIME_LIMIT:.1f} s: {'met' if ok else 'MISSED'}")
        if args.keep:
            print(f"files kept in {folder}")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
