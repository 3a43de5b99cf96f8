"""How figures are shown in reports: numbers, ratios and changes, rounded one way everywhere."""

from __future__ import annotations

import math


def format_number(value: float | None) -> str:
    """A figure for people: grouped thousands for large values, 4 significant digits for small.

    The one rounding of every report (tables, charts, compare, regressions); '' for None, NaN and
    infinities; 4 significant digits in scientific notation from 1e15 up and below 1e-4
    (``1.7e+308``, ``4.941e-324``).
    """
    if value is None or not math.isfinite(value):
        return ""
    magnitude = abs(value)
    if 1 <= magnitude < 1000:  # most figures (a chart's thousands of tooltips): the branch below, first
        return f"{value:.2f}".rstrip("0").rstrip(".")
    if magnitude >= 1e15:
        return f"{value:.4g}"
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 1:
        text = f"{value:.2f}"
    else:
        text = f"{value:.4g}"
    return text.rstrip("0").rstrip(".") if "." in text and "e" not in text else text


def format_ratio(ratio: float | None) -> str:
    """A ratio NEW/OLD: three decimals ('' when unknown or not finite)."""
    if ratio is None or not math.isfinite(ratio):
        return ""
    return f"{ratio:.3f}" if abs(ratio) < 1e6 else f"{ratio:.3e}"


def format_change(change: float | None) -> str:
    """A relative change in percent with its sign: ``+4.2%`` ('' when unknown or not finite)."""
    if change is None or not math.isfinite(change):
        return ""
    return f"{change * 100:+.1f}%" if abs(change) < 1e4 else f"{change * 100:+.3e}%"
