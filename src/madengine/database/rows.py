"""perf.csv rows on their way into a database: streaming reading, content keys, catalog enrichment.

Content key: the SHA-256 of the row's non-empty cells (sorted by column name, ``relative_change``
left out because the import computes it) plus the row's occurrence number among identical rows
of the file. Re-importing a perf.csv therefore yields the same keys, and the store's UNIQUE
constraint on the key turns the re-import into a no-op, while two identical rows of one file
(two runs that printed the same figure) are both kept.

A perf.csv is never held whole (:class:`PerfCsv`): a first pass checks every line and notes which
rows have an identical twin (8 bytes a row), a second pass hands out :class:`ImportRow` batches.
"""

from __future__ import annotations

import array
import dataclasses
import datetime
import hashlib
import itertools
import operator
import os
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from madengine.core.errors import InputError
from madengine.core.jsonio import read_json_file
from madengine.results.columns import ALL_COLUMNS
from madengine.results.identity import FIELDS as IDENTITY_FIELDS
from madengine.results.identity import ResultIdentity
from madengine.results.perfcsv import csv_input_errors, csv_rows

BASELINE_WINDOW = 5  #: relative_change compares with the mean of at most this many latest runs
KEY_EXCLUDED = ("relative_change",)
IDENTITY_COLUMN = "identity_key"  #: stored beside the perf.csv columns: ResultIdentity.key() of the row
ENRICHED_COLUMNS = ("tags", "args", "n_gpus", "training_precision")  # filled from --model-json-path
BATCH_ROWS = 5000  #: rows an import holds at once
_TWIN_BITS = 1 << 24  #: the first pass's bitmap of row hashes (2 MB): a hit is a possible identical twin

GroupKey = str  # ResultIdentity.key()


@dataclasses.dataclass
class ImportRow:
    """One perf.csv row ready for a store: its content key, the known columns, the rest."""

    key: str
    cells: dict[str, str]  # every column of ALL_COLUMNS ('' when the CSV lacks it)
    extra: dict[str, str]  # columns perf.csv had beyond ALL_COLUMNS, in CSV order
    group: GroupKey = ""  #: the row's identity key (``madengine.results.identity``): its series

    def __post_init__(self) -> None:
        if not self.group:
            self.group = ResultIdentity.from_row(self.cells).key()


def now_text() -> str:
    """``created_date`` of imported rows: UTC, the original tool's ``%Y-%m-%d %H:%M:%S``."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _canonical(row: dict[str, str]) -> bytes:
    """The key's text of a row: its non-empty cells as JSON, keys sorted, no spaces, UTF-8 (orjson
    writes exactly what ``json.dumps(sort_keys=True, ensure_ascii=False, separators=(",", ":"))``
    wrote in earlier releases, several times faster: the keys of stored rows stay the same)."""
    import orjson

    return orjson.dumps({k: v for k, v in row.items() if v != "" and k not in KEY_EXCLUDED},
                        option=orjson.OPT_SORT_KEYS)


def _canonical_cells(header: Sequence[str], cells: Sequence[str]) -> bytes:
    """:func:`_canonical` of a row given as its cells (``relative_change`` already blanked)."""
    import orjson

    return orjson.dumps(dict(itertools.compress(zip(header, cells), cells)), option=orjson.OPT_SORT_KEYS)


def _key(canonical: bytes, occurrence: int) -> str:
    return hashlib.sha256(canonical + b"\n#" + str(occurrence).encode()).hexdigest()


def content_keys(rows: Sequence[dict[str, str]], seen: dict[bytes, int] | None = None) -> list[str]:
    """One content key per row (see the module docstring). ``seen`` carries the occurrence counts
    over several calls, for rows of one perf.csv that arrive one at a time (``run --db-url``)."""
    seen = {} if seen is None else seen
    keys = []
    for row in rows:
        canonical = _canonical(row)
        occurrence = seen.get(canonical, 0)
        seen[canonical] = occurrence + 1
        keys.append(_key(canonical, occurrence))
    return keys


def to_import_rows(rows: Sequence[dict[str, str]], seen: dict[bytes, int] | None = None) -> list[ImportRow]:
    out = []
    for key, row in zip(content_keys(rows, seen), rows):
        cells = {name: row.get(name, "") for name in ALL_COLUMNS}
        extra = {name: value for name, value in row.items() if name not in cells}
        out.append(ImportRow(key, cells, extra))
    return out


class PerfCsv:
    """A perf.csv read in two passes, never held whole.

    :meth:`check` reads every line: a missing, empty or malformed file, a line with more cells than
    the header or an empty ``model`` cell is an :class:`InputError` naming the file and line, before
    anything is written anywhere. It counts the rows and notes which rows may have an identical twin
    (their occurrence number needs the full key text). :meth:`batches` then reads the rows the check
    counted (rows appended since are left for the next import) as :class:`ImportRow` lists.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.header: list[str] = []
        self.rows = 0  #: rows counted by check()
        self.size = 0  #: bytes of the file when checked
        self._twins: set[int] = set()
        self._blank = -1  #: the relative_change column, blanked for keys and twins

    def _open(self) -> Any:
        return open(self.path, newline="", encoding="utf-8")

    def _read_header(self, reader: Any) -> list[str]:
        header = [name.strip() for name in next(reader, [])]
        if not any(header):
            raise InputError("empty file: no CSV header", path=str(self.path), hint="pass a perf.csv with a header line")
        if "model" not in header:
            raise InputError("not a perf.csv: the header has no 'model' column", path=str(self.path),
                             hint=f"header starts with {', '.join(header[:4])!r}")
        if len(set(header)) != len(header):
            duplicated = sorted({h for h in header if header.count(h) > 1})
            raise InputError(f"duplicate columns in the header: {', '.join(duplicated)}", path=str(self.path))
        return header

    def _twin_hash(self, cells: list[str]) -> int:
        if self._blank >= 0 and self._blank < len(cells):
            cells = cells[:self._blank] + [""] + cells[self._blank + 1:]
        if len(cells) < len(self.header):
            cells = cells + [""] * (len(self.header) - len(cells))
        return hash(tuple(cells))

    def check(self) -> int:
        """Check the whole file (see the class docstring); returns the number of rows."""
        path = self.path
        if not path.is_file():
            what = "is a directory, not a perf.csv file" if path.is_dir() else "file not found"
            raise InputError(what, path=str(path), hint="pass the perf.csv written by 'madengine run'")
        self.size = os.path.getsize(path)
        hashes = array.array("q")
        bitmap = bytearray(_TWIN_BITS // 8)
        maybe: set[int] = set()
        with csv_input_errors(path), self._open() as handle:
            reader = csv_rows(handle)
            self.header = self._read_header(reader)
            self._blank = self.header.index("relative_change") if "relative_change" in self.header else -1
            width, model = len(self.header), self.header.index("model")
            for cells in reader:
                if not cells:
                    continue
                if len(cells) > width:
                    raise InputError(f"line {reader.line_num} has {len(cells)} cells but the header has {width}",
                                     path=str(path), hint="fix or remove that line (quote cells that hold commas)")
                cells = list(map(str.strip, cells))
                if model >= len(cells) or not cells[model]:
                    raise InputError(f"line {reader.line_num}: empty 'model' cell", path=str(path),
                                     hint="fix or remove that line")
                value = self._twin_hash(cells)
                bit = value & (_TWIN_BITS - 1)
                if bitmap[bit >> 3] & (1 << (bit & 7)):
                    maybe.add(value)
                bitmap[bit >> 3] |= 1 << (bit & 7)
                hashes.append(value)
        counted: dict[int, int] = {}
        for value in hashes:
            if value in maybe:
                counted[value] = counted.get(value, 0) + 1
        self._twins = {value for value, count in counted.items() if count > 1}
        self.rows = len(hashes)
        return self.rows

    def batches(self, size: int = BATCH_ROWS) -> Iterator[list[ImportRow]]:
        """The rows :meth:`check` counted, ``size`` at a time."""
        seen: dict[bytes, int] = {}
        identities: dict[tuple[str, ...], str] = {}
        with csv_input_errors(self.path), self._open() as handle:
            reader = csv_rows(handle)
            header = [name.strip() for name in next(reader, [])]
            if header != self.header:
                raise InputError("the file changed while it was imported", path=str(self.path),
                                 hint="import it again once the run that writes it has ended")
            width = len(header)
            # cells[width] is an empty cell: where the columns perf.csv lacks are read from
            known = operator.itemgetter(*(header.index(n) if n in header else width for n in ALL_COLUMNS))
            extra_names = [name for name in header if name not in ALL_COLUMNS]
            extra = operator.itemgetter(*(header.index(n) for n in extra_names)) if extra_names else None
            fields = operator.itemgetter(*(header.index(f) if f in header else width for f in IDENTITY_FIELDS))
            batch: list[ImportRow] = []
            left = self.rows
            for cells in reader:
                if not cells:
                    continue
                if left == 0:
                    break
                left -= 1
                cells = list(map(str.strip, cells))
                cells += [""] * (width + 1 - len(cells))
                batch.append(self._row(header, cells, known, extra, extra_names, fields, identities, seen))
                if len(batch) >= size:
                    yield batch
                    batch = []
            if batch:
                yield batch

    def _row(self, header: list[str], cells: list[str], known: Any, extra: Any, extra_names: list[str], fields: Any,
             identities: dict[tuple[str, ...], str], seen: dict[bytes, int]) -> ImportRow:
        keyed = cells
        if self._blank >= 0 and cells[self._blank]:
            keyed = list(cells)
            keyed[self._blank] = ""
        canonical = _canonical_cells(header, keyed)
        occurrence = 0
        if self._twins and self._twin_hash(cells[:len(header)]) in self._twins:
            occurrence = seen.get(canonical, 0)
            seen[canonical] = occurrence + 1
        values = fields(cells)
        group = identities.get(values)
        if group is None:
            group = identities[values] = ResultIdentity(*values).key()
        found_extra = dict(zip(extra_names, extra(cells) if len(extra_names) > 1 else (extra(cells),))) \
            if extra is not None else {}
        return ImportRow(_key(canonical, occurrence), dict(zip(ALL_COLUMNS, known(cells))), found_extra, group)


def read_perf_rows(path: Path) -> list[dict[str, str]]:
    """The rows of a small perf.csv (checked as :meth:`PerfCsv.check` does), held whole."""
    source = PerfCsv(path)
    source.check()
    return [{**row.cells, **row.extra} for batch in source.batches() for row in batch]


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
        if row.cells != before:
            changed += 1
            row.group = ResultIdentity.from_row(row.cells).key()  # n_gpus is part of the identity
    return changed
