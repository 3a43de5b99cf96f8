"""Change points in a time-ordered series of results: E-divisive means, as Apache Otava (hunter) does.

Method (Matteson & James 2014, "A nonparametric approach for multiple change point analysis", with
hunter's replacement of the permutation test by a Student's t-test, Fleming et al. 2023):

1. **Locate** (E-divisive means, exponent α = 1): in a segment x[a:b], the candidate split τ is the
   one maximizing the divergence
   ``Q(τ) = l·r/(l+r) · (2/(l·r)·Σ|L-R| - 2/(l(l-1))·Σ|L-L'| - 2/(r(r-1))·Σ|R-R'|)``
   with L = x[a:τ], R = x[τ:b] (l, r their sizes, both >= ``MIN_SEGMENT``).
2. **Test**: Student's two-sample t-test (pooled variance, as hunter) of L against R; the p-value is multiplied by the number of candidate
   positions (Bonferroni: the split was chosen as the most different one) and the change is kept when
   that is below ``ALPHA``. Deterministic: no permutations, no random numbers.
3. **Recurse** on both sides (binary segmentation), over the whole series and over half-overlapping
   windows of ``WINDOW`` (50) values (half the series when shorter), as Otava's ``window_len`` (a short excursion, up for 10 runs and
   back, hides from the whole-series search, whose best single split straddles it).
4. **Prune**: every candidate is re-tested against its neighbouring segments (previous candidate ..
   next one, Bonferroni over the positions of that span, so a window's candidate is held to the bar
   of the span it splits) and the weakest failing one is dropped until all pass. Two candidates closer
   than ``MIN_SEGMENT`` look past each other, so the weaker of them is the one that goes.

Each :class:`ChangePoint` gives the index of the first value after the change, its relative size
(mean after / mean before - 1), its confidence (1 - adjusted p) and the :class:`Summary` of the
segments before and after it.

Complexity: the pairwise distance sums of every split of a segment come from one incremental pass
with a Fenwick tree over the value ranks and one sort, O(m log m) for a segment of m values, so a level
of the recursion costs O(n log n) and a series of n points O(n log n · (changes + 1)). Before that
search, a segment is screened in O(m): when not even its most different split could pass the t-test
of step 2, no split is searched for (:func:`_may_split`; most windows of a stable series), with the
same change points as without the screen. A 500-point series takes well under a millisecond
(2,000 of them, 1 % with a step: 1.2 s of CPU; 5.4 s without the screen).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Sequence

from .distributions import t_two_sided_p
from .summary import Summary, summarize

ALPHA = 0.01  #: Bonferroni-adjusted p-value a change must stay under
MIN_SEGMENT = 3  #: values a change needs on each side (a change is confirmed 3 runs after it)
WINDOW = 50  #: values per window of the candidate search (Otava's default window_len)


@dataclasses.dataclass(frozen=True)
class ChangePoint:
    index: int  #: position of the first value after the change
    size: float | None  #: mean after / mean before - 1 (None when the mean before is 0)
    p_value: float  #: Student's t-test p, Bonferroni-adjusted
    before: Summary
    after: Summary

    @property
    def confidence(self) -> float:
        return 1.0 - self.p_value


def _left_distances(values: Sequence[float], ranks: Sequence[int]) -> list[float]:
    """``out[k]`` = Σ|x_k - x_i| over i < k: one pass with a Fenwick tree of counts and sums by rank
    (ties sit at distinct ranks and add 0 either way)."""
    size = len(values)
    counts = [0] * (size + 1)
    sums = [0.0] * (size + 1)
    out = []
    seen, running = 0, 0.0
    for value, rank in zip(values, ranks):
        below_count, below_sum, i = 0, 0.0, rank
        while i > 0:
            below_count += counts[i]
            below_sum += sums[i]
            i &= i - 1
        out.append(value * (2 * below_count - seen) - 2.0 * below_sum + running)
        i = rank + 1
        while i <= size:
            counts[i] += 1
            sums[i] += value
            i += i & -i
        seen += 1
        running += value
    return out


def _distances_to_all(values: Sequence[float], order: Sequence[int]) -> list[float]:
    """``out[k]`` = Σ|x_k - x_j| over every j, from the sorted order and its prefix sums."""
    m = len(values)
    ordered = [values[i] for i in order]
    total = math.fsum(ordered)
    out = [0.0] * m
    prefix = 0.0
    for rank, index in enumerate(order):
        value = ordered[rank]
        out[index] = value * rank - prefix + (total - prefix - value) - value * (m - rank - 1)
        prefix += value
    return out


def best_split(values: Sequence[float], min_size: int = MIN_SEGMENT) -> tuple[int, float] | None:
    """(τ, Q(τ)) of the E-divisive split of ``values`` (τ = size of the left part); None when the
    series is too short or flat."""
    m = len(values)
    if m < 2 * min_size:
        return None
    scale = max(map(abs, values))
    if scale == 0:
        return None
    xs = [v / scale for v in values]
    order = sorted(range(m), key=xs.__getitem__)
    ranks = [0] * m
    for rank, index in enumerate(order):
        ranks[index] = rank
    to_earlier = _left_distances(xs, ranks)
    to_all = _distances_to_all(xs, order)
    # within(L) grows by x_k's distances to the earlier values; between(L, R) loses x_k's distances to L
    # and gains those to R when x_k moves from R to L; within(R) is what remains of all pairs
    total = math.fsum(to_earlier)
    within_left = between = 0.0
    best: tuple[int, float] | None = None
    for tau in range(1, m - min_size + 1):
        earlier = to_earlier[tau - 1]
        within_left += earlier
        between += to_all[tau - 1] - 2.0 * earlier
        if tau < min_size:
            continue
        l, r = tau, m - tau
        within_right = total - within_left - between
        q = l * r / m * (2.0 * between / (l * r) - 2.0 * within_left / (l * (l - 1)) - 2.0 * within_right / (r * (r - 1)))
        if best is None or q > best[1] + 1e-12:
            best = (tau, q)
    if best is None or best[1] <= 0:
        return None
    return best


def student_p(left: Sequence[float], right: Sequence[float]) -> float:
    """Two-sided p of Student's two-sample t-test with pooled variance (hunter's test; exact under
    "no change", unlike Welch's, which is liberal for 3 values against 57). Overflow-safe."""
    scale = max(max(map(abs, left)), max(map(abs, right))) or 1.0
    a = [v / scale for v in left]
    b = [v / scale for v in right]
    mean_a, mean_b = math.fsum(a) / len(a), math.fsum(b) / len(b)
    df = len(a) + len(b) - 2
    pooled = (math.fsum((v - mean_a) ** 2 for v in a) + math.fsum((v - mean_b) ** 2 for v in b)) / df
    if pooled == 0:
        return 1.0 if mean_a == mean_b else 0.0
    t = (mean_b - mean_a) / math.sqrt(pooled * (1.0 / len(a) + 1.0 / len(b)))
    return t_two_sided_p(t, df)


def _adjusted_p(values: Sequence[float], start: int, split: int, end: int, min_size: int, extra_left: int = 0) -> float:
    # a segment that starts where the values start goes on ``extra_left`` values further back
    candidates = max(end - start - 2 * min_size + 1 + (extra_left if start == 0 else 0), 1)
    return min(1.0, student_p(values[start:split], values[split:end]) * candidates)


def _may_split(values: Sequence[float], start: int, end: int, alpha: float, min_size: int, extra_left: int) -> bool:
    """Whether any split of ``values[start:end]`` could pass the t-test of :func:`_split_points`. When
    none can, the E-divisive split, whichever it is, fails it too and need not be searched for: most
    segments of a stable series end here, in O(m).

    For a split after τ of m values, Student's t² = (m-2)·B/(SS-B), with SS the segment's sum of
    squares about its mean and B = (τ·S - m·S_τ)²/(m·τ·(m-τ)) the part of it between the two sides
    (S_τ the sum of the first τ centred values, S of all m): the largest B gives the largest t. That t,
    made 0.01 % larger, gives a p that no split's is below (rounding can only turn the answer into
    "maybe"). A normal tail is the cheap first test: Student's two-sided tail is never thinner."""
    m = end - start
    if m < 2 * min_size:
        return False
    segment = values[start:end]
    scale = max(map(abs, segment))
    if not scale > 0:
        return True  # all zeros: best_split and the t-test decide
    mean = math.fsum(v / scale for v in segment) / m
    xs = [v / scale - mean for v in segment]
    total = math.fsum(xs)
    spread = math.fsum(x * x for x in xs) - total * total / m
    if not spread > 0:
        return True  # a constant segment: best_split and the t-test decide
    sums = itertools.accumulate(xs[:m - min_size])
    between = max((tau * total - m * s) ** 2 / (tau * (m - tau))
                  for tau, s in zip(range(min_size, m - min_size + 1), itertools.islice(sums, min_size - 1, None))) / m
    within = spread - between
    if within <= spread * 1e-6:
        return True  # a step so large that the spread within is lost in rounding: the test decides
    t = math.sqrt((m - 2) * between / within) * 1.0001
    if not math.isfinite(t):
        return True
    limit = alpha / max(m - 2 * min_size + 1 + (extra_left if start == 0 else 0), 1)
    return math.erfc(t / math.sqrt(2.0)) < limit and t_two_sided_p(t, m - 2) < limit


def _split_points(values: Sequence[float], start: int, end: int, alpha: float, min_size: int,
                  extra_left: int = 0) -> list[int]:
    if not _may_split(values, start, end, alpha, min_size, extra_left):
        return []
    found = best_split(values[start:end], min_size)
    if found is None:
        return []
    split = start + found[0]
    if _adjusted_p(values, start, split, end, min_size, extra_left) >= alpha:
        return []
    return [*_split_points(values, start, split, alpha, min_size, extra_left), split,
            *_split_points(values, split, end, alpha, min_size, extra_left)]


def _candidates(xs: Sequence[float], alpha: float, min_size: int, extra_left: int = 0) -> set[int]:
    """Splits binary segmentation finds in the whole series and in windows of ``WINDOW`` values (half
    the series when shorter; half-overlapping, as Otava's ``window_len``): a short excursion (up for 10 runs, then back) can
    hide from the whole-series search, whose best single split straddles it."""
    found = set(_split_points(xs, 0, len(xs), alpha, min_size, extra_left))
    window = min(WINDOW, len(xs) // 2)
    if window >= 2 * min_size:
        for start in range(0, len(xs) - 2 * min_size + 1, window // 2):
            found.update(_split_points(xs, start, min(start + window, len(xs)), alpha, min_size, extra_left))
    return found


def _p_between(xs: Sequence[float], splits: Sequence[int], split: int, min_size: int, extra_left: int = 0) -> float:
    """Adjusted p of ``split`` against its neighbouring segments among ``splits``; neighbours closer
    than ``min_size`` are looked past (of two candidates for one change, the weaker one then fails)."""
    start = max((s for s in splits if s <= split - min_size), default=0)
    end = min((s for s in splits if s >= split + min_size), default=len(xs))
    if split - start < min_size or end - split < min_size:
        return 1.0
    return _adjusted_p(xs, start, split, end, min_size, extra_left)


def change_indexes(values: Sequence[float], *, alpha: float = ALPHA, min_size: int = MIN_SEGMENT,
                   extra_left: int = 0) -> list[int]:
    """Positions of the first value after each change, ascending (see the module docstring).

    ``extra_left``: how many values of the same segment came before ``values`` (a series examined
    from its latest part on): a change in the first segment is held to the bar of its whole span,
    as if the search had looked at the earlier values too."""
    xs = [float(v) for v in values]
    if not all(math.isfinite(v) for v in xs):
        raise ValueError("change-point detection needs finite numbers")
    accepted = sorted(_candidates(xs, alpha, min_size, extra_left))
    while True:
        scores = {split: _p_between(xs, accepted, split, min_size, extra_left) for split in accepted}
        crowded = [pair for pair in zip(accepted, accepted[1:]) if pair[1] - pair[0] < min_size]
        if crowded:  # two candidates for one change: the less significant goes
            a, b = crowded[0]
            accepted.remove(a if (scores[a], a) > (scores[b], b) else b)
            continue
        weakest = max(((p, split) for split, p in scores.items()), default=None)
        if weakest is None or weakest[0] < alpha:
            return accepted
        accepted.remove(weakest[1])  # the weakest change fails: drop it and re-test the others


def detect(values: Sequence[float], *, alpha: float = ALPHA, min_size: int = MIN_SEGMENT,
           extra_left: int = 0) -> list[ChangePoint]:
    """The change points of a time-ordered series, oldest first (``extra_left``: see :func:`change_indexes`)."""
    xs = [float(v) for v in values]
    splits = change_indexes(xs, alpha=alpha, min_size=min_size, extra_left=extra_left)
    bounds = [0, *splits, len(xs)]
    changes = []
    for k, split in enumerate(splits, start=1):
        before, after = summarize(xs[bounds[k - 1]:split]), summarize(xs[split:bounds[k + 1]])
        size = after.mean / before.mean - 1.0 if before.mean != 0 else None
        if size is not None and before.mean < 0:
            size = -size  # a negative figure rising toward 0 is an increase
        changes.append(ChangePoint(split, size, _adjusted_p(xs, bounds[k - 1], split, bounds[k + 1], min_size,
                                                           extra_left),
                                   before, after))
    return changes


def current_segment(values: Sequence[float], *, alpha: float = ALPHA, min_size: int = MIN_SEGMENT) -> list[float]:
    """The values after the last change point (all of them when there is none): today's baseline."""
    xs = [float(v) for v in values]
    splits = change_indexes(xs, alpha=alpha, min_size=min_size)
    return xs[splits[-1]:] if splits else xs
