"""Helpers shared by the tests of `madengine database` (no tests here)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Iterable

from madengine.results import PerfRecord, append_records


def write_perf_csv(path: Path, rows: Iterable[dict]) -> Path:
    """A perf.csv written by the real writer (madengine.results.perfcsv), one record per dict."""
    records = []
    for spec in rows:
        spec = dict(spec)
        extra = spec.pop("extra", {})
        spec.setdefault("status", "SUCCESS")
        spec.setdefault("gpu_architecture", "gfx942")
        spec.setdefault("base_docker", "rocm/pytorch:latest")
        spec.setdefault("machine_name", "node1")
        spec.setdefault("metric", "samples/s")
        record = PerfRecord(**spec)
        record.extra = extra
        records.append(record)
    return append_records(path, records)


def history(model: str, values: Iterable[float], run_prefix: str = "run", **common) -> list[dict]:
    """One SUCCESS row per value, each from its own run id (run1, run2, ...)."""
    return [dict(model=model, performance=float(v), run_id=f"{run_prefix}{i}", **common) for i, v in enumerate(values, 1)]


def relative(row: dict) -> dict:
    return json.loads(row["relative_change"]) if row["relative_change"] else {}


def one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("madengine: error: "), stderr
    assert "Traceback" not in stderr
    return lines[0]


def clean_database_env(monkeypatch, folder: Path) -> Path:
    """``folder`` as the current directory, with none of the variables that choose a database."""
    monkeypatch.chdir(folder)
    for name in ("MADENGINE_DB_URL", "TUNA_DB_HOSTNAME", "MONGO_HOST"):
        monkeypatch.delenv(name, raising=False)
    return folder


def every_table(path: Path, leave_out: Iterable[str] = ()) -> dict[str, list[tuple]]:
    """Every table of a SQLite results database but ``leave_out``, rows in order, the moments of the
    import left out."""
    connection = sqlite3.connect(path)
    try:
        tables = [r[0] for r in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
                  if r[0] not in leave_out]
        out = {}
        for table in tables:
            names = [r[1] for r in connection.execute(f'PRAGMA table_info("{table}")')
                     if r[1] not in ("created_date", "detected_at", "updated_at", "imported_at")]
            out[table] = connection.execute(f'SELECT {", ".join(names)} FROM "{table}" ORDER BY 1').fetchall()
        return out
    finally:
        connection.close()
