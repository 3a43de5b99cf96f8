"""What a comparison judges single runs against: every series' latest runs and their references.

``compare`` of two runs with one figure a side judges each new figure against its result's stable
segment up to the old run (:func:`madengine.database.series.reference_values`,
:func:`madengine.stats.history.reference`: ``report compare --old-run``'s own steps). Over thousands
of results that is a few milliseconds per thousand made again for every pair of runs, so this cache
keeps, per series, its state and the reference at each of its latest runs:

* :meth:`SeriesCache.refresh` reloads only the states whose newest covered row moved since (a run
  recording rows one at a time touches one series per row; a nightly import, all of them once);
* :meth:`SeriesCache.prepare` makes the references of every run of each series' tail (the runs a series
  state keeps: the only ones with a reference) ahead of the requests (the dashboard's background
  pass calls it), so a comparison only applies the test: 25 ms less for a pair of runs over 2,000
  results, for 1.7 s of the background pass and 30 MB per 2,000 series (measured with references of
  at most 50 runs; the whole stable segment, up to the tail's 100, costs about 10 % more time).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Mapping, Sequence

from madengine.database.series import SeriesState, reference_values
from madengine.stats.history import Reference, reference

_CHUNK = 500
IDLE_WAIT_S = 0.002  #: how long the background pass waits for the requests being answered


class SeriesCache:
    """Series states by identity key, with the reference of each tail run, kept across data versions."""

    def __init__(self, load: Callable[[Sequence[str]], dict[str, SeriesState]]) -> None:
        self._load = load
        self._states: dict[str, tuple[int, SeriesState]] = {}  # key -> (covered, state)
        self._references: dict[str, dict[str, Reference | None]] = {}  # key -> run -> its reference
        self._lock = threading.Lock()

    def refresh(self, overview: Mapping[str, Mapping[str, Any]]) -> None:
        """Bring the states up to ``overview`` (``Reader.series_overview``: covered per key)."""
        with self._lock:
            stale = [k for k, o in overview.items() if self._states.get(k, (-1,))[0] != o["covered"]]
            gone = [k for k in self._states if k not in overview]
        for key in gone:
            with self._lock:
                self._states.pop(key, None)
                self._references.pop(key, None)
        for start in range(0, len(stale), _CHUNK):
            loaded = self._load(stale[start:start + _CHUNK])
            with self._lock:
                for key, state in loaded.items():
                    self._states[key] = (state.covered, state)
                    self._references.pop(key, None)

    def prepare(self, stop: Callable[[], bool] = lambda: False, busy: Callable[[], bool] = lambda: False) -> None:
        """The references of every series' tail runs not made yet (stops early when ``stop()``), a
        series at a time, while no request is being answered (``busy()``): a request reading rows
        from SQLite gives up the interpreter at every row, and would wait for a series each time."""
        with self._lock:
            waiting = [key for key in self._states if key not in self._references]
        for key in waiting:
            while busy() and not stop():
                time.sleep(IDLE_WAIT_S)
            if stop():
                return
            with self._lock:
                entry = self._states.get(key)
            if entry is not None:
                made = {p.run: self._reference(entry[1], p.run) for p in entry[1].tail}
                with self._lock:
                    if self._states.get(key) is entry:
                        self._references[key] = made
            time.sleep(0)  # a request waiting for the interpreter goes first

    @staticmethod
    def _reference(state: SeriesState, run: str) -> Reference | None:
        values = reference_values(state, run)
        return reference(values) if values else None

    def references_at(self, run: str, keys: Mapping[str, Any]) -> dict[Any, Reference]:
        """Per identity of ``keys`` (identity key -> what to key the answer by) whose series has run
        ``run`` among its latest and enough stable history before it: its reference."""
        found = {}
        with self._lock:
            states, prepared = dict(self._states), dict(self._references)
        for key, label in keys.items():
            entry = states.get(key)
            if entry is None:
                continue
            made = prepared.get(key)
            # a prepared series has every tail run: a run it lacks has no reference
            ref = made.get(run) if made is not None else self._reference(entry[1], run)
            if ref is not None:
                found[label] = ref
        return found
