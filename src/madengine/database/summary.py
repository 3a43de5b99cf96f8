"""The summary tables of the results table: one row per result identity and one per run.

Over a million rows, "the latest row of every result identity" and "every run with its counts" are
GROUP BY queries over the whole table (seconds). Two small tables answer them at once (the
dashboard, ``madengine report serve``, reads them):

* ``<table>_ids``: per result identity (``identity_hash`` = SHA-256 of ``identity_key``): the
  identity's fields, its first and latest row id, and its row and SUCCESS/FAILURE/SKIPPED counts;
* ``<table>_runs``: per run id (``run_hash`` = SHA-256 of ``run_id``): first and latest row id, row
  and status counts, distinct models, the earliest ``started_at`` and ``created_date``, the machine.

They hold derived data only and are always made from the rows, never the other way round:

* every import (``database update-table`` and ``run --db-url``, through
  :mod:`madengine.database.importer`) adds its rows to the entries they belong to (:func:`absorb`:
  one GROUP BY over the new rows only), in the same transaction;
* ``create_table`` builds them from the rows when they are missing (a table of an earlier release is
  migrated in place) or when they no longer count every row (an earlier release wrote rows since).

Readers fall back to GROUP BY queries over the rows while the summaries are missing or behind
(:func:`is_current`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
from typing import Any, Iterable, Protocol, Sequence

from madengine.database.rows import IDENTITY_COLUMN
from madengine.results.columns import Status
from madengine.results.identity import FIELDS as IDENTITY_FIELDS
from madengine.results.identity import ResultIdentity


class SqlStore(Protocol):
    """What the summaries use of a :class:`madengine.database.sql.SqlStore` (which calls them on
    insert: a protocol here, not an import, keeps the two modules out of a circle)."""

    table: str
    dialect: Any
    connection: Any

    def _sql(self, text: str) -> str: ...

    def _execute(self, text: str, params: Sequence[Any] = ()) -> Any: ...


IDS_SUFFIX = "_ids"
RUNS_SUFFIX = "_runs"
MAX_NAME = 64  # MySQL's identifier limit; a longer summary table name means no summaries (readers fall back)
COUNTS = ("n_rows", "n_success", "n_failure", "n_skipped")
IDS_COLUMNS = ("identity_hash", IDENTITY_COLUMN, *IDENTITY_FIELDS, "first_id", "latest_id", *COUNTS)
RUNS_COLUMNS = ("run_hash", "run_id", "first_id", "latest_id", *COUNTS, "n_models", "started_at", "created_date",
                "machine_name")
_INTEGERS = frozenset(("first_id", "latest_id", "n_models", *COUNTS))
_KEYS = ("identity_hash", "run_hash")
_STATUS_SUMS = ("COUNT(*), SUM(CASE WHEN status = ? THEN 1 ELSE 0 END), SUM(CASE WHEN status = ? THEN 1 ELSE 0 END), "
                "SUM(CASE WHEN status = ? THEN 1 ELSE 0 END)")
STATUSES = (Status.SUCCESS, Status.FAILURE, Status.SKIPPED)
_RUN_AGGREGATES = (f"MIN(id), MAX(id), {_STATUS_SUMS}, COUNT(DISTINCT model), MIN(NULLIF(started_at, '')), "
                   "MIN(created_date), MAX(machine_name)")
_IDENTITY_AGGREGATES = f"MIN(id), MAX(id), {_STATUS_SUMS}"


def text_hash(text: str) -> str:
    """The key of a summary entry: SHA-256 of the identity key or run id (TEXT cannot be a MySQL key)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def names(table: str) -> tuple[str, str] | None:
    """The two summary tables of ``table``, or None when their names would be too long."""
    ids, runs = table + IDS_SUFFIX, table + RUNS_SUFFIX
    return (ids, runs) if max(len(ids), len(runs)) <= MAX_NAME else None


def _column_type(store: SqlStore, name: str) -> str:
    mysql = store.dialect.name == "mysql"
    if name in _KEYS:
        return "CHAR(64) NOT NULL PRIMARY KEY" if mysql else "TEXT NOT NULL PRIMARY KEY"
    if name in _INTEGERS:
        return "BIGINT NOT NULL DEFAULT 0" if mysql else "INTEGER NOT NULL DEFAULT 0"
    return "TEXT"


def _create(store: SqlStore, name: str, columns: Sequence[str]) -> None:
    q = store.dialect.q
    body = ", ".join(f"{q(c)} {_column_type(store, c)}" for c in columns)
    suffix = " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4" if store.dialect.name == "mysql" else ""
    store._execute(f"CREATE TABLE IF NOT EXISTS {q(name)} ({body}){suffix}")


def _number(value: Any) -> int:
    return int(value or 0)


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _identity_entry(key: str, aggregates: Sequence[Any]) -> tuple[Any, ...]:
    first, latest, rows, success, failure, skipped = aggregates
    identity = ResultIdentity.from_key(key)
    return (text_hash(key), key, *(getattr(identity, f) for f in IDENTITY_FIELDS), _number(first), _number(latest),
            _number(rows), _number(success), _number(failure), _number(skipped))


def _run_entry(run_id: str, aggregates: Sequence[Any]) -> tuple[Any, ...]:
    first, latest, rows, success, failure, skipped, models, started, created, machine = aggregates
    return (text_hash(run_id), run_id, _number(first), _number(latest), _number(rows), _number(success),
            _number(failure), _number(skipped), _number(models), _text(started), _text(created), _text(machine))


def refresh(store: SqlStore, identity_keys: Iterable[str], run_ids: Iterable[str]) -> None:
    """Recompute the entries of these identities and runs from the rows (after an insert)."""
    tables = names(store.table)
    if tables is None:
        return
    ids_table, runs_table = tables
    identity_rows, run_rows = [], []
    for key in sorted(set(identity_keys)):
        aggregates = store._execute(f"SELECT {_IDENTITY_AGGREGATES} FROM {{t}} WHERE {IDENTITY_COLUMN} = ?",
                                    (*STATUSES, key)).fetchone()
        if aggregates and aggregates[2]:
            identity_rows.append(_identity_entry(key, aggregates))
    for run_id in sorted({r for r in run_ids if r}):
        aggregates = store._execute(f"SELECT {_RUN_AGGREGATES} FROM {{t}} WHERE run_id = ?",
                                    (*STATUSES, run_id)).fetchone()
        if aggregates and aggregates[2]:
            run_rows.append(_run_entry(run_id, aggregates))
    store.replace_rows(ids_table, IDS_COLUMNS, identity_rows)
    store.replace_rows(runs_table, RUNS_COLUMNS, run_rows)


def _stored_by(store: SqlStore, name: str, columns: Sequence[str], key: str,
               values: Sequence[str]) -> dict[str, tuple[Any, ...]]:
    q = store.dialect.q
    found = {}
    for start in range(0, len(values), 500):
        chunk = list(values[start:start + 500])
        marks = ", ".join("?" for _ in chunk)
        for row in store._execute(f"SELECT {', '.join(q(c) for c in columns)} FROM {q(name)} WHERE {q(key)} IN ({marks})",
                                  chunk).fetchall():
            found[str(row[0])] = row
    return found


class Tally:
    """The aggregates :func:`absorb` takes in, counted as an import writes its rows: what its GROUP
    BY over them would give (the same figures, in the same order), without reading a million rows
    back."""

    def __init__(self, created_date: str) -> None:
        self.created_date = created_date
        self._identities: dict[str, list[Any]] = {}  # first, latest, rows, SUCCESS, FAILURE, SKIPPED, other
        #: as identities, then its distinct models, earliest start, latest machine, and which models
        #: it has: one bit per model number (a set of each run's model names kept 550,000 strings alive
        #: at a million rows: 75 MB)
        self._runs: dict[str, list[Any]] = {}
        self._models: dict[str, int] = {}  # model -> its number

    def extend(self, first_id: int, identity_keys: Sequence[str], statuses: Sequence[str], run_ids: Sequence[str],
               models: Sequence[str], starts: Sequence[str], machines: Sequence[str]) -> None:
        """Rows ``first_id``, ``first_id + 1``, ... (ids ascending) with these cells, as stored, one
        per item of each argument (one call a batch: the loop's names stay local)."""
        identities, runs, model_numbers = self._identities, self._runs, self._models
        counted = map(_COUNTED.get, statuses, itertools.repeat(6))
        for row_id, identity_key, count, run_id, model, started_at, machine_name in zip(
                itertools.count(first_id), identity_keys, counted, run_ids, models, starts, machines):
            entry = identities.get(identity_key)
            if entry is None:
                entry = identities[identity_key] = [row_id, row_id, 0, 0, 0, 0, 0]
            entry[1] = row_id
            entry[2] += 1
            entry[count] += 1
            if not run_id:
                continue
            run = runs.get(run_id)
            if run is None:
                run = runs[run_id] = [row_id, row_id, 0, 0, 0, 0, 0, 0, started_at, machine_name, bytearray()]
            run[1] = row_id
            run[2] += 1
            run[count] += 1
            number = model_numbers.get(model)
            if number is None:
                number = model_numbers[model] = len(model_numbers)
            seen, at, bit = run[10], number >> 3, 1 << (number & 7)
            if at >= len(seen):
                seen.extend(bytes(at + 1 - len(seen)))
            if not seen[at] & bit:
                seen[at] |= bit
                run[7] += 1
            if started_at and (not run[8] or started_at < run[8]):
                run[8] = started_at
            if machine_name > run[9]:
                run[9] = machine_name

    def identities(self) -> list[tuple[Any, ...]]:
        """(identity key, first id, latest id, rows, successes, failures, skipped), by key."""
        return [(key, *entry[:6]) for key, entry in sorted(self._identities.items())]

    def runs(self) -> list[tuple[Any, ...]]:
        """(run id, ``_RUN_AGGREGATES``), by run id."""
        return [(run_id, *run[:6], run[7], run[8] or None, self.created_date, run[9])
                for run_id, run in sorted(self._runs.items())]


_COUNTED = {status: 3 + k for k, status in enumerate(STATUSES)}  #: where Tally counts a status


def absorb(store: SqlStore, mark: int, tally: Tally | None = None) -> None:
    """Add the rows after ``mark`` (one import's, written while it was the table's only writer) to
    the entries of their identities and runs: one GROUP BY over those rows, or the ``tally`` of them
    the import kept. A run that had rows before is recomputed from all of its rows (its distinct
    models cannot be added up)."""
    tables = names(store.table)
    if tables is None:
        return
    ids_table, runs_table = tables
    if tally is not None:
        new_ids = tally.identities()
    else:
        new_ids = store._execute(f"SELECT {IDENTITY_COLUMN}, {_IDENTITY_AGGREGATES} FROM {{t}} WHERE id > ? AND "
                                 f"{IDENTITY_COLUMN} IS NOT NULL GROUP BY {IDENTITY_COLUMN}",
                                 (*STATUSES, mark)).fetchall()
    stored = _stored_by(store, ids_table, IDS_COLUMNS, "identity_hash", [text_hash(_text(r[0])) for r in new_ids])
    entries = []
    for key, first, latest, rows, success, failure, skipped in new_ids:
        old = stored.get(text_hash(_text(key)))
        if old is not None:
            before = dict(zip(IDS_COLUMNS, old))
            first = before["first_id"]
            rows, success, failure, skipped = (_number(a) + _number(before[c]) for a, c in
                                               zip((rows, success, failure, skipped), COUNTS))
        entries.append(_identity_entry(_text(key), (first, latest, rows, success, failure, skipped)))
    store.replace_rows(ids_table, IDS_COLUMNS, entries)
    if tally is not None:
        new_runs = tally.runs()
    else:
        new_runs = store._execute(f"SELECT run_id, {_RUN_AGGREGATES} FROM {{t}} WHERE id > ? AND run_id IS NOT NULL "
                                  "AND run_id <> '' GROUP BY run_id", (*STATUSES, mark)).fetchall()
    known = _stored_by(store, runs_table, RUNS_COLUMNS, "run_hash", [text_hash(_text(r[0])) for r in new_runs])
    store.replace_rows(runs_table, RUNS_COLUMNS, [_run_entry(_text(r[0]), r[1:]) for r in new_runs
                                               if text_hash(_text(r[0])) not in known])
    refresh(store, (), [_text(r[0]) for r in new_runs if text_hash(_text(r[0])) in known])


def computed_identities(store: SqlStore) -> list[tuple[Any, ...]]:
    """The identity entries (``IDS_COLUMNS``) computed from the rows that have an identity key."""
    return [_identity_entry(_text(r[0]), r[1:]) for r in store._execute(
        f"SELECT {IDENTITY_COLUMN}, {_IDENTITY_AGGREGATES} FROM {{t}} WHERE {IDENTITY_COLUMN} IS NOT NULL "
        f"GROUP BY {IDENTITY_COLUMN}", STATUSES).fetchall()]


def computed_runs(store: SqlStore) -> list[tuple[Any, ...]]:
    """The run entries (``RUNS_COLUMNS``) computed from the rows."""
    return [_run_entry(_text(r[0]), r[1:]) for r in store._execute(
        f"SELECT run_id, {_RUN_AGGREGATES} FROM {{t}} WHERE run_id IS NOT NULL AND run_id <> '' GROUP BY run_id",
        STATUSES).fetchall()]


def stored_identities(store: SqlStore) -> list[tuple[Any, ...]]:
    return _stored(store, names(store.table)[0], IDS_COLUMNS)  # type: ignore[index]


def stored_runs(store: SqlStore) -> list[tuple[Any, ...]]:
    return _stored(store, names(store.table)[1], RUNS_COLUMNS)  # type: ignore[index]


def _stored(store: SqlStore, name: str, columns: Sequence[str]) -> list[tuple[Any, ...]]:
    q = store.dialect.q
    cursor = store._execute(f"SELECT {', '.join(q(c) for c in columns)} FROM {q(name)} ORDER BY first_id")
    return [tuple(_number(v) if c in _INTEGERS else _text(v) for c, v in zip(columns, row)) for row in cursor.fetchall()]


def rebuild(store: SqlStore) -> None:
    """Every entry anew from the rows (one GROUP BY per summary table)."""
    tables = names(store.table)
    if tables is None:
        return
    ids_table, runs_table = tables
    identity_rows, run_rows = computed_identities(store), computed_runs(store)
    store._execute(f"DELETE FROM {store.dialect.q(ids_table)}")
    store._execute(f"DELETE FROM {store.dialect.q(runs_table)}")
    store.replace_rows(ids_table, IDS_COLUMNS, identity_rows)
    store.replace_rows(runs_table, RUNS_COLUMNS, run_rows)


def present(store: SqlStore) -> bool:
    tables = names(store.table)
    return tables is not None and all(store.table_exists(name) for name in tables)


def _count_matches(store: SqlStore, name: str, where: str) -> bool:
    summed = store._execute(f"SELECT COALESCE(SUM(n_rows), 0) FROM {store.dialect.q(name)}").fetchone()[0]
    counted = store._execute(f"SELECT COUNT(*) FROM {{t}} WHERE {where}").fetchone()[0]
    return int(summed) == int(counted)


def ensure(store: SqlStore) -> bool:
    """Create the summary tables, and build them from the rows when new or not counting every row.

    Returns True when they were (re)built. Called by ``create_table`` after the rows' identity keys
    are filled in."""
    tables = names(store.table)
    if tables is None:
        return False
    ids_table, runs_table = tables
    existed = present(store)
    _create(store, ids_table, IDS_COLUMNS)
    _create(store, runs_table, RUNS_COLUMNS)
    if existed and _count_matches(store, ids_table, f"{IDENTITY_COLUMN} IS NOT NULL") \
            and _count_matches(store, runs_table, "run_id IS NOT NULL AND run_id <> ''"):
        return False
    rebuild(store)
    return True


@dataclasses.dataclass(frozen=True)
class State:
    """What a reader needs to know about the summaries: present, and covering the newest row."""

    present: bool
    max_id: int  #: the table's newest row id (0 when empty)
    covered_id: int  #: the newest row id the identity summary has seen

    @property
    def current(self) -> bool:
        return self.present and self.covered_id == self.max_id


def state(store: SqlStore) -> State:
    """Cheap (two indexed MAX queries): whether the summaries can answer for the table right now."""
    max_id = _number(store._execute("SELECT MAX(id) FROM {t}").fetchone()[0])
    if not present(store):
        return State(False, max_id, 0)
    ids_table = names(store.table)[0]  # type: ignore[index]
    covered = _number(store._execute(f"SELECT MAX(latest_id) FROM {store.dialect.q(ids_table)}").fetchone()[0])
    return State(True, max_id, covered)
