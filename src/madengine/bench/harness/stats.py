"""Latency statistics of a benchmark (standard library only).

Definitions (written down because peers differ):

* ``stddev_ms`` is the sample standard deviation (n - 1); 0 for a single run.
* ``cv`` is stddev / mean (a fraction, not a percent).
* Percentiles interpolate linearly between the closest ranks of the sorted latencies (numpy's
  default ``linear`` method); onnxruntime_perf_test instead takes the element at ``floor(n·p)``,
  which differs only between neighbouring samples.
* ``inferences_per_second`` is n / (sum of the timed latencies) = 1000 / mean_ms: the loop is
  sequential, so time outside ``session.run`` is not the model's. ``samples_per_second`` is that
  times the batch size.
* ``outliers`` counts latencies outside Q1 - 1.5·IQR .. Q3 + 1.5·IQR (pyperf's rule); they are
  reported, never removed.
"""

from __future__ import annotations

import math
from typing import Sequence

PERCENTILES = (50, 90, 95, 99)

#: pyperf's threshold: a spread this large means the figures should not be trusted as they are
UNSTABLE_CV = 0.10
#: below this many timed runs p99 is (nearly) the maximum
MIN_RUNS_FOR_P99 = 100


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of already sorted values, by linear interpolation."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} is outside 0..100")
    position = (len(sorted_values) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    fraction = position - low
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * fraction


def summarize(latencies_ms: Sequence[float], batch_size: int = 1) -> dict[str, float | int]:
    """n, mean, stddev, CV, min, p50/p90/p95/p99, max (ms), outliers and throughput."""
    values = sorted(float(v) for v in latencies_ms)
    n = len(values)
    if n == 0:
        raise ValueError("no timed runs to summarize")
    if batch_size < 1:
        raise ValueError("batch size must be 1 or more")
    total = math.fsum(values)
    mean = total / n
    variance = math.fsum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    stddev = math.sqrt(variance)
    q1, q3 = percentile(values, 25), percentile(values, 75)
    spread = 1.5 * (q3 - q1)
    summary: dict[str, float | int] = {
        "n": n,
        "mean_ms": mean,
        "stddev_ms": stddev,
        "cv": stddev / mean if mean > 0 else 0.0,
        "min_ms": values[0],
    }
    for q in PERCENTILES:
        summary[f"p{q}_ms"] = percentile(values, q)
    summary["max_ms"] = values[-1]
    summary["outliers"] = sum(1 for v in values if v < q1 - spread or v > q3 + spread)
    inferences = n / (total / 1000.0) if total > 0 else 0.0
    summary["inferences_per_second"] = inferences
    summary["samples_per_second"] = inferences * batch_size
    summary["batch_size"] = batch_size
    return summary


def stability_warnings(summary: dict[str, float | int]) -> list[str]:
    """pyperf-style warnings about figures that should not be trusted as they are."""
    notes = []
    cv = float(summary["cv"])
    if cv >= UNSTABLE_CV:
        notes.append(f"unstable: the standard deviation is {cv:.1%} of the mean (>= {UNSTABLE_CV:.0%}); "
                     "close other work, pin --threads, or run longer")
    if int(summary["n"]) < MIN_RUNS_FOR_P99:
        notes.append(f"only {summary['n']} timed runs: p99 is close to the maximum "
                     f"(use --iterations {MIN_RUNS_FOR_P99} or more for tail latencies)")
    mean = float(summary["mean_ms"])
    if mean > 0 and float(summary["max_ms"]) >= 1.5 * mean:
        notes.append(f"the slowest run took {float(summary['max_ms']) / mean:.1f}x the mean "
                     f"({summary['outliers']} outlier(s))")
    return notes
