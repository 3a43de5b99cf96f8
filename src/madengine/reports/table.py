"""Fast, read-only loading of a perf.csv for reports.

Reports read every row of files that can hold 100,000 rows, so rows stay lists of cells (no
per-row dicts) and only the columns a report uses are looked at. Header whitespace is stripped
(the v1 header was written as ``model, n_gpus, ...``).
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import gc
import sys
from pathlib import Path
from typing import Iterator

from madengine.core.errors import InputError
from madengine.core.inputfile import open_input
from madengine.results.perfcsv import csv_input_errors

# perf.csv cells can hold whole JSON contexts and command lines; the csv default (128 KiB) is too small
csv.field_size_limit(min(sys.maxsize, 2**31 - 1))


@contextlib.contextmanager
def bulk() -> Iterator[None]:
    """Pause the cyclic garbage collector while a large table is loaded and aggregated.

    A 100,000-row table is millions of live objects; every collection the new rows and
    accumulators trigger would walk them all again (5x slower aggregation). Nothing here builds
    reference cycles, so reference counting frees everything as usual.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@dataclasses.dataclass
class PerfTable:
    """The rows of one CSV: ``header`` (stripped names) and ``rows`` padded to the header width."""

    path: Path
    header: list[str]
    rows: list[list[str]]

    def index(self, name: str) -> int | None:
        try:
            return self.header.index(name)
        except ValueError:
            return None

    def column(self, name: str) -> list[str]:
        """Every cell of column ``name`` (stripped), or empty strings when the column is absent."""
        i = self.index(name)
        if i is None:
            return [""] * len(self.rows)
        return [row[i].strip() for row in self.rows]

    def dicts(self) -> Iterator[dict[str, str]]:
        header = self.header
        for row in self.rows:
            yield dict(zip(header, row))


def load_table(path: Path, *, require: tuple[str, ...] = ("model",)) -> PerfTable:
    """Read a perf.csv-like file; :class:`InputError` when it is missing or malformed."""
    path = Path(path)
    with csv_input_errors(path), open_input(path, text=True) as handle:
        return _read(path, csv.reader(handle, strict=True), require)


def _read(path: Path, reader, require: tuple[str, ...]) -> PerfTable:
    header = [name.strip() for name in next(reader, [])]
    if not any(header):
        raise InputError("empty CSV: no header line", path=str(path), hint="expected a perf.csv header")
    missing = [name for name in require if name not in header]
    if missing:
        raise InputError(f"no column {', '.join(missing)} in the header", path=str(path),
                         hint="expected a perf.csv written by madengine")
    width = len(header)
    rows = list(reader)  # one C-level pass; rows of the wrong width are rare and handled after
    if rows and (min(map(len, rows)) != width or max(map(len, rows)) != width):
        rows = _fit_to_header(path, rows, width)
    return PerfTable(path, header, rows)


def _fit_to_header(path: Path, rows: list[list[str]], width: int) -> list[list[str]]:
    """Drop blank lines, pad short rows, and reject rows with more cells than the header."""
    fitted = []
    for number, cells in enumerate(rows, start=2):
        count = len(cells)
        if count == width:
            fitted.append(cells)
        elif count == 0:
            continue
        elif count < width:
            fitted.append(cells + [""] * (width - count))
        else:
            raise InputError(f"data row {number - 1} has {count} cells but the header has {width}",
                             path=str(path), hint="fix or remove that line")
    return fitted
