"""One import into a results store: rows in batches, then one pass per result series it touched.

``database update-table`` (a perf.csv, streamed by :class:`~.rows.PerfCsv`), ``run --db-url`` (one
row at a time, :mod:`.live`) and the catch-up of ``create-table`` all go through here, on SQLite,
MySQL and MongoDB alike (the stores offer the same operations):

1. the import becomes the table's only writer (``store.begin_import``) and notes the newest row
   (``store.mark``): every row after it is this import's;
2. per batch of rows: the content keys already stored are skipped, each new row gets the
   ``relative_change`` a running window gives (:class:`~.series.RunningBaselines`, seeded from the
   series states), the batch is inserted; the cells the series pass needs are kept
   (:class:`~.kept.KeptRows`) and the summaries' aggregates counted (:class:`~.summary.Tally`);
3. the summary tables take in the new rows (the tally, or one GROUP BY over them; SQL);
4. per touched series, one :func:`~.series.advance`: change points of its tail and new runs, the
   corrected ``relative_change`` cells, its latest run's verdict; the alerts of its changes
   (:func:`~.alerts.reconcile`, triage kept).

The kept rows and the tally stand for the rows only when the store confirms that they got the ids
after ``mark`` in the order they were written (``store.numbered``: every row inserted, none refused,
no gap); otherwise the series pass reads the rows back and the summaries group them (MongoDB always).

So when the import returns, every change and count is complete. Progress goes to the reporter every
``PROGRESS_EVERY_S`` seconds once an import takes that long (rows so far, share, an estimate).

All of it runs in the calling process: handing the rows to a process reading ahead or to workers
advancing series cost more CPU (10 s and 6 s at a million rows) than half of what they took over.
"""

from __future__ import annotations

import contextlib
import dataclasses
import operator
import time
from typing import Any, Callable, Iterable, Sequence

from madengine.core.events import Reporter
from madengine.database import alerts as alertlib
from madengine.database.kept import KeptRows
from madengine.database.rows import COLUMN_AT, ImportRow, now_text
from madengine.database.series import (ROW_COLUMNS, Advance, RunningBaselines, SeriesRow, SeriesState, advance, figure,
                                       status_code)
from madengine.database.summary import Tally
from madengine.results.columns import Status
from madengine.results.series import figures_of

SERIES_CHUNK = 100  #: series whose new rows are read and written at once
CHECK_WHOLE_BELOW = 32 << 20  #: bytes of a perf.csv below which it is checked whole before a database is opened
PROGRESS_EVERY_S = 5.0

Store = Any  # SqlStore | MongoStore
_RELATIVE = COLUMN_AT["relative_change"]
#: the cells of a row that :func:`_note` reads
_NOTED = operator.itemgetter(*(COLUMN_AT[name] for name in (
    "status", "performance", "perf_samples", "run_id", "started_at", "model", "machine_name")))


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
    written = _Written(mark, RunningBaselines({}), KeptRows(mark + 1) if history else None, Tally(created_date))
    states: dict[str, SeriesState] = {}  # loaded to seed the running window: the series pass goes on from them
    outcome, done = Outcome(), 0
    progress(0, total, "rows")
    with store.bulk() if mark == 0 else contextlib.nullcontext():
        for batch in batches:
            done += len(batch)
            _insert_batch(store, batch, written, states if history and mark else None, created_date, outcome,
                          empty=mark == 0, earlier_through=earlier_through)
            read = share() if share is not None else 0.0
            progress(done, total or (round(done / read) if read else 0), "rows")
    store.rows_written()
    if outcome.inserted:
        # the ids were the import's to give only if the store numbered its rows as counted
        numbered = written.numbered and store.numbered(mark, outcome.inserted)
        store.absorb(mark, written.tally if numbered else None)
        if history:
            kept = written.kept if numbered and written.kept is not None and written.kept.valid else None
            update_series(store, mark, list(written.touched), outcome, progress, states, kept)
    return outcome


@dataclasses.dataclass
class _Written:
    """What an import keeps of the rows it writes, for what comes after them."""

    mark: int  #: the table's newest row id before the import
    baselines: RunningBaselines  #: the running window of each series' relative_change
    kept: KeptRows | None  #: the rows for the series pass (None: no series kept)
    tally: Tally  #: their aggregates for the summary tables
    touched: dict[str, None] = dataclasses.field(default_factory=dict)  #: the series written to, in order
    numbered: bool = True  #: every row went in: its id is the next after the table's newest
    codes: dict[str, str] = dataclasses.field(default_factory=dict)  #: status -> its code (``status_code``)


def _insert_batch(store: Store, batch: list[ImportRow], written: _Written, states: dict[str, SeriesState] | None,
                  created_date: str, outcome: Outcome, *, empty: bool, earlier_through: int | None = None) -> None:
    """The rows of ``batch`` the store does not have, with their running ``relative_change``
    (``states``: where the series states loaded to seed the window go; None: nothing to seed), noted
    for the series pass and the summaries."""
    stored = set() if empty else store.existing_keys([row.key for row in batch])  # an empty table has none
    if stored and earlier_through is not None and store.stored_through(sorted(stored), earlier_through):
        raise RepeatsEarlierRow
    fresh = [row for row in batch if row.key not in stored] if stored else batch
    if states is not None:  # series met for the first time in this import: their states seed the window
        unseen = [g for g in dict.fromkeys(row.group for row in fresh) if g not in written.touched]
        loaded = store.load_states(unseen) if unseen else {}
        states.update(loaded)
        written.baselines.seed({key: state.baseline for key, state in loaded.items()})
    if fresh:
        _note(fresh, written, written.mark + outcome.inserted + 1)
    inserted = store.insert(fresh, created_date)
    written.numbered = written.numbered and inserted == len(fresh)
    outcome.inserted += inserted
    outcome.already_stored += len(batch) - len(fresh)


def _note(fresh: list[ImportRow], written: _Written, first_id: int) -> None:
    """Give the rows of ``fresh`` (ids from ``first_id``) their running ``relative_change`` and note
    them for the series pass and the summaries. Column by column: each row's cells are picked in C,
    and the kept rows and the tally take a batch at once (a million rows made ten calls a row)."""
    groups = [row.group for row in fresh]
    written.touched.update(dict.fromkeys(groups))
    statuses, performances, samples, runs, starts, models, machines = zip(*map(_NOTED, [row.values for row in fresh]))
    codes = written.codes
    for status in set(statuses).difference(codes):
        codes[status] = status_code(status)
    row_codes = list(map(codes.__getitem__, statuses))
    values = [figure(text) if code == "S" else None for text, code in zip(performances, row_codes)]
    after, success = written.baselines.after, Status.SUCCESS
    texts = [after(group, value) if value is not None and status == success else ""
             for group, value, status in zip(groups, values, statuses)]
    for row, text in zip(fresh, texts):
        row.values[_RELATIVE] = text
    if written.kept is not None:
        figures = [figures_of(cell, text) if code == "S" else () for cell, text, code in
                   zip(samples, performances, row_codes)]
        written.kept.extend(groups, row_codes, values, figures, runs, starts, texts)
    written.tally.extend(first_id, groups, statuses, runs, models, starts, machines)


def update_series(store: Store, mark: int, keys: Sequence[str], outcome: Outcome, progress: Progress,
                  states: dict[str, SeriesState] | None = None, kept: KeptRows | None = None) -> None:
    """One :func:`advance` per series of ``keys`` over its rows after ``mark``, and their alerts, a
    chunk of series at a time (``states``: those loaded already; ``kept``: the rows after ``mark``,
    else they are read back)."""
    keys = sorted(keys)
    loaded = states or {}
    progress(0, len(keys), "series")
    for start in range(0, len(keys), SERIES_CHUNK):
        chunk = keys[start:start + SERIES_CHUNK]
        _finish_chunk(store, chunk, _advance_chunk(store, mark, chunk, loaded, kept), outcome)
        progress(start + len(chunk), len(keys), "series")


def _advance_chunk(store: Store, mark: int, chunk: list[str], loaded: dict[str, SeriesState],
                   kept: KeptRows | None) -> list[Advance]:
    missing = [key for key in chunk if key not in loaded]
    states = {**{key: loaded.pop(key) for key in chunk if key in loaded}, **(store.load_states(missing) if missing else {})}
    if kept is not None:
        new: dict[str, Sequence[SeriesRow | dict[str, Any]]] = dict(kept.take(chunk))
    else:
        new = {key: [dict(zip(ROW_COLUMNS, row)) for row in rows] for key, rows in store.new_rows(mark, chunk).items()}
    steps = []
    for key, rows in new.items():
        state = states.get(key)
        # ids start at 1: an import into an empty table (mark 0) has no rows before its own to look for
        reread = state is not None or (mark > 0 and store.has_rows_before(key, mark))
        steps.append(advance(state, key, rows, (lambda key=key: store.identity_rows(key)) if reread else None,
                             since=mark))  # type: ignore[misc]
    return steps


def _finish_chunk(store: Store, chunk: list[str], steps: list[Advance], outcome: Outcome) -> None:
    now = now_text()
    existing: dict[str, list[alertlib.Alert]] = {}
    for alert in store.load_alerts(chunk):
        existing.setdefault(alert.identity_key, []).append(alert)
    saved_states, saved_alerts, updates, unsure = [], [], [], []
    for step in steps:
        key = step.state.key
        saved_states.append(step.state)
        known = {a.alert_id for a in existing.get(key, [])}
        changed = alertlib.reconcile(existing.get(key, []), step.changes, step.frozen_before, now)
        outcome.new_alerts += sum(a.alert_id not in known for a in changed)
        saved_alerts += changed
        updates += step.updates
        unsure += step.unsure
    if unsure:  # cells of kept rows: corrected where the stored one differs
        stored = store.relative_changes([row_id for row_id, _ in unsure])
        updates += [(row_id, text) for row_id, text in unsure if text != stored.get(row_id, "")]
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
