"""Two-sample comparison of performance figures: is NEW faster, slower, unchanged, or can't we tell?

Method (see docs/statistics.md):

* **Test**: Mann–Whitney U, two-sided, α = ``ALPHA`` (0.05). Exact null distribution when there
  are no ties and m·n <= ``EXACT_LIMIT``; otherwise the normal approximation with tie correction and
  continuity correction (scipy's ``asymptotic``). Rank-based: one wild repeat cannot decide it.
* **Effect**: the ratio NEW/OLD is exp(Hodges–Lehmann shift of the log values) = the median of
  all pairwise ratios new_j/old_i. Its 95 % CI is Moses' distribution-free interval (the order
  statistics of the pairwise ratios that the U distribution gives), so "CI excludes 1" and
  "significant" agree. When any figure is 0 or negative the shift is taken on the values
  themselves and the ratio is 1 + shift/|median(OLD)|.
* **Verdict** (``min_effect`` = the minimum effect size, ``--threshold``, default 3 %):

  - ``inconclusive`` when a side has fewer than ``MIN_SAMPLES`` (3) figures;
  - ``faster``/``slower`` when p < α **and** |ratio - 1| >= min_effect, in the metric's good/bad
    direction (the caller says whether lower is better);
  - ``unchanged`` when the 95 % CI of the ratio lies inside 1 ± min_effect (any change is smaller
    than what matters), or every figure on both sides is the same;
  - ``inconclusive`` otherwise: too few samples or too much noise to tell. With 3 figures a side
    the smallest possible p is 0.1, so the U test never calls a change at n = 3: repeat more.

Measured false-alarm and power figures: ``benchmarks/stat_power.py``.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from typing import Sequence

from .distributions import mann_whitney_cdf, normal_cdf, normal_ppf

ALPHA = 0.05
DEFAULT_MIN_EFFECT = 0.03
MIN_SAMPLES = 3
CONFIDENCE = 0.95
EXACT_LIMIT = 10_000  #: m·n up to which the exact U distribution is used (no ties)
_SORT_LIMIT = 250_000  #: m·n up to which pairwise differences are materialized and sorted

VERDICTS = ("faster", "slower", "unchanged", "inconclusive")


@dataclasses.dataclass(frozen=True)
class SampleComparison:
    verdict: str  #: faster | slower | unchanged | inconclusive
    n_old: int
    n_new: int
    ratio: float | None  #: NEW/OLD point estimate (None when it cannot be defined)
    ci_low: float | None  #: 95 % CI of the ratio (None with too few samples)
    ci_high: float | None
    p_value: float | None  #: two-sided Mann–Whitney p (None with too few samples)
    scale: str  #: "log" (all figures > 0) or "linear"
    reason: str  #: one line on why the verdict is what it is

    @property
    def change(self) -> float | None:
        """Relative change NEW vs OLD (ratio - 1)."""
        return None if self.ratio is None else self.ratio - 1.0


@dataclasses.dataclass(frozen=True)
class UTest:
    u: float  #: U of NEW: pairs where new > old, plus half the ties
    p_value: float
    exact: bool


def mann_whitney(old: Sequence[float], new: Sequence[float]) -> UTest:
    """Two-sided Mann–Whitney U test of ``new`` against ``old`` (scipy-compatible p-values)."""
    m, n = len(old), len(new)
    if m == 0 or n == 0:
        raise ValueError("the U test needs figures on both sides")
    ordered_old = sorted(old)
    u = 0.0
    for value in new:
        below = bisect.bisect_left(ordered_old, value)
        u += below + (bisect.bisect_right(ordered_old, value) - below) / 2.0
    combined = sorted([*old, *new])
    ties = _tie_sizes(combined)
    if not ties and m * n <= EXACT_LIMIT:
        low = mann_whitney_cdf(u, m, n)
        high = mann_whitney_cdf(m * n - u, m, n)  # P(U >= u) by symmetry
        return UTest(u, min(1.0, 2.0 * min(low, high)), True)
    total = m + n
    correction = sum(t ** 3 - t for t in ties) / (total * (total - 1))
    variance = m * n / 12.0 * ((total + 1) - correction)
    if variance <= 0:
        return UTest(u, 1.0, False)  # every figure is the same
    big = max(u, m * n - u)
    z = (big - m * n / 2.0 - 0.5) / math.sqrt(variance)
    return UTest(u, min(1.0, 2.0 * normal_cdf(-z)), False)


def _tie_sizes(ordered: Sequence[float]) -> list[int]:
    sizes, run = [], 1
    for previous, value in zip(ordered, ordered[1:]):
        if value == previous:
            run += 1
        else:
            if run > 1:
                sizes.append(run)
            run = 1
    if run > 1:
        sizes.append(run)
    return sizes


def _count_at_most(xs: Sequence[float], ys: Sequence[float], value: float) -> int:
    """How many pairs (x, y) of the sorted ``xs``/``ys`` have y - x <= value (two pointers, O(m+n))."""
    count, j = 0, 0
    for x in xs:  # x rising: the allowed y's only grow
        limit = value + x
        while j < len(ys) and ys[j] <= limit:
            j += 1
        count += j
    return count


def _kth_difference(xs: Sequence[float], ys: Sequence[float], k: int) -> float:
    """The k-th smallest (1-based) of the pairwise differences y - x of sorted ``xs``, ``ys``."""
    if len(xs) * len(ys) <= _SORT_LIMIT:
        return sorted(y - x for x in xs for y in ys)[k - 1]
    low, high = ys[0] - xs[-1], ys[-1] - xs[0]
    for _ in range(200):
        middle = (low + high) / 2.0
        if middle in (low, high):
            break
        if _count_at_most(xs, ys, middle) >= k:
            high = middle
        else:
            low = middle
    return high


def _critical_count(m: int, n: int, exact: bool) -> int:
    """How many pairwise differences each end of Moses' 95 % interval leaves out (0: none exists)."""
    half_alpha = (1.0 - CONFIDENCE) / 2.0
    if exact:
        k = 0
        while mann_whitney_cdf(k, m, n) <= half_alpha:
            k += 1
        return k
    spread = math.sqrt(m * n * (m + n + 1) / 12.0)
    return max(int(math.floor(m * n / 2.0 - normal_ppf(1.0 - half_alpha) * spread)), 0)


def hodges_lehmann(old: Sequence[float], new: Sequence[float],
                   exact: bool = True) -> tuple[float, float | None, float | None]:
    """Shift estimate of ``new`` over ``old`` (median of pairwise differences) and its 95 % CI
    (Moses); the CI is (None, None) when the samples are too small for 95 %."""
    xs, ys = sorted(old), sorted(new)
    pairs = len(xs) * len(ys)
    if pairs % 2:
        estimate = _kth_difference(xs, ys, (pairs + 1) // 2)
    else:
        estimate = (_kth_difference(xs, ys, pairs // 2) + _kth_difference(xs, ys, pairs // 2 + 1)) / 2.0
    k = _critical_count(len(xs), len(ys), exact)
    if k < 1:
        return estimate, None, None
    return estimate, _kth_difference(xs, ys, k), _kth_difference(xs, ys, pairs - k + 1)


def as_ratio(log_value: float) -> float:
    """exp() that gives inf instead of raising for ratios beyond the float range (5e-324 vs 1.7e308)."""
    return math.exp(log_value) if log_value < 709.0 else math.inf


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2.0


def _ratio_interval(old: Sequence[float], new: Sequence[float], exact: bool
                    ) -> tuple[str, float | None, float | None, float | None]:
    """(scale, ratio, ci_low, ci_high) of NEW/OLD."""
    if min(old) > 0 and min(new) > 0:
        shift, low, high = hodges_lehmann([math.log(v) for v in old], [math.log(v) for v in new], exact)
        return "log", as_ratio(shift), None if low is None else as_ratio(low), None if high is None else as_ratio(high)
    shift, low, high = hodges_lehmann(old, new, exact)
    base = abs(_median(old))
    if base == 0:
        return "linear", None, None, None
    return "linear", 1.0 + shift / base, None if low is None else 1.0 + low / base, \
        None if high is None else 1.0 + high / base


def _finite(values: Sequence[float], side: str) -> list[float]:
    out = [float(v) for v in values]
    if not all(math.isfinite(v) for v in out):
        raise ValueError(f"{side} has a figure that is not a finite number")
    return out


def compare_samples(old: Sequence[float], new: Sequence[float], *, lower_is_better: bool,
                    min_effect: float = DEFAULT_MIN_EFFECT, alpha: float = ALPHA) -> SampleComparison:
    """The verdict on NEW against OLD (see the module docstring for the rules)."""
    if min_effect < 0:
        raise ValueError("the minimum effect size cannot be negative")
    old, new = _finite(old, "OLD"), _finite(new, "NEW")
    m, n = len(old), len(new)
    if m < MIN_SAMPLES or n < MIN_SAMPLES:
        ratio = None
        if m and n and _median(old) > 0 and _median(new) > 0:
            ratio = _median(new) / _median(old)
        return SampleComparison("inconclusive", m, n, ratio, None, None, None, "log" if ratio else "linear",
                                f"fewer than {MIN_SAMPLES} figures on a side ({m} old, {n} new)")
    test = mann_whitney(old, new)
    scale, ratio, low, high = _ratio_interval(old, new, test.exact)

    def result(verdict: str, reason: str) -> SampleComparison:
        return SampleComparison(verdict, m, n, ratio, low, high, test.p_value, scale, reason)

    if len(set(old)) == 1 and set(old) == set(new):
        return result("unchanged", "every figure is the same on both sides")
    significant = test.p_value < alpha
    if ratio is None:  # OLD's median is 0: no relative effect size, the test alone decides
        if significant:
            worse = (_median(new) > _median(old)) == lower_is_better
            return result("slower" if worse else "faster", f"p = {test.p_value:.3g} < {alpha}")
        return result("inconclusive", f"not significant (p = {test.p_value:.3g})")
    change = ratio - 1.0
    if significant and abs(change) >= min_effect:
        worse = (change > 0) == lower_is_better
        return result("slower" if worse else "faster", f"p = {test.p_value:.3g} < {alpha}, change {change:+.1%}")
    if low is not None and high is not None and 1.0 - min_effect <= low and high <= 1.0 + min_effect:
        return result("unchanged", f"the 95 % CI of the ratio lies inside 1 ± {min_effect:.1%}")
    if significant:
        return result("inconclusive", f"a change of {change:+.1%} (p = {test.p_value:.3g}), smaller than "
                                      f"{min_effect:.1%} but its CI reaches beyond it")
    return result("inconclusive", f"not significant (p = {test.p_value:.3g}) and the CI reaches beyond "
                                  f"± {min_effect:.1%}: too noisy or too few figures to tell")
