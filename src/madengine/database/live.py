"""Rows into the results database as they land: ``madengine run --db-url URL`` (or ``MADENGINE_DB_URL``).

perf.csv stays the primary record: the pipeline appends each row there first, then hands it to
:class:`LiveRecorder`. A row gets the content key and ``relative_change`` that ``database
update-table`` of the same perf.csv would give it (the same code: ``rows.to_import_rows`` and
:func:`madengine.database.importer.import_rows`), so a later ``update-table`` adds nothing twice, and
the summary tables, change points and alerts of the dashboard stay current row by row.

A database that is down never fails a run: the first failure ends the recording for the rest of
the run (no connect timeout per row) and :meth:`LiveRecorder.record` returns one warning saying how
to import the rows later.
"""

from __future__ import annotations

from typing import Mapping

from madengine.core.errors import MadEngineError
from madengine.database.urls import DbUrl, parse_url

# the store, its drivers and the row helpers are imported when a recorder is made: every
# ``run`` asks recorder_url(), few record into a database

ENV_VARIABLE = "MADENGINE_DB_URL"
LOCK_WAIT_S = 10.0  #: how long a row waits for another import of the table (MySQL's named lock)


def recorder_url(db_url: str | None, environ: Mapping[str, str]) -> DbUrl | None:
    """The database ``run`` records into: ``--db-url``, else ``MADENGINE_DB_URL``; None for neither
    (a bad URL is an InputError before anything runs)."""
    if db_url:
        return parse_url(db_url, origin="--db-url")
    text = (environ.get(ENV_VARIABLE) or "").strip()
    return parse_url(text, origin=ENV_VARIABLE) if text else None


class LiveRecorder:
    """Inserts perf.csv rows one at a time, as they are appended to perf.csv."""

    def __init__(self, url: DbUrl, environ: Mapping[str, str], table: str | None = None) -> None:
        from madengine.database.sql import DEFAULT_TABLE

        self.url = url
        self.environ = environ
        self.table = table or DEFAULT_TABLE
        self.recorded = 0
        self.stopped = ""  #: why recording stopped ('' while it goes on)
        self._table_checked = False
        self._seen: dict[bytes, int] = {}  # occurrences of identical rows, as update-table counts them in the file

    def record(self, cells: Mapping[str, str], perf_csv: str) -> str | None:
        """Insert one row (its perf.csv cells); the warning to show when the database failed, once."""
        if self.stopped:
            return None
        from madengine.database import importer
        from madengine.database import rows as rowlib
        from madengine.database.api import open_store

        # the cells as perf.csv gives them back (read_rows strips them): the same content key; a row
        # naming figures brings their rows too (results.figures)
        rows = rowlib.to_import_rows([{k: str(v).strip() for k, v in cells.items()}], self._seen)
        row = rows[0]
        try:
            with open_store(self.url, self.table, self.environ, create=True) as store:
                if not self._table_checked:
                    store.create_table()  # the table, newer columns, summary and history tables (idempotent)
                    importer.catch_up(store)
                    self._table_checked = True
                # a run does not wait long behind a big import: its rows are in perf.csv, for later
                self.recorded += importer.import_rows(store, [rows], wait_s=LOCK_WAIT_S).inserted
        except Exception as exc:  # noqa: BLE001 - whatever the database did, the run goes on (perf.csv has the row)
            self.stopped = str(exc) if isinstance(exc, MadEngineError) else f"{type(exc).__name__}: {exc}"
            return (f"madengine: warning: the results database did not take the row of {row.get('model')} "
                    f"({self.stopped}); this run's rows go to {perf_csv} only. Import them later: madengine database "
                    f"update-table --csv-file-path {perf_csv} --db-url {self.url.shown}")
        return None
