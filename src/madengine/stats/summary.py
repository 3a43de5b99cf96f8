"""Descriptive statistics of repeated measurements: the one module ``run --repeat``, ``bench`` and the
ONNX harness share (standard library only; the harness copies this file with ``distributions.py``).

Definitions (written down because tools differ):

* ``stddev`` is the sample standard deviation (n - 1); ``None`` for a single sample.
* ``cv`` (coefficient of variation) is stddev / |mean|, a fraction; ``None`` when the mean is 0
  or there is one sample.
* ``median`` is the 50th percentile. Percentiles interpolate linearly between the closest ranks
  of the sorted values (numpy's default ``linear`` method).
* ``ci95_low``/``ci95_high``: a 95 % confidence interval of the figure's typical value, from 2
  samples on (wide: t(0.975, 1) = 12.7). Analytic, so the same samples always give the same
  interval. The method follows the figure's domain:

  - **All samples positive** (throughput, latency, time: the usual case): Student's t **on the log
    scale**, exp(m ± t(0.975, n-1)·s/√n) with m and s the mean and standard deviation of ln(x).
    That is the CI of the **geometric mean** (``geomean``), the median of log-normal figures: its
    coverage is exactly 95 % for log-normal figures at any n. Both ends are positive whatever the
    spread (a plain t interval of 4.8, 20 and 39 samples/s reaches -2.9), and the interval is
    skewed like the figures. Ends beyond the largest float are clamped to it.
  - **Samples ≥ 0 with a zero among them** (a rate that was 0 once: no logarithm exists): the
    percentile interval of the **exact bootstrap distribution of the median** (Maritz & Jarrett
    1978): the k-th smallest of n draws with replacement is at most x_(j) with probability
    P(Binomial(n, j/n) ≥ k) = I_{j/n}(k, n-k+1), so no resampling and no seed. Its ends are
    samples, so never below 0: 0, 10 and 1 give 0 … 10. Distribution-free, so with few samples it
    is the range: [min, max] holds the median of a continuous figure with probability 75 % at
    n = 3, 94 % at n = 5, 98 % at n = 10 (:func:`median_interval`).
  - **Any sample negative** (a difference, a temperature): the figure is not a non-negative quantity
    and the interval is Student's t of the mean on the values, mean ± t·stddev/√n.

  The row's ``performance`` is the median, which is robust to one slow repeat.
* ``outliers`` counts values outside Q1 - 1.5·IQR .. Q3 + 1.5·IQR (Tukey's fences, pyperf's
  rule); they are reported, never removed.
* Overflow-safe: values are scaled by the largest magnitude before sums of squares, so figures
  from 5e-324 to 1.7e308 (and negative ones) summarize without an exception.

Stability warnings follow pyperf (``pyperf._cli.format_checks``): a CV of ``UNSTABLE_CV`` (10 %)
or more, and a maximum at least 1.5x the mean.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from typing import Iterable, Sequence

from .distributions import betainc, t_ppf

#: pyperf's threshold: a spread this large means the figures should not be trusted as they are
UNSTABLE_CV = 0.10
CONFIDENCE = 0.95
_LOG_MAX = math.log(sys.float_info.max)
_SMALLEST = 5e-324


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
    a, b = sorted_values[low], sorted_values[high]
    if fraction == 0.0 or a == b:
        return a
    return a + (b - a) * fraction if math.isfinite(b - a) else a * (1 - fraction) + b * fraction


@dataclasses.dataclass(frozen=True)
class Summary:
    """n, mean, median, stddev, cv, min, max, the 95 % CI (log scale for positive figures), the
    outlier count and the geometric mean (``None`` unless every value is positive)."""

    n: int
    mean: float
    median: float
    stddev: float | None
    cv: float | None
    minimum: float
    maximum: float
    ci95_low: float | None
    ci95_high: float | None
    outliers: int
    geomean: float | None = None

    @property
    def unstable(self) -> bool:
        return self.cv is not None and self.cv >= UNSTABLE_CV


def _finite(values: Iterable[float]) -> list[float]:
    out = []
    for value in values:
        number = float(value)
        if not math.isfinite(number):
            raise ValueError(f"not a finite number: {value!r}")
        out.append(number)
    return out


def _mean_and_stddev(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation: exactly rounded sums of the values themselves, and only
    when a sum would overflow (figures near 1.7e308), of the values scaled to at most 1."""
    n = len(values)
    try:
        total = math.fsum(values)
    except OverflowError:  # 1.7e308 + 1.7e308
        total = math.inf
    if math.isfinite(total):
        mean = total / n
        try:
            squares = math.fsum((v - mean) ** 2 for v in values) if n > 1 else 0.0
        except OverflowError:  # (1e300 - 0)**2: the scaled path below handles it
            squares = math.inf
        if math.isfinite(squares):
            return mean, math.sqrt(squares / (n - 1)) if n > 1 else None
    scale = max(abs(values[0]), abs(values[-1])) or 1.0  # values are sorted: the extremes are at the ends
    scaled = [v / scale for v in values]
    mean = math.fsum(scaled) / n
    stddev = math.sqrt(math.fsum((v - mean) ** 2 for v in scaled) / (n - 1)) if n > 1 else None
    return mean * scale, (None if stddev is None else _times(stddev, scale))


def _times(a: float, b: float) -> float:
    try:
        return a * b
    except OverflowError:  # pragma: no cover - float multiplication gives inf, kept for clarity
        return math.inf


def summarize(values: Iterable[float]) -> Summary:
    """The :class:`Summary` of ``values`` (in any order); ``ValueError`` for none or a non-finite one."""
    ordered = sorted(_finite(values))
    n = len(ordered)
    if n == 0:
        raise ValueError("no values to summarize")
    mean, stddev = _mean_and_stddev(ordered)
    cv = stddev / abs(mean) if stddev is not None and mean != 0 else None
    geomean = low = high = None
    if ordered[0] > 0:
        geomean, low, high = _log_interval(ordered)
    elif ordered[0] == 0 and n > 1:
        low, high = median_interval(ordered)
    elif stddev is not None:
        low, high = _mean_interval(mean, stddev, n)
    q1, q3 = percentile(ordered, 25), percentile(ordered, 75)
    fence = 1.5 * (q3 - q1) if math.isfinite(q3 - q1) else math.inf
    outliers = sum(1 for v in ordered if v < q1 - fence or v > q3 + fence)
    return Summary(n=n, mean=mean, median=percentile(ordered, 50), stddev=stddev, cv=cv, minimum=ordered[0],
                   maximum=ordered[-1], ci95_low=low, ci95_high=high, outliers=outliers, geomean=geomean)


def _t_half_width(stddev: float, n: int) -> float:
    return _times(t_ppf(0.5 + CONFIDENCE / 2, n - 1), stddev / math.sqrt(n))


def _mean_interval(mean: float, stddev: float, n: int) -> tuple[float, float]:
    """Student's t interval of the mean, on the values themselves."""
    half = _t_half_width(stddev, n)
    return mean - half, mean + half


def median_interval(ordered: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The percentile interval of the exact bootstrap distribution of the median of sorted values:
    the lower end is the (1 - confidence)/2 quantile of the resampled lower median (the ⌈n/2⌉-th
    smallest of n draws with replacement), the upper end the (1 + confidence)/2 quantile of the
    resampled upper median (the (⌊n/2⌋+1)-th); the two coincide for odd n, and for even n the
    interpolated median lies between them, so the interval holds at least ``confidence`` of the
    bootstrap distribution. Both ends are sample values (within [min, max])."""
    n = len(ordered)
    tail = (1.0 - confidence) / 2.0
    return _resampled_quantile(ordered, (n + 1) // 2, tail), _resampled_quantile(ordered, n // 2 + 1, 1.0 - tail)


def _resampled_quantile(ordered: Sequence[float], k: int, q: float) -> float:
    """The smallest sample x_(j) such that the k-th smallest of n draws with replacement is at most
    x_(j) with probability ≥ q: P(Binomial(n, j/n) ≥ k) = I_{j/n}(k, n - k + 1), increasing in j
    (bisection). Tied samples need nothing special: the first of a tie is returned."""
    n = len(ordered)
    low, high = 1, n
    while low < high:
        middle = (low + high) // 2
        if betainc(k, n - k + 1, middle / n) >= q:
            high = middle
        else:
            low = middle + 1
    return ordered[low - 1]


def _log_interval(ordered: Sequence[float]) -> tuple[float, float | None, float | None]:
    """The geometric mean of sorted positive values and Student's t interval on ln(x), taken back:
    the CI of the geometric mean (none for one value). Positive ends, at most the largest float;
    the geometric mean lies in [min, max] and in the interval despite rounding."""
    n = len(ordered)
    if ordered[0] == ordered[-1]:  # no spread: exactly the value, not its round trip through ln
        return ordered[0], (ordered[0] if n > 1 else None), (ordered[0] if n > 1 else None)
    logs = [math.log(v) for v in ordered]
    center = math.fsum(logs) / n
    geomean = min(max(_bounded_exp(center), ordered[0]), ordered[-1])
    if n < 2:
        return geomean, None, None
    spread = math.sqrt(math.fsum((v - center) ** 2 for v in logs) / (n - 1))
    half = _t_half_width(spread, n)
    return geomean, min(_bounded_exp(center - half), geomean), max(_bounded_exp(center + half), geomean)


def _bounded_exp(x: float) -> float:
    if x >= _LOG_MAX:
        return sys.float_info.max
    return max(math.exp(x), _SMALLEST)


def stability_warnings(summary: Summary, what: str = "sample") -> list[str]:
    """pyperf-style warnings about figures that should not be trusted as they are ([] when fine)."""
    return stability_notes(summary.cv, summary.mean, summary.maximum, summary.outliers, what)


def stability_notes(cv: float | None, mean: float, maximum: float, outliers: int, what: str = "sample") -> list[str]:
    """:func:`stability_warnings` from the figures themselves (for callers that keep them elsewhere)."""
    notes = []
    if cv is not None and cv >= UNSTABLE_CV:
        notes.append(f"unstable: the standard deviation is {cv:.1%} of the mean (>= {UNSTABLE_CV:.0%})")
    if mean > 0 and maximum >= 1.5 * mean:
        notes.append(f"the largest {what} is {maximum / mean:.1f}x the mean ({outliers} outlier(s))")
    return notes
