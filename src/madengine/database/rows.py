"""perf.csv rows on their way into a database: reading, content keys, catalog enrichment, and the
``relative_change`` against recent results.

Content key: the SHA-256 of the row's non-empty cells (sorted by column name, ``relative_change``
left out because the import computes it) plus the row's occurrence number among identical rows
of the file. Re-importing a perf.csv therefore yields the same keys, and the store's UNIQUE
constraint on the key turns the re-import into a no-op, while two identical rows of one file
(two runs that printed the same figure) are both kept.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import math
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from madengine.core.errors import InputError
from madengine.core.jsonio import read_json_file
from madengine.results.columns import ALL_COLUMNS, Status
from madengine.results.identity import ResultIdentity
from madengine.results.parsing import as_number
from madengine.results.perfcsv import read_header, read_rows
from madengine.stats.changepoint import current_segment

BASELINE_WINDOW = 5  #: relative_change compares with the mean of at most this many latest SUCCESS rows
BASELINE_HISTORY = 30  #: latest SUCCESS rows searched for a change point that starts the current baseline
KEY_EXCLUDED = ("relative_change",)
IDENTITY_COLUMN = "identity_key"  #: stored beside the perf.csv columns: ResultIdentity.key() of the row
ENRICHED_COLUMNS = ("tags", "args", "n_gpus", "training_precision")  # filled from --model-json-path

GroupKey = str  # ResultIdentity.key()


@dataclasses.dataclass
class ImportRow:
    """One perf.csv row ready for a store: its content key, the known columns, the rest."""

    key: str
    cells: dict[str, str]  # every column of ALL_COLUMNS ('' when the CSV lacks it)
    extra: dict[str, str]  # columns perf.csv had beyond ALL_COLUMNS, in CSV order

    @property
    def group(self) -> GroupKey:
        """The row's identity key (``madengine.results.identity``): what its baseline is made of."""
        return ResultIdentity.from_row(self.cells).key()


def now_text() -> str:
    """``created_date`` of imported rows: UTC, the original tool's ``%Y-%m-%d %H:%M:%S``."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def read_perf_rows(path: Path) -> list[dict[str, str]]:
    """The rows of a perf.csv; a missing, empty or malformed file is an :class:`InputError`."""
    path = Path(path)
    if not path.is_file():
        what = "is a directory, not a perf.csv file" if path.is_dir() else "file not found"
        raise InputError(what, path=str(path), hint="pass the perf.csv written by 'madengine run'")
    header = read_header(path)
    if not header:
        raise InputError("empty file: no CSV header", path=str(path), hint="pass a perf.csv with a header line")
    if "model" not in header:
        raise InputError("not a perf.csv: the header has no 'model' column", path=str(path),
                         hint=f"header starts with {', '.join(header[:4])!r}")
    if len(set(header)) != len(header):
        duplicated = sorted({h for h in header if header.count(h) > 1})
        raise InputError(f"duplicate columns in the header: {', '.join(duplicated)}", path=str(path))
    rows = read_rows(path)
    for line_no, row in enumerate(rows, start=2):
        if not row.get("model"):
            raise InputError(f"line {line_no}: empty 'model' cell", path=str(path), hint="fix or remove that line")
    return rows


def content_keys(rows: Sequence[dict[str, str]], seen: dict[str, int] | None = None) -> list[str]:
    """One content key per row (see the module docstring). ``seen`` carries the occurrence counts
    over several calls, for rows of one perf.csv that arrive one at a time (``run --db-url``)."""
    seen = {} if seen is None else seen
    keys = []
    for row in rows:
        cells = {k: v for k, v in row.items() if v != "" and k not in KEY_EXCLUDED}
        canonical = json.dumps(cells, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        occurrence = seen.get(canonical, 0)
        seen[canonical] = occurrence + 1
        keys.append(hashlib.sha256(f"{canonical}\n#{occurrence}".encode("utf-8")).hexdigest())
    return keys


def to_import_rows(rows: Sequence[dict[str, str]], seen: dict[str, int] | None = None) -> list[ImportRow]:
    out = []
    for key, row in zip(content_keys(rows, seen), rows):
        cells = {name: row.get(name, "") for name in ALL_COLUMNS}
        extra = {name: value for name, value in row.items() if name not in cells}
        out.append(ImportRow(key, cells, extra))
    return out


def load_model_entries(path: Path) -> dict[str, dict[str, Any]]:
    """``models.json`` entries by name (a JSON array of objects with a ``name``)."""
    path = Path(path)
    data = read_json_file(path)
    if not isinstance(data, list):
        raise InputError(f"must hold a JSON array of model objects, got {type(data).__name__}", path=str(path))
    entries: dict[str, dict[str, Any]] = {}
    for index, entry in enumerate(data):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"].strip():
            raise InputError(f"entry {index} is not an object with a non-empty 'name'", path=str(path))
        entries[entry["name"].strip()] = entry
    return entries


def _entry_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value).strip()


def enrich_from_models(rows: Iterable[ImportRow], entries: dict[str, dict[str, Any]]) -> int:
    """Fill empty ``tags``/``args``/``n_gpus``/``training_precision`` cells from the catalog.

    Only empty cells change: what the run recorded wins. Returns how many rows changed.
    """
    changed = 0
    for row in rows:
        entry = entries.get(row.cells["model"])
        if entry is None:
            continue
        before = dict(row.cells)
        for column in ENRICHED_COLUMNS:
            if not row.cells[column] and entry.get(column) not in (None, ""):
                row.cells[column] = _entry_cell(entry[column])
        changed += row.cells != before
    return changed


class Baselines:
    """The latest SUCCESS performances per result identity, and ``relative_change`` against them.

    The baseline is the one ``report regressions`` uses: the mean of the latest ``window`` SUCCESS
    figures of the same identity **after the last change point** found in the latest ``history``
    ones (:func:`madengine.stats.changepoint.current_segment`), so a row is never compared with a
    mix of figures from before and after a step. Seeded once per identity from the store
    (``fetch(identity_key, history)`` returns the newest first), then kept up to date in memory as
    rows are inserted: importing a perf.csv at once or in parts gives the same values.
    """

    def __init__(self, fetch: Callable[[GroupKey, int], list[float]], window: int = BASELINE_WINDOW,
                 history: int = BASELINE_HISTORY) -> None:
        self._fetch = fetch
        self.window = window
        self.history = max(history, window)
        self._recent: dict[GroupKey, list[float]] = {}

    def _values(self, group: GroupKey) -> list[float]:
        if group not in self._recent:
            self._recent[group] = list(self._fetch(group, self.history))[: self.history]
        return self._recent[group]

    def relative_change(self, row: ImportRow) -> str:
        """The JSON ``relative_change`` of ``row`` ('' when there is nothing to compare), and
        remember ``row`` as the newest result of its identity."""
        if row.cells["status"] != Status.SUCCESS:
            return ""
        value = as_number(row.cells["performance"])
        if value is None:
            return ""
        recent = self._values(row.group)
        text = ""
        baseline_values = current_segment(recent[::-1])[-self.window:] if recent else []
        if baseline_values:
            baseline = _mean(baseline_values)
            change = (value - baseline) / baseline * 100 if baseline != 0 else math.nan
            if math.isfinite(change):
                text = json.dumps({"pct_change": round(change, 4), "baseline_avg": round(baseline, 6),
                                   "sample_count": len(baseline_values)}, sort_keys=True)
        recent.insert(0, value)
        del recent[self.history:]
        return text


def _mean(values: Sequence[float]) -> float:
    scale = max(abs(v) for v in values) or 1.0
    return sum(v / scale for v in values) / len(values) * scale


def numeric_performances(values: Iterable[Any]) -> list[float]:
    """The numeric ones of stored ``performance`` cells, order kept."""
    out = []
    for value in values:
        number = as_number(value) if value is not None else None
        if number is not None:
            out.append(number)
    return out
