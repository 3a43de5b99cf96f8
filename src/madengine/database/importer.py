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
import multiprocessing
import os
import pickle
import time
from typing import Any, Callable, Iterable, Iterator, Protocol, Sequence

from madengine.core.errors import ServiceError
from madengine.core.events import Reporter
from madengine.database import alerts as alertlib
from madengine.database.rows import ImportRow, now_text
from madengine.database.series import ROW_COLUMNS, Advance, RunningBaselines, SeriesState, advance

SERIES_CHUNK = 100  #: series whose new rows are read and written at once
READ_AHEAD_FROM = 32 << 20  #: bytes of a perf.csv to read from which its batches are read in a child process (ReadAhead)
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


class RepeatsEarlierRow(Exception):
    """A row read after the rows an earlier import of the same file read is stored at or before that
    import's last row: it may repeat a row not read this time, whose occurrence number (part of its
    content key) only a whole read of the file gives."""


class Source(Protocol):
    """What an import reads its rows from (:class:`~.rows.PerfCsv`): batches, how far the reading got
    (``share``), and what it read, to hand from a reading process to the importing one."""

    share: float

    def batches(self) -> Iterable[list[ImportRow]]: ...

    def read(self) -> Any: ...

    def take(self, read: Any) -> None: ...


class ReadAhead:
    """The row batches of a big perf.csv made in a forked child process while this one writes the
    last ones: reading, checking and keying the rows (pure Python, half of an import's work) then
    runs on another core. The child only reads the file and sends each batch down a pipe
    (:func:`_pack`: the cells of a batch as one text, a few bytes a row beside it, so that handing a
    row over costs a small part of making it); the pipe holds the child back when it is a batch
    ahead. At the end it sends what it read (``source.read()``, taken here by ``source.take``). An
    exception of the child comes out where its batch would have. A small import (``size`` bytes to
    read below ``READ_AHEAD_FROM``), or a platform without fork, reads its batches here.

    Use as a context manager entered before the store is opened: the child then holds no database
    connection. It leaves through ``os._exit`` (multiprocessing's fork processes do) and is reaped,
    or killed, when the block ends, whether the batches were all read or not."""

    def __init__(self, source: Source, size: int) -> None:
        self._source = source
        self.forks = size >= READ_AHEAD_FROM and "fork" in multiprocessing.get_all_start_methods()
        self._child: Any = None
        self._reader: Any = None

    def __enter__(self) -> "ReadAhead":
        if self.forks:
            context = multiprocessing.get_context("fork")
            self._reader, writer = context.Pipe(duplex=False)
            self._child = context.Process(target=_send_batches, args=(self._source, writer),
                                          name="madengine-import-read", daemon=True)
            self._child.start()
            writer.close()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self._child is not None:
            self._reader.close()  # a child still sending gets a broken pipe and leaves
            self._child.join(timeout=5)
            if self._child.is_alive():
                self._child.kill()
                self._child.join()
            self._child = None

    def __iter__(self) -> Iterator[list[ImportRow]]:
        if self._child is None:
            yield from self._source.batches()
            return
        while True:
            try:
                message = self._reader.recv_bytes()
            except EOFError:
                raise ServiceError(f"the process reading the rows ended early (exit code {self._child.exitcode})",
                                   hint="run the import again") from None
            kind, payload = message[:1], message[1:]
            if kind == b"E":
                self._source.take(pickle.loads(payload))
                return
            if kind == b"X":
                raise pickle.loads(payload)
            self._source.share, batch = _unpack(payload)
            yield batch


_CELL, _ROW = "\x1f", "\x1e"  #: ASCII unit and record separators: what joins a batch's cells into one text


def _pack(batch: list[ImportRow], share: float) -> bytes:
    """A batch as ``_unpack`` makes it again: its cells joined into one text (split again in C, far
    cheaper than pickling each cell), its keys, its identity keys once each; pickled whole when a
    cell holds a separator."""
    cells = _ROW.join(_CELL.join(row.values) for row in batch)
    width = len(batch[0].values) if batch else 0
    if cells.count(_CELL) != len(batch) * (width - 1) or cells.count(_ROW) != max(len(batch) - 1, 0):
        return pickle.dumps((share, batch), pickle.HIGHEST_PROTOCOL)
    groups: dict[str, int] = {}
    numbers = [groups.setdefault(row.group, len(groups)) for row in batch]
    extras = [row.extra for row in batch] if any(row.extra for row in batch) else None
    return pickle.dumps((share, ([row.key for row in batch], cells, list(groups), numbers, extras)),
                        pickle.HIGHEST_PROTOCOL)


def _unpack(payload: bytes) -> tuple[float, list[ImportRow]]:
    share, packed = pickle.loads(payload)
    if isinstance(packed, list):
        return share, packed
    keys, cells, groups, numbers, extras = packed
    rows = cells.split(_ROW) if keys else []
    return share, [ImportRow(key, row.split(_CELL), extras[k] if extras else {}, groups[number])
                   for k, (key, row, number) in enumerate(zip(keys, rows, numbers))]


def _send_batches(source: Source, writer: Any) -> None:
    """The child of :class:`ReadAhead`: every batch of ``source``, then what it read, or the exception."""
    try:
        for batch in source.batches():
            writer.send_bytes(b"B" + _pack(batch, source.share))
        writer.send_bytes(b"E" + pickle.dumps(source.read(), pickle.HIGHEST_PROTOCOL))
    except BrokenPipeError:
        return  # the import stopped reading
    except BaseException as exc:  # noqa: BLE001 - handed to the importing process, raised there
        try:
            payload = pickle.dumps(exc)
            pickle.loads(payload)  # an exception that cannot be rebuilt there is sent as its line
        except Exception:  # noqa: BLE001
            payload = pickle.dumps(ServiceError(f"reading the rows failed: {type(exc).__name__}: {exc}"))
        with contextlib.suppress(OSError):
            writer.send_bytes(b"X" + payload)


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
                what: str = "import", created_date: str | None = None, wait_s: float | None = None,
                earlier_through: int | None = None, share: Callable[[], float] | None = None) -> Outcome:
    """Insert the new rows of ``batches`` (see the module docstring); ``total``: rows to expect, for
    the progress lines (0: unknown, estimated from ``share``, the share of the file read so far);
    ``wait_s``: how long to wait for another import of the table (the store's own default when
    None); ``earlier_through``: the rows are what was appended to a file after an earlier import of
    it, which ended with this row id (:class:`RepeatsEarlierRow`)."""
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
        for batch in batches:
            done += len(batch)
            _insert_batch(store, batch, baselines, touched, states if history and mark else None, created_date,
                          outcome, empty=mark == 0, earlier_through=earlier_through)
            read = share() if share is not None else 0.0
            progress(done, total or (round(done / read) if read else 0), "rows")
    store.rows_written()
    if outcome.inserted:
        store.absorb(mark)
        if history:
            update_series(store, mark, list(touched), outcome, progress, states)
    return outcome


def _insert_batch(store: Store, batch: list[ImportRow], baselines: RunningBaselines, touched: dict[str, None],
                  states: dict[str, SeriesState] | None, created_date: str, outcome: Outcome, *, empty: bool,
                  earlier_through: int | None = None) -> None:
    """The rows of ``batch`` the store does not have, with their running ``relative_change``
    (``states``: where the series states loaded to seed the window go; None: nothing to seed)."""
    stored = set() if empty else store.existing_keys([row.key for row in batch])  # an empty table has none
    if stored and earlier_through is not None and store.stored_through(sorted(stored), earlier_through):
        raise RepeatsEarlierRow
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


Task = tuple[Any, ...]  #: (state or None, identity key, its new rows (ROW_COLUMNS tuples), read whole if needed, since)


def _advance_task(state: SeriesState | None, key: str, rows: Sequence[Sequence[Any]], reread: bool, since: int,
                  read_all: Any = None) -> Advance | None:
    """advance() of one series given its new rows as the store's tuples; ``read_all`` None (a worker
    process, no database there): None when the series must be read whole."""
    try:
        return advance(state, key, [dict(zip(ROW_COLUMNS, row)) for row in rows],
                       (read_all or _read_all_elsewhere) if reread else None, since=since)
    except _NeedsRows:
        return None


def _advance_in_worker(tasks: Sequence[Task]) -> list[Advance | None]:
    return [_advance_task(*task) for task in tasks]


class _Workers:
    """Where the series of a big import are advanced: worker processes (as many as the machine has
    cores, up to MAX_WORKERS), each given a share of a chunk's series at once, while this process
    reads the next chunk and writes the last; in this process alone for a small import.

    The workers are forked: a spawned one would run the caller's script again (a script calling
    ``update_table`` needs no ``if __name__ == "__main__"``). They only compute, never touch the
    database connection they inherit, and leave through ``os._exit`` (multiprocessing's fork
    workers do), so the connection is never closed or rolled back in them."""

    def __init__(self, rows: int, series: int) -> None:
        cores = os.cpu_count() or 1
        self.pool = None
        self.size = 1
        if rows >= WORKERS_FROM and series > 1 and cores > 1 and "fork" in multiprocessing.get_all_start_methods():
            self.size = min(cores, MAX_WORKERS)
            self.pool = concurrent.futures.ProcessPoolExecutor(max_workers=self.size,
                                                               mp_context=multiprocessing.get_context("fork"))

    def submit(self, tasks: list[Task]) -> list[tuple[list[Task], Any]]:
        """Handles of ``tasks``: one share per worker (the tasks themselves in this process)."""
        if self.pool is None:
            return [(tasks, None)]
        share = -(-len(tasks) // self.size)
        return [(part, self.pool.submit(_advance_in_worker, part))
                for part in (tasks[k:k + share] for k in range(0, len(tasks), share))]

    @staticmethod
    def results(store: Store, handle: tuple[list[Task], Any]) -> list[Advance]:
        tasks, future = handle
        steps = [None] * len(tasks) if future is None else future.result()
        # in this process: a small import, or a series to read whole
        return [step or _advance_task(*task, read_all=lambda key=task[1]: store.identity_rows(key))  # type: ignore[misc]
                for step, task in zip(steps, tasks)]

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
    tasks = []
    for key, rows in store.new_rows(mark, chunk).items():
        state = states.get(key)
        # ids start at 1: an import into an empty table (mark 0) has no rows before its own to look for
        tasks.append((state, key, rows, state is not None or (mark > 0 and store.has_rows_before(key, mark)), mark))
    return chunk, workers.submit(tasks)


def _finish_chunk(store: Store, chunk: list[str], handles: list[Any], workers: _Workers, outcome: Outcome) -> None:
    now = now_text()
    existing: dict[str, list[alertlib.Alert]] = {}
    for alert in store.load_alerts(chunk):
        existing.setdefault(alert.identity_key, []).append(alert)
    saved_states, saved_alerts, updates = [], [], []
    for step in (step for handle in handles for step in workers.results(store, handle)):
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
