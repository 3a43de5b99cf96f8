"""One import into a results store: rows in batches, then one pass per result series it touched.

``database update-table`` (a perf.csv, streamed by :class:`~.rows.PerfCsv`), ``run --db-url`` (one
row at a time, :mod:`.live`) and the catch-up of ``create-table`` all go through here, on SQLite,
MySQL and MongoDB alike (the stores offer the same operations):

1. the import becomes the table's only writer (``store.begin_import``) and notes the newest row
   (``store.mark``): every row after it is this import's;
2. per batch of rows: the content keys already stored are skipped, each new row gets the
   ``relative_change`` a running window gives (:class:`~.series.RunningBaselines`, seeded from the
   series states), the batch is inserted;
3. the summary tables take in the new rows (one GROUP BY over them, SQL);
4. per touched series, one :func:`~.series.advance`: change points of its tail and new runs, the
   corrected ``relative_change`` cells, its latest run's verdict; the alerts of its changes
   (:func:`~.alerts.reconcile`, triage kept).

So when the import returns, every change and count is complete. Progress goes to the reporter every
``PROGRESS_EVERY_S`` seconds once an import takes that long (rows so far, share, an estimate).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import itertools
import multiprocessing
import os
import queue
import threading
import time
from typing import Any, Iterable, Iterator, Sequence

from madengine.core.events import Reporter
from madengine.database import alerts as alertlib
from madengine.database.rows import IDENTITY_COLUMN, ImportRow, now_text
from madengine.database.series import Advance, RunningBaselines, SeriesState, advance

SERIES_CHUNK = 100  #: series whose new rows are read and written at once
WORKERS_FROM = 50_000  #: rows an import brings from which its series are advanced in worker processes
#: (a nightly run adds one point to each series: its work is small, handing it out would cost as much)
MAX_WORKERS = 4
PROGRESS_EVERY_S = 5.0

Store = Any  # SqlStore | MongoStore


@dataclasses.dataclass
class Outcome:
    inserted: int = 0
    already_stored: int = 0
    series: int = 0  #: series brought up to date
    new_alerts: int = 0  #: changes found for the first time
    corrected: int = 0  #: relative_change cells the series pass corrected


class Prefetch:
    """The batches of an iterable made in a thread, at most ``depth`` ahead: reading and keying the
    next rows overlaps with the database writing the last ones (SQLite and the drivers release the
    interpreter while they work). An exception of the reader comes out where the batch would have."""

    _END = object()

    def __init__(self, source: Iterable[list[ImportRow]], depth: int = 2) -> None:
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._fill, args=(iter(source),), name="madengine-import-read",
                                        daemon=True)
        self._thread.start()

    def _fill(self, source: Iterator[list[ImportRow]]) -> None:
        try:
            for batch in source:
                while not self._stop.is_set():
                    try:
                        self._queue.put(batch, timeout=0.2)
                        break
                    except queue.Full:
                        continue
                if self._stop.is_set():
                    return
            self._queue.put(self._END)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            self._queue.put(exc)

    def __iter__(self) -> Iterator[list[ImportRow]]:
        try:
            while True:
                item = self._queue.get()
                if item is self._END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            self._stop.set()
            self._thread.join(timeout=5)


class Progress:
    """Lines on the reporter for a long import; nothing for one that takes less than PROGRESS_EVERY_S."""

    def __init__(self, reporter: Reporter | None, what: str) -> None:
        self.reporter = reporter
        self.what = what
        self._last = time.monotonic()
        self._started: dict[str, float] = {}

    def __call__(self, done: int, total: int, unit: str) -> None:
        now = time.monotonic()
        started = self._started.setdefault(unit, now)
        if self.reporter is None or now - self._last < PROGRESS_EVERY_S or not total:
            return
        self._last = now
        spent = now - started
        left = f", about {spent / done * (total - done):.0f} s left" if 0 < done < total else ""
        self.reporter.message(f"madengine: {self.what}: {done:,} of {total:,} {unit} ({done / total:.0%}){left}")


def import_rows(store: Store, batches: Iterable[list[ImportRow]], *, total: int = 0, reporter: Reporter | None = None,
                what: str = "import", created_date: str | None = None, wait_s: float | None = None) -> Outcome:
    """Insert the new rows of ``batches`` (see the module docstring); ``total``: rows to expect, for
    the progress lines; ``wait_s``: how long to wait for another import of the table (the store's own
    default when None)."""
    created_date = created_date or now_text()
    progress = Progress(reporter, what)
    if wait_s is None:
        store.begin_import()
    else:
        store.begin_import(wait_s)
    mark = store.mark()
    history = store.keeps_history()
    baselines = RunningBaselines({})
    touched: dict[str, None] = {}
    states: dict[str, SeriesState] = {}  # loaded to seed the running window: the series pass goes on from them
    outcome, done = Outcome(), 0
    progress(0, total, "rows")
    with store.bulk() if mark == 0 else contextlib.nullcontext():
        for batch in Prefetch(batches):
            done += len(batch)
            _insert_batch(store, batch, baselines, touched, states if history and mark else None, created_date,
                          outcome, empty=mark == 0)
            progress(done, total, "rows")
    if outcome.inserted:
        store.absorb(mark)
        if history:
            update_series(store, mark, list(touched), outcome, progress, states)
    return outcome


def _insert_batch(store: Store, batch: list[ImportRow], baselines: RunningBaselines, touched: dict[str, None],
                  states: dict[str, SeriesState] | None, created_date: str, outcome: Outcome, *, empty: bool) -> None:
    """The rows of ``batch`` the store does not have, with their running ``relative_change``
    (``states``: where the series states loaded to seed the window go; None: nothing to seed)."""
    stored = set() if empty else store.existing_keys([row.key for row in batch])  # an empty table has none
    fresh = [row for row in batch if row.key not in stored]
    unseen = [g for g in dict.fromkeys(row.group for row in fresh) if g not in touched]
    if unseen and states is not None:
        loaded = store.load_states(unseen)
        states.update(loaded)
        baselines.seed({key: state.baseline for key, state in loaded.items()})
    for row in fresh:
        touched[row.group] = None
        row.set("relative_change", baselines.relative_change(row.group, row.get("status"), row.get("performance")))
    outcome.inserted += store.insert(fresh, created_date)
    outcome.already_stored += len(batch) - len(fresh)


class _NeedsRows(Exception):
    """A worker's advance() wants every row of the series: the importing process reads them."""


def _read_all_elsewhere() -> list[dict[str, Any]]:
    raise _NeedsRows


def _advance_in_worker(state: SeriesState | None, key: str, rows: list[dict[str, Any]], reread: bool,
                       since: int) -> Advance | None:
    """advance() in a worker process (no database there): None when the series must be read whole."""
    try:
        return advance(state, key, rows, _read_all_elsewhere if reread else None, since=since)
    except _NeedsRows:
        return None


class _Workers:
    """Where the series of a big import are advanced: worker processes (as many as the machine has
    cores, up to MAX_WORKERS) while this process reads the next series and writes the last; in this
    process alone for a small import.

    The workers are forked: a spawned one would run the caller's script again (a script calling
    ``update_table`` needs no ``if __name__ == "__main__"``). They only compute, never touch the
    database connection they inherit, and leave through ``os._exit`` (multiprocessing's fork
    workers do), so the connection is never closed or rolled back in them."""

    def __init__(self, rows: int, series: int) -> None:
        cores = os.cpu_count() or 1
        self.pool = None
        if rows >= WORKERS_FROM and series > 1 and cores > 1 and "fork" in multiprocessing.get_all_start_methods():
            self.pool = concurrent.futures.ProcessPoolExecutor(
                max_workers=min(cores, MAX_WORKERS), mp_context=multiprocessing.get_context("fork"))

    def submit(self, task: tuple[Any, ...]) -> tuple[tuple[Any, ...], Any]:
        return task, None if self.pool is None else self.pool.submit(_advance_in_worker, *task)

    @staticmethod
    def result(store: Store, handle: tuple[tuple[Any, ...], Any]) -> Advance:
        task, future = handle
        step = None if future is None else future.result()
        if step is None:  # in this process: a small import, or a series to read whole
            state, key, rows, reread, since = task
            step = advance(state, key, rows, (lambda: store.identity_rows(key)) if reread else None, since=since)
        return step

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


def update_series(store: Store, mark: int, keys: Sequence[str], outcome: Outcome, progress: Progress,
                  states: dict[str, SeriesState] | None = None) -> None:
    """One :func:`advance` per series of ``keys`` over its rows after ``mark``, and their alerts; the
    series of one chunk are advanced while the next chunk is read (``states``: those loaded already)."""
    keys = sorted(keys)
    progress(0, len(keys), "series")
    workers = _Workers(outcome.inserted, len(keys))
    try:
        pending: tuple[list[str], list[Any]] | None = None
        for start in range(0, len(keys) + SERIES_CHUNK, SERIES_CHUNK):
            chunk = keys[start:start + SERIES_CHUNK]
            submitted = _submit_chunk(store, mark, chunk, workers, states or {}) if chunk else None
            if pending is not None:
                _finish_chunk(store, *pending, workers, outcome)
                progress(min(start, len(keys)), len(keys), "series")
            pending = submitted
    finally:
        workers.close()


def _submit_chunk(store: Store, mark: int, chunk: list[str], workers: _Workers,
                  loaded: dict[str, SeriesState]) -> tuple[list[str], list[Any]]:
    missing = [key for key in chunk if key not in loaded]
    states = {**{key: loaded.pop(key) for key in chunk if key in loaded}, **(store.load_states(missing) if missing else {})}
    handles = []
    for key, rows in itertools.groupby(store.new_rows(mark, chunk), key=lambda r: r[IDENTITY_COLUMN]):
        state = states.get(key)
        handles.append(workers.submit((state, key, list(rows), state is not None or store.has_rows_before(key, mark),
                                       mark)))
    return chunk, handles


def _finish_chunk(store: Store, chunk: list[str], handles: list[Any], workers: _Workers, outcome: Outcome) -> None:
    now = now_text()
    existing: dict[str, list[alertlib.Alert]] = {}
    for alert in store.load_alerts(chunk):
        existing.setdefault(alert.identity_key, []).append(alert)
    saved_states, saved_alerts, updates = [], [], []
    for handle in handles:
        step = workers.result(store, handle)
        key = step.state.key
        saved_states.append(step.state)
        known = {a.alert_id for a in existing.get(key, [])}
        changed = alertlib.reconcile(existing.get(key, []), step.changes, step.frozen_before, now)
        outcome.new_alerts += sum(a.alert_id not in known for a in changed)
        saved_alerts += changed
        updates += step.updates
    store.save_states(saved_states)
    store.save_alerts(saved_alerts)
    store.update_relative_change(updates)
    outcome.series += len(saved_states)
    outcome.corrected += len(updates)


def catch_up(store: Store, reporter: Reporter | None = None) -> int:
    """Series states for identities that have none or are behind their rows (rows an earlier
    release wrote, or a table made before series states existed): each series read whole, its
    change points found, its alerts made. Returns how many series were brought up to date."""
    if not store.keeps_history():
        return 0
    keys = store.series_behind()
    if not keys:
        return 0
    progress = Progress(reporter, "change points of earlier rows")
    mark, now = store.mark(), now_text()
    for start in range(0, len(keys), SERIES_CHUNK):
        chunk = keys[start:start + SERIES_CHUNK]
        existing: dict[str, list[alertlib.Alert]] = {}
        for alert in store.load_alerts(chunk):
            existing.setdefault(alert.identity_key, []).append(alert)
        saved_states, saved_alerts = [], []
        for key in chunk:
            step = advance(None, key, [], lambda k=key: store.identity_rows(k), since=mark)
            saved_states.append(step.state)
            saved_alerts += alertlib.reconcile(existing.get(key, []), step.changes, 0, now)
        store.save_states(saved_states)
        store.save_alerts(saved_alerts)
        progress(start + len(chunk), len(keys), "series")
    return len(keys)
