"""perf.csv: append result rows atomically, never losing what is already there.

Appending takes an exclusive lock on a sidecar ``<perf.csv>.lock`` file, reads only the header
line, and appends the new rows at the end of the file: a 100,000-row perf.csv is not rewritten to
add one row. Only when a row brings a column the header lacks is the file rewritten (header plus
every old row, padded) into a temporary file that atomically replaces the old one, still under
the lock. Concurrent writers therefore never interleave or drop rows.
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import io
import os
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from madengine.core.errors import InputError
from madengine.results.columns import ALL_COLUMNS
from madengine.results.record import PerfRecord


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive inter-process lock for ``path`` (a sidecar file, so renames are safe)."""
    lock_path = path.with_name(path.name + ".lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


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


def read_header(path: Path) -> list[str]:
    """The column names of an existing CSV (whitespace stripped); [] when missing or empty."""
    path = Path(path)
    if not path.exists():
        return []
    with csv_input_errors(path), open(path, newline="", encoding="utf-8") as handle:
        first = handle.readline()
        return _parse_header_line(first) if first.strip() else []


def read_rows(path: Path, *, require: Sequence[str] = (), hint: str | None = None) -> list[dict[str, str]]:
    """Every row of a CSV as dicts keyed by stripped column names (blank lines skipped).

    ``require``: columns the header must have (else :class:`InputError` with ``hint``). A row with
    more cells than the header is an error naming its line.
    """
    path = Path(path)
    with csv_input_errors(path), open(path, newline="", encoding="utf-8") as handle:
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


def _rewrite_with_header(path: Path, header: list[str]) -> None:
    """Rewrite ``path`` with ``header``, keeping every existing row (padded), atomically."""
    old = read_rows(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(header)
        for row in old:
            writer.writerow([row.get(name, "") for name in header])
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def append_rows(path: Path, rows: Iterable[dict[str, str]]) -> Path:
    """Append plain rows (column → cell) to ``path``, creating it with the standard header."""
    path = Path(path)
    rows = list(rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    with locked(path):
        header = read_header(path)
        if not header:
            header = list(ALL_COLUMNS)
            for row in rows:
                header.extend(k for k in row if k not in header)
            with open(path, "w", newline="", encoding="utf-8") as handle:
                handle.write(_csv_line(header))
        else:
            new_columns = []
            for row in rows:
                new_columns.extend(k for k, v in row.items() if v != "" and k not in header and k not in new_columns)
            if new_columns:
                header = header + new_columns
                _rewrite_with_header(path, header)
        if not rows:
            return path
        text = "".join(_csv_line([row.get(name, "") for name in header]) for row in rows)
        if not _ends_with_newline(path):
            text = "\n" + text
        with open(path, "a", newline="", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
    return path


def append_records(path: Path, records: Iterable[PerfRecord]) -> Path:
    """Append result records to perf.csv at ``path`` (see module docstring for guarantees)."""
    return append_rows(path, (record.to_row() for record in records))


def ensure_perf_csv(path: Path) -> Path:
    """Create ``path`` with the standard header when it does not exist yet."""
    return append_rows(path, [])
