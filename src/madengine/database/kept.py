"""The rows one import wrote, kept for its series pass, instead of read back from the table.

The series pass (:func:`madengine.database.series.advance`) needs a few cells of each new row: its
status, figure, samples, run and start time. Read back from a million-row table, a query per series,
they cost 3.5 s of CPU (random reads of 1 KB rows for 100 bytes each). The import has every one of
them in hand as it writes the row, so :class:`KeptRows` keeps them, packed in arrays in the order
the rows were written (about 75 bytes a row: 71 MB at a million realistic rows, where Python
objects would take 470), each row linked to the next one of its series, and hands each series its
:class:`~madengine.database.series.SeriesRow` list when its turn comes.

The ``relative_change`` a SUCCESS row was written with is not kept (``None``: the series pass looks
up the few cells it would correct); every other row was written with an empty one.

Row ``k`` (from 0) of the import has the id ``first_id + k``: the import is the table's only writer,
and its rows get the ids after the table's newest one, in the order they are inserted. The importer
uses the kept rows only when the store confirms that numbering (every row inserted, the newest id
where the count says: ``store.numbered``); otherwise it reads the rows back (MongoDB always: its
``seq`` is a clock reading).
"""

from __future__ import annotations

import array
import itertools
import math
from typing import Iterator, Sequence, Sized

from madengine.database.series import SeriesRow

_NONE = math.nan  #: the figure of a row without one (figures are finite)
_LAST = 0  #: the link of a series' last row (no row links to the first one)
_SUCCESS = ord("S")  #: the code of a SUCCESS row (written with a relative_change)
_EMPTY = ord("s")  #: the code of a SUCCESS row written with an empty relative_change
_FLOAT = frozenset((float,))  #: the type of every sample a row can keep (a set's test of a map runs in C)


class KeptRows:
    """The rows of one import (see the module docstring); ``valid`` turns False when a row cannot
    be kept as it is (the importer then reads the rows back)."""

    def __init__(self, first_id: int) -> None:
        self.first_id = first_id
        self.valid = True
        self._series: dict[str, list[int]] = {}  # series -> [its first row, its last row]
        self._next = array.array("I")  # each row's next row of its series (_LAST: none)
        self._codes = bytearray()  # each row's status code (_EMPTY: "S", written without relative_change)
        self._figures = array.array("d")
        self._samples = array.array("d")  # every row's samples, one row after another
        self._sample_ends = array.array("I")  # where each row's samples end in _samples
        self._runs = array.array("I")  # each row's run id: its number in _run_names
        self._starts = bytearray()  # start times, UTF-8, one row after another
        self._start_ends = array.array("I")
        self._run_numbers: dict[str, int] = {"": 0}
        self._run_names = [""]

    def extend(self, groups: Sequence[str], codes: Sequence[str], figures: Sequence[float | None],
               samples: Sequence[Sequence[float]], run_ids: Sequence[str], starts: Sequence[str],
               relative_changes: Sequence[str]) -> None:
        """The next rows, one per item of each argument: its series, status code, figure, samples
        (those of a SUCCESS row), run id and start time, as :class:`SeriesRow` holds them, and the
        ``relative_change`` it was written with. Each array is extended in C, once a batch: only the
        links between a series' rows take a Python step a row."""
        flat = list(itertools.chain.from_iterable(samples))
        if not _FLOAT.issuperset(map(type, flat)):
            self.valid = False  # a figure that keeps its text (results.parsing.Figure): read back
        first = len(self._codes)
        self._link(groups, first)
        self._codes.extend([_EMPTY if code == "S" and not text else ord(code) for code, text in
                            zip(codes, relative_changes)])
        self._figures.extend([_NONE if figure is None else figure for figure in figures])
        self._sample_ends.extend(_ends(len(self._samples), samples))
        self._samples.extend(flat)
        run_ids = list(map(str.strip, run_ids))
        numbers = self._run_numbers
        for run_id in dict.fromkeys(run_ids):
            if run_id not in numbers:
                numbers[run_id] = len(self._run_names)
                self._run_names.append(run_id)
        self._runs.extend(map(numbers.__getitem__, run_ids))
        starts = list(map(str.strip, starts))
        text = "".join(starts)
        encoded = text.encode()
        # ASCII (start times are): a character a byte, the ends of the texts are the ends of their bytes
        parts: Sequence[Sized] = starts if len(encoded) == len(text) else [start.encode() for start in starts]
        self._start_ends.extend(_ends(len(self._starts), parts))
        self._starts += encoded

    def _link(self, groups: Sequence[str], first: int) -> None:
        """Rows ``first``, ``first + 1``, ... of ``groups``: each one the next of its series' last row."""
        series, following = self._series, self._next
        following.extend(itertools.repeat(_LAST, len(groups)))
        for row, group in enumerate(groups, first):
            ends = series.get(group)
            if ends is None:
                series[group] = [row, row]
            else:
                following[ends[1]] = row
                ends[1] = row

    def take(self, groups: Sequence[str]) -> dict[str, list[SeriesRow]]:
        """The rows of each of ``groups`` that has some (a series is taken once)."""
        return {group: self._rows(self._series.pop(group)[0]) for group in groups if group in self._series}

    def _rows(self, row: int) -> list[SeriesRow]:
        codes, figures, samples, sample_ends, names, runs = self._codes, self._figures, self._samples, \
            self._sample_ends, self._run_names, self._runs
        starts, start_ends, following, first_id = self._starts, self._start_ends, self._next, self.first_id
        rows, new = [], tuple.__new__  # a NamedTuple made in C: its own __new__ is a Python function
        while True:
            row_id, code, figure = first_id + row, codes[row], figures[row]
            started = starts[start_ends[row - 1] if row else 0:start_ends[row]].decode()
            rows.append(new(SeriesRow, (row_id, "S" if code == _EMPTY else chr(code),
                                        None if figure != figure else figure,
                                        samples[sample_ends[row - 1] if row else 0:sample_ends[row]].tolist(),
                                        names[runs[row]] or started or f"#{row_id + 1}", started,
                                        None if code == _SUCCESS else "")))
            row = following[row]
            if row == _LAST:
                return rows


def _ends(before: int, parts: Sequence[Sized]) -> Iterator[int]:
    """Where each of ``parts`` ends once they follow ``before`` items, one after another."""
    return itertools.islice(itertools.accumulate(map(len, parts), initial=before), 1, None)
