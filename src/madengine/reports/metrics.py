"""What a metric name says about its direction, and how figures are shown."""

from __future__ import annotations

import functools
import math
import re

# Units and words of metrics where a smaller figure is the better one (times, latencies, losses).
_LOWER_WORDS = frozenset({
    "ms", "us", "ns", "s", "sec", "secs", "second", "seconds", "min", "mins", "minutes", "hours",
    "latency", "time", "duration", "elapsed", "runtime", "loss", "ttft", "tpot", "itl",
})
_DIVIDER = re.compile(r"/|(?:^|[^a-z])per(?:[^a-z]|$)")
_WORDS = re.compile(r"[^a-z0-9]+")


@functools.lru_cache(maxsize=4096)  # a report asks once per result: thousands of times per metric
def lower_is_better(metric: str) -> bool:
    """True for metrics where lower is better: names made of time units or words such as
    latency, time, seconds, ms, ``*_s``, loss.

    Only the numerator of a rate counts: ``samples_per_second`` and ``tokens/sec`` are
    higher-is-better, ``ms_per_token`` and ``time/step`` lower-is-better. Whole words are matched,
    not substrings, so ``items_per_second`` (which contains "ms" and "_s") stays a rate.
    """
    numerator = _DIVIDER.split(metric.strip().lower(), 1)[0]
    words = [word for word in _WORDS.split(numerator) if word]
    return any(word in _LOWER_WORDS or word.endswith(("latency", "time")) for word in words)


def format_number(value: float | None) -> str:
    """A figure for people: grouped thousands for large values, 4 significant digits for small.

    The one rounding of every report (tables, charts, compare, regressions); '' for None, NaN and
    infinities; 4 significant digits in scientific notation from 1e15 up and below 1e-4
    (``1.7e+308``, ``4.941e-324``).
    """
    if value is None or not math.isfinite(value):
        return ""
    magnitude = abs(value)
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
