"""SQL result stores: an embedded SQLite file (no server) or a MySQL/MariaDB server (pymysql).

One schema for both: ``id`` (insertion order), ``row_key`` (the content key, UNIQUE: re-imports
are no-ops), ``created_date``, one TEXT column per perf.csv column of
``madengine.results.columns`` (``PERF_COLUMNS + EXTRA_COLUMNS``), and ``extra_columns`` (a JSON
object of any other column perf.csv had). Values are bound as query parameters, never formatted
into SQL; the only names formatted into SQL are the fixed column names and a table name checked
against ``[A-Za-z_][A-Za-z0-9_]*``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import operator
import sqlite3
import sys
from typing import Any, Iterator, Sequence

from madengine.core.errors import ConfigError, CredentialError, InputError, MadEngineError, ServiceError
from madengine.database import files, history_tables, summary
from madengine.database.rows import IDENTITY_COLUMN, FileMark, ImportRow
from madengine.database.alerts import Alert
from madengine.database.series import ROW_COLUMNS, SeriesState
from madengine.database.urls import DbUrl, check_identifier
from madengine.results.columns import ALL_COLUMNS, Status
from madengine.results.identity import FIELDS as IDENTITY_FIELDS
from madengine.results.identity import ResultIdentity

DEFAULT_TABLE = "dlm_table"  # the original tool's table name, so dashboards keep their queries
EXTRA_COLUMN = "extra_columns"
SQLITE_BUSY_TIMEOUT_S = 10.0
MYSQL_CONNECT_TIMEOUT_S = 5.0
MYSQL_IO_TIMEOUT_S = 120  # a server that dies mid-import must not hang the command
SQLITE_IMPORT_CACHE_KB = 128 * 1024  # page cache of an importing connection
# pages of a new database file: rows of ~1 KB (a run row with its context and samples) fill 8 KB pages
# better than SQLite's 4 KB, and an import writes half as many of them (1M rows: ~3 s less CPU)
SQLITE_PAGE_SIZE = 8192
MYSQL_LOCK_WAIT_S = 120  # how long an import waits for another one writing the same table
_BATCH = 500
_MYSQL_IDENTITY_INDEX = f"{IDENTITY_COLUMN}(255), status(16)"  # TEXT columns are indexed by prefix
_RETRY_HINT = "perf.csv keeps every row: run 'madengine database update-table' again once it is reachable"


@dataclasses.dataclass(frozen=True)
class _Dialect:
    name: str
    param: str
    quote: str
    id_column: str
    key_column: str
    created_column: str
    insert_ignore: str

    def q(self, identifier: str) -> str:
        return f"{self.quote}{identifier}{self.quote}"


# SQLite: row_key is UNIQUE through the index ``<table>_key`` (_create_sqlite_indexes), which an import into an
# empty table builds once at the end as it does the others (tables of earlier releases declare it UNIQUE inline)
SQLITE = _Dialect("sqlite", "?", '"', "id INTEGER PRIMARY KEY AUTOINCREMENT", "row_key TEXT NOT NULL",
                  "created_date TEXT NOT NULL", "INSERT OR IGNORE")
MYSQL = _Dialect("mysql", "%s", "`", "id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY",
                 "row_key CHAR(64) NOT NULL UNIQUE", "created_date DATETIME NOT NULL", "INSERT IGNORE")

STORED_COLUMNS: tuple[str, ...] = (*ALL_COLUMNS, EXTRA_COLUMN, IDENTITY_COLUMN)
HISTORY_COLUMNS = ("id", *IDENTITY_FIELDS, "status", "performance", "perf_samples", "run_id", "started_at",
                   "created_date")


@dataclasses.dataclass(frozen=True)
class TableState:
    created: bool  #: the table did not exist before
    added_columns: tuple[str, ...]  #: columns added to an existing table (a newer madengine's columns)


@dataclasses.dataclass(frozen=True)
class RunInfo:
    """One ``run_id`` of the results table."""

    run_id: str
    created_date: str
    started_at: str
    rows: int
    success: int
    failure: int
    skipped: int
    models: int
    machine_name: str

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# --- driver errors -> typed errors -------------------------------------------------------------

def _mysql_error(exc: Exception, url: DbUrl) -> MadEngineError:
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
    text = str(exc.args[1]) if len(exc.args) > 1 else str(exc)
    if code == 1045:
        return CredentialError(f"MySQL refused the credentials of user '{url.user}'", path=url.shown,
                               hint="check the user and password (--db-url or TUNA_DB_USER_NAME/TUNA_DB_USER_PASSWORD)")
    if code in (1044, 1142, 1227):
        return CredentialError(f"MySQL denied access: {text}", path=url.shown, hint="grant the user rights on that database")
    if code in (2002, 2003, 2005, 2006, 2013, 2055):
        return ServiceError(f"cannot reach the MySQL server ({text})", path=url.shown, hint=_RETRY_HINT)
    return ServiceError(f"MySQL error {code}: {text}", path=url.shown)


def _sqlite_error(exc: sqlite3.Error, url: DbUrl) -> MadEngineError:
    text = str(exc)
    if isinstance(exc, sqlite3.OperationalError):
        if "locked" in text or "busy" in text:
            return ServiceError(f"the SQLite database is locked by another process ({text})", path=url.shown,
                                hint=_RETRY_HINT)
        return ServiceError(f"SQLite error: {text}", path=url.shown, hint=_RETRY_HINT)
    return InputError(f"not a usable SQLite database ({text})", path=url.shown)


@contextlib.contextmanager
def driver_errors(url: DbUrl) -> Iterator[None]:
    """Turn database driver exceptions into one-line typed errors naming the (masked) URL."""
    try:
        yield
    except sqlite3.Error as exc:
        raise _sqlite_error(exc, url) from None
    except MadEngineError:
        raise
    except Exception as exc:
        pymysql = sys.modules.get("pymysql")
        if pymysql is not None and isinstance(exc, pymysql.err.MySQLError):
            raise _mysql_error(exc, url) from None
        raise


# --- connections -------------------------------------------------------------------------------

def _connect_sqlite(url: DbUrl, create: bool, readonly: bool = False) -> sqlite3.Connection:
    assert url.path is not None
    path = url.path
    if not path.exists() and not create:
        raise InputError("database file not found", path=str(path),
                         hint="'madengine database update-table --csv-file-path perf.csv' creates it")
    if path.is_dir():
        raise InputError("is a directory, not a SQLite database file", path=str(path))
    if not path.parent.is_dir():
        raise InputError("the folder of the database file does not exist", path=str(path))
    if readonly:
        # SQLite itself refuses every write on this connection; autocommit, so each query sees the latest rows
        connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None,
                                     timeout=url.timeout or SQLITE_BUSY_TIMEOUT_S, check_same_thread=False)
    else:
        connection = sqlite3.connect(str(path), timeout=url.timeout or SQLITE_BUSY_TIMEOUT_S)
        # takes effect only in a database without tables yet (a new file); an existing one keeps its own
        connection.execute(f"PRAGMA page_size = {SQLITE_PAGE_SIZE}")
    connection.execute("PRAGMA schema_version").fetchone()  # fails now, not later, on a non-database file
    return connection


def _connect_mysql(url: DbUrl, create: bool, readonly: bool = False) -> Any:
    try:
        import pymysql
    except ImportError:
        raise ServiceError("MySQL support needs the 'pymysql' package",
                           hint="pip install 'madengine[db]'") from None
    options = dict(host=url.host, port=url.port or 3306, user=url.user, password=url.password, charset="utf8mb4",
                   connect_timeout=url.timeout or MYSQL_CONNECT_TIMEOUT_S, read_timeout=MYSQL_IO_TIMEOUT_S,
                   write_timeout=MYSQL_IO_TIMEOUT_S, autocommit=False)
    if readonly:
        # the server refuses every write in this session; autocommit, so each query sees the latest rows
        options.update(autocommit=True, init_command="SET SESSION TRANSACTION READ ONLY")
        create = False
    try:
        return pymysql.connect(database=url.database, **options)
    except pymysql.err.OperationalError as exc:
        if not exc.args or exc.args[0] != 1049:
            raise
        if not create:
            raise InputError(f"database '{url.database}' does not exist", path=url.shown,
                             hint="'madengine database create-table' creates it") from None
    # like the original tool: a missing database is created (name checked when the URL was parsed)
    connection = pymysql.connect(**options)
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE IF NOT EXISTS {MYSQL.q(url.database)} CHARACTER SET utf8mb4")
    connection.select_db(url.database)
    return connection


class SqlStore:
    """The results table of one SQL database. Use as a context manager inside
    :func:`driver_errors`; nothing is committed unless the ``with`` block succeeds."""

    def __init__(self, url: DbUrl, table: str = DEFAULT_TABLE, *, create: bool = False, readonly: bool = False) -> None:
        """``readonly``: the database refuses writes on this connection (SQLite ``mode=ro``, a MySQL
        read-only session) and every query sees the rows committed so far (autocommit)."""
        self.url = url
        self.table = check_identifier(table, "table")
        self.dialect = SQLITE if url.scheme == "sqlite" else MYSQL
        connect = _connect_sqlite if url.scheme == "sqlite" else _connect_mysql
        self.connection = connect(url, create and not readonly, readonly)
        self._summaries: bool | None = None  #: the summary tables exist, so inserts keep them current
        self._cache_size: int | None = None  #: SQLite's page cache size before an import enlarged it

    def __enter__(self) -> "SqlStore":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                self.connection.commit()
            else:
                self.connection.rollback()
        finally:
            self.connection.close()

    # --- helpers ---

    def _sql(self, text: str) -> str:
        """``text`` with ``{t}`` the quoted table and ``?`` the dialect's parameter marker."""
        return text.replace("{t}", self.dialect.q(self.table)).replace("?", self.dialect.param)

    def _execute(self, text: str, params: Sequence[Any] = ()) -> Any:
        cursor = self.connection.cursor()
        cursor.execute(self._sql(text), tuple(params))
        return cursor

    def table_exists(self, name: str | None = None) -> bool:
        """Whether the results table (or the table ``name`` beside it) exists."""
        if self.dialect is SQLITE:
            query = "SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?"
        else:
            query = "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?"
        return self._execute(query, (name or self.table,)).fetchone() is not None

    def replace_rows(self, name: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """REPLACE into the table ``name`` beside the results table (SQLite and MySQL alike): a row of
        the same key is swapped for the new one."""
        if not rows:
            return
        q = self.dialect.q
        statement = self._sql(f"REPLACE INTO {q(name)} ({', '.join(q(c) for c in columns)}) "
                              f"VALUES ({', '.join('?' for _ in columns)})")
        cursor = self.connection.cursor()
        for start in range(0, len(rows), 500):
            cursor.executemany(statement, list(rows[start:start + 500]))

    def columns(self) -> list[str]:
        cursor = self._execute("SELECT * FROM {t} WHERE 1 = 0")
        names = [d[0] for d in cursor.description]
        cursor.fetchall()
        return names

    def require_table(self) -> None:
        if not self.table_exists():
            raise InputError(f"no results table '{self.table}' yet", path=self.url.shown,
                             hint="'madengine database update-table --csv-file-path perf.csv' creates and fills it")

    # --- schema ---

    def _create_statement(self) -> str:
        q = self.dialect.q
        columns = [self.dialect.id_column, self.dialect.key_column, self.dialect.created_column]
        columns += [f"{q(name)} TEXT" for name in STORED_COLUMNS]
        if self.dialect is MYSQL:
            # TEXT columns are indexed by prefix in MySQL
            columns.append(f"INDEX {q(self.table + '_group')} (model(100), gpu_architecture(64), base_docker(100), status(16))")
            columns.append(f"INDEX {q(self.table + '_run')} (run_id(64))")
            columns.append(f"INDEX {q(self.table + '_identity')} ({_MYSQL_IDENTITY_INDEX})")
            return f"CREATE TABLE IF NOT EXISTS {q(self.table)} ({', '.join(columns)}) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
        return f"CREATE TABLE IF NOT EXISTS {q(self.table)} ({', '.join(columns)})"

    def _create_sqlite_indexes(self) -> None:
        q = self.dialect.q
        if not self._key_declared_unique():
            self._execute(f"CREATE UNIQUE INDEX IF NOT EXISTS {q(self.table + '_key')} ON {{t}} (row_key)")
        self._execute(f"CREATE INDEX IF NOT EXISTS {q(self.table + '_group')} ON {{t}} "
                      "(model, gpu_architecture, base_docker, status)")
        self._execute(f"CREATE INDEX IF NOT EXISTS {q(self.table + '_run')} ON {{t}} (run_id)")
        self._execute(f"CREATE INDEX IF NOT EXISTS {q(self.table + '_identity')} ON {{t}} ({IDENTITY_COLUMN}, status)")

    def _key_declared_unique(self) -> bool:
        """The table declares row_key UNIQUE itself (an earlier release made it): SQLite's own index
        keeps the keys unique, another one would only cost."""
        indexes = self._execute(f"PRAGMA index_list({self.dialect.q(self.table)})").fetchall()
        return any(origin == "u" for _, _, _, origin, *_ in indexes)

    def _create_mysql_identity_index(self) -> None:
        """The identity index on a table an earlier release created (MySQL has no IF NOT EXISTS for it)."""
        name = self.table + "_identity"
        cursor = self._execute("SELECT COUNT(*) FROM information_schema.statistics WHERE table_schema = DATABASE() "
                               "AND table_name = ? AND index_name = ?", (self.table, name))
        if not cursor.fetchone()[0]:
            self._execute(f"ALTER TABLE {{t}} ADD INDEX {self.dialect.q(name)} ({_MYSQL_IDENTITY_INDEX})")

    def _fill_identity_keys(self) -> int:
        """Migration in place: rows imported by an earlier release get their ``identity_key``."""
        names = ", ".join(self.dialect.q(n) for n in ("id", *IDENTITY_FIELDS))
        cursor = self._execute(f"SELECT {names} FROM {{t}} WHERE {IDENTITY_COLUMN} IS NULL")
        rows = cursor.fetchall()
        updates = [(ResultIdentity.from_row(dict(zip(IDENTITY_FIELDS, row[1:]))).key(), row[0]) for row in rows]
        statement = self._sql(f"UPDATE {{t}} SET {IDENTITY_COLUMN} = ? WHERE id = ?")
        for start in range(0, len(updates), _BATCH):
            self.connection.cursor().executemany(statement, updates[start:start + _BATCH])
        return len(updates)

    def create_table(self) -> TableState:
        """Create the results table, or add the columns a newer madengine has; idempotent."""
        existed = self.table_exists()
        added: list[str] = []
        if not existed:
            self._execute(self._create_statement())
        else:
            present = set(self.columns())
            if "row_key" not in present:
                raise ConfigError(f"table '{self.table}' was not created by this madengine (it has no row_key column)",
                                  path=self.url.shown, hint="choose another table with --table, or rename that one")
            for name in STORED_COLUMNS:
                if name not in present:
                    self._execute(f"ALTER TABLE {{t}} ADD COLUMN {self.dialect.q(name)} TEXT")
                    added.append(name)
        if self.dialect is SQLITE:
            self._create_sqlite_indexes()
        elif existed:
            self._create_mysql_identity_index()
        if existed:
            self._fill_identity_keys()
        summary.ensure(self)
        self._summaries = summary.names(self.table) is not None
        history_tables.ensure(self)
        files.ensure(self)
        return TableState(created=not existed, added_columns=tuple(added))

    # --- rows ---

    def existing_keys(self, keys: Sequence[str]) -> set[str]:
        found: set[str] = set()
        for start in range(0, len(keys), _BATCH):
            chunk = keys[start:start + _BATCH]
            marks = ", ".join("?" for _ in chunk)
            found.update(r[0] for r in self._execute(f"SELECT row_key FROM {{t}} WHERE row_key IN ({marks})", chunk))
        return found

    def stored_through(self, keys: Sequence[str], last_id: int) -> bool:
        """Whether one of ``keys`` is stored in a row with an id up to ``last_id``."""
        for start in range(0, len(keys), _BATCH):
            chunk = keys[start:start + _BATCH]
            marks = ", ".join("?" for _ in chunk)
            if self._execute(f"SELECT id FROM {{t}} WHERE row_key IN ({marks}) AND id <= ? LIMIT 1",
                             (*chunk, last_id)).fetchone() is not None:
                return True
        return False

    def row_key(self, row_id: int) -> str:
        """The content key of row ``row_id`` ('' when there is none)."""
        found = self._execute("SELECT row_key FROM {t} WHERE id = ?", (row_id,)).fetchone()
        return str(found[0]) if found else ""

    def file_mark(self, host: str, path: str) -> FileMark | None:
        """What the latest import of the perf.csv at ``path`` on ``host`` read of it (:mod:`.files`)."""
        return files.load(self, host, path)

    def save_file_mark(self, mark: FileMark) -> None:
        files.save(self, mark)

    # --- what an import needs (madengine.database.importer) ---

    def begin_import(self, wait_s: float = MYSQL_LOCK_WAIT_S) -> None:
        """Be the table's only writer until the end of the transaction: rows with ids above
        :meth:`mark` are then this import's own (SQLite: the write lock, waited for as the URL's
        ``timeout`` says; MySQL: a named lock that every madengine writer of the table takes, waited
        for ``wait_s``)."""
        if self.dialect is SQLITE:
            # the unique key and identity indexes of a million rows take random inserts: keep their pages
            self._cache_size = self.connection.execute("PRAGMA cache_size").fetchone()[0]
            self.connection.execute(f"PRAGMA cache_size = -{SQLITE_IMPORT_CACHE_KB}")
            if not self.connection.in_transaction:
                self.connection.execute("BEGIN IMMEDIATE")
            return
        name = f"madengine:{self.url.database}.{self.table}"[:64]
        got = self._execute("SELECT GET_LOCK(?, ?)", (name, wait_s)).fetchone()[0]
        if got != 1:
            raise ServiceError(f"another import has been writing table '{self.table}' for {wait_s:g} s",
                               path=self.url.shown, hint=_RETRY_HINT)

    def rows_written(self) -> None:
        """An import's rows are in: its page cache goes back to the connection's own size (the series
        pass reads each page once: the memory is given back for it)."""
        if self._cache_size is not None:
            self.connection.execute(f"PRAGMA cache_size = {int(self._cache_size)}")
            self._cache_size = None

    def mark(self) -> int:
        """The newest row id: rows an import inserts come after it."""
        return int(self._execute("SELECT MAX(id) FROM {t}").fetchone()[0] or 0)

    def numbered(self, mark: int, count: int) -> bool:
        """Whether the ``count`` rows an import inserted after ``mark`` have the ids ``mark + 1`` to
        ``mark + count``, in the order they were inserted (ids ascend and differ: the newest id says
        so; an AUTOINCREMENT past deleted rows or an id a refused MySQL insert used says no)."""
        return self.mark() == mark + count

    def bulk(self) -> contextlib.AbstractContextManager[None]:
        """Around the inserts of an import into an empty table: SQLite builds its indexes, the unique
        one of ``row_key`` among them, once at the end (sorting a million entries beats a million
        B-tree inserts), inside the same transaction (a crash or a bad line rolls the drop back with
        the rows); MySQL keeps them (its index DDL would commit the transaction). The keys of one
        import differ from each other (occurrence numbers), so nothing the unique index would have
        refused goes in meanwhile."""
        return self._without_indexes() if self.dialect is SQLITE else contextlib.nullcontext()

    @contextlib.contextmanager
    def _without_indexes(self) -> Iterator[None]:
        for suffix in ("_key", "_group", "_run", "_identity"):
            self._execute(f"DROP INDEX IF EXISTS {self.dialect.q(self.table + suffix)}")
        try:
            yield
        finally:
            self._create_sqlite_indexes()

    def new_rows(self, mark: int, keys: Sequence[str]) -> dict[str, list[tuple[Any, ...]]]:
        """Per identity of ``keys`` that has rows after ``mark``: those rows, by id, as tuples of
        ``series.ROW_COLUMNS`` (NULL cells stay None: readers use ``or ""``). One query per identity:
        no identity key read back with every row, nothing to sort but its own rows."""
        statement = self._sql(f"SELECT {', '.join(self.dialect.q(n) for n in ROW_COLUMNS)} FROM {{t}} "
                              f"WHERE {IDENTITY_COLUMN} = ? AND id > ? ORDER BY id")
        cursor = self.connection.cursor()
        found = {}
        for key in keys:
            cursor.execute(statement, (key, mark))
            rows = cursor.fetchall()
            if rows:
                found[key] = rows
        return found

    def has_rows_before(self, key: str, mark: int) -> bool:
        return self._execute(f"SELECT id FROM {{t}} WHERE {IDENTITY_COLUMN} = ? AND id <= ? LIMIT 1",
                             (key, mark)).fetchone() is not None

    def identity_rows(self, key: str) -> list[dict[str, str]]:
        """Every row of one identity (``series.ROW_COLUMNS``), by id."""
        cursor = self._execute(f"SELECT {', '.join(self.dialect.q(n) for n in ROW_COLUMNS)} FROM {{t}} "
                               f"WHERE {IDENTITY_COLUMN} = ? ORDER BY id", (key,))
        return [dict(zip(ROW_COLUMNS, map(_text, row))) for row in cursor.fetchall()]

    def keeps_history(self) -> bool:
        return history_tables.names(self.table) is not None and history_tables.present(self)

    def load_states(self, keys: Sequence[str]) -> dict[str, SeriesState]:
        return history_tables.load_states(self, keys)

    def save_states(self, states: Sequence[SeriesState]) -> None:
        history_tables.save_states(self, states)

    def load_alerts(self, keys: Sequence[str] | None = None, alert_ids: Sequence[str] = ()) -> list[Alert]:
        return history_tables.load_alerts(self, keys, alert_ids)

    def save_alerts(self, alerts: Sequence[Alert]) -> None:
        history_tables.save_alerts(self, alerts)

    def update_relative_change(self, updates: Sequence[tuple[int, str]]) -> None:
        history_tables.update_relative_change(self, updates)

    def relative_changes(self, row_ids: Sequence[int]) -> dict[int, str]:
        """The stored ``relative_change`` of each of these rows ('' for an empty cell)."""
        found: dict[int, str] = {}
        for start in range(0, len(row_ids), _BATCH):
            chunk = row_ids[start:start + _BATCH]
            marks = ", ".join("?" for _ in chunk)
            found.update((int(i), _text(text)) for i, text in
                         self._execute(f"SELECT id, relative_change FROM {{t}} WHERE id IN ({marks})", chunk))
        return found

    def log_triage(self, alert: Alert) -> None:
        history_tables.log_triage(self, alert)

    def triage_log(self, alert_id: str) -> list[dict[str, Any]]:
        return history_tables.triage_log(self, alert_id)

    def series_behind(self) -> list[str]:
        tables = summary.names(self.table)
        return history_tables.behind(self, tables[0]) if tables else []

    def absorb(self, mark: int, tally: summary.Tally | None = None) -> None:
        """Bring the summary tables up to date with the rows after ``mark`` (this import's; ``tally``:
        their aggregates, counted as they were written)."""
        if self._summaries is None:
            self._summaries = summary.present(self)
        if self._summaries:
            # MySQL's GROUP BY compares text by its collation (case, trailing spaces): only SQLite's
            # compares it as the tally does
            summary.absorb(self, mark, tally if self.dialect is SQLITE else None)

    def fetch_history(self, models: Sequence[str] = ()) -> list[dict[str, str]]:
        """The SUCCESS rows (``HISTORY_COLUMNS``) of every identity, or of ``models``, in insertion order.

        Read-only, so a table of an earlier release (without the newer columns) is read as it is:
        the columns it lacks come back empty.
        """
        present = set(self.columns())
        names = [n for n in HISTORY_COLUMNS if n in present]
        query, params = f"SELECT {', '.join(self.dialect.q(n) for n in names)} FROM {{t}} WHERE status = ?", \
            [Status.SUCCESS]
        if models:
            query += f" AND model IN ({', '.join('?' for _ in models)})"
            params += list(models)
        cursor = self._execute(query + " ORDER BY id", params)
        empty = dict.fromkeys(HISTORY_COLUMNS, "")
        return [{**empty, **{name: _text(value) for name, value in zip(names, row)}} for row in cursor.fetchall()]

    def insert(self, rows: Sequence[ImportRow], created_date: str) -> int:
        """Insert ``rows`` (a row whose key is already stored is skipped); returns how many were new.
        The summary and history tables follow through :mod:`madengine.database.importer`. One
        prepared statement for every row (SQLite steps it in C; pymysql sends multi-row INSERTs)."""
        q = self.dialect.q
        names = ["row_key", "created_date", *STORED_COLUMNS]
        statement = self._sql(f"{self.dialect.insert_ignore} INTO {{t}} ({', '.join(q(n) for n in names)}) "
                              f"VALUES ({', '.join('?' for _ in names)})")
        values = [(row.key, created_date, *row.values, json.dumps(row.extra, ensure_ascii=False) if row.extra else "",
                   row.group) for row in rows]
        cursor = self.connection.cursor()
        inserted = 0
        step = max(len(values), 1) if self.dialect is SQLITE else _BATCH
        for start in range(0, len(values), step):
            cursor.executemany(statement, values[start:start + step])
            inserted += max(cursor.rowcount, 0)
        return inserted

    @staticmethod
    def _perf_rows(names: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[dict[str, str]]:
        """perf.csv-shaped rows (``fetch_run``): every column of ALL_COLUMNS, then the extra ones. A run
        of thousands of rows: each row's cells are taken and zipped in C, fixed only where not text."""
        empty = len(names)  # the index of the '' appended to each row: a column the table lacks
        cells_of = operator.itemgetter(*(names.index(n) if n in names else empty for n in ALL_COLUMNS))
        extra_at = names.index(EXTRA_COLUMN) if EXTRA_COLUMN in names else empty
        out = []
        for values in rows:
            values = (*values, "")
            cells = cells_of(values)
            if None in cells or not all(map(str.__instancecheck__, cells)):
                cells = tuple(map(_text, cells))
            row = dict(zip(ALL_COLUMNS, cells))
            extra = _text(values[extra_at])
            if extra:
                try:
                    row.update({k: _text(v) for k, v in json.loads(extra).items() if k not in row})
                except (ValueError, AttributeError):
                    pass  # a hand-edited cell must not make the whole run unreadable
            out.append(row)
        return out

    def fetch_run(self, run_id: str) -> list[dict[str, str]]:
        cursor = self._execute("SELECT * FROM {t} WHERE run_id = ? ORDER BY id", (run_id,))
        names = [d[0] for d in cursor.description]
        return self._perf_rows(names, cursor.fetchall())

    def list_runs(self) -> list[RunInfo]:
        cursor = self._execute(
            "SELECT run_id, MIN(created_date), MIN(started_at), COUNT(*), "
            "SUM(CASE WHEN status = ? THEN 1 ELSE 0 END), SUM(CASE WHEN status = ? THEN 1 ELSE 0 END), "
            "SUM(CASE WHEN status = ? THEN 1 ELSE 0 END), COUNT(DISTINCT model), MAX(machine_name), MIN(id) "
            "FROM {t} WHERE run_id IS NOT NULL AND run_id <> '' GROUP BY run_id ORDER BY MIN(id)",
            (Status.SUCCESS, Status.FAILURE, Status.SKIPPED))
        return [RunInfo(run_id=_text(r[0]), created_date=_text(r[1]), started_at=_text(r[2]), rows=int(r[3]),
                        success=int(r[4] or 0), failure=int(r[5] or 0), skipped=int(r[6] or 0), models=int(r[7]),
                        machine_name=_text(r[8])) for r in cursor.fetchall()]

    def count(self) -> int:
        return int(self._execute("SELECT COUNT(*) FROM {t}").fetchone()[0])


def _text(value: Any) -> str:
    return "" if value is None else str(value)
