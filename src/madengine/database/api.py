"""The operations behind ``madengine database`` and ``report alerts``: one function per command, no printing.

perf.csv is the source of truth. Every import reads and checks the file before it writes anything
(streamed: never held whole), writes in one transaction (SQL) or with idempotent upserts (MongoDB),
and skips rows already stored; when the database cannot be reached nothing is lost, and the next
``update-table`` of the same perf.csv brings the database up to date. A perf.csv imported before
and only appended to since is read from where that import ended (:meth:`.rows.PerfCsv.resume`).
The import itself is :mod:`madengine.database.importer` (rows in batches, then one pass per touched
result series).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from madengine.core.errors import CredentialError, InputError, MadEngineError, ServiceError
from madengine.core.gcpause import collector_paused
from madengine.core.events import Reporter
from madengine.database import alerts as alertlib
from madengine.database import importer
from madengine.database import rows as rowlib
from madengine.database.mongo import MongoStore, UploadResult, mongo_errors, upload
from madengine.database.series import reference_values
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
    series: int = 0  #: result series whose changes and verdicts this import brought up to date
    new_alerts: int = 0  #: changes found for the first time
    unread: int = 0  #: rows an earlier import of the file read, not read again (the file only grew since)
    read_whole_because: str = ""  #: why a file imported before was read whole again ('' when it was not)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _environ(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


@contextlib.contextmanager
def open_store(url: DbUrl, table: str, environ: Mapping[str, str], *, create: bool,
               readonly: bool = False) -> Iterator[Store]:
    """The results store of ``url``, with driver errors turned into one-line typed errors
    (``readonly``: a SQL database refuses writes on this connection)."""
    check_identifier(table, "table")
    guard = mongo_errors(url) if url.scheme == "mongodb" else driver_errors(url)
    with guard:
        store = MongoStore(url, table, environ, create=create) if url.scheme == "mongodb" \
            else SqlStore(url, table, create=create, readonly=readonly)
        with store:
            yield store


def create_table(db_url: str | None = None, environ: Mapping[str, str] | None = None,
                 table: str = DEFAULT_TABLE, reporter: Reporter | None = None) -> CreateResult:
    """Create the results table (idempotent; adds columns a newer madengine defines, and brings the
    summary and history tables up to date with rows an earlier release wrote)."""
    environ = _environ(environ)
    url = resolve_sql_url(db_url, environ)
    with open_store(url, table, environ, create=True) as store:
        state: TableState = store.create_table()
        importer.catch_up(store, reporter)
    return CreateResult(url.shown, table, state.created, state.added_columns)


def update_table(csv_file_path: Path, db_url: str | None = None, environ: Mapping[str, str] | None = None,
                 model_json_path: Path | None = None, table: str = DEFAULT_TABLE,
                 reporter: Reporter | None = None) -> ImportResult:
    """Import the rows of a perf.csv that the database does not have yet.

    The file is checked first (one streamed pass; bad input fails before anything is written), then
    imported in batches (:mod:`madengine.database.importer`): new SUCCESS rows get
    ``relative_change`` against the latest runs of their result identity after its last change
    point, every series the import touched gets its change points, verdict and alerts. A table of an
    earlier release is migrated in place first. A file imported into this table before and only
    appended to since is read from where that import ended; one that was rewritten, truncated or
    edited is read whole, and ``reporter`` gets a line saying why (and progress lines on long imports).
    """
    environ = _environ(environ)
    path = Path(csv_file_path)
    with collector_paused():  # millions of rows made and dropped, none in a cycle: nothing to scan for
        source = rowlib.PerfCsv(path)
        mark, why, unreachable = _earlier_import(source, db_url, environ, table)
        why = why or (source.resume(mark) if mark is not None else "")
        try:
            return _update_table(source, db_url, environ, model_json_path, table, reporter, why, unreachable,
                                 mark.last_id if source.start and mark is not None else None)
        except importer.RepeatsEarlierRow:
            why = "a row appended since repeats one imported before (identical rows are counted over the whole file)"
            return _update_table(rowlib.PerfCsv(path), db_url, environ, model_json_path, table, reporter, why,
                                 None, None)


def _earlier_import(source: rowlib.PerfCsv, db_url: str | None, environ: Mapping[str, str],
                    table: str) -> tuple[rowlib.FileMark | None, str, MadEngineError | None]:
    """What the latest import of ``source`` into the table read of it (None: nothing, or the database
    cannot be read now), why it no longer counts ('' when it may), and the error of a database that
    cannot be reached or refuses the credentials: raised once the file has been checked, as when the
    file is read whole (a bad file is named first)."""
    try:
        url = resolve_sql_url(db_url, environ)
        with open_store(url, table, environ, create=False, readonly=True) as store:
            mark = store.file_mark(*rowlib.file_place(source.path))
            if mark is not None and store.row_key(mark.last_id) != mark.last_key:
                return None, "the table no longer holds the rows of its latest import", None
            return mark, "", None
    except (ServiceError, CredentialError) as exc:
        return None, "", exc
    except MadEngineError:
        return None, "", None  # no database or table yet, a bad URL (named once the file is checked)


def _update_table(source: rowlib.PerfCsv, db_url: str | None, environ: Mapping[str, str],
                  model_json_path: Path | None, table: str, reporter: Reporter | None, why: str,
                  unreachable: MadEngineError | None, earlier_through: int | None) -> ImportResult:
    if why and reporter is not None:
        reporter.message(f"madengine: {source.path}: reading the whole file: {why}")
    source.open()
    # a small file is checked whole before a database is opened; a big one as it is read (ahead, in
    # another process), its import rolled back on a bad line
    total = source.check() if source.unread_bytes < importer.READ_AHEAD_FROM else 0
    entries = rowlib.load_model_entries(Path(model_json_path)) if model_json_path is not None else None
    if unreachable is not None:
        raise unreachable
    url = resolve_sql_url(db_url, environ)
    enriched = 0

    def batches(rows: Iterable[list[rowlib.ImportRow]]) -> Iterator[list[rowlib.ImportRow]]:
        nonlocal enriched
        for batch in rows:
            if entries is not None:
                enriched += rowlib.enrich_from_models(batch, entries)
            yield batch

    # the rows are read ahead from here on (a child process for a big file), while the store is made ready
    with importer.ReadAhead(source, source.unread_bytes) as ahead, \
            open_store(url, table, environ, create=True) as store:
        state = store.create_table()
        importer.catch_up(store, reporter)
        outcome = importer.import_rows(store, batches(ahead), total=total, reporter=reporter,
                                       what=f"importing {source.path.name}", earlier_through=earlier_through,
                                       share=lambda: source.share)
        last_id = store.mark()
        store.save_file_mark(source.mark(last_id, store.row_key(last_id)))
    rows = source.rows_before + source.rows
    return ImportResult(url=url.shown, table=table, csv_file=str(source.path), rows=rows,
                        inserted=outcome.inserted, already_stored=rows - outcome.inserted, enriched=enriched,
                        table_created=state.created, series=outcome.series, new_alerts=outcome.new_alerts,
                        unread=source.rows_before, read_whole_because=why)


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


def fetch_references(db_url: str | None, run_id: str, identity_keys: Sequence[str],
                     environ: Mapping[str, str] | None = None, table: str = DEFAULT_TABLE) -> dict[str, list[float]]:
    """Per identity key: the figures of its stable segment up to and including run ``run_id``
    (:func:`madengine.database.series.reference_values`), for the ones whose series state has that run
    among its latest; {} for a table without series states."""
    environ = _environ(environ)
    url = resolve_sql_url(db_url, environ)
    with open_store(url, table, environ, create=False) as store:
        store.require_table()
        if not store.keeps_history():
            return {}
        found = {}
        for key, state in store.load_states(list(identity_keys)).items():
            values = reference_values(state, run_id)
            if values:
                found[key] = values
        return found


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


# --- alerts (madengine report alerts, the dashboard's triage) ----------------------------------

def _require_history(store: Store) -> None:
    if not store.keeps_history():
        raise InputError(f"table '{store.table}' keeps no alerts yet", path=store.url.shown,
                         hint="'madengine database create-table' (or the next update-table) adds them")


def find_alert(store: Store, alert_id: str) -> alertlib.Alert:
    """The alert of this id, or of the one id this prefix (at least 6 characters) starts."""
    wanted = (alert_id or "").strip().lower()
    if len(wanted) < 6 or any(c not in "0123456789abcdef" for c in wanted):
        raise InputError(f"not an alert id: {alert_id[:40]!r}", path="alert",
                         hint="'madengine report alerts list' shows them (16 hex digits; 6 or more identify one)")
    found = store.load_alerts(alert_ids=[wanted]) if len(wanted) == 16 else \
        [a for a in store.load_alerts() if a.alert_id.startswith(wanted)]
    if len(found) != 1:
        raise InputError(f"{'no' if not found else 'more than one'} alert {wanted!r}", path="alert",
                         hint="'madengine report alerts list' shows them")
    return found[0]


def triage_alert(store: Store, alert_id: str, decision: alertlib.Triage, now: str | None = None) -> alertlib.Alert:
    """Set an alert's triage and log it, in the store's transaction."""
    _require_history(store)
    alert = alertlib.apply(find_alert(store, alert_id), decision, now or rowlib.now_text())
    store.save_alerts([alert])
    store.log_triage(alert)
    return alert


def list_alerts(db_url: str | None = None, environ: Mapping[str, str] | None = None, table: str = DEFAULT_TABLE,
                *, states: Sequence[str] = (), kinds: Sequence[str] = (), withdrawn: bool = False) -> list[alertlib.Alert]:
    """The alerts of the results table, the most deserving first (regressions by size × confidence);
    withdrawn ones (the detection no longer finds them) only with ``withdrawn``."""
    environ = _environ(environ)
    url = resolve_sql_url(db_url, environ)
    with open_store(url, table, environ, create=False) as store:
        store.require_table()
        _require_history(store)
        alerts = store.load_alerts()
    chosen = [a for a in alerts if (withdrawn or a.detected) and (not states or a.state in states)
              and (not kinds or a.kind in kinds)]
    return sorted(chosen, key=alertlib.priority)


def set_alert(alert_id: str, decision: alertlib.Triage, db_url: str | None = None,
              environ: Mapping[str, str] | None = None, table: str = DEFAULT_TABLE) -> alertlib.Alert:
    """Record a triage decision about one alert (``report alerts set``)."""
    environ = _environ(environ)
    url = resolve_sql_url(db_url, environ)
    with open_store(url, table, environ, create=False) as store:
        store.require_table()
        return triage_alert(store, alert_id, decision)


def show_alert(alert_id: str, db_url: str | None = None, environ: Mapping[str, str] | None = None,
               table: str = DEFAULT_TABLE) -> tuple[alertlib.Alert, list[dict[str, Any]]]:
    """One alert and its triage log, oldest first."""
    environ = _environ(environ)
    url = resolve_sql_url(db_url, environ)
    with open_store(url, table, environ, create=False) as store:
        store.require_table()
        _require_history(store)
        alert = find_alert(store, alert_id)
        return alert, store.triage_log(alert.alert_id)
