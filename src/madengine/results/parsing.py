"""Parsing a model's performance from its output, and ``multiple_results`` CSV files.

Rule: a line ``performance: <number> <metric>`` in the output of the model script itself
(pre/post scripts and tools are not searched). When several lines match, the **last** one
counts: models commonly print interim figures during warm-up and the final figure at the end.
The number may be signed, decimal or scientific, and may carry a ``/unit`` suffix and/or a comma
(``performance: 14164/s, samples_per_second``).
"""

from __future__ import annotations

import csv
import dataclasses
import math
import re
from pathlib import Path

from madengine.core.errors import InputError

PERFORMANCE_LINE = re.compile(
    r"performance:\s+([+\-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+\-]?[0-9]+)?)"
    r"(?:,?\s*/[a-zA-Z]+\s*,?|,)?\s+([^\s,]+)"
)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@dataclasses.dataclass(frozen=True)
class Performance:
    value: float
    metric: str


def parse_performance(output: str) -> Performance | None:
    """The last ``performance:`` figure in ``output``, or None when there is none."""
    found = None
    for match in PERFORMANCE_LINE.finditer(_ANSI.sub("", output)):
        found = match
    if found is None:
        return None
    value = float(found.group(1))
    if math.isnan(value) or math.isinf(value):
        return None
    return Performance(value, found.group(2).rstrip(","))


REQUIRED_MULTI_COLUMNS = ("model", "performance", "metric")


def parse_multiple_results(path: Path) -> list[dict[str, str]]:
    """Rows of a ``multiple_results`` CSV (columns model, performance, metric, plus extras).

    Header whitespace is stripped. Raises :class:`InputError` naming the file when the file is
    missing, malformed, or lacks a required column.
    """
    path = Path(path)
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.reader(handle)
            header = [h.strip() for h in next(reader, [])]
            missing = [c for c in REQUIRED_MULTI_COLUMNS if c not in header]
            if missing:
                raise InputError(f"missing column(s) {', '.join(missing)}", path=str(path),
                                 hint="a multiple_results CSV needs columns model, performance, metric")
            rows = []
            for cells in reader:
                if not any(c.strip() for c in cells):
                    continue
                rows.append({h: (cells[i].strip() if i < len(cells) else "") for i, h in enumerate(header)})
            return rows
    except FileNotFoundError:
        raise InputError("the model declared multiple_results but did not write this file", path=str(path)) from None
    except (csv.Error, UnicodeDecodeError) as exc:
        raise InputError(f"malformed CSV ({exc})", path=str(path)) from None


def as_number(text: str) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) or math.isinf(value) else value
