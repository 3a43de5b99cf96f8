"""Change points of the result identities the results database keeps no alerts for, found in the background.

A table an import of this release wrote has its changes already (the alerts of
:mod:`madengine.database.history_tables`, complete when the import returns). For a table an earlier
release wrote (the dashboard never writes, so it cannot migrate it), or rows such a release added
since, the detection is `report regressions`' own (:func:`madengine.results.series.numbered_points`
and :func:`~madengine.results.series.changes_of`: one point per run, E-divisive means). It costs
milliseconds per identity (about 8 ms for 500 runs), too much to do for thousands of identities in one
request: a thread goes through them once at start and then again for each identity whose latest row
changed; until it has been through all of them, views say how far it got and about how long the rest
takes. A trend computes its own identity at once.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Mapping, Sequence

from madengine.database.dashboard import IdentityEntry, Reader
from madengine.results.series import Change, changes_of, numbered_points
from madengine.stats.changepoint import MIN_SEGMENT

PAUSE_S = 0.5  #: between two looks at the database when everything is up to date


def detect(entry: IdentityEntry, rows: Sequence[Mapping[str, str]]) -> list[Change]:
    """The changes of one identity's rows (``Reader.identity_rows``), as ``report regressions`` finds them."""
    points = numbered_points(enumerate(rows))
    if len(points) < 2 * MIN_SEGMENT:
        return []
    return changes_of(entry.identity, points)


class ChangeWatch:
    """Per identity: the changes of its rows up to its latest row id."""

    def __init__(self, reader: Reader, entries: Callable[[], list[IdentityEntry]],
                 covered: Callable[[Sequence[IdentityEntry]], set[str]] = lambda entries: set(),
                 warm: Callable[[], None] = lambda: None) -> None:
        self.reader = reader
        self._entries = entries
        self._covered = covered  #: the keys of the identities whose changes the database has: nothing to find
        self._warm = warm  #: before each pass: what the pages read for the current data, made ahead of them
        self._rate: float | None = None  #: seconds per identity of the background pass so far
        self._found: dict[str, tuple[int, list[Change]]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error = ""  #: the last error of the background pass ('' when fine)

    def of(self, entry: IdentityEntry, rows: Sequence[Mapping[str, str]] | None = None) -> list[Change]:
        """The changes of ``entry`` (from the cache when its latest row is the same)."""
        with self._lock:
            cached = self._found.get(entry.key)
        if cached is not None and cached[0] == entry.latest_id:
            return cached[1]
        found = detect(entry, self.reader.identity_rows(entry.key) if rows is None else rows)
        with self._lock:
            self._found[entry.key] = (entry.latest_id, found)
        return found

    def known(self, entries: Sequence[IdentityEntry]) -> tuple[int, list[Change]]:
        """How many of ``entries`` are checked up to their latest row, and their changes."""
        checked, changes = 0, []
        with self._lock:
            for entry in entries:
                cached = self._found.get(entry.key)
                if cached is None:
                    continue
                checked += cached[0] == entry.latest_id
                changes.extend(cached[1])
        return checked, changes

    def estimate(self, left: int) -> float | None:
        """About how many seconds the background pass needs for ``left`` more identities (None before
        it has measured itself)."""
        return None if self._rate is None else self._rate * left

    # --- the background pass ---

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="madengine-changes", daemon=True)
            self._thread.start()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._pass()
                self.error = ""
            except Exception as exc:  # noqa: BLE001 - a database that went away: try again later, never die
                self.error = f"{type(exc).__name__}: {exc}"
            self._stop.wait(PAUSE_S)
        self.reader.close()

    def _pass(self) -> None:
        self._warm()
        done, started = 0, time.monotonic()
        entries = self._entries()
        known = self._covered(entries)
        for entry in entries:
            if self._stop.is_set():
                return
            if entry.key in known:
                continue
            with self._lock:
                cached = self._found.get(entry.key)
            if cached is None or cached[0] != entry.latest_id:
                self.of(entry)
                done += 1
                self._rate = (time.monotonic() - started) / done
