"""Read-only access to the results table for the dashboard (``madengine report serve``).

:class:`Reader` holds one read-only connection per thread (SQLite ``mode=ro``, a MySQL read-only
session; both autocommit, so every query sees the rows committed so far) and never writes. The
per-identity and per-run overviews come from the summary tables (:mod:`madengine.database.summary`)
when they cover the newest row, else from GROUP BY queries over the rows (a table an earlier release
made and nobody migrated yet: correct, slower). A table of the release before result identities
(no ``identity_key`` column) is grouped in Python.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Callable, Iterable, Sequence, TypeVar

from madengine.core.errors import InputError, MadEngineError
from madengine.database import history_tables, summary
from madengine.database.alerts import Alert
from madengine.database.rows import IDENTITY_COLUMN
from madengine.database.series import SeriesState
from madengine.database.sql import DEFAULT_TABLE, SqlStore, driver_errors
from madengine.database.urls import DbUrl
from madengine.results.identity import FIELDS as IDENTITY_FIELDS
from madengine.results.identity import ResultIdentity

T = TypeVar("T")
_CHUNK = 500

#: what the overview shows of an identity's latest row
LATEST_COLUMNS = ("id", "status", "performance", "metric", "reason", "run_id", "started_at", "machine_name", "tags",
                  "perf_n", "perf_cv", "perf_min", "perf_max", "relative_change", "created_date")
#: what a trend needs of every row of one identity (its identity fields are the identity's own: not read per row)
SERIES_COLUMNS = ("id", "status", "performance", "perf_samples", "run_id", "started_at", "machine_name", "tags", "reason",
                  "created_date")
#: what ``report compare`` needs of a run's rows
COMPARE_COLUMNS = (*IDENTITY_FIELDS, "status", "performance", "perf_samples", "run_id")


@dataclasses.dataclass(frozen=True)
class IdentityEntry:
    """One result identity: its row counts and its latest row's id."""

    key: str
    identity: ResultIdentity
    first_id: int
    latest_id: int
    rows: int
    success: int
    failure: int
    skipped: int


@dataclasses.dataclass(frozen=True)
class RunEntry:
    """One run id: its row counts, models, machine and start."""

    run_id: str
    first_id: int
    latest_id: int
    rows: int
    success: int
    failure: int
    skipped: int
    models: int
    started_at: str
    created_date: str
    machine_name: str

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Version:
    """What changes when a row lands or an alert is triaged: the table exists, its newest row id,
    the newest triage step's id."""

    exists: bool
    max_id: int = 0
    triage: int = 0

    @property
    def token(self) -> str:
        """One text for both, as pages and the events stream carry it."""
        return f"{self.max_id}.{self.triage}" if self.triage else str(self.max_id)


def _identity_entry(values: Sequence[Any]) -> IdentityEntry:
    record = dict(zip(summary.IDS_COLUMNS, values))
    key = record[IDENTITY_COLUMN]
    return IdentityEntry(key, ResultIdentity.from_key(key), record["first_id"], record["latest_id"], record["n_rows"],
                         record["n_success"], record["n_failure"], record["n_skipped"])


def _run_entry(values: Sequence[Any]) -> RunEntry:
    record = dict(zip(summary.RUNS_COLUMNS, values))
    return RunEntry(record["run_id"], record["first_id"], record["latest_id"], record["n_rows"], record["n_success"],
                    record["n_failure"], record["n_skipped"], record["n_models"], record["started_at"],
                    record["created_date"], record["machine_name"])


def _text(value: Any) -> str:
    return "" if value is None else str(value)


class Reader:
    """The dashboard's queries; safe to share between threads (each gets its own connection)."""

    def __init__(self, url: DbUrl, table: str = DEFAULT_TABLE) -> None:
        self.url = url
        self.table = table
        self._local = threading.local()

    # --- connections ---

    def _store(self) -> SqlStore:
        store = getattr(self._local, "store", None)
        if store is None:
            store = SqlStore(self.url, self.table, readonly=True)
            self._local.store = store
            self._local.columns = None
        return store

    def _drop(self) -> None:
        store = getattr(self._local, "store", None)
        self._local.store = None
        if store is not None:
            try:
                store.connection.close()
            except Exception:  # already broken: nothing to close
                pass

    def _run(self, work: Callable[[SqlStore], T]) -> T:
        """``work`` on this thread's connection; a failed connection is dropped (the next call reconnects)."""
        try:
            with driver_errors(self.url):
                return work(self._store())
        except MadEngineError:
            self._drop()
            raise

    def close(self) -> None:
        self._drop()

    def _columns(self, store: SqlStore) -> set[str]:
        if getattr(self._local, "columns", None) is None:
            self._local.columns = set(store.columns())
        return self._local.columns

    def _select(self, store: SqlStore, wanted: Sequence[str]) -> tuple[str, list[str]]:
        """The SELECT list of the ``wanted`` columns the table has (older tables lack some)."""
        present = [name for name in wanted if name in self._columns(store)]
        return ", ".join(store.dialect.q(n) for n in present), present

    @staticmethod
    def _dicts(names: Sequence[str], wanted: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[dict[str, str]]:
        empty = dict.fromkeys(wanted, "") if list(names) != list(wanted) else {}
        at_id = list(names).index("id") if "id" in names else -1  # the integer column: text like the others
        out = []
        for row in rows:
            # the common case, every cell text, stays in C (a run of thousands of rows per comparison)
            record = dict(zip(names, row))
            if at_id >= 0:
                record["id"] = str(row[at_id])
            if not all(map(str.__instancecheck__, record.values())):
                record = {n: _text(v) for n, v in record.items()}
            out.append({**empty, **record} if empty else record)
        return out

    # --- queries ---

    def version(self) -> Version:
        """The table's newest row id and triage step; ``exists`` False while there is no database or table yet."""
        def work(store: SqlStore) -> Version:
            if not store.table_exists():
                return Version(False)
            triage = history_tables.triage_version(store) if self._has_history(store) else 0
            return Version(True, int(store._execute("SELECT MAX(id) FROM {t}").fetchone()[0] or 0), triage)
        try:
            return self._run(work)
        except InputError:  # no database file or database yet: the dashboard shows how to fill it
            return Version(False)

    def identities(self) -> list[IdentityEntry]:
        """Every result identity, oldest first (by its first row)."""
        def work(store: SqlStore) -> list[IdentityEntry]:
            if IDENTITY_COLUMN not in self._columns(store):
                return self._grouped_in_python(store)
            if summary.state(store).current:
                return [_identity_entry(v) for v in summary.stored_identities(store)]
            entries = [_identity_entry(v) for v in summary.computed_identities(store)]
            return sorted(entries + self._grouped_in_python(store, f"WHERE {IDENTITY_COLUMN} IS NULL"),
                          key=lambda e: e.first_id)
        return self._run(work)

    def _grouped_in_python(self, store: SqlStore, where: str = "") -> list[IdentityEntry]:
        """Identities of rows without an ``identity_key`` (a table nobody migrated yet)."""
        select, names = self._select(store, ("id", *IDENTITY_FIELDS, "status"))
        groups: dict[ResultIdentity, list[Any]] = {}
        for row in store._execute(f"SELECT {select} FROM {{t}} {where} ORDER BY id"):
            record = dict(zip(names, row))
            entry = groups.setdefault(ResultIdentity.from_row(record), [int(record["id"]), 0, 0, 0, 0, 0])
            entry[1] = int(record["id"])
            entry[2] += 1
            status = _text(record.get("status"))
            for offset, name in enumerate(summary.STATUSES, start=3):
                entry[offset] += status == name
        return [IdentityEntry(identity.key(), identity, *values) for identity, values in groups.items()]

    def runs(self) -> list[RunEntry]:
        """Every run id, oldest first (by its first row)."""
        def work(store: SqlStore) -> list[RunEntry]:
            if "run_id" not in self._columns(store):
                return []
            if summary.state(store).current:
                return [_run_entry(v) for v in summary.stored_runs(store)]
            return sorted((_run_entry(v) for v in summary.computed_runs(store)), key=lambda r: r.first_id)
        return self._run(work)

    def rows_by_id(self, ids: Sequence[int], columns: Sequence[str] = LATEST_COLUMNS) -> dict[int, dict[str, str]]:
        """The ``columns`` of the rows of these ids."""
        def work(store: SqlStore) -> dict[int, dict[str, str]]:
            select, names = self._select(store, ("id", *columns))
            found: dict[int, dict[str, str]] = {}
            for start in range(0, len(ids), _CHUNK):
                chunk = [int(i) for i in ids[start:start + _CHUNK]]
                marks = ", ".join("?" for _ in chunk)
                rows = store._execute(f"SELECT {select} FROM {{t}} WHERE id IN ({marks})", chunk).fetchall()
                for row in self._dicts(names, columns, rows):
                    found[int(row["id"])] = row
            return found
        return self._run(work)

    def identity_rows(self, key: str) -> list[dict[str, str]]:
        """Every row (``SERIES_COLUMNS``) of one result identity, in insertion order."""
        def work(store: SqlStore) -> list[dict[str, str]]:
            if IDENTITY_COLUMN in self._columns(store):
                select, names = self._select(store, SERIES_COLUMNS)
                rows = store._execute(f"SELECT {select} FROM {{t}} WHERE {IDENTITY_COLUMN} = ? ORDER BY id",
                                      (key,)).fetchall()
                return self._dicts(names, SERIES_COLUMNS, rows)
            identity = ResultIdentity.from_key(key)  # a table without identity keys: its rows grouped here
            select, names = self._select(store, (*SERIES_COLUMNS, *IDENTITY_FIELDS))
            rows = self._dicts(names, (*SERIES_COLUMNS, *IDENTITY_FIELDS), store._execute(f"SELECT {select} FROM {{t}} ORDER BY id"))
            return [{name: row[name] for name in SERIES_COLUMNS} for row in rows if ResultIdentity.from_row(row) == identity]
        return self._run(work)

    def run_rows(self, run_id: str, columns: Sequence[str] | None = None) -> list[dict[str, str]]:
        """The rows of one run, in insertion order: shaped like perf.csv rows (``fetch_run``), or only
        ``columns`` of them."""
        def work(store: SqlStore) -> list[dict[str, str]]:
            if columns is None:
                return store.fetch_run(run_id)
            select, names = self._select(store, columns)
            rows = store._execute(f"SELECT {select} FROM {{t}} WHERE run_id = ? ORDER BY id", (run_id,)).fetchall()
            return self._dicts(names, columns, rows)
        return self._run(work)


    # --- series states and alerts (the history tables an import keeps) ---

    def _has_history(self, store: SqlStore) -> bool:
        if not getattr(self._local, "history", False):  # once there, they stay: ask until they are
            self._local.history = history_tables.present(store)
        return self._local.history

    def has_history(self) -> bool:
        """Whether the table has series states and alerts (a table an import of this release wrote)."""
        try:
            return self._run(self._has_history)
        except InputError:
            return False

    def series_overview(self) -> dict[str, dict[str, Any]]:
        """Per identity key: ``covered``, ``latest_run``, ``statuses``, ``verdict`` ({} without history)."""
        return self._run(lambda store: history_tables.series_overview(store) if self._has_history(store) else {})

    def alerts(self) -> list[Alert]:
        """Every alert (withdrawn ones included); [] without history."""
        return self._run(lambda store: history_tables.load_alerts(store) if self._has_history(store) else [])

    def states(self, keys: Sequence[str]) -> dict[str, SeriesState]:
        """The series states (tails included) of these identities."""
        return self._run(lambda store: history_tables.load_states(store, keys) if self._has_history(store) else {})
