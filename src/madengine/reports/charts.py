"""Chart geometry for inline SVG: bars per model, lines across runs, per-model sparklines.

Python computes coordinates; the templates draw them (so every label is escaped by jinja2's
autoescape). Charts are bounded in size whatever the number of rows: at most ``MAX_BARS`` bars,
``MAX_SERIES`` lines of at most ``MAX_POINTS`` points each (runs are bucketed beyond that).
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections import Counter

from madengine.reports.metrics import format_number, lower_is_better
from madengine.reports.summary import ModelStats, Summary

MAX_CHARTS = 4  # metrics charted (the ones with most SUCCESS rows)
MAX_BARS = 25
MAX_SERIES = 8
MAX_POINTS = 150
SPARK_POINTS = 40
PALETTE = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777")

WIDTH = 900
LABEL_WIDTH = 230
VALUE_WIDTH = 110
BAR_ROW = 22
AXIS_HEIGHT = 26
LINE_HEIGHT = 260
LINE_MARGIN = (16, 24, 34, 70)  # top, right, bottom, left


@dataclasses.dataclass
class Tick:
    position: float
    label: str


@dataclasses.dataclass
class Bar:
    label: str
    full_label: str
    value_text: str
    y: float
    x: float
    width: float
    whisker: tuple[float, float] | None  # min..max of the model's figures


@dataclasses.dataclass
class BarChart:
    metric: str
    lower_is_better: bool
    bars: list[Bar]
    ticks: list[Tick]
    width: int
    height: int
    plot_left: int
    plot_right: int
    zero_x: float
    note: str


@dataclasses.dataclass
class Series:
    name: str
    color: str
    path: str
    points: list[tuple[float, float, str]]  # x, y, tooltip


@dataclasses.dataclass
class LineChart:
    metric: str
    lower_is_better: bool
    series: list[Series]
    y_ticks: list[Tick]
    x_ticks: list[Tick]
    width: int
    height: int
    plot: tuple[int, int, int, int]  # left, top, right, bottom
    note: str


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering ``low..high`` (1, 2, 2.5, 5 × 10^k steps).

    Expects values near 1 in magnitude (see :func:`scale_exponent`); any finite pair gives ticks."""
    if high == low:
        high, low = high + (abs(high) or 1) * 0.5, low - (abs(low) or 1) * 0.5
    raw = (high - low) / max(count - 1, 1)
    if not (0 < raw < math.inf):  # a span that underflows or overflows: the two ends will do
        return [low, high] if low < high else [low - 1, high + 1]
    step = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 2.5, 5, 10):
        if raw <= factor * step:
            step *= factor
            break
    start, end = math.floor(low / step) * step, math.ceil(high / step) * step
    return [start + k * step for k in range(int(round((end - start) / step)) + 1)]


def scale_exponent(values) -> int:
    """0 for ordinary figures; for extreme ones (5e-324, 1.7e308) the power of two that brings the
    largest near 1, so that spans, ticks and coordinates stay finite and non-zero. Scaling by a
    power of two is exact."""
    peak = max((abs(v) for v in values), default=0.0)
    return 0 if peak == 0 or 1e-30 < peak < 1e30 else math.frexp(peak)[1]


def _scaled(value: float, exponent: int) -> float:
    return math.ldexp(value, -exponent) if exponent else value


def _unscaled(value: float, exponent: int) -> float:
    try:
        return math.ldexp(value, exponent) if exponent else value
    except OverflowError:  # a tick beyond the largest float: label it with the largest
        return math.copysign(sys.float_info.max, value)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def charted_metrics(models: list[ModelStats]) -> tuple[list[str], int]:
    """The metrics to chart (most SUCCESS figures first) and how many were left out."""
    weight: Counter[str] = Counter()
    for stats in models:
        if stats.mean is not None:
            weight[stats.metric] += stats.count
    ranked = [metric for metric, _ in weight.most_common()]
    return ranked[:MAX_CHARTS], max(len(ranked) - MAX_CHARTS, 0)


def bar_chart(metric: str, models: list[ModelStats]) -> BarChart:
    """Mean performance per model in ``metric``, with each model's min..max range."""
    chosen = sorted((s for s in models if s.metric == metric and s.mean is not None),
                    key=lambda s: (-s.count, s.model))
    note = f"{len(chosen) - MAX_BARS} more model(s) with fewer results not shown" if len(chosen) > MAX_BARS else ""
    chosen = sorted(chosen[:MAX_BARS], key=lambda s: -s.mean)  # type: ignore[operator]
    exponent = scale_exponent([v for s in chosen for v in (s.minimum, s.maximum)])  # type: ignore[misc]
    low = min(0.0, *(_scaled(s.minimum, exponent) for s in chosen))  # type: ignore[arg-type]
    high = max(0.0, *(_scaled(s.maximum, exponent) for s in chosen))  # type: ignore[arg-type]
    ticks = nice_ticks(low, high)
    left, right = LABEL_WIDTH, WIDTH - VALUE_WIDTH
    scale = (right - left) / (ticks[-1] - ticks[0])

    def x_of(value: float) -> float:
        return round(left + (_scaled(value, exponent) - ticks[0]) * scale, 1)

    zero = x_of(0.0)
    bars = []
    for row, stats in enumerate(chosen):
        end = x_of(stats.mean)  # type: ignore[arg-type]
        whisker = (x_of(stats.minimum), x_of(stats.maximum)) if stats.count > 1 else None  # type: ignore[arg-type]
        bars.append(Bar(_clip(stats.model, 34), stats.model, format_number(stats.mean), row * BAR_ROW + 8,
                        min(zero, end), round(abs(end - zero), 1), whisker))
    height = len(bars) * BAR_ROW + 8 + AXIS_HEIGHT
    return BarChart(metric, lower_is_better(metric), bars,
                    [Tick(x_of(_unscaled(t, exponent)), format_number(_unscaled(t, exponent))) for t in ticks],
                    WIDTH, height, left, right, zero, note)


def _bucketed(points: list[tuple[int, float]], first: int, last: int) -> list[tuple[float, float]]:
    """At most MAX_POINTS (run position, mean) points: runs grouped into equal buckets beyond that."""
    span = last - first + 1
    if span <= MAX_POINTS:
        return [(float(p), v) for p, v in points]
    buckets: dict[int, list[float]] = {}
    for position, value in points:
        buckets.setdefault((position - first) * MAX_POINTS // span, []).append(value)
    width = span / MAX_POINTS
    return [(first + (b + 0.5) * width - 0.5, sum(vs) / len(vs)) for b, vs in sorted(buckets.items())]


def line_chart(metric: str, models: list[ModelStats], summary: Summary) -> LineChart | None:
    """Performance in ``metric`` across runs for the models with most runs; None without history."""
    candidates = sorted((s for s in models if s.metric == metric and len(s.history) >= 2),
                        key=lambda s: (-len(s.history), s.model))
    if not candidates:
        return None
    chosen = candidates[:MAX_SERIES]
    first = min(s.history[0][0] for s in chosen)
    last = max(s.history[-1][0] for s in chosen)
    values = [v for s in chosen for _, v in s.history]
    exponent = scale_exponent(values)
    y_ticks = nice_ticks(_scaled(min(values), exponent), _scaled(max(values), exponent))
    left, top, right, bottom = LINE_MARGIN[3], LINE_MARGIN[0], WIDTH - LINE_MARGIN[1], LINE_HEIGHT - LINE_MARGIN[2]
    x_scale = (right - left) / max(last - first, 1)
    y_scale = (bottom - top) / (y_ticks[-1] - y_ticks[0])

    def xy(position: float, value: float) -> tuple[float, float]:
        return (round(left + (position - first) * x_scale, 1),
                round(bottom - (_scaled(value, exponent) - y_ticks[0]) * y_scale, 1))

    series = []
    for number, stats in enumerate(chosen):
        points = [(*xy(p, v), p, v) for p, v in _bucketed(stats.history, first, last)]
        path = "M" + " L".join(f"{x},{y}" for x, y, _, _ in points)
        marks = [(x, y, f"{stats.model}: {format_number(v)} {metric} ({_run_label(summary, p)})")
                 for x, y, p, v in points] if len(points) <= 60 else []
        series.append(Series(stats.model, PALETTE[number % len(PALETTE)], path, marks))
    x_ticks = [Tick(xy(p, 0)[0], _run_label(summary, p)) for p in sorted({first, (first + last) // 2, last})]
    note = f"{len(candidates) - MAX_SERIES} more model(s) with fewer runs not shown" if len(candidates) > MAX_SERIES else ""
    if last - first + 1 > MAX_POINTS:
        note = "; ".join(filter(None, [note, f"{last - first + 1} runs averaged into {MAX_POINTS} buckets"]))
    y_labels = [Tick(xy(first, _unscaled(t, exponent))[1], format_number(_unscaled(t, exponent))) for t in y_ticks]
    return LineChart(metric, lower_is_better(metric), series, y_labels,
                     x_ticks, WIDTH, LINE_HEIGHT, (left, top, right, bottom), note)


def _run_label(summary: Summary, position: float) -> str:
    index = min(max(int(round(position)), 0), len(summary.runs) - 1)
    return summary.runs[index].label


def sparkline(stats: ModelStats, width: int = 120, height: int = 24) -> str:
    """SVG polyline points of a model's figures across runs (its own scale); '' under 2 runs."""
    history = stats.history
    if len(history) < 2:
        return ""
    if len(history) > SPARK_POINTS:
        step = len(history) / SPARK_POINTS
        history = [history[int(k * step)] for k in range(SPARK_POINTS - 1)] + [history[-1]]
    exponent = scale_exponent(v for _, v in history)
    values = [_scaled(v, exponent) for _, v in history]
    low, high = min(values), max(values)
    spread = (high - low) or 1.0
    dx = (width - 4) / (len(values) - 1)
    return " ".join(f"{2 + k * dx:.1f},{height - 2 - (v - low) / spread * (height - 4):.1f}" for k, v in enumerate(values))
