"""Latency statistics of a benchmark, on the shared statistics module.

The descriptive statistics (mean, stddev n-1, CV, linear-interpolation percentiles, Tukey outliers,
the CV threshold and pyperf-style warnings) are those of :mod:`madengine.stats.summary`, the module
``run --repeat`` uses too (see docs/statistics.md). This file only shapes them into the harness's
result (``*_ms`` keys, throughput) and adds the benchmark's own notes.

Portable: inside a container the harness folder holds a copy of ``summary.py`` and
``distributions.py`` (``madengine.bench.models_json.copy_harness`` puts them there); in-process
(``madengine bench``) they come from ``madengine.stats``.

* ``median_samples_per_second`` is batch size × 1000 / p50_ms: the headline throughput (perf.csv's
  ``performance`` for ``--metric throughput``). A latency benchmark's typical figure is its median:
  under load one stalled run can make the mean 100× the median, and a throughput from the mean would
  make two backends look 25× apart where their medians are 2.6× apart.
* ``inferences_per_second`` is n / (sum of the timed latencies) = 1000 / mean_ms: the loop is
  sequential, so time outside ``session.run`` is not the model's. ``samples_per_second`` is that
  times the batch size (the mean's throughput, kept as a column).
* onnxruntime_perf_test takes the element at ``floor(n·p)`` for a percentile instead of
  interpolating, which differs only between neighbouring samples.
"""

from __future__ import annotations

import math
from typing import Sequence

try:  # the copy beside this file, in a container or a run's work folder
    from . import summary as shared  # type: ignore[attr-defined]
except ImportError:  # in-process: the package's own module
    from madengine.stats import summary as shared

PERCENTILES = (50, 90, 95, 99)
UNSTABLE_CV = shared.UNSTABLE_CV
percentile = shared.percentile
#: below this many timed runs p99 is (nearly) the maximum
MIN_RUNS_FOR_P99 = 100


def summarize(latencies_ms: Sequence[float], batch_size: int = 1) -> dict[str, float | int]:
    """n, mean, stddev, CV, min, p50/p90/p95/p99, max (ms), outliers and throughput (of the median,
    and of the mean)."""
    if batch_size < 1:
        raise ValueError("batch size must be 1 or more")
    values = sorted(float(v) for v in latencies_ms)
    if not values:
        raise ValueError("no timed runs to summarize")
    stats = shared.summarize(values)
    summary: dict[str, float | int] = {
        "n": stats.n,
        "mean_ms": stats.mean,
        "stddev_ms": stats.stddev or 0.0,
        "cv": stats.cv if stats.cv is not None and stats.mean > 0 else 0.0,
        "min_ms": stats.minimum,
    }
    for q in PERCENTILES:
        summary[f"p{q}_ms"] = percentile(values, q)
    summary["max_ms"] = stats.maximum
    summary["outliers"] = stats.outliers
    total = math.fsum(values)
    inferences = stats.n / (total / 1000.0) if total > 0 else 0.0
    median = float(summary["p50_ms"])
    summary["median_samples_per_second"] = batch_size * 1000.0 / median if median > 0 else 0.0
    summary["inferences_per_second"] = inferences
    summary["samples_per_second"] = inferences * batch_size
    summary["batch_size"] = batch_size
    return summary


def stability_warnings(summary: dict[str, float | int]) -> list[str]:
    """The shared pyperf-style warnings, with the benchmark's advice, plus the p99 note."""
    notes = []
    for note in shared.stability_notes(float(summary["cv"]), float(summary["mean_ms"]), float(summary["max_ms"]),
                                       int(summary["outliers"]), what="run"):
        if note.startswith("unstable"):
            note += "; close other work, pin --threads, or run longer"
        notes.append(note)
    if int(summary["n"]) < MIN_RUNS_FOR_P99:
        notes.append(f"only {summary['n']} timed runs: p99 is close to the maximum "
                     f"(use --iterations {MIN_RUNS_FOR_P99} or more for tail latencies)")
    return notes
