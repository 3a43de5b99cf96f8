"""perf.html: one self-contained page (no network needed) from a perf.csv.

The page has summary counts, charts as inline SVG (mean performance per result with its 95 % CI and
min–max; performance across runs with each run's spread and the detected change points, when the
file has history), the list of detected changes, a per-result table (model with its tag configs,
environment, a sparkline of its history), and the rows table, sortable and filterable by a small
inline script. Summary, charts
and the per-model table cover every row; the rows table holds the latest ``ROW_LIMIT`` rows
(paged in the browser), so a 100,000-row perf.csv still gives a page of a few hundred KB.
"""

from __future__ import annotations

import datetime
from pathlib import Path

from madengine.core.version import __version__
from madengine.core.errors import InputError
from madengine.core.redact import redact
from madengine.reports import charts
from madengine.reports.regressions import changes_in_summary
from madengine.reports.render import environment, rows_view, summary_cards, write_atomically
from madengine.reports.summary import summarize
from madengine.reports.table import PerfTable, bulk, load_table

ROW_LIMIT = 2000  # rows in the rows table (the latest ones)
MODEL_LIMIT = 2000  # models in the per-model table (most rows first beyond that)
PAGE_SIZE = 50


def default_output(csv_path: Path) -> Path:
    """``perf.csv`` → ``perf.html`` beside it."""
    return Path(csv_path).with_suffix(".html")


def render_html(csv_path: Path) -> str:
    """The page for ``csv_path`` as text."""
    with bulk():
        return redact(_render(load_table(csv_path)))


def _render(table: PerfTable) -> str:
    summary = summarize(table)
    metrics, left_out = charts.charted_metrics(summary.models)
    models = summary.models
    if len(models) > MODEL_LIMIT:
        models = sorted(sorted(models, key=lambda s: -s.rows)[:MODEL_LIMIT], key=lambda s: s.model)
    changes = changes_in_summary(summary)
    line_charts = [chart for chart in (charts.line_chart(m, summary.models, summary, changes) for m in metrics)
                   if chart]
    listed = sorted((c for group in changes.values() for c in group),
                    key=lambda c: (c.kind != "regression", not c.latest, c.identity.label(), c.index))
    return environment().get_template("report.html.j2").render(
        title=f"madengine results: {table.path.name}",
        source=str(table.path),
        generated=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        version=__version__,
        summary=summary,
        cards=summary_cards(summary),
        bar_charts=[charts.bar_chart(m, summary.models) for m in metrics],
        line_charts=line_charts,
        charts_left_out=left_out,
        changes=listed,
        run_label=lambda position: summary.runs[position].label,
        models=models,
        models_total=len(summary.models),
        sparklines={s.group: charts.sparkline(s) for s in models},
        view=rows_view(table, ROW_LIMIT),
        page_size=PAGE_SIZE,
    )


def csv_to_html(csv_path: Path, output: Path | None = None) -> Path:
    """Write the HTML report of ``csv_path`` to ``output`` (default: beside it, ``.html``).

    Raises :class:`InputError` when the CSV is missing or malformed, or the page cannot be written.
    """
    csv_path = Path(csv_path)
    target = Path(output) if output else default_output(csv_path)
    if target.resolve() == csv_path.resolve():
        raise InputError("the report would overwrite its own CSV", path=str(target), hint="choose another -o")
    text = render_html(csv_path)
    write_atomically(target, text)
    return target
