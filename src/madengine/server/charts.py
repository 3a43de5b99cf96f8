"""The trend chart of one result identity, as inline SVG geometry (the templates draw it, escaped; the
dots, thousands of them on a page of 10 series, come as one fragment escaped here).

One point per run (the median of the run's samples, as ``report regressions`` counts it), runs evenly
spaced in time order; a band through each run's min and max where a run has several samples; a
dashed vertical line at the first run after each change ``report regressions`` finds (red: a
regression, green: an improvement). Figures are divided by a power of ten before drawing, so any
finite figure is drawn (the axis shows the real ones); ticks and scaling are perf.html's
(:mod:`madengine.reports.charts`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

from markupsafe import Markup

from madengine.reports.charts import Tick, magnitude, nice_ticks
from madengine.reports.metrics import format_change, format_number

WIDTH = 960
HEIGHT = 280
MARGIN = (16, 24, 40, 72)  # top, right, bottom, left


@dataclasses.dataclass
class Mark:
    x: float
    kind: str
    tip: str


@dataclasses.dataclass
class TrendChart:
    width: int
    height: int
    plot: tuple[int, int, int, int]  # left, top, right, bottom
    path: str
    band: str  # SVG polygon points through every run's max, back through every min ('' without spread)
    dots: Markup  #: a circle per run with its tooltip, escaped
    marks: list[Mark]
    y_ticks: list[Tick]
    x_ticks: list[Tick]


def _escaped(text: str) -> str:
    """``text`` for HTML, as ``markupsafe.escape`` writes it, as plain text: a chart escapes two texts
    per dot, and a Markup made for each and copied into the fragment again cost a third of that."""
    return text.replace("&", "&amp;").replace(">", "&gt;").replace("<", "&lt;").replace("'", "&#39;").replace('"', "&#34;")


def _short(run_id: str) -> str:
    return run_id if len(run_id) <= 24 else run_id[:23] + "…"


def trend_chart(points: Sequence[Mapping[str, Any]], changes: Sequence[Mapping[str, Any]], metric: str) -> TrendChart | None:
    """The chart of a series (``views.Dashboard.series``: points and changes); None without points."""
    if not points:
        return None
    left, top = MARGIN[3], MARGIN[0]
    right, bottom = WIDTH - MARGIN[1], HEIGHT - MARGIN[2]
    spread = any(p["n"] > 1 for p in points)
    # every value lies between its run's min and max: the extremes of those are the chart's
    lowest, highest = min(p["min"] for p in points), max(p["max"] for p in points)
    scale = magnitude([lowest, highest])
    ticks = nice_ticks(lowest / scale, highest / scale)
    x_step = (right - left) / max(len(points) - 1, 1)
    y_step = (bottom - top) / (ticks[-1] - ticks[0])

    # every x once (a page of 10 series x 500 runs draws 5,000 points, a band through them, ticks)
    xs = [round(left + index * x_step, 1) for index in range(len(points))] if len(points) > 1 \
        else [round((left + right) / 2, 1)]

    def x_of(index: int) -> float:
        return xs[index]

    low = ticks[0]

    def ys_of(figures: Sequence[float]) -> list[str]:
        return [str(round(bottom - (value / scale - low) * y_step, 1)) for value in figures]

    # each coordinate made text once: the dots, the line and the band share them
    x_texts = list(map(str, xs))
    y_texts = ys_of([p["value"] for p in points])
    unit = f" {metric}" if metric else ""
    radius = 3 if len(points) <= 200 else 2
    dots = []
    for x, y, point in zip(x_texts, y_texts, points):
        n = point["n"]
        spread_text = f", min {format_number(point['min'])}, max {format_number(point['max'])} of {n} samples" \
            if n > 1 else ""
        run = point["run_id"]
        tip = f"{run} {point['started_at'].replace('T', ' ')[:19]}: {format_number(point['value'])}{unit}{spread_text}"
        dots.append(f'<circle class="point" cx="{x}" cy="{y}" r="{radius}" data-run="{_escaped(run)}">'
                    f'<title>{_escaped(tip.strip())}</title></circle>')
    path = "M" + " L".join(f"{x},{y}" for x, y in zip(x_texts, y_texts))
    band = ""
    if spread and len(points) > 1:
        upper = [f"{x},{y}" for x, y in zip(x_texts, ys_of([p["max"] for p in points]))]
        lower = [f"{x},{y}" for x, y in zip(reversed(x_texts), reversed(ys_of([p["min"] for p in points])))]
        band = " ".join(upper + lower)
    position = {p["run_id"]: i for i, p in enumerate(points)}
    marks = []
    for change in changes:
        index = position.get(change["after"]["run_id"])
        if index is not None:
            marks.append(Mark(x_of(index), change["kind"],
                              f"{change['kind']} {format_change((change['size_percent'] or 0) / 100)} at "
                              f"{change['after']['run_id']} (confidence {change['confidence']:.3f})"))
    chosen = sorted({0, (len(points) - 1) // 2, len(points) - 1})
    x_ticks = [Tick(x_of(i), _short(points[i]["run_id"]), points[i]["started_at"].replace("T", " ")[:19])
               for i in chosen]
    y_ticks = [Tick(round(bottom - (t - low) * y_step, 1), format_number(t * scale)) for t in ticks]
    return TrendChart(WIDTH, HEIGHT, (left, top, right, bottom), path, band, Markup("".join(dots)), marks, y_ticks,
                      x_ticks)
