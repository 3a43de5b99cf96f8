"""The probability distributions the statistics need, in the standard library only.

* Normal: :class:`statistics.NormalDist` (exact to double precision).
* Student's t: CDF through the regularized incomplete beta function (Lentz's continued fraction,
  as in Numerical Recipes §6.4), quantiles by bisection on that CDF (cached per degrees of freedom).
* The exact null distribution of the Mann–Whitney U statistic without ties: the coefficients of
  the Gaussian binomial ``[m+n choose m]_q``, built as a product of ``(1 - q^(n+i)) / (1 - q^i)``
  in O(m·(m·n)) integer operations.

Portable: imports nothing outside the standard library and nothing of madengine, because the ONNX
harness copies this file (with ``summary.py``) into containers. Cross-checked against scipy in
``tests/test_stats.py``.
"""

from __future__ import annotations

import functools
import math
from statistics import NormalDist

_NORMAL = NormalDist()
_EPS = 3e-16
_TINY = 1e-300
_MAX_ITERATIONS = 500
#: beyond this many degrees of freedom Student's t is the normal distribution to ~1e-7
_NORMAL_DF = 1e7


def normal_cdf(z: float) -> float:
    return _NORMAL.cdf(z)


def normal_ppf(p: float) -> float:
    return _NORMAL.inv_cdf(p)


def _beta_fraction(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, _MAX_ITERATIONS + 1):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + aa / c
            c = c if abs(c) > _TINY else _TINY
            delta = d * c
            h *= delta
        if abs(delta - 1.0) < _EPS:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b) for a, b > 0 and 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` degrees of freedom."""
    if math.isnan(t):
        return 1.0
    if math.isinf(t):
        return 0.0
    if df >= _NORMAL_DF:
        return 2.0 * normal_cdf(-abs(t))
    return betainc(df / 2.0, 0.5, df / (df + t * t))


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` (> 0, need not be an integer) degrees of freedom."""
    tail = t_two_sided_p(t, df) / 2.0
    return 1.0 - tail if t > 0 else tail


@functools.lru_cache(maxsize=4096)
def t_ppf(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t (bisection on :func:`t_cdf`, to double precision)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"quantile {p} is outside (0, 1)")
    if df >= _NORMAL_DF:
        return normal_ppf(p)
    if p < 0.5:
        return -t_ppf(1.0 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        low, high = high, high * 2.0
    for _ in range(200):
        middle = (low + high) / 2.0
        if middle in (low, high):
            break
        if t_cdf(middle, df) < p:
            low = middle
        else:
            high = middle
    return (low + high) / 2.0


@functools.lru_cache(maxsize=256)
def mann_whitney_counts(m: int, n: int) -> tuple[int, ...]:
    """How many of the C(m+n, m) orderings of two tie-free samples give U = 0, 1, ..., m·n."""
    if m > n:
        m, n = n, m
    size = m * n + 1
    counts = [0] * size
    counts[0] = 1
    for i in range(1, m + 1):
        # multiply by (1 - q^(n+i)), then divide by (1 - q^i): the q-binomial's product form
        shift = n + i
        for u in range(size - 1, shift - 1, -1):
            counts[u] -= counts[u - shift]
        for u in range(i, size):
            counts[u] += counts[u - i]
    return tuple(counts)


def mann_whitney_cdf(u: float, m: int, n: int) -> float:
    """Exact P(U <= u) of the Mann–Whitney U statistic of samples of sizes m and n (no ties)."""
    counts = mann_whitney_counts(m, n)
    k = math.floor(u + 1e-9)
    if k < 0:
        return 0.0
    if k >= len(counts) - 1:
        return 1.0
    return sum(counts[: k + 1]) / math.comb(m + n, m)
