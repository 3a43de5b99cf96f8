"""The jinja2 environment of the report templates and the parts every page shares.

Autoescape is on for every template: cell text, model names and chart labels are escaped
wherever they land (element text, attributes, SVG ``<title>``), so a model named
``<script>…`` is shown, never run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import os
from pathlib import Path

import jinja2

from madengine.core.errors import InputError
from madengine.reports.metrics import format_change, format_number
from madengine.reports.summary import Summary
from madengine.reports.table import PerfTable
from madengine.results.columns import ALL_COLUMNS

# The columns of the rows table, in this order, when present and not empty in the shown rows.
# the reason right after the status: a FAILURE row says why without scrolling (at 1280 px and up)
ROW_COLUMNS = ("model", "tag_configs", "status", "reason", "performance", "metric", "perf_n", "perf_cv", "n_gpus",
               "gpu_architecture", "executor", "backend", "machine_name", "docker_image", "test_duration", "started_at",
               "run_id")
TRACE_COLUMN = "trace"  # a link to the row's trace.json, beside its run id
# how a cell of these columns is shown: "num" right-aligned figures, "status" coloured, "wrap" long text
COLUMN_KINDS = {"performance": "num", "perf_n": "num", "perf_cv": "num", "n_gpus": "num", "test_duration": "num",
                "status": "status", "reason": "wrap"}
CELL_LIMIT = 300  # characters of a cell shown in the rows table (a long reason would bloat a 2,000-row page)
MAX_EXTRA_COLUMNS = 6  # per-result columns (multiple_results extras, bench statistics) shown after those


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("madengine.reports", "templates"), autoescape=True,
                             trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    env.filters["number"] = format_number
    env.filters["figure"] = format_figure
    env.filters["percent"] = lambda value: "" if value is None else f"{value * 100:.1f} %"
    env.filters["thousands"] = lambda value: f"{value:,}"
    env.filters["change"] = format_change
    return env


def format_figure(text: str) -> str:
    """A table cell's number with the reports' one rounding (:func:`format_number`); the raw value
    stays in the cell's title. Text that is not a finite number is shown as it is."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        return text
    return format_number(value) if math.isfinite(value) else text


@dataclasses.dataclass
class RowsView:
    """The latest ``limit`` rows (newest first) and the columns worth showing for them."""

    columns: list[str]
    kinds: list[str]  # per column: a COLUMN_KINDS value or ""
    rows: list[list[str]]  # cells in ``columns`` order
    statuses: list[str]
    models: list[str]
    total: int

    @property
    def truncated(self) -> bool:
        return len(self.rows) < self.total


def rows_view(table: PerfTable, limit: int) -> RowsView:
    latest = table.rows[-limit:][::-1] if limit else []
    indexes = [table.index(name) for name in ROW_COLUMNS]
    standard = set(ALL_COLUMNS)
    extras = [i for i, name in enumerate(table.header) if name and name not in standard]
    chosen = [i for i in indexes if i is not None and any(row[i].strip() for row in latest)]
    chosen += [i for i in extras if any(row[i].strip() for row in latest)][:MAX_EXTRA_COLUMNS]
    if not chosen:
        chosen = [table.index("model")]  # type: ignore[list-item]
    i_model, i_status = table.index("model"), table.index("status")
    traces = [_trace_file(table, row) for row in latest]
    with_trace = any(traces)
    return RowsView(
        columns=[table.header[i] for i in chosen] + ([TRACE_COLUMN] if with_trace else []),
        kinds=[COLUMN_KINDS.get(table.header[i], "") for i in chosen] + (["trace"] if with_trace else []),
        rows=[[_clip(row[i].strip()) for i in chosen] + ([trace] if with_trace else [])
              for row, trace in zip(latest, traces)],
        statuses=[row[i_status].strip().upper() if i_status is not None else "" for row in latest],
        models=[row[i_model].strip() for row in latest],  # type: ignore[index]
        total=len(table.rows),
    )


def _trace_file(table: PerfTable, row: list[str]) -> str:
    """The trace.json of a run's row: the run folder of its logs (``<runs>/<run id>/<key>/run.log``)."""
    i_trace, i_artifacts = table.index("trace_id"), table.index("artifacts")
    if i_trace is None or i_artifacts is None or not row[i_trace].strip():
        return ""
    log = next((a for a in row[i_artifacts].split(",") if a.strip().endswith("run.log")), "")
    return str(Path(log.strip()).parent.parent / "trace.json") if log else ""


def _clip(text: str) -> str:
    return text if len(text) <= CELL_LIMIT else text[: CELL_LIMIT - 1] + "…"


def summary_cards(summary: Summary) -> list[tuple[str, str, str]]:
    """(label, value, css class) of the summary counts."""
    counts = summary.counts
    cards = [("rows", f"{summary.total:,}", ""), ("SUCCESS", f"{counts['SUCCESS']:,}", "success"),
             ("FAILURE", f"{counts['FAILURE']:,}", "failure"), ("SKIPPED", f"{counts['SKIPPED']:,}", "skipped")]
    if counts["other"]:
        cards.append(("other status", f"{counts['other']:,}", "other"))
    rate = summary.success_rate
    cards += [("success rate", "" if rate is None else f"{rate * 100:.1f} %", ""),
              ("models", f"{summary.model_names:,}", "")]
    if len(summary.models) > summary.model_names:  # a model in several tag configs or environments
        cards.append(("results", f"{len(summary.models):,}", ""))
    cards.append(("runs", f"{len(summary.runs):,}", ""))
    if summary.machines:
        cards.append(("machines", f"{summary.machines:,}", ""))
    return cards


def write_atomically(target: Path, text: str) -> None:
    """A browser or a mail job reading the page never sees half of it."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise InputError(f"cannot write the report ({exc.strerror})", path=str(target)) from None
