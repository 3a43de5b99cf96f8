"""Chart geometry for inline SVG: bars per result, lines across runs, per-result sparklines.

Python computes coordinates; the templates draw them (so every label is escaped by jinja2's
autoescape). Charts are bounded in size whatever the number of rows: at most ``MAX_BARS`` bars,
``MAX_SERIES`` lines of at most ``MAX_POINTS`` points each (runs are bucketed beyond that).

Spread is drawn from the samples: a bar's dark error bar is the 95 % CI of every sample (stats.summary),
its thin line the min–max; a line's band is each run's min–max (runs with several samples). Detected
change points (``report regressions``' method) are marked on the lines.

Every chart works in values divided by its largest magnitude, so any finite figure (5e-324, 0,
negative, 1.7e308) is drawn; the labels show the real figures (:func:`format_number`).
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from typing import TYPE_CHECKING

from madengine.reports.metrics import format_change, format_number
from madengine.results.direction import lower_is_better
from madengine.reports.summary import ModelStats, Summary

if TYPE_CHECKING:
    from madengine.results.series import Change

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
    sublabel: str = ""


@dataclasses.dataclass
class Bar:
    label: str
    full_label: str
    value_text: str
    y: float
    x: float
    width: float
    whisker: tuple[float, float] | None  # min..max of the result's samples
    error: tuple[float, float] | None = None  # 95 % CI of the samples (log scale when all are positive)
    error_text: str = ""


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
class Marker:
    """A detected change on a line: a vertical mark at the first run after it."""

    x: float
    kind: str  # regression | improvement | change
    tip: str


@dataclasses.dataclass
class Series:
    name: str
    color: str
    path: str
    points: list[tuple[float, float, str]]  # x, y, tooltip
    band: str = ""  # SVG polygon points: each run's min..max
    markers: list[Marker] = dataclasses.field(default_factory=list)


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
    """Round tick values covering ``low..high`` (1, 2, 2.5, 5 × 10^k steps)."""
    if high == low:
        high, low = high + (abs(high) or 1) * 0.5, low - (abs(low) or 1) * 0.5
    raw = (high - low) / max(count - 1, 1)
    step = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 2.5, 5, 10):
        if raw <= factor * step:
            step *= factor
            break
    start, end = math.floor(low / step) * step, math.ceil(high / step) * step
    return [start + k * step for k in range(int(round((end - start) / step)) + 1)]


def magnitude(values) -> float:
    """The power of ten a chart divides its figures by, so that the largest is about 1 and the ticks
    stay round (1 for none or all 0). The exponent stays within ±300: 1e308/1e300 and 5e-324/1e-300
    are both ordinary numbers."""
    largest = max((abs(v) for v in values if v is not None and math.isfinite(v)), default=0.0)
    if largest == 0:
        return 1.0
    return 10.0 ** min(max(math.floor(math.log10(largest)), -300), 300)


def _label(scaled: float, scale: float) -> str:
    """The real figure of a scaled tick value ('' beyond the float range)."""
    try:
        return format_number(scaled * scale)
    except OverflowError:  # pragma: no cover - float multiplication gives inf, which formats as ''
        return ""


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


def series_names(chosen: list[ModelStats]) -> dict[int, str]:
    """A name per result: the model with its tag configs, plus its environment when another result of
    the same chart has the same name."""
    names = Counter(s.name for s in chosen)
    return {id(s): s.name if names[s.name] == 1 else s.identity.label() for s in chosen}


def bar_chart(metric: str, models: list[ModelStats]) -> BarChart:
    """Mean performance per result in ``metric``, with the 95 % CI of its samples and the min..max."""
    chosen = sorted((s for s in models if s.metric == metric and s.mean is not None),
                    key=lambda s: (-s.count, s.name))
    note = f"{len(chosen) - MAX_BARS} more model(s) with fewer results not shown" if len(chosen) > MAX_BARS else ""
    chosen = sorted(chosen[:MAX_BARS], key=lambda s: -s.mean)  # type: ignore[operator]
    names = series_names(chosen)
    scale = magnitude(v for s in chosen for v in (s.minimum, s.maximum))
    low = min(0.0, *(s.minimum / scale for s in chosen))  # type: ignore[operator]
    high = max(0.0, *(s.maximum / scale for s in chosen))  # type: ignore[operator]
    ticks = nice_ticks(low, high)
    left, right = LABEL_WIDTH, WIDTH - VALUE_WIDTH
    pixels = (right - left) / (ticks[-1] - ticks[0])

    def x_scaled(scaled: float) -> float:
        scaled = min(max(scaled, ticks[0]), ticks[-1])  # a CI of ±inf ends at the axis
        return round(left + (scaled - ticks[0]) * pixels, 1)

    def x_of(value: float) -> float:
        return x_scaled(value / scale)

    zero = x_of(0.0)
    bars = []
    for row, stats in enumerate(chosen):
        end = x_of(stats.mean)  # type: ignore[arg-type]
        whisker = (x_of(stats.minimum), x_of(stats.maximum)) if stats.minimum != stats.maximum else None  # type: ignore[arg-type]
        summary = stats.samples
        error, error_text = None, ""
        if summary is not None and summary.ci95_low is not None and summary.ci95_high is not None:
            error = (x_of(summary.ci95_low), x_of(summary.ci95_high))
            error_text = f"; 95 % CI {format_number(summary.ci95_low)} – {format_number(summary.ci95_high)} " \
                         f"from {summary.n} samples"
        name = names[id(stats)]
        bars.append(Bar(_clip(name, 34), stats.identity.label(), format_number(stats.mean), row * BAR_ROW + 8,
                        min(zero, end), round(abs(end - zero), 1), whisker, error, error_text))
    height = len(bars) * BAR_ROW + 8 + AXIS_HEIGHT
    return BarChart(metric, lower_is_better(metric), bars, [Tick(x_scaled(t), _label(t, scale)) for t in ticks],
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


def line_chart(metric: str, models: list[ModelStats], summary: Summary,
               changes: dict[tuple[str, ...], list[Change]] | None = None) -> LineChart | None:
    """Performance in ``metric`` across runs for the results with most runs; None without history.

    ``changes`` (per group, from :func:`madengine.reports.regressions.changes_in_summary`) are marked.
    """
    candidates = sorted((s for s in models if s.metric == metric and len(s.history) >= 2),
                        key=lambda s: (-len(s.history), s.name))
    if not candidates:
        return None
    chosen = candidates[:MAX_SERIES]
    names = series_names(chosen)
    first = min(s.history[0][0] for s in chosen)
    last = max(s.history[-1][0] for s in chosen)
    scale = magnitude([v for s in chosen for _, v in s.history] + [v for s in chosen for _, a, b in s.spread for v in (a, b)])
    values = [v / scale for s in chosen for _, v in s.history]
    values += [v / scale for s in chosen for _, a, b in s.spread for v in (a, b)]
    y_ticks = nice_ticks(min(values), max(values))
    left, top, right, bottom = LINE_MARGIN[3], LINE_MARGIN[0], WIDTH - LINE_MARGIN[1], LINE_HEIGHT - LINE_MARGIN[2]
    x_scale = (right - left) / max(last - first, 1)
    y_scale = (bottom - top) / (y_ticks[-1] - y_ticks[0])

    def x_of(position: float) -> float:
        return round(left + (position - first) * x_scale, 1)

    def y_scaled(scaled: float) -> float:
        return round(bottom - (scaled - y_ticks[0]) * y_scale, 1)

    def y_of(value: float) -> float:
        return y_scaled(value / scale)

    series = []
    for number, stats in enumerate(chosen):
        name = names[id(stats)]
        points = [(x_of(p), y_of(v), p, v) for p, v in _bucketed(stats.history, first, last)]
        path = "M" + " L".join(f"{x},{y}" for x, y, _, _ in points)
        marks = [(x, y, f"{name}: {format_number(v)} {metric} ({_run_label(summary, p)})")
                 for x, y, p, v in points] if len(points) <= 60 else []
        band = ""
        if stats.spread and last - first + 1 <= MAX_POINTS:
            upper = [f"{x_of(p)},{y_of(high)}" for p, _, high in stats.spread]
            lower = [f"{x_of(p)},{y_of(low)}" for p, low, _ in reversed(stats.spread)]
            band = " ".join(upper + lower) if len(stats.spread) > 1 else ""
        markers = [Marker(x_of(stats.history[c.index][0]), c.kind,
                          f"{name}: {c.kind} {format_change(c.point.size)} at {_run_label(summary, stats.history[c.index][0])} "
                          f"(confidence {c.point.confidence:.3f})")
                   for c in (changes or {}).get(stats.group, []) if c.index < len(stats.history)]
        series.append(Series(name, PALETTE[number % len(PALETTE)], path, marks, band, markers))
    x_ticks = [Tick(x_of(p), *_run_tick(summary, p)) for p in sorted({first, (first + last) // 2, last})]
    note = f"{len(candidates) - MAX_SERIES} more model(s) with fewer runs not shown" if len(candidates) > MAX_SERIES else ""
    if last - first + 1 > MAX_POINTS:
        note = "; ".join(filter(None, [note, f"{last - first + 1} runs averaged into {MAX_POINTS} buckets"]))
    if y_ticks[0] > 0 or y_ticks[-1] < 0:  # a zoomed axis makes small changes look large: say so
        note = "; ".join(filter(None, [f"the {metric} axis starts at {_label(y_ticks[0], scale)}, not at zero", note]))
    return LineChart(metric, lower_is_better(metric), series, [Tick(y_scaled(t), _label(t, scale)) for t in y_ticks],
                     x_ticks, WIDTH, LINE_HEIGHT, (left, top, right, bottom), note)


def _run(summary: Summary, position: float):
    index = min(max(int(round(position)), 0), len(summary.runs) - 1)
    return summary.runs[index]


def _run_label(summary: Summary, position: float) -> str:
    return _run(summary, position).label


def _run_tick(summary: Summary, position: float) -> tuple[str, str]:
    """An x tick: the run id, and under it the start time to the second."""
    run = _run(summary, position)
    key = run.key if len(run.key) <= 24 else run.key[:23] + "…"
    started = run.started_at.replace("T", " ")[:19]
    return key, "" if started == run.key.replace("T", " ")[:19] else started


def sparkline(stats: ModelStats, width: int = 120, height: int = 24) -> str:
    """SVG polyline points of a result's figures across runs (its own scale); '' under 2 runs."""
    history = stats.history
    if len(history) < 2:
        return ""
    if len(history) > SPARK_POINTS:
        step = len(history) / SPARK_POINTS
        history = [history[int(k * step)] for k in range(SPARK_POINTS - 1)] + [history[-1]]
    scale = magnitude(v for _, v in history)
    values = [v / scale for _, v in history]
    low, high = min(values), max(values)
    spread = (high - low) or 1.0
    dx = (width - 4) / (len(values) - 1)
    return " ".join(f"{2 + k * dx:.1f},{height - 2 - (v - low) / spread * (height - 4):.1f}" for k, v in enumerate(values))
