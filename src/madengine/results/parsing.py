"""Parsing a model's performance from its output, and ``multiple_results`` CSV files.

Rule: a line ``performance: <number> <metric>`` in the output of the model script itself
(pre/post scripts and tools are not searched). When several lines match, the **last** one
counts: models commonly print interim figures during warm-up and the final figure at the end.
The number may be signed, decimal or scientific, and may carry a ``/unit`` suffix and/or a comma
(``performance: 14164/s, samples_per_second``).
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

from madengine.core.errors import InputError
from madengine.results.perfcsv import read_rows

_NUMBER = r"[+\-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+\-]?[0-9]+)?"
PERFORMANCE_LINE = re.compile(
    rf"performance:\s+({_NUMBER})"
    r"(?:,?\s*/[a-zA-Z]+\s*,?|,)?\s+([^\s,]+)"
)
_WHOLE_NUMBER = re.compile(rf"{_NUMBER}\Z")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def strip_ansi(text: str) -> str:
    """``text`` without terminal escape sequences (colours, cursor moves)."""
    return _ANSI.sub("", text)


class Figure(float):
    """A performance figure: a number (for statistics, charts and comparisons) that keeps the text
    the model wrote, so that perf.csv records ``performance: 7 x`` as ``7``, not ``7.0``.

    ``repr()``/``str()`` give that text; everything else is the float's.
    """

    __slots__ = ("text",)

    def __new__(cls, text: str) -> "Figure":
        value = super().__new__(cls, text)
        value.text = text
        return value

    def __repr__(self) -> str:
        return self.text

    __str__ = __repr__

    def __reduce__(self):  # pickling (parallel runs) and deepcopy keep the text
        return (Figure, (self.text,))


@dataclasses.dataclass(frozen=True)
class Performance:
    value: Figure
    metric: str


def parse_performance(output: str) -> Performance | None:
    """The last ``performance:`` figure in ``output``, or None when there is none."""
    found = None
    for match in PERFORMANCE_LINE.finditer(strip_ansi(output)):
        found = match
    if found is None:
        return None
    value = Figure(found.group(1))
    if not math.isfinite(value):  # 1e999
        return None
    return Performance(value, found.group(2).rstrip(","))


REQUIRED_MULTI_COLUMNS = ("model", "performance", "metric")


def parse_multiple_results(path: Path) -> list[dict[str, str]]:
    """Rows of a ``multiple_results`` CSV (columns model, performance, metric, plus extras).

    Header whitespace is stripped. Raises :class:`InputError` naming the file when the file is
    missing, malformed (quoting included: a quote left open is an error, never a row made of the
    rest of the file), has a line longer than its header, or lacks a required column.
    """
    path = Path(path)
    if not path.exists():
        raise InputError("the model declared multiple_results but did not write this file", path=str(path))
    rows = read_rows(path, require=REQUIRED_MULTI_COLUMNS,
                     hint="a multiple_results CSV needs columns model, performance, metric")
    return [row for row in rows if any(row.values())]


def as_number(text: str) -> float | None:
    """The finite number ``text`` holds, or None. A number written as a model writes one (``7``,
    ``-1.5e3``) comes back as a :class:`Figure` that keeps that text."""
    try:
        value = float(text)
    except (TypeError, ValueError, OverflowError):
        return None
    if not math.isfinite(value):
        return None
    stripped = text.strip() if isinstance(text, str) else ""
    return Figure(stripped) if _WHOLE_NUMBER.match(stripped) else value
