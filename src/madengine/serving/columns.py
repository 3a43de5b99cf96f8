"""A load point's perf.csv row: its columns, its figure, and what tells it apart from the others.

One row per load point. ``performance`` is the output token throughput (``metric``
``output_throughput_tok_per_s``); the other figures are columns of their own, and the row names
them in its ``figures`` column so that ``report compare``, ``report regressions`` and the charts
take each as a metric of its own (:mod:`madengine.results.figures`). The load point, the prompt
lengths (or the dataset) and the API go into ``tag_configs``: part of the result identity, so
concurrency 1 and concurrency 4 are never compared with each other. The server's name is the row's
``backend``.
"""

from __future__ import annotations

import json
import math
from typing import Any

from madengine.serving.loadpoints import LoadPoint
from madengine.serving.metrics import LATENCIES, PERCENTILES, PointFigures

METRIC = "output_throughput_tok_per_s"
LATENCY_COLUMNS = tuple(f"{name}_{stat}_ms" for name in LATENCIES for stat in ("mean", *(f"p{q}" for q in PERCENTILES)))
#: the columns that are figures of their own (report compare, regressions, charts)
FIGURE_COLUMNS = tuple(f"{name}_p{q}_ms" for name in LATENCIES for q in PERCENTILES) + (
    "request_throughput_req_per_s", "goodput_req_per_s")


def rounded(value: float | None, digits: int = 6) -> float | None:
    """``digits`` significant digits (cells stay readable); None for nothing or a non-finite value."""
    if value is None or not math.isfinite(value):
        return None
    return float(f"{value:.{digits}g}")


def point_columns(figures: PointFigures | None, *, point: LoadPoint, requests: int, slo_text: str,
                  slo_met: bool | None) -> dict[str, Any]:
    """The load point's own columns (the benchmark's settings come from the caller)."""
    columns: dict[str, Any] = {
        "load_point": point.label, "concurrency": point.concurrency if point.concurrency is not None else "",
        "request_rate": "" if point.rate is None else point.value_text, "requests": requests,
    }
    if figures is None:
        return columns
    columns.update({
        "completed": figures.completed, "errors": figures.errors, "error_rate": rounded(figures.error_rate, 4),
        "error_kinds": json.dumps(figures.error_kinds) if figures.error_kinds else "",
        "token_counts": figures.token_source, "input_tokens": figures.input_tokens,
        "output_tokens": figures.output_tokens, "duration_s": rounded(figures.duration_s),
        "request_throughput_req_per_s": rounded(figures.per_second(figures.completed)),
        METRIC: rounded(figures.per_second(figures.output_tokens)),
        "total_throughput_tok_per_s": rounded(figures.per_second(figures.input_tokens + figures.output_tokens)),
        "goodput_req_per_s": rounded(figures.per_second(figures.good)) if slo_text else None,
        "slo": slo_text, "slo_attainment": rounded(figures.attainment, 4) if slo_text else None,
        "slo_met": "" if slo_met is None else ("true" if slo_met else "false"),
    })
    for name, stats in figures.latencies.items():
        for stat, value in stats.items():
            columns[f"{name}_{stat}_ms"] = rounded(value)
    columns["figures"] = ",".join(name for name in FIGURE_COLUMNS if columns.get(name) is not None)
    return columns


def tag_pairs(point: LoadPoint, **workload: Any) -> list[tuple[str, str]]:
    """What the load point's row is compared by, besides model, server and environment: the load
    point and the workload (:func:`workload_pairs`)."""
    return [(point.kind, point.value_text), *workload_pairs(**workload)]


def workload_pairs(*, input_len: int | None, output_len: int | None, dataset: str, api: str
                   ) -> list[tuple[str, str]]:
    """The prompts (their length, or the dataset), the output length (``reply``: each ShareGPT
    reply's) and the API when it is not completions."""
    pairs = [("dataset", dataset) if dataset else ("input_len", str(input_len)),
             ("output_len", str(output_len) if output_len is not None else "reply")]
    if api != "completions":
        pairs.append(("api", api))
    return pairs
