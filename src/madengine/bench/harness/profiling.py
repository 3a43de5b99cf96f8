"""ORT per-node profiling turned into a per-operator table.

ONNX Runtime's profiler (``SessionOptions.enable_profiling``) writes a Chrome-trace JSON list of
events. A ``cat: "Session", name: "model_run"`` event spans each ``session.run``; a
``cat: "Node"`` event named ``<node>_kernel_time`` is one node's kernel, with ``args.op_name``
and ``args.provider``. Node events inside the first ``skip_runs`` model runs (the warm-up) are
left out, so the table describes steady state. Times in the trace are microseconds.
"""

from __future__ import annotations

import bisect
import csv
import json
from pathlib import Path
from typing import Any, Sequence

from .errors import HarnessError

KERNEL_SUFFIX = "_kernel_time"
COLUMNS = ("op_type", "node", "provider", "calls", "total_ms", "mean_ms", "share")


def load_events(path: Path) -> list[dict[str, Any]]:
    try:
        with open(path, encoding="utf-8") as handle:
            events = json.load(handle)
    except (OSError, ValueError) as exc:
        raise HarnessError(f"cannot read the ORT profile {path}: {exc}") from None
    if isinstance(events, dict):  # some ORT builds wrap the list as {"traceEvents": [...]}
        events = events.get("traceEvents", [])
    if not isinstance(events, list):
        raise HarnessError(f"the ORT profile {path} is not a list of events")
    return [e for e in events if isinstance(e, dict)]


def operator_table(events: Sequence[dict[str, Any]], skip_runs: int = 0) -> dict[str, Any]:
    """Per-node rows (sorted by total time, largest first), per-op-type rows, and the run count."""
    runs = sorted((int(e.get("ts", 0)), int(e.get("dur", 0))) for e in events
                  if e.get("cat") == "Session" and e.get("name") == "model_run")
    starts = [start for start, _ in runs]
    nodes: dict[str, dict[str, Any]] = {}
    for event in events:
        name = str(event.get("name", ""))
        if event.get("cat") != "Node" or not name.endswith(KERNEL_SUFFIX):
            continue
        run_index = bisect.bisect_right(starts, int(event.get("ts", 0))) - 1
        if run_index < skip_runs:
            continue
        args = event.get("args") or {}
        node = name[: -len(KERNEL_SUFFIX)]
        row = nodes.setdefault(node, {"op_type": str(args.get("op_name", "")), "node": node,
                                      "provider": str(args.get("provider", "")), "calls": 0, "total_us": 0})
        row["calls"] += 1
        row["total_us"] += int(event.get("dur", 0))
    grand_total = sum(row["total_us"] for row in nodes.values())
    node_rows = [_finish(row, grand_total) for row in sorted(nodes.values(), key=lambda r: (-r["total_us"], r["node"]))]
    type_rows = [_finish(row, grand_total) for row in sorted(_by_op_type(nodes.values()),
                                                             key=lambda r: (-r["total_us"], r["op_type"]))]
    return {"runs": max(len(runs) - skip_runs, 0), "total_ms": grand_total / 1000.0, "nodes": node_rows,
            "op_types": type_rows}


def _by_op_type(node_rows: Any) -> list[dict[str, Any]]:
    """Node rows summed per op type; ``node`` says how many nodes, ``provider`` lists every provider."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in node_rows:
        groups.setdefault(row["op_type"], []).append(row)
    out = []
    for op_type, rows in groups.items():
        count = len(rows)
        out.append({"op_type": op_type, "node": f"({count} node{'s' if count != 1 else ''})",
                    "provider": ",".join(sorted({r["provider"] for r in rows if r["provider"]})),
                    "calls": sum(r["calls"] for r in rows), "total_us": sum(r["total_us"] for r in rows)})
    return out


def _finish(row: dict[str, Any], grand_total: int) -> dict[str, Any]:
    total_us = row["total_us"]
    return {"op_type": row["op_type"], "node": row["node"], "provider": row["provider"], "calls": row["calls"],
            "total_ms": total_us / 1000.0, "mean_ms": total_us / 1000.0 / row["calls"] if row["calls"] else 0.0,
            "share": total_us / grand_total if grand_total else 0.0}


def save(table: dict[str, Any], folder: Path) -> list[Path]:
    """Write ``profile_ops.csv`` (per node), ``profile_op_types.csv`` and ``profile_ops.json``."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, rows in (("profile_ops.csv", table["nodes"]), ("profile_op_types.csv", table["op_types"])):
        path = folder / name
        with open(path, "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=COLUMNS, lineterminator="\n")
            writer.writeheader()
            for row in rows:
                writer.writerow({k: row[k] for k in COLUMNS})
        written.append(path)
    path = folder / "profile_ops.json"
    path.write_text(json.dumps(table, indent=1), encoding="utf-8")
    written.append(path)
    return written
