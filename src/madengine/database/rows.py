"""perf.csv rows on their way into a database: streaming reading, content keys, catalog enrichment.

Content key: the SHA-256 of the row's non-empty cells (sorted by column name, ``relative_change``
left out because the import computes it) plus the row's occurrence number among identical rows
of the file. Re-importing a perf.csv therefore yields the same keys, and the store's UNIQUE
constraint on the key turns the re-import into a no-op, while two identical rows of one file
(two runs that printed the same figure) are both kept.

A perf.csv is never held whole (:class:`PerfCsv`): one pass checks each line as it hands out
:class:`ImportRow` batches, and counts identical rows as they come (an 8-byte tag a row).

A perf.csv only grows between imports (runs append to it): an import remembers what it read of the
file (:class:`FileMark`: its identity, the bytes read and their SHA-256, stored beside the results
table), and the next import of the same file reads only what was appended since
(:meth:`PerfCsv.resume`). A file rewritten, truncated or edited in place is read whole again.

Two steps of the reading run in C where the package was built with a C compiler
(``_fastrows.c``: a plain line split into its cells, and a row's key text); the Python code below
gives the same results, and does the whole reading where the C part is missing.
"""

from __future__ import annotations

import array
import contextlib
import csv
import dataclasses
import datetime
import fcntl
import hashlib
import io
import itertools
import operator
import os
import socket
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence, TextIO

from madengine.core.errors import InputError
from madengine.core.inputfile import open_input
from madengine.core.jsonio import read_json_file
from madengine.results.columns import ALL_COLUMNS
from madengine.results.figures import FIGURES_COLUMN, figure_rows
from madengine.results.identity import FIELDS as IDENTITY_FIELDS
from madengine.results.identity import ResultIdentity
from madengine.results.perfcsv import csv_input_errors, csv_rows

try:
    from madengine.database._fastrows import key_text as _c_key_text
    from madengine.database._fastrows import split_line as _c_split_line
except ImportError:  # installed without a C compiler: the same cells and keys, made in Python (slower)
    _c_key_text = _c_split_line = None

_HINT = "pass the perf.csv written by 'madengine run'"

BASELINE_WINDOW = 5  #: relative_change compares with the mean of at most this many latest runs
KEY_EXCLUDED = ("relative_change",)
IDENTITY_COLUMN = "identity_key"  #: stored beside the perf.csv columns: ResultIdentity.key() of the row
ENRICHED_COLUMNS = ("tags", "args", "n_gpus", "training_precision")  # filled from --model-json-path
BATCH_ROWS = 5000  #: rows an import holds at once
_READ_CHUNK = 1 << 20  #: bytes read at once for the SHA-256 of what an earlier import read
_TEXT_CHUNK = 1 << 16  #: bytes a perf.csv is decoded and read at once

GroupKey = str  # ResultIdentity.key()


COLUMN_AT = {name: k for k, name in enumerate(ALL_COLUMNS)}  #: where each known column is in ``ImportRow.values``


@dataclasses.dataclass(slots=True)
class ImportRow:
    """One perf.csv row ready for a store: its content key, the known columns, the rest.

    The known columns are a list in ``ALL_COLUMNS`` order (what a SQL insert binds, made without a
    dict per row: a million-row import never builds one); :attr:`cells` gives them by name."""

    key: str
    values: list[str]  #: every column of ALL_COLUMNS, in that order ('' when the CSV lacks it)
    extra: dict[str, str]  #: columns perf.csv had beyond ALL_COLUMNS, in CSV order
    group: GroupKey  #: the row's identity key (``madengine.results.identity``): its series

    @classmethod
    def of(cls, key: str, values: list[str], extra: dict[str, str]) -> "ImportRow":
        """The row with the identity its cells give (a perf.csv's rows get theirs from a cache)."""
        row = cls(key, values, extra, "")
        row.group = ResultIdentity.from_row(row.cells).key()
        return row

    @property
    def cells(self) -> dict[str, str]:
        """The known columns by name (a new dict: :meth:`set` changes a cell)."""
        return dict(zip(ALL_COLUMNS, self.values))

    def get(self, name: str) -> str:
        return self.values[COLUMN_AT[name]]

    def set(self, name: str, value: str) -> None:
        self.values[COLUMN_AT[name]] = value


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


def _key_text(names: Sequence[str], cells: Sequence[str]) -> bytes:
    """:func:`_canonical` of a row given as its cells in the order of their sorted column ``names``
    (a dict made in sorted order serializes as OPT_SORT_KEYS would sort it). ``_fastrows.key_text``
    writes the same bytes from the names' JSON texts."""
    import orjson

    return orjson.dumps(dict(itertools.compress(zip(names, cells), cells)))


def _split_line(line: str, limit: int) -> list[str] | None:
    """Where ``_fastrows.split_line`` is missing: every line is left to the csv module."""
    return None


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
        extra = {name: value for name, value in row.items() if name not in COLUMN_AT}
        out += with_figure_rows(ImportRow.of(key, [row.get(name, "") for name in ALL_COLUMNS], extra))
    return out


def with_figure_rows(row: ImportRow) -> list[ImportRow]:
    """The row, then one row per figure its ``figures`` cell names (:mod:`madengine.results.figures`):
    each figure is stored as a row of its own metric, so the database's series, alerts, summaries and
    the dashboard take it like any other result. The stored row's ``figures`` is emptied (its figures
    are those rows now, never counted twice); a figure's row is keyed by its row's key and the
    figure's name, so a re-import stores it once."""
    names = row.extra.get(FIGURES_COLUMN)
    if not names:
        return [row]
    cells = {**row.cells, **row.extra}
    figures = [ImportRow.of(hashlib.sha256(f"{row.key}#figure:{figure['metric']}".encode()).hexdigest(),
                         [figure.get(name, "") for name in ALL_COLUMNS],
                         {name: value for name, value in figure.items() if name not in COLUMN_AT})
               for figure in figure_rows(cells, names)]
    row.extra[FIGURES_COLUMN] = ""
    return [row, *figures]


def _picker(indexes: Sequence[int]) -> Callable[[Sequence[str]], tuple[str, ...]]:
    """The cells at ``indexes`` of a row, as a tuple (also for one index or none)."""
    if len(indexes) == 1:
        only = indexes[0]
        return lambda cells: (cells[only],)
    return operator.itemgetter(*indexes) if indexes else (lambda cells: ())


def _json_name(name: str) -> bytes:
    import orjson

    return orjson.dumps(name) + b":"


class _Layout:
    """Where the cells of a perf.csv's rows go, made once from its header. Every picker reads a row
    padded with one empty cell past the header (``cells[width]``): a column the header lacks, and
    ``relative_change`` where the content key leaves it out, read that cell."""

    def __init__(self, header: Sequence[str]) -> None:
        width = len(header)
        at = {name: k for k, name in enumerate(header)}
        blank = at.get("relative_change", -1)
        by_name = sorted(range(width), key=header.__getitem__)
        self.keyed_names = [header[k] for k in by_name]  #: the header, sorted: the content key's order
        #: the sorted names as ``_fastrows.key_text`` takes them: each one's JSON text and a colon
        self.key_prefixes = tuple(map(_json_name, self.keyed_names))
        #: the cells of the content key, in ``keyed_names`` order (a row's twin-hash too)
        self.keyed = _picker([width if k == blank else k for k in by_name])
        self.fields = _picker([at.get(name, width) for name in IDENTITY_FIELDS])
        self.extra_names = [name for name in header if name not in COLUMN_AT]
        self.extra = _picker([at[name] for name in self.extra_names])
        self.figures = FIGURES_COLUMN in self.extra_names  #: rows may name figures (``with_figure_rows``)
        #: the header is ALL_COLUMNS or its start (a perf.csv of this release or an earlier one): a
        #: row's own list becomes its known cells, no cell picked one by one
        self.in_order = list(header) == list(ALL_COLUMNS[:width])
        self._tail = [""] * (len(ALL_COLUMNS) - width)
        self._known = _picker([at.get(name, width) for name in ALL_COLUMNS])

    def known(self, cells: list[str]) -> list[str]:
        """The cells of ALL_COLUMNS in order (``ImportRow.values``); ``cells`` may be that list itself,
        after every other picker read it."""
        if not self.in_order:
            return list(self._known(cells))
        cells[len(cells) - 1:] = self._tail  # the empty cell past the header, or the columns it lacks
        return cells


@dataclasses.dataclass(frozen=True)
class FileMark:
    """What an import read of a perf.csv: where the next import of the same file goes on
    (:meth:`PerfCsv.resume`). Stored beside the results table (:mod:`madengine.database.files`)."""

    host: str  #: the machine the file is on (a shared database serves many machines' perf.csv)
    path: str  #: its resolved path
    device: int
    inode: int  #: with ``device``, the file itself: a file rewritten into place is another one
    size: int  #: bytes read: the header and every row up to here
    rows: int  #: the rows in those bytes
    lines: int  #: the lines in those bytes (a later row's line number counts on from here)
    checksum: str  #: SHA-256 of those bytes
    last_id: int  #: the table's newest row id (MongoDB: seq) when that import ended
    last_key: str  #: that row's content key: the table still holds the rows the import left there


def file_place(path: Path) -> tuple[str, str]:
    """(host, resolved path): under which a perf.csv's :class:`FileMark` is kept."""
    return socket.gethostname(), str(Path(path).resolve())


class _Span(io.RawIOBase):
    """Bytes ``[start, end)`` of a file opened unbuffered: what one import reads of a perf.csv (rows
    appended after ``end`` are left for the next import), each chunk fed to ``digest`` if given."""

    def __init__(self, raw: Any, start: int, end: int, digest: Any = None) -> None:
        super().__init__()
        raw.seek(start)
        self._raw, self._left, self._digest = raw, end - start, digest
        self.read = 0  #: bytes read so far

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer)[:max(self._left, 0)]
        got = self._raw.readinto(view) if len(view) else 0
        self._left -= got
        self.read += got
        if self._digest is not None and got:
            self._digest.update(view[:got])
        return got


def _feed(digest: Any, raw: Any, size: int) -> bytes:
    """``digest`` fed the first ``size`` bytes of ``raw``; returns the last of them (b'' for none)."""
    buffer = bytearray(_READ_CHUNK)
    view, left, last = memoryview(buffer), size, b""
    while left > 0:
        got = raw.readinto(view[:min(left, _READ_CHUNK)])
        if not got:
            break  # the file shrank meanwhile: the digest differs
        digest.update(view[:got])
        last = bytes(view[got - 1:got])
        left -= got
    return last


def _is_header_line(cells: Sequence[str], model: int, names: frozenset[str]) -> bool:
    """A line that names columns rather than holding a row: two perf.csv files joined, or columns
    changed mid-file (the cell under ``model`` is a column name, and most of its cells are)."""
    if model >= len(cells) or cells[model].strip() not in names:
        return False
    named = [cell.strip() for cell in cells if cell.strip()]
    return sum(cell in names for cell in named) * 2 > len(named)


class _Occurrences:
    """How many rows with the same content came before each row of a file, counted as the rows come:
    an open-addressing table of each row's tag (the first 8 bytes of the SHA-256 of its key text,
    odd: 0 marks a free slot; 8 bytes a row, never a dict of every row), and the counts of the few
    tags met more than once. A reader may take a tag's free home slot itself (``table``, ``mask``,
    ``room``: a row with no twin takes no call) and calls :meth:`count` for the others."""

    def __init__(self, expected: int) -> None:
        size = 1 << max(10, (2 * expected).bit_length())
        self.table = array.array("Q", bytes(8 * size))
        self.mask = size - 1
        self.room = size // 2  #: tags to take before the table grows (it stays at most half full)
        self._repeats: dict[int, int] = {}

    def count(self, tag: int) -> int:
        """The rows with ``tag`` (odd) before this one (this one counted for the next)."""
        table, mask = self.table, self.mask
        slot = tag & mask
        while True:
            found = table[slot]
            if not found:
                break
            if found == tag:
                seen = self._repeats.get(tag, 1)
                self._repeats[tag] = seen + 1
                return seen
            slot = (slot + 1) & mask
        table[slot] = tag
        self.room -= 1
        if self.room <= 0:
            self._grow()
        return 0

    def _grow(self) -> None:
        old = self.table
        size = 2 * len(old)
        self.table, self.mask = array.array("Q", bytes(8 * size)), size - 1
        self.room += size // 2 - len(old) // 2
        table, mask = self.table, self.mask
        for tag in filter(None, old):
            slot = tag & mask
            while table[slot]:
                slot = (slot + 1) & mask
            table[slot] = tag


class PerfCsv:
    """A perf.csv streamed, never held whole.

    :meth:`open` notes the file's identity and size (rows appended after that are left for the next
    import) and checks its header. :meth:`batches` then hands out the rows as :class:`ImportRow`
    lists, each line checked as it is read: a line with more cells than the header, an empty
    ``model`` cell or a second header line is an :class:`InputError` naming the file and line (the
    import's transaction is rolled back). :meth:`check` reads every line the same way without keying
    the rows: a small file is checked whole before a database is opened at all.

    A row's occurrence number among identical rows is counted as the rows come (:class:`_Occurrences`);
    two rows count as identical when the first 8 bytes of the SHA-256 of their key texts are equal
    (a chance of 1 in 10^7 that two different rows of a million-row file do).

    After :meth:`resume`, only the bytes appended since an earlier import are read.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.header: list[str] = []
        self.size = 0  #: bytes of the file when opened: what is read ends here
        self.start = 0  #: where the rows to read start (0: the whole file, header first)
        self.rows_before = 0  #: rows before ``start`` (read by an earlier import)
        self.lines_before = 0  #: lines before ``start``
        self.rows = 0  #: rows read after ``start`` so far
        self.lines = 0  #: lines read up to where the reading got
        self.checksum = ""  #: SHA-256 of the bytes up to ``size``, once the rows were all read
        self.share = 0.0  #: the share of the bytes after ``start`` read so far
        self._file_id: tuple[int, int] = (0, 0)  #: (device, inode) when opened
        self._digest: Any = None  #: SHA-256 of the bytes before ``start`` (resume)
        self._span: _Span | None = None
        self._layout = _Layout([])

    @property
    def unread_bytes(self) -> int:
        """Bytes to read (after ``start``), once opened."""
        return self.size - self.start

    def open(self) -> "PerfCsv":
        """Note the file's identity and size, check its header (idempotent)."""
        if self._file_id != (0, 0):
            return self
        path = self.path
        with csv_input_errors(path):
            with open_input(path, hint=_HINT) as handle:
                with contextlib.suppress(OSError):  # a file system without locks: the size as it is
                    # madengine's writers append whole rows under an exclusive lock: the size ends with a row
                    fcntl.flock(handle.fileno(), fcntl.LOCK_SH)
                stat = os.fstat(handle.fileno())
            self._file_id, self.size = (stat.st_dev, stat.st_ino), stat.st_size
            with open_input(path, text=True, hint=_HINT) as handle:
                self.header = self._read_header(csv_rows(handle))
        self._layout = _Layout(self.header)
        return self

    @contextlib.contextmanager
    def _read_span(self, digest: Any = None) -> Iterator[TextIO]:
        """The text from ``start`` to ``size`` (``digest`` fed its bytes); the file must still be the
        one opened."""
        with open(self.path, "rb", buffering=0) as raw:
            if (os.fstat(raw.fileno()).st_dev, os.fstat(raw.fileno()).st_ino) != self._file_id:
                raise InputError("the file changed while it was imported", path=str(self.path),
                                 hint="import it again once the run that writes it has ended")
            self._span = _Span(raw, self.start, self.size, digest)
            with io.TextIOWrapper(io.BufferedReader(self._span, _TEXT_CHUNK), encoding="utf-8", newline="") as text:
                # the text layer asks for 8 KB at a time by default, and a buffered reader with nothing
                # buffered reads straight into it: 120,000 reads (each a call of _Span) a gigabyte
                text._CHUNK_SIZE = _TEXT_CHUNK
                yield text

    def resume(self, mark: FileMark) -> str:
        """Read only what was appended after what ``mark`` says an earlier import read, when the file
        only grew since: returns ''. Otherwise the file is read whole, and the returned line says why."""
        try:
            stat = os.stat(self.path)
        except OSError:
            return ""  # open() names the problem
        if (stat.st_dev, stat.st_ino) != (mark.device, mark.inode):
            return "it is another file than the one imported before (rewritten or replaced)"
        if stat.st_size < mark.size:
            return f"it is shorter than the {mark.size:,} bytes imported before (truncated or rewritten)"
        digest = hashlib.sha256()
        with open(self.path, "rb", buffering=0) as raw:
            last = _feed(digest, raw, mark.size)
            following = raw.read(1)
        if digest.hexdigest() != mark.checksum:
            return f"its first {mark.size:,} bytes changed since they were imported (edited in place)"
        if last not in (b"\n", b"") and following not in (b"\n", b"\r", b""):
            return "the line it ended with when imported before was continued since"
        self.start, self.rows_before, self.lines_before, self._digest = mark.size, mark.rows, mark.lines, digest
        return ""

    def mark(self, last_id: int, last_key: str) -> FileMark:
        """What this import read of the file, for the next import of it (after :meth:`batches`)."""
        host, path = file_place(self.path)
        return FileMark(host, path, *self._file_id, self.size, self.rows_before + self.rows, self.lines,
                        self.checksum, last_id, last_key)

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

    def check(self) -> int:
        """Check every line after ``start`` (see the class docstring); returns the number of rows."""
        self.open()
        return sum(1 for _ in self._cells())

    def _cells(self, digest: Any = None) -> Iterator[list[str]]:
        """The cells of each row after ``start``, stripped and padded to the header and one more
        (``_Layout``), each line checked; ``rows``, ``lines`` and ``share`` follow the reading. A plain
        line is split in C (``_fastrows.split_line``); the csv module reads the others (a quoted cell
        may go on over several lines) strictly (``csv_rows``), and every line where C is missing."""
        width, model = len(self.header), self.header.index("model")
        names = frozenset((*ALL_COLUMNS, *self.header))
        pad = [""] * (width + 1)
        split, limit, strip = _c_split_line or _split_line, csv.field_size_limit(), str.strip
        self.rows, self.lines = 0, self.lines_before
        with csv_input_errors(self.path), self._read_span(digest) as handle:
            if not self.start:
                reader = csv_rows(handle)
                if [name.strip() for name in next(reader, [])] != self.header:
                    raise InputError("the file changed while it was imported", path=str(self.path),
                                     hint="import it again once the run that writes it has ended")
                self.lines += reader.line_num
            lines = iter(handle)
            for line in lines:
                cells = split(line, limit)
                if cells is None:
                    reader = csv_rows(itertools.chain((line,), lines))
                    cells = list(map(strip, next(reader, [])))
                    self.lines += reader.line_num
                else:
                    self.lines += 1
                if not cells:
                    continue
                if model < len(cells) and cells[model] in names and _is_header_line(cells, model, names):
                    raise self._line_error(" is a second header line: the columns changed mid-file",
                                           "split the file at that line and import each part")
                if len(cells) > width:
                    raise self._line_error(f" has {len(cells)} cells but the header has {width}",
                                           "fix or remove that line (quote cells that hold commas)")
                if model >= len(cells) or not cells[model]:
                    raise self._line_error(": empty 'model' cell", "fix or remove that line")
                cells += pad[len(cells):]
                self.rows += 1
                yield cells
        self.share = 1.0

    def _line_error(self, what: str, hint: str) -> InputError:
        return InputError(f"line {self.lines}{what}", path=str(self.path), hint=hint)

    def batches(self, size: int = BATCH_ROWS) -> Iterator[list[ImportRow]]:
        """The rows after ``start``, ``size`` at a time (see the class docstring); ``checksum`` once
        they are all read."""
        self.open()
        layout, sha256, from_bytes = self._layout, hashlib.sha256, int.from_bytes
        keyed, fields_of, known = layout.keyed, layout.fields, layout.known
        key_text, names = (_c_key_text, layout.key_prefixes) if _c_key_text is not None else \
            (_key_text, layout.keyed_names)
        occurrences = _Occurrences(self.unread_bytes // 1000)
        table, mask = occurrences.table, occurrences.mask
        extra_names, extra = layout.extra_names, layout.extra
        identities: dict[tuple[str, ...], str] = {}
        digest = self._digest or sha256()
        batch: list[ImportRow] = []
        for cells in self._cells(digest):
            text = sha256(key_text(names, keyed(cells)))  # _canonical of the row
            tag = from_bytes(text.digest()[:8], "little") | 1
            slot = tag & mask
            if table[slot] or occurrences.room <= 1:  # taken (by a twin?), or the table grows
                text.update(b"\n#%d" % occurrences.count(tag))
                table, mask = occurrences.table, occurrences.mask
            else:  # the first row of its content: a free home slot, most rows
                table[slot] = tag
                occurrences.room -= 1
                text.update(b"\n#0")
            fields = fields_of(cells)
            group = identities.get(fields)
            if group is None:
                group = identities[fields] = ResultIdentity(*fields).key()
            others = dict(zip(extra_names, extra(cells))) if extra_names else {}
            row = ImportRow(text.hexdigest(), known(cells), others, group)
            if layout.figures:
                batch += with_figure_rows(row)
            else:
                batch.append(row)
            if len(batch) >= size:
                self.share = self._share()
                yield batch
                batch = []
        self.checksum = digest.hexdigest()
        if batch:
            yield batch

    def _share(self) -> float:
        return min(self._span.read / self.unread_bytes, 1.0) if self._span is not None and self.unread_bytes else 0.0


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
        entry = entries.get(row.get("model"))
        if entry is None:
            continue
        filled = False
        for column in ENRICHED_COLUMNS:
            if not row.get(column) and entry.get(column) not in (None, ""):
                row.set(column, _entry_cell(entry[column]))
                filled = filled or row.get(column) != ""
        if filled:
            changed += 1
            row.group = ResultIdentity.from_row(row.cells).key()  # n_gpus is part of the identity
    return changed
