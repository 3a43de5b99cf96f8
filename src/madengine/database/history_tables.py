"""The history tables beside a SQL results table: series states and alerts.

* ``<table>_series``: one row per result identity (``identity_hash``): the :class:`~.series.SeriesState`
  an import continues from (``state``, JSON), and what the dashboard reads of it without that JSON:
  ``covered`` (the newest row id it has seen), ``latest_run``, ``statuses``, ``verdict`` (JSON);
* ``<table>_alerts``: one row per alert (:mod:`.alerts`), with its triage (state, note, links, who, when);
* ``<table>_alert_log``: every triage step, oldest first (``id`` orders them; its newest id is part
  of the dashboard's data version, so a page shows a triage at once).

Written by imports (in their transaction) and by triage; derived from the rows except the triage,
which nothing else holds: a rebuild of the series states keeps every alert and its triage.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Sequence

from madengine.core import jsonio
from madengine.database import alerts as alertlib
from madengine.database.alerts import Alert
from madengine.database.series import SeriesState
from madengine.database.summary import MAX_NAME, SqlStore, text_hash


SERIES_SUFFIX, ALERTS_SUFFIX, LOG_SUFFIX = "_series", "_alerts", "_alert_log"
SERIES_COLUMNS = ("identity_hash", "identity_key", "covered", "latest_run", "statuses", "verdict", "state")
ALERT_COLUMNS = ("alert_id", "identity_hash", "identity_key", "model", "metric", "kind", "position", "before_run",
                 "after_run", "after_started_at", "size_percent", "confidence", "detected", "latest", "change_json",
                 "state", "note", "links", "updated_by", "updated_at", "detected_at")
LOG_COLUMNS = ("alert_id", "state", "note", "links", "by_name", "at")
_CHUNK = 500
_MYSQL_TYPES = {"identity_hash": "CHAR(64) NOT NULL", "alert_id": "CHAR(16) NOT NULL", "covered": "BIGINT NOT NULL",
                "position": "BIGINT NOT NULL", "detected": "INT NOT NULL", "latest": "INT NOT NULL",
                "size_percent": "DOUBLE", "confidence": "DOUBLE NOT NULL", "state": "MEDIUMTEXT"}
_SQLITE_TYPES = {"covered": "INTEGER NOT NULL", "position": "INTEGER NOT NULL", "detected": "INTEGER NOT NULL",
                 "latest": "INTEGER NOT NULL", "size_percent": "REAL", "confidence": "REAL NOT NULL"}


def names(table: str) -> tuple[str, str, str] | None:
    """The three history tables of ``table``; None when a name would be too long (no history kept)."""
    found = (table + SERIES_SUFFIX, table + ALERTS_SUFFIX, table + LOG_SUFFIX)
    return found if max(map(len, found)) <= MAX_NAME else None


def _type(store: SqlStore, column: str) -> str:
    mysql = store.dialect.name == "mysql"
    return (_MYSQL_TYPES if mysql else _SQLITE_TYPES).get(column, "TEXT")


def present(store: SqlStore) -> bool:
    tables = names(store.table)
    return tables is not None and all(store.table_exists(name) for name in tables)


def ensure(store: SqlStore) -> bool:
    """Create the history tables that are missing; False when the table's name leaves no room for them."""
    tables = names(store.table)
    if tables is None:
        return False
    series, alerts, log = tables
    q = store.dialect.q
    mysql = store.dialect.name == "mysql"
    suffix = " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4" if mysql else ""
    body = ", ".join(f"{q(c)} {_type(store, c)}" for c in SERIES_COLUMNS)
    store._execute(f"CREATE TABLE IF NOT EXISTS {q(series)} ({body}, PRIMARY KEY ({q('identity_hash')})){suffix}")
    body = ", ".join(f"{q(c)} {_type(store, c)}" for c in ALERT_COLUMNS)
    index = f", INDEX {q(alerts + '_series')} ({q('identity_hash')})" if mysql else ""
    store._execute(f"CREATE TABLE IF NOT EXISTS {q(alerts)} ({body}, PRIMARY KEY ({q('alert_id')}){index}){suffix}")
    if not mysql:
        store._execute(f"CREATE INDEX IF NOT EXISTS {q(alerts + '_series')} ON {q(alerts)} (identity_hash)")
    ident = "id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY" if mysql else "id INTEGER PRIMARY KEY AUTOINCREMENT"
    body = ", ".join(f"{q(c)} TEXT" for c in LOG_COLUMNS)
    store._execute(f"CREATE TABLE IF NOT EXISTS {q(log)} ({ident}, {body}){suffix}")
    return True


def _chunks(items: Sequence[Any]) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), _CHUNK):
        yield items[start:start + _CHUNK]


# --- series ------------------------------------------------------------------------------------

def load_states(store: SqlStore, keys: Iterable[str]) -> dict[str, SeriesState]:
    """The stored states of these identities (those that have one)."""
    series = names(store.table)[0]  # type: ignore[index]
    hashes = {text_hash(k): k for k in keys}
    found: dict[str, SeriesState] = {}
    for chunk in _chunks(list(hashes)):
        marks = ", ".join("?" for _ in chunk)
        for key, statuses, verdict, state in store._execute(
                f"SELECT identity_key, statuses, verdict, state FROM {store.dialect.q(series)} "
                f"WHERE identity_hash IN ({marks})", chunk).fetchall():
            found[key] = SeriesState.from_record(key, jsonio.loads(state), statuses or "",
                                                 jsonio.loads(verdict) if verdict else None)
    return found


def save_states(store: SqlStore, states: Iterable[SeriesState]) -> None:
    rows = [(text_hash(s.key), s.key, s.covered, s.tail[-1].run if s.tail else "", s.statuses,
             jsonio.dumps(s.verdict) if s.verdict else "", jsonio.dumps(s.to_record())) for s in states]
    store.replace_rows(names(store.table)[0], SERIES_COLUMNS, rows)  # type: ignore[index]


def series_overview(store: SqlStore) -> dict[str, dict[str, Any]]:
    """Per identity key: ``covered``, ``latest_run``, ``statuses``, ``verdict`` (the dashboard's read)."""
    series = names(store.table)[0]  # type: ignore[index]
    out = {}
    for key, covered, latest_run, statuses, verdict in store._execute(
            f"SELECT identity_key, covered, latest_run, statuses, verdict FROM {store.dialect.q(series)}").fetchall():
        out[key] = {"covered": int(covered or 0), "latest_run": latest_run or "", "statuses": statuses or "",
                    "verdict": jsonio.loads(verdict) if verdict else None}
    return out


def behind(store: SqlStore, ids_table: str) -> list[str]:
    """Identity keys whose state is missing or older than their latest row (rows an earlier
    release wrote), by the identity summary ``ids_table``."""
    q = store.dialect.q
    series = names(store.table)[0]  # type: ignore[index]
    return [r[0] for r in store._execute(
        f"SELECT i.identity_key FROM {q(ids_table)} i LEFT JOIN {q(series)} s ON s.identity_hash = i.identity_hash "
        "WHERE s.identity_hash IS NULL OR s.covered < i.latest_id ORDER BY i.first_id").fetchall()]


# --- alerts ------------------------------------------------------------------------------------

def _alert(values: Sequence[Any]) -> Alert:
    record = dict(zip(ALERT_COLUMNS, values))
    record["change"] = jsonio.loads(record.pop("change_json") or "{}")
    record["links"] = jsonio.loads(record["links"] or "[]")
    return alertlib.from_record(record)


def load_alerts(store: SqlStore, keys: Iterable[str] | None = None, alert_ids: Sequence[str] = ()) -> list[Alert]:
    """The alerts of these identities (every alert when None), or of these ids."""
    alerts_table = names(store.table)[1]  # type: ignore[index]
    select = f"SELECT {', '.join(store.dialect.q(c) for c in ALERT_COLUMNS)} FROM {store.dialect.q(alerts_table)}"
    if keys is None and not alert_ids:
        return [_alert(r) for r in store._execute(select).fetchall()]
    column, values = ("alert_id", list(alert_ids)) if alert_ids else \
        ("identity_hash", [text_hash(k) for k in keys or ()])
    found = []
    for chunk in _chunks(values):
        marks = ", ".join("?" for _ in chunk)
        found += [_alert(r) for r in store._execute(f"{select} WHERE {column} IN ({marks})", chunk).fetchall()]
    return found


def save_alerts(store: SqlStore, alerts: Iterable[Alert]) -> None:
    rows = [(a.alert_id, text_hash(a.identity_key), a.identity_key, a.model, a.metric, a.kind, a.position, a.before_run,
             a.after_run, a.after_started_at, a.size_percent, a.confidence, int(a.detected), int(a.latest),
             jsonio.dumps(a.change), a.state, a.note, jsonio.dumps(a.links), a.updated_by, a.updated_at, a.detected_at)
            for a in alerts]
    store.replace_rows(names(store.table)[1], ALERT_COLUMNS, rows)  # type: ignore[index]


def log_triage(store: SqlStore, alert: Alert) -> None:
    q = store.dialect.q
    log = names(store.table)[2]  # type: ignore[index]
    store._execute(f"INSERT INTO {q(log)} ({', '.join(q(c) for c in LOG_COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?)",
                   (alert.alert_id, alert.state, alert.note, jsonio.dumps(alert.links), alert.updated_by,
                    alert.updated_at))


def triage_log(store: SqlStore, alert_id: str) -> list[dict[str, Any]]:
    q = store.dialect.q
    log = names(store.table)[2]  # type: ignore[index]
    rows = store._execute(f"SELECT id, {', '.join(q(c) for c in LOG_COLUMNS)} FROM {q(log)} WHERE alert_id = ? "
                          "ORDER BY id", (alert_id,)).fetchall()
    return [{"state": r[2], "note": r[3] or "", "links": jsonio.loads(r[4] or "[]"), "by": r[5] or "", "at": r[6] or ""}
            for r in rows]


def triage_version(store: SqlStore) -> int:
    """The newest triage step's id (0 for none): part of the dashboard's data version."""
    log = names(store.table)[2]  # type: ignore[index]
    return int(store._execute(f"SELECT MAX(id) FROM {store.dialect.q(log)}").fetchone()[0] or 0)


def update_relative_change(store: SqlStore, updates: Sequence[tuple[int, str]]) -> None:
    statement = store._sql("UPDATE {t} SET relative_change = ? WHERE id = ?")
    cursor = store.connection.cursor()
    for chunk in _chunks([(text, row_id) for row_id, text in updates]):
        cursor.executemany(statement, list(chunk))
