"""What earlier runs say about the models of this one: how long each took (for the ETA).

Read from the end of perf.csv only, so a file of 100,000 rows costs no more than a small one.
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path
from typing import Iterable

from madengine.core.errors import MadEngineError
from madengine.core.inputfile import open_input
from madengine.results.columns import Status
from madengine.results.parsing import as_number
from madengine.results.perfcsv import read_header

TAIL_BYTES = 1 << 20


def _tail_rows(path: Path) -> list[dict[str, str]]:
    header = read_header(path)
    if not header:
        return []
    with open_input(path) as handle:
        handle.seek(0, os.SEEK_END)
        size = handle.tell()
        handle.seek(max(0, size - TAIL_BYTES))
        data = handle.read().decode("utf-8", "replace")
    lines = data.split("\n")
    if size > TAIL_BYTES:
        lines = lines[1:]  # the first line may be cut
    else:
        lines = lines[1:]  # the header
    rows = []
    for cells in csv.reader(io.StringIO("\n".join(lines))):
        if len(cells) == len(header):
            rows.append(dict(zip(header, cells)))
    return rows


def earlier_durations(perf_csv: Path, models: Iterable[str]) -> dict[str, float]:
    """Seconds (build + test) of each model's latest SUCCESS row, for the models that have one."""
    wanted = set(models)
    durations: dict[str, float] = {}
    try:
        rows = _tail_rows(Path(perf_csv))
    except (OSError, ValueError, csv.Error, MadEngineError):
        return {}
    for row in rows:
        name = row.get("model", "")
        if name in wanted and row.get("status") == Status.SUCCESS:
            seconds = sum(as_number(row.get(column, "")) or 0.0 for column in ("build_duration", "test_duration"))
            if seconds > 0:
                durations[name] = seconds
    return durations
