"""The operations behind ``madengine database``: one function per command, no printing.

perf.csv is the source of truth. Every import reads and checks the whole file before it connects,
writes in one transaction (SQL) or with idempotent upserts (MongoDB), and skips rows already
stored; when the database cannot be reached nothing is lost, and the next ``update-table`` of
the same perf.csv brings the database up to date.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from pathlib import Path
from typing import Any, Iterator, Mapping

from madengine.database import rows as rowlib
from madengine.database.mongo import MongoStore, UploadResult, mongo_errors, upload
from madengine.database.sql import DEFAULT_TABLE, RunInfo, SqlStore, TableState, driver_errors
from madengine.database.urls import DbUrl, check_identifier, resolve_mongo_url, resolve_sql_url

Store = Any  # SqlStore | MongoStore: the same operations


@dataclasses.dataclass(frozen=True)
class CreateResult:
    url: str
    table: str
    created: bool
    added_columns: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "added_columns": list(self.added_columns)}


@dataclasses.dataclass(frozen=True)
class ImportResult:
    url: str
    table: str
    csv_file: str
    rows: int  #: rows read from perf.csv
    inserted: int  #: rows new to the database
    already_stored: int  #: rows the database had from an earlier import
    enriched: int  #: rows whose empty cells --model-json-path filled
    table_created: bool

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _environ(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


@contextlib.contextmanager
def open_store(url: DbUrl, table: str, environ: Mapping[str, str], *, create: bool) -> Iterator[Store]:
    """The results store of ``url``, with driver errors turned into one-line typed errors."""
    check_identifier(table, "table")
    guard = mongo_errors(url) if url.scheme == "mongodb" else driver_errors(url)
    with guard:
        store = MongoStore(url, table, environ, create=create) if url.scheme == "mongodb" \
            else SqlStore(url, table, create=create)
        with store:
            yield store


def create_table(db_url: str | None = None, environ: Mapping[str, str] | None = None,
                 table: str = DEFAULT_TABLE) -> CreateResult:
    """Create the results table (idempotent; adds columns a newer madengine defines)."""
    environ = _environ(environ)
    url = resolve_sql_url(db_url, environ)
    with open_store(url, table, environ, create=True) as store:
        state: TableState = store.create_table()
    return CreateResult(url.shown, table, state.created, state.added_columns)


def update_table(csv_file_path: Path, db_url: str | None = None, environ: Mapping[str, str] | None = None,
                 model_json_path: Path | None = None, table: str = DEFAULT_TABLE,
                 window: int = rowlib.BASELINE_WINDOW) -> ImportResult:
    """Import the rows of a perf.csv that the database does not have yet.

    Each new SUCCESS row gets ``relative_change`` against the mean of the ``window`` latest
    SUCCESS rows of the same result identity after its last change point (``rows.Baselines``;
    rows of this import count once inserted, in file order). A table of an earlier release is
    migrated in place first (new columns, ``identity_key`` filled in).
    """
    environ = _environ(environ)
    csv_file_path = Path(csv_file_path)
    # bad input fails before any connection is made
    import_rows = rowlib.to_import_rows(rowlib.read_perf_rows(csv_file_path))
    enriched = 0
    if model_json_path is not None:
        enriched = rowlib.enrich_from_models(import_rows, rowlib.load_model_entries(Path(model_json_path)))
    url = resolve_sql_url(db_url, environ)
    with open_store(url, table, environ, create=True) as store:
        state = store.create_table()
        stored = store.existing_keys([row.key for row in import_rows])
        new_rows = [row for row in import_rows if row.key not in stored]
        baselines = rowlib.Baselines(store.recent_success, window)
        for row in new_rows:
            row.cells["relative_change"] = baselines.relative_change(row)
        inserted = store.insert(new_rows, rowlib.now_text())
    return ImportResult(url=url.shown, table=table, csv_file=str(csv_file_path), rows=len(import_rows),
                        inserted=inserted, already_stored=len(import_rows) - inserted, enriched=enriched,
                        table_created=state.created)


def fetch_run(db_url: str | None, run_id: str, environ: Mapping[str, str] | None = None,
              table: str = DEFAULT_TABLE) -> list[dict[str, str]]:
    """The rows of one ``run_id``, in insertion order, shaped like ``perfcsv.read_rows`` rows.

    Keys: every column of ``PERF_COLUMNS + EXTRA_COLUMNS`` ('' when empty), then the extra
    columns perf.csv had. ``db_url`` None means ``MADENGINE_DB_URL``/``TUNA_DB_*``/``madengine.db``.
    An unknown run id gives [] (``list_runs`` lists the known ones); a missing database or table
    is an :class:`~madengine.core.errors.InputError`, an unreachable server a ``ServiceError``.
    """
    environ = _environ(environ)
    url = resolve_sql_url(db_url, environ)
    with open_store(url, table, environ, create=False) as store:
        store.require_table()
        return store.fetch_run(run_id)


def fetch_history(db_url: str | None = None, environ: Mapping[str, str] | None = None, table: str = DEFAULT_TABLE,
                  models: tuple[str, ...] = ()) -> list[dict[str, str]]:
    """Every SUCCESS row (identity columns, performance, perf_samples, run_id, started_at, created_date,
    id), oldest first, of every model or of ``models``: the history ``report regressions`` reads."""
    environ = _environ(environ)
    url = resolve_sql_url(db_url, environ)
    with open_store(url, table, environ, create=False) as store:
        store.require_table()
        return store.fetch_history(models)


def list_runs(db_url: str | None = None, environ: Mapping[str, str] | None = None,
              table: str = DEFAULT_TABLE) -> list[RunInfo]:
    """Every run id of the results table, oldest first (rows without a run id are not listed)."""
    environ = _environ(environ)
    url = resolve_sql_url(db_url, environ)
    with open_store(url, table, environ, create=False) as store:
        store.require_table()
        return store.list_runs()


def upload_mongodb(kind: str, file_path: Path, name: str, db_url: str | None = None,
                   environ: Mapping[str, str] | None = None, database: str | None = None,
                   collection: str | None = None) -> UploadResult:
    """Upsert job or run documents from a file or folder into MongoDB (see ``madengine.database.mongo``)."""
    environ = _environ(environ)
    url = resolve_mongo_url(db_url, environ)
    return upload(url, environ, kind, Path(file_path), name, database=database, collection=collection)
