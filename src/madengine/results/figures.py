"""A row's other figures: columns it names in ``figures`` are metrics of their own.

A row has one ``performance`` and ``metric``. A row that measures several things at once (a serving
benchmark's load point: TTFT, TPOT, ITL and E2E percentiles, throughputs, goodput) names the
columns holding the others in its ``figures`` cell (``ttft_p50_ms,ttft_p99_ms,...``).
:func:`with_figures` gives the row, then one row per named column with a finite number: the same
row with that column as its ``performance`` and its name as its ``metric`` (no ``perf_samples``: the
figure is one value). So ``report compare``, ``report regressions``, the charts and the dashboard's
comparisons take each figure as a result of its own identity (the metric is part of it), and each
figure's direction comes from its name (``..._ms``: lower is better).
"""

from __future__ import annotations

import math
from typing import Iterable, Iterator, Mapping

FIGURES_COLUMN = "figures"


def with_figures(rows: Iterable[Mapping[str, str]]) -> Iterator[Mapping[str, str]]:
    """Each row, followed by the rows of the figures it names (see the module doc)."""
    for row in rows:
        yield row
        names = row.get(FIGURES_COLUMN)
        if names:
            yield from figure_rows(row, str(names))


def figure_rows(row: Mapping[str, str], names: str) -> Iterator[dict[str, str]]:
    for name in dict.fromkeys(n.strip() for n in names.split(",")):
        if not name or name in ("performance", "metric"):
            continue
        text = str(row.get(name) or "").strip()
        try:
            value = float(text)
        except ValueError:
            continue
        if math.isfinite(value):
            yield {**row, "performance": text, "metric": name, "perf_samples": "", FIGURES_COLUMN: ""}
