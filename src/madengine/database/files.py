"""The perf.csv files a SQL results table was imported from: ``<table>_files``, one row per file.

Each row is the :class:`~.rows.FileMark` of the file's latest import (its machine and path, device
and inode, the bytes read, their row and line counts and SHA-256, the table's newest row then), so
that the next ``update-table`` of the same file reads only what was appended since
(:meth:`~.rows.PerfCsv.resume`). Written in the import's transaction, like the rows it describes.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

from madengine.database.rows import FileMark, now_text

SUFFIX = "_files"
MAX_NAME = 64  # MySQL's identifier limit: a longer name keeps no marks (every import reads the file whole)
FIELDS = tuple(field.name for field in dataclasses.fields(FileMark))
COLUMNS = ("file_hash", *FIELDS, "imported_at")
_INTEGERS = frozenset(("device", "inode", "size", "rows", "lines", "last_id"))


def name(table: str) -> str | None:
    found = table + SUFFIX
    return found if len(found) <= MAX_NAME else None


def file_hash(host: str, path: str) -> str:
    """The key of a file's row: SHA-256 of its machine and path (TEXT cannot be a MySQL key)."""
    return hashlib.sha256(f"{host}\0{path}".encode("utf-8")).hexdigest()


def _type(store: Any, column: str) -> str:
    mysql = store.dialect.name == "mysql"
    if column == "file_hash":
        return "CHAR(64) NOT NULL PRIMARY KEY" if mysql else "TEXT NOT NULL PRIMARY KEY"
    if column in _INTEGERS:
        return "BIGINT NOT NULL" if mysql else "INTEGER NOT NULL"
    return "TEXT"


def ensure(store: Any) -> None:
    """Create the table of file marks if it is missing (nothing when the name would be too long)."""
    table = name(store.table)
    if table is None:
        return
    q = store.dialect.q
    suffix = " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4" if store.dialect.name == "mysql" else ""
    body = ", ".join(f"{q(c)} {_type(store, c)}" for c in COLUMNS)
    store._execute(f"CREATE TABLE IF NOT EXISTS {q(table)} ({body}){suffix}")


def load(store: Any, host: str, path: str) -> FileMark | None:
    """The mark of the file at ``path`` on ``host``; None when it was never imported into this table."""
    table = name(store.table)
    if table is None or not store.table_exists(table):
        return None
    q = store.dialect.q
    row = store._execute(f"SELECT {', '.join(q(c) for c in FIELDS)} FROM {q(table)} WHERE file_hash = ?",
                         (file_hash(host, path),)).fetchone()
    if row is None:
        return None
    values = dict(zip(FIELDS, row))
    return FileMark(**{k: int(v) if k in _INTEGERS else str(v or "") for k, v in values.items()})


def save(store: Any, mark: FileMark) -> None:
    table = name(store.table)
    if table is not None:
        store.replace_rows(table, COLUMNS, [(file_hash(mark.host, mark.path), *dataclasses.astuple(mark), now_text())])
