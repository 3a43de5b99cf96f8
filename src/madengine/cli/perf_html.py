"""perf.html beside a perf.csv, after every command that appends rows (run, bench)."""

from __future__ import annotations

from pathlib import Path

from madengine.cli.env import Environment


def write_html(env: Environment, perf_csv: Path) -> None:
    try:
        from madengine.reports.html import csv_to_html

        page = csv_to_html(perf_csv)
        env.message(f"madengine: report written to {page}")
    except Exception as exc:  # a report problem never hides or changes the run's own result
        env.message(f"madengine: warning: perf.html not written: {type(exc).__name__}: {exc}")
