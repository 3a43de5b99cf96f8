"""Aggregating 64 nodes' logs into one perf.csv row (``madengine.results.aggregate``).

Each node's log is a training log of ``--lines`` lines (step lines, interim figures, the final
``performance:`` line near its end, then shutdown lines), written once to a temporary folder. Timed
side by side in one run, median of ``--repeat``:

* madengine: :func:`aggregate_logs` (each log read from its end) and the row's cells (``to_row``);
* for scale, reading each whole log and parsing it with :func:`parse_performance` (what a run does
  with one node's output), then the same aggregation and row.

Target: madengine ≤ 50 ms for 64 nodes.

    python3 benchmarks/aggregate_nodes.py [--nodes 64] [--lines 20000] [--repeat 15]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from madengine.results import PerfRecord
from madengine.results.aggregate import JobShape, NodeFigure, aggregate, aggregate_logs
from madengine.results.parsing import parse_performance

TARGET_MS = 50.0


def write_logs(folder: Path, nodes: int, lines: int) -> dict[int, Path]:
    logs = {}
    for node in range(nodes):
        body = []
        for step in range(lines):
            body.append(f"[rank{node * 8}]: step {step} loss {2.5 - step / lines:.4f} lr 1.0e-04 "
                        f"grad_norm 0.87 elapsed_ms 412.{step % 97:02d}")
            if step and step % 1000 == 0:
                body.append(f"[rank{node * 8}]: performance: {900 + step % 13}.5 samples_per_second")
        body.append(f"[rank{node * 8}]: performance: {1000 + node}.25 samples_per_second")
        body += ["[rank0]: saving checkpoint skipped", "[rank0]: destroy_process_group", "done"]
        logs[node] = folder / f"node-{node}.log"
        logs[node].write_text("\n".join(body) + "\n", encoding="utf-8")
    return logs


def one_row(logs: dict[int, Path], shape: JobShape) -> dict[str, str]:
    job = aggregate_logs(logs, shape)
    return PerfRecord(model="pyt_big", status="SUCCESS", performance=job.value, metric=job.metric,
                      **job.columns()).to_row()


def whole_text_row(logs: dict[int, Path], shape: JobShape) -> dict[str, str]:
    figures = [NodeFigure.of(node, parse_performance(path.read_text(encoding="utf-8")))
               for node, path in logs.items()]
    job = aggregate(figures, shape)
    return PerfRecord(model="pyt_big", status="SUCCESS", performance=job.value, metric=job.metric,
                      **job.columns()).to_row()


def timed(action, repeat: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = action()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--lines", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    shape = JobShape("torchrun", args.nodes, 8)
    with tempfile.TemporaryDirectory(prefix="madengine-aggregate-") as folder:
        logs = write_logs(Path(folder), args.nodes, args.lines)
        size = sum(path.stat().st_size for path in logs.values())
        madengine_ms, row = timed(lambda: one_row(logs, shape), args.repeat)
        whole_ms, whole = timed(lambda: whole_text_row(logs, shape), max(3, args.repeat // 3))
    assert row == whole, "reading from the end must find what parsing the whole text finds"
    expected = sum(1000.25 + node for node in range(args.nodes))
    assert float(row["performance"]) == expected and row["node_n"] == str(args.nodes), row
    print(f"{args.nodes} nodes' logs, {size / 1e6:.1f} MB ({args.lines} lines each) → one row "
          f"(performance {row['performance']} {row['metric']}, node_cv {float(row['node_cv']):.4f})")
    print(f"  madengine (logs read from their end): {madengine_ms:8.2f} ms   target ≤ {TARGET_MS:.0f} ms")
    print(f"  whole logs parsed, for scale:         {whole_ms:8.2f} ms   ratio {madengine_ms / whole_ms:.3f}")
    ok = madengine_ms <= TARGET_MS
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
