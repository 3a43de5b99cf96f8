"""perf.csv: append result rows atomically, never losing what is already there.

Appending takes an exclusive lock (``flock``) on perf.csv itself, reads only the header line, and
appends the new rows at the end of the file: a 100,000-row perf.csv is not rewritten to add one
row. Only when a row brings a column the header lacks is the file rewritten (header plus every
old row, padded) into a temporary file that atomically replaces the old one, still under the lock;
a writer that locked the replaced file notices and locks the new one. Concurrent writers therefore
never interleave or drop rows, and no lock file is left beside perf.csv.

A row is written whole or not at all: when the disk fills (or any write fails) part-way, the file
is cut back to where it ended before, and the error is raised for the caller to keep the row
elsewhere.
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Iterable, Iterator, Sequence, TextIO

from madengine.core.errors import InputError
from madengine.core.inputfile import check_input, open_input, require_regular
from madengine.results.columns import ALL_COLUMNS
from madengine.results.record import PerfRecord


@contextlib.contextmanager
def locked(path: Path) -> Iterator[TextIO]:
    """``path`` opened for appending (created if missing) under an exclusive inter-process lock."""
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        check_input(path, missing=None)  # a FIFO or a device is never opened (a FIFO's read never ends)
        handle = open(path, "a+", newline="", encoding="utf-8")
        try:
            require_regular(os.fstat(handle.fileno()).st_mode, str(path))  # swapped in after the check
        except InputError:
            handle.close()
            raise
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            current = os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino
        except FileNotFoundError:
            current = False
        if current:
            break
        handle.close()  # another writer replaced the file while we waited: lock the new one
    try:
        yield handle
    finally:
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
        handle.close()


def _append_whole(handle: TextIO, text: str) -> None:
    """Append ``text`` and make it durable, or leave the file exactly as it was.

    Written to the file descriptor directly: a buffered writer that failed half-way would try to
    flush the rest again while the file is being cut back.
    """
    fd = handle.fileno()
    size = os.fstat(fd).st_size
    data = text.encode("utf-8")
    try:
        while data:
            data = data[os.write(fd, data):]
        os.fsync(fd)
    except OSError:
        os.ftruncate(fd, size)  # no torn row: the next row would otherwise be glued to it
        raise


def _parse_header_line(line: str) -> list[str]:
    return [name.strip() for name in next(csv.reader([line], strict=True), [])]


@contextlib.contextmanager
def csv_input_errors(path: Path) -> Iterator[None]:
    """Turn every way a CSV file can be unreadable into one :class:`InputError` naming it."""
    try:
        yield
    except FileNotFoundError:
        raise InputError("file not found", path=str(path)) from None
    except IsADirectoryError:
        raise InputError("is a folder, not a CSV file", path=str(path)) from None
    except PermissionError:
        raise InputError("permission denied", path=str(path), hint="check the file's permissions") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"not a UTF-8 text CSV ({exc.reason})", path=str(path)) from None
    except csv.Error as exc:
        raise InputError(f"malformed CSV ({exc})", path=str(path), hint="check the quoting of that line") from None


def csv_rows(handle) -> Iterator[list[str]]:
    """The rows of a CSV opened with ``newline=""``, read strictly: a quote left open or text after
    a closing quote is an error (``csv.Error``), not a row made of the rest of the file."""
    return csv.reader(handle, strict=True)


#: the longest header line read (a perf.csv of every column is a few KiB)
HEADER_LIMIT = 1 << 20


def read_header(path: Path) -> list[str]:
    """The column names of an existing CSV (whitespace stripped); [] when missing or empty."""
    path = Path(path)
    if not check_input(path, missing=None):
        return []
    with csv_input_errors(path), open_input(path, text=True) as handle:
        first = _header_line(handle, path)
        return _parse_header_line(first) if first.strip() else []


def _header_line(handle: TextIO, path: Path) -> str:
    """The first line of a CSV, read no further than :data:`HEADER_LIMIT` characters."""
    first = handle.readline(HEADER_LIMIT)
    if len(first) >= HEADER_LIMIT and not first.endswith("\n"):
        raise InputError(f"the first line is longer than {HEADER_LIMIT >> 20} MiB: not a CSV header", path=str(path),
                         hint="name a perf.csv")
    return first


def read_rows(path: Path, *, require: Sequence[str] = (), hint: str | None = None) -> list[dict[str, str]]:
    """Every row of a CSV as dicts keyed by stripped column names (blank lines skipped).

    ``require``: columns the header must have (else :class:`InputError` with ``hint``). A row with
    more cells than the header is an error naming its line.
    """
    path = Path(path)
    with csv_input_errors(path), open_input(path, text=True) as handle:
        reader = csv_rows(handle)
        header = [name.strip() for name in next(reader, [])]
        missing = [name for name in require if name not in header]
        if missing:
            raise InputError(f"missing column(s) {', '.join(missing)}", path=str(path), hint=hint)
        rows = []
        for cells in reader:
            if not cells:
                continue
            if len(cells) > len(header):
                raise InputError(f"line {reader.line_num} has {len(cells)} cells but the header has {len(header)}",
                                 path=str(path), hint="fix or remove that line (quote cells that hold commas)")
            rows.append({name: (cells[i].strip() if i < len(cells) else "") for i, name in enumerate(header)})
        return rows


def _csv_line(cells: Sequence[str]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow(cells)
    return buffer.getvalue()


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        if handle.tell() == 0:
            return True
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) == b"\n"


def _rewrite_with_header(path: Path, header: list[str], rows: list[dict[str, str]]) -> None:
    """Replace ``path`` by a copy with ``header``, every existing row (padded) and ``rows``.

    The copy is locked before it takes the file's place, so a writer waiting for the old file
    finds the new one locked until the new rows are in.
    """
    old = read_rows(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(header)
        for row in old + rows:
            writer.writerow([row.get(name, "") for name in header])
        handle.flush()
        os.fsync(handle.fileno())
        os.replace(tmp, path)


def append_rows(path: Path, rows: Iterable[dict[str, str]]) -> Path:
    """Append plain rows (column → cell) to ``path``, creating it with the standard header."""
    path = Path(path)
    rows = list(rows)
    with csv_input_errors(path), locked(path) as handle:  # a folder or a non-UTF-8 file: one-line error
        handle.seek(0)
        first = _header_line(handle, path)
        header = _parse_header_line(first) if first.strip() else []
        text = ""
        if not header:
            header = list(ALL_COLUMNS)
            for row in rows:
                header.extend(k for k in row if k not in header)
            text = _csv_line(header)
        else:
            new_columns = []
            for row in rows:
                new_columns.extend(k for k, v in row.items() if v != "" and k not in header and k not in new_columns)
            if new_columns:
                _rewrite_with_header(path, header + new_columns, rows)
                return path
        text += "".join(_csv_line([row.get(name, "") for name in header]) for row in rows)
        if text and first.strip() and not _ends_with_newline(path):
            text = "\n" + text
        if text:
            _append_whole(handle, text)
    return path


def append_records(path: Path, records: Iterable[PerfRecord]) -> Path:
    """Append result records to perf.csv at ``path`` (see module docstring for guarantees)."""
    return append_rows(path, (record.to_row() for record in records))


def check_writable(perf_csv: Path, runs_dir: Path) -> None:
    """Before anything runs: perf.csv and the runs folder can take results (else exit 2)."""
    perf_csv, runs_dir = Path(perf_csv), Path(runs_dir)
    check_input(perf_csv, missing=None)
    for folder, what in ((perf_csv.parent, str(perf_csv)), (runs_dir, str(runs_dir))):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".madengine-probe-") as probe:
                probe.write(b"x" * 4096)  # a full disk refuses data, not always an empty file
                probe.flush()
                os.fsync(probe.fileno())
        except OSError as exc:
            raise InputError(f"cannot write results here ({exc.strerror or exc})", path=what,
                             hint="free space, fix permissions, or choose another -o/--output and --runs-dir") from None
    if perf_csv.exists() and not os.access(perf_csv, os.W_OK):
        raise InputError("perf.csv is not writable", path=str(perf_csv), hint="fix its permissions or choose -o")


#: the file of a run's rows that perf.csv could not take, in the run folder
UNRECORDED_FILE = Path("unrecorded") / "rows.json"


def keep_unrecorded(run_dir: Path, record: PerfRecord) -> Path | None:
    """Keep a row perf.csv could not take: added to the run's ``unrecorded/rows.json`` (a JSON list,
    which ``report update-perf --single-result`` adds to perf.csv in one go), else to the same file
    in the temporary folder (the run folder may be on the disk that failed). None when neither
    takes it. The file is replaced whole, so it never holds half a row."""
    run_dir = Path(run_dir)
    for folder in (run_dir, Path(tempfile.gettempdir()) / f"madengine-{run_dir.name}"):
        path = folder / UNRECORDED_FILE
        try:
            rows = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else []
            rows.append(record.to_row())
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
            os.replace(tmp, path)
            return path
        except (OSError, ValueError):
            continue
    return None
