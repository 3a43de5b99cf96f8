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
import functools
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

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
    inserted: int  #: rows new to the database (a row's figures are rows of their own there: results.figures)
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
    # a small file is checked whole before a database is opened; a big one as it is read, its import
    # rolled back on a bad line
    total = source.check() if source.unread_bytes < importer.CHECK_WHOLE_BELOW else 0
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

    with open_store(url, table, environ, create=True) as store:
        state = store.create_table()
        importer.catch_up(store, reporter)
        outcome = importer.import_rows(store, batches(source.batches()), total=total, reporter=reporter,
                                       what=f"importing {source.path.name}", earlier_through=earlier_through,
                                       share=lambda: source.share)
        last_id = store.mark()
        store.save_file_mark(source.mark(last_id, store.row_key(last_id)))
    rows = source.rows_before + source.rows
    return ImportResult(url=url.shown, table=table, csv_file=str(source.path), rows=rows,
                        inserted=outcome.inserted, already_stored=source.rows_before + outcome.already_stored, enriched=enriched,
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


def checked_alert_id(alert_id: str) -> str:
    """An alert id as typed (6 to 16 hex digits, any case, spaces around), lowercase; else one-line InputError."""
    wanted = (alert_id or "").strip().lower()
    if not 6 <= len(wanted) <= 16 or any(c not in "0123456789abcdef" for c in wanted):
        raise InputError(f"not an alert id: {alert_id[:40]!r}", path="alert",
                         hint="'madengine report alerts list' shows them (16 hex digits; 6 or more identify one)")
    return wanted


def find_alert(store: Store, alert_id: str) -> alertlib.Alert:
    """The alert of this id, or of the one id this prefix (at least 6 characters) starts."""
    [alert] = find_alerts(store, [alert_id])
    return alert


def find_alerts(store: Store, alert_ids: Sequence[str]) -> list[alertlib.Alert]:
    """The alerts of these ids (or prefixes of 6 or more), each once, in the order given. Ids this
    database does not have are named in one error: a bulk set changes the alerts of one database,
    all of them or none."""
    wanted = list(dict.fromkeys(checked_alert_id(a) for a in alert_ids))
    full = [w for w in wanted if len(w) == 16]
    every = store.load_alerts() if len(full) < len(wanted) else store.load_alerts(alert_ids=full)
    found, missing, ambiguous = [], [], []
    for prefix in wanted:
        matches = [a for a in every if a.alert_id.startswith(prefix)]
        if len(matches) == 1:
            found.append(matches[0])
        else:
            (ambiguous if matches else missing).append(prefix)
    if ambiguous:
        raise InputError(f"more than one alert {ambiguous[0]!r}", path="alert",
                         hint="give more of its digits; 'madengine report alerts list' shows them")
    if missing:
        where = f"{store.url.shown} table {store.table}"
        text = f"no alert {missing[0]!r}" if len(wanted) == 1 else \
            f"{len(missing)} of {len(wanted)} alerts are not in {where} ({', '.join(missing[:3])}" \
            f"{', ...' if len(missing) > 3 else ''}): ids of another database?"
        hint = "'madengine report alerts list' shows them" + \
            ("; a bulk set names the alerts of one database (--db-url, --table)" if len(wanted) > 1 else "")
        raise InputError(text, path="alert", hint=hint)
    return list({a.alert_id: a for a in found}.values())


def find_summary(store: Store, run_id: str, alerts: Sequence[alertlib.Alert] | None = None) -> alertlib.Summary:
    """The summary of run ``run_id``: the alerts the detection finds whose first run after is it."""
    chosen = [a for a in (store.load_alerts() if alerts is None else alerts) if a.detected and a.after_run == run_id]
    if not chosen:
        raise InputError(f"no alert summary {run_id[:80]!r}", path="summary",
                         hint="'madengine report alerts summaries' lists them (a summary's id is its run id)")
    return alertlib.summaries(chosen)[0]


def triage_alerts(store: Store, alerts: Sequence[alertlib.Alert], decision: alertlib.Triage,
                  now: str | None = None) -> tuple[list[alertlib.Alert], list[alertlib.Alert]]:
    """Set the triage of these alerts and log it, in the store's transaction: (changed, unchanged).
    An alert that already says what the decision says gets no new log entry."""
    _require_history(store)
    moment = now or rowlib.now_text()
    unchanged = [a for a in alerts if alertlib.unchanged_by(a, decision)]
    changed = [alertlib.apply(a, decision, moment) for a in alerts if a not in unchanged]
    if changed:
        store.save_alerts(changed)
        for alert in changed:
            store.log_triage(alert)
    return changed, unchanged


def triage_alert(store: Store, alert_id: str, decision: alertlib.Triage, now: str | None = None) -> alertlib.Alert:
    """Set one alert's triage and log it (nothing written when it says so already)."""
    changed, unchanged = triage_alerts(store, [find_alert(store, alert_id)], decision, now)
    return (changed or unchanged)[0]


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


@dataclasses.dataclass(frozen=True)
class TriageOutcome:
    """What a (bulk) triage did: the alerts it changed, and those that said so already (not written)."""

    changed: list[alertlib.Alert]
    unchanged: list[alertlib.Alert]
    summary: str = ""  #: the summary it triaged ('' for alerts named by id)

    @property
    def alerts(self) -> list[alertlib.Alert]:
        return [*self.changed, *self.unchanged]

    def to_json(self) -> dict[str, Any]:
        return {"summary": self.summary or None, "changed": [a.alert_id for a in self.changed],
                "unchanged": [a.alert_id for a in self.unchanged], "alerts": [a.to_json() for a in self.alerts]}


def triage_chosen(store: Store, alert_ids: Sequence[str], summary: str | None,
                  decide: Callable[[], alertlib.Triage]) -> TriageOutcome:
    """One decision about several alerts at once: those of ``alert_ids``, or of summary ``summary``
    (every one of it, or those of ``alert_ids`` when given, which must belong to it). The ids are
    checked before the decision is made (``decide`` checks the state, note, links and who)."""
    _require_history(store)
    if not alert_ids and summary is None:
        raise InputError("name the alerts: one or more ids, or a summary", path="alert",
                         hint="'madengine report alerts summaries' lists the summaries and their alerts")
    chosen = find_alerts(store, alert_ids) if alert_ids else []
    if summary is not None:
        group = find_summary(store, summary)
        inside = {a.alert_id for a in group.alerts}
        outside = [a.alert_id for a in chosen if a.alert_id not in inside]
        if outside:
            raise InputError(f"alert {outside[0]} is not in summary {summary[:80]!r}", path="alert",
                             hint="'madengine report alerts summaries' shows the alerts of each summary")
        chosen = chosen or group.alerts
    changed, unchanged = triage_alerts(store, chosen, decide())
    return TriageOutcome(changed, unchanged, summary or "")


def set_alerts(alert_ids: Sequence[str], decide: Callable[[], alertlib.Triage], db_url: str | None = None,
               environ: Mapping[str, str] | None = None, table: str = DEFAULT_TABLE, *,
               summary: str | None = None) -> TriageOutcome:
    """Record one triage decision about several alerts at once (``report alerts set``; see
    :func:`triage_chosen`)."""
    environ = _environ(environ)
    url = resolve_sql_url(db_url, environ)
    with open_store(url, table, environ, create=False) as store:
        store.require_table()
        return triage_chosen(store, alert_ids, summary, decide)


def set_alert(alert_id: str, decision: alertlib.Triage, db_url: str | None = None,
              environ: Mapping[str, str] | None = None, table: str = DEFAULT_TABLE) -> alertlib.Alert:
    """Record a triage decision about one alert."""
    return set_alerts([alert_id], lambda: decision, db_url, environ, table).alerts[0]


def list_summaries(db_url: str | None = None, environ: Mapping[str, str] | None = None, table: str = DEFAULT_TABLE,
                   *, states: Sequence[str] = (), kinds: Sequence[str] = (), limit: int | None = None
                   ) -> list[alertlib.Summary]:
    """The alert summaries of the results table (:func:`madengine.database.alerts.summaries`: one per
    run that introduced alerts, those with an untriaged regression first, then the newest), of the
    alerts the detection finds in ``states`` and ``kinds``; the first ``limit`` with their suspected
    commit ranges."""
    environ = _environ(environ)
    url = resolve_sql_url(db_url, environ)
    with open_store(url, table, environ, create=False) as store:
        store.require_table()
        _require_history(store)
        chosen = [a for a in store.load_alerts() if a.detected and (not states or a.state in states)
                  and (not kinds or a.kind in kinds)]
        made = alertlib.summaries(chosen)[:limit]
        commits = functools.lru_cache(maxsize=None)(lambda run: alertlib.commits_of(store.fetch_run(run)))
        for summary in made:
            summary.commits = alertlib.commit_ranges(summary, commits)
        return made


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
