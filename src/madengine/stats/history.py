"""A new figure judged against the result's own history: the verdict for one run (or a few) when a
side has too few samples for a two-sample test.

Method (docs/statistics.md, "Against the history"):

* **Reference**: the result's whole stable segment before the figures judged, one figure per run:
  every run after its last change point (:mod:`.changepoint`), at most ``MAX_HISTORY`` (100: the runs
  a series state keeps; past 100 runs the power gains under 2 points while a slow drift the change
  detection does not cut costs false alarms, docs/statistics.md), and at least ``MIN_HISTORY`` (10).
  Far outliers (beyond Q1 − 3·IQR or Q3 + 3·IQR) are left out, so one wild run does not widen the
  band; normal noise is practically never cut there, so the band keeps its coverage.
* **Scale**: the logarithm of the figures when all are > 0 (noise of timings is multiplicative: the
  band is a ratio), else the figures themselves (changes relative to the reference's |mean|).
* **Prediction interval** (Student's t, exact for normal noise): the mean of ``k`` new figures of an
  unchanged result lies within ``mean ± t(1 − α/2, n − 1) · s · √(1/k + 1/n)`` of the reference's
  ``n`` figures with probability 1 − α. ``t = (new − mean) / (s · √(1/k + 1/n))`` and its two-sided
  p-value say how far outside it is; α is the false-alarm rate of a verdict.
* **Verdict** (α = ``ALPHA``, 0.8 %: a false-alarm rate under 1 % with room for chance; ``min_effect``
  as ``report compare``'s threshold): ``slower`` /
  ``faster`` when p < α **and** the change is at least ``min_effect``, in the metric's bad / good
  direction; ``unchanged`` when the 95 % interval of the ratio new/reference lies inside
  1 ± ``min_effect`` (it excludes every change that matters); ``inconclusive`` otherwise (within the
  history's noise, or a change smaller than what matters), with ``more_runs``: how many more runs at
  this level the interval needs to be that narrow (:func:`more_runs`), shown as ``not yet known (N
  more runs)`` (:func:`state_words`).

:func:`judge_latest` judges the latest run of a series twice: alone at 0.1 % and together with the two
runs before it at 0.9 % (Bonferroni: the pair keeps the false-alarm rate at most ``LATEST_ALPHA``,
1 %; the two tests overlap, so it is lower: 0.6-0.8 % measured, what the change detection adds
included). When the latest change point leaves fewer than ``MIN_HISTORY`` runs before the runs
judged, they are judged against the segment before it (a change the detection placed a few runs
early would otherwise leave the step's first runs with no verdict at all). One run after a 5 %
step at a CV of 2 % is 2.4 standard deviations out, which no test of one figure can call at 1 % false
alarms more than 57 % of the time (the best one-sided test); three runs after it, their mean is 4.2
standard errors out. Only the latest run's own interval says ``unchanged``: the mean of three runs
dilutes a step at the latest one (it called a 5 % slower latest run unchanged 15 % of the time).
Measured: ``benchmarks/stat_power.py``.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import operator
from typing import Sequence

from .distributions import t_ppf, t_two_sided_p
from .summary import percentile

ALPHA = 0.008  #: false-alarm rate of one verdict on one figure (two-sided)
LATEST_ALPHA = 0.01  #: judge_latest's two tests together
CONFIDENCE = 0.95  #: the interval that says "unchanged"
MIN_HISTORY = 10  #: reference runs a verdict needs
MAX_HISTORY = 100  #: the stable segment's latest runs that make the reference (all of it up to this many)
SEQUENCE_RUNS = 3  #: judge_latest's second test: the latest runs taken together
LATEST_SHARE = 0.1  #: the share of LATEST_ALPHA judge_latest gives the latest run alone (the rest: the latest 3)
FAR_OUT = 3.0  #: IQRs beyond the quartiles where a reference figure is left out
DEFAULT_MIN_EFFECT = 0.03
METHOD = "prediction interval"

VERDICTS = ("faster", "slower", "unchanged", "inconclusive")


@dataclasses.dataclass(frozen=True, slots=True)
class Reference:
    """What a stable segment says about the noise of a result (figures on ``scale``)."""

    n: int  #: figures kept
    mean: float
    stddev: float
    scale: str  #: "log" or "linear"
    dropped: int  #: far outliers left out

    @property
    def typical(self) -> float:
        """The reference level in the figures' own unit."""
        return math.exp(self.mean) if self.scale == "log" else self.mean


@dataclasses.dataclass(frozen=True)
class HistoryVerdict:
    verdict: str  #: faster | slower | unchanged | inconclusive
    method: str  #: what decided, e.g. "prediction interval: latest run vs 48 runs"
    n_history: int  #: reference runs
    n_new: int  #: new figures judged together
    reference: float | None  #: the reference level (figure's unit)
    ratio: float | None  #: new / reference (None when it cannot be defined)
    ci_low: float | None  #: 95 % interval of the ratio
    ci_high: float | None
    t: float | None  #: how many standard errors out
    p_value: float | None
    false_alarm_rate: float  #: α: how often an unchanged result gets faster/slower by this test
    reason: str
    more_runs: int | None = None  #: inconclusive: further runs at this level the interval needs to say unchanged

    @property
    def change(self) -> float | None:
        return None if self.ratio is None else self.ratio - 1.0

    def to_json(self) -> dict[str, object]:
        out = dataclasses.asdict(self)
        out["change_percent"] = None if self.change is None or not math.isfinite(self.change) \
            else round(self.change * 100, 3)
        return {k: (round(v, 6) if isinstance(v, float) and math.isfinite(v) else v) for k, v in out.items()}


def _finite(values: Sequence[float]) -> list[float]:
    out = list(map(float, values))
    if not all(map(math.isfinite, out)):
        raise ValueError("history verdicts need finite figures")
    return out


def reference(values: Sequence[float], cap: int = MAX_HISTORY) -> Reference | None:
    """The :class:`Reference` of a stable segment's figures (the latest ``cap``); None with
    fewer than ``MIN_HISTORY`` or when every figure is the same. (A dashboard makes thousands per
    comparison: the loops are the interpreter's own.)"""
    figures = _finite(values[-cap:])
    if len(figures) < MIN_HISTORY:
        return None
    scale = "log" if min(figures) > 0 else "linear"
    xs = list(map(math.log, figures)) if scale == "log" else figures
    ordered = sorted(xs)
    q1, q3 = percentile(ordered, 25), percentile(ordered, 75)
    low, high = q1 - FAR_OUT * (q3 - q1), q3 + FAR_OUT * (q3 - q1)
    kept = xs if low <= ordered[0] and ordered[-1] <= high else [x for x in xs if low <= x <= high]
    if len(kept) < MIN_HISTORY:
        kept = xs
    n = len(kept)
    mean = math.fsum(kept) / n
    deviations = list(map(operator.sub, kept, itertools.repeat(mean)))
    stddev = math.sqrt(math.fsum(map(operator.mul, deviations, deviations)) / (n - 1))
    if stddev == 0 or not math.isfinite(stddev):
        return None
    return Reference(n, mean, stddev, scale, len(xs) - n)


def _ratio(ref: Reference, shift: float) -> float | None:
    """new/reference for a shift on the reference's scale."""
    if ref.scale == "log":
        return math.exp(shift) if shift < 709.0 else math.inf
    base = abs(ref.mean)
    return None if base == 0 else 1.0 + shift / base


@functools.lru_cache(maxsize=128)
def _t_quantile(df: int) -> float:
    return t_ppf(0.5 + CONFIDENCE / 2, df)


def more_runs(ref: Reference, shift: float, k: int, min_effect: float) -> int | None:
    """How many runs beyond the ``k`` judged the mean needs (at the same level, ``shift`` from the
    reference on its scale) for its 95 % interval to lie inside 1 ± ``min_effect``: the smallest
    ``K`` with ``t · s · √(1/K + 1/n) <= room`` (``room``: what is left between the change seen and
    ``min_effect``), less ``k``. None when no number of runs would do: the change seen is
    ``min_effect`` or more, or the reference's own uncertainty (``t · s / √n``) fills the room."""
    if ref.scale == "log":
        lowest = math.log1p(-min_effect) if min_effect < 1 else -math.inf
        room = min(math.log1p(min_effect) - shift, shift - lowest)
    else:
        room = min_effect * abs(ref.mean) - abs(shift)
    if not room > 0:
        return None
    left = (room / (_t_quantile(ref.n - 1) * ref.stddev)) ** 2 - 1.0 / ref.n
    if left <= 0:
        return None
    return max(math.ceil(1.0 / left - 1e-9) - k, 0)


def state_words(verdict: dict | None) -> str:
    """What the overview says about a latest run (a :class:`HistoryVerdict`'s JSON): ``slower``,
    ``faster``, ``unchanged``, or ``not yet known (N more runs)``; '' without a verdict."""
    if not verdict:
        return ""
    if verdict.get("verdict") in ("slower", "faster", "unchanged"):
        return str(verdict["verdict"])
    n = verdict.get("more_runs")
    if n is None:
        return "not yet known"
    return f"not yet known ({n} more run{'' if n == 1 else 's'})"


def judge(ref: Reference, new: Sequence[float], *, lower_is_better: bool, alpha: float = ALPHA,
          min_effect: float = DEFAULT_MIN_EFFECT, what: str = "") -> HistoryVerdict:
    """The verdict on the mean of ``new`` (one figure or a few) against ``ref`` (module docstring)."""
    figures = new if len(new) == 1 and new[0].__class__ is float and math.isfinite(new[0]) else _finite(new)
    k = len(figures)
    method = f"{METHOD}: {what or ('latest run' if k == 1 else f'{k} runs')} vs {ref.n} runs"
    if ref.scale == "log" and min(figures) <= 0:
        return HistoryVerdict("inconclusive", method, ref.n, k, ref.typical, None, None, None, None, None, alpha,
                              "a figure <= 0 against a history of positive figures")
    xs = [math.log(v) for v in figures] if ref.scale == "log" else figures
    shift = math.fsum(xs) / k - ref.mean
    error = ref.stddev * math.sqrt(1.0 / k + 1.0 / ref.n)
    t = shift / error
    p = t_two_sided_p(t, ref.n - 1)
    half = _t_quantile(ref.n - 1) * error
    ratio, low, high = _ratio(ref, shift), _ratio(ref, shift - half), _ratio(ref, shift + half)

    def result(verdict: str, reason: str) -> HistoryVerdict:
        more = more_runs(ref, shift, k, min_effect) if verdict == "inconclusive" else None
        return HistoryVerdict(verdict, method, ref.n, k, ref.typical, ratio, low, high, t, p, alpha, reason, more)

    band = f"{t:+.1f} standard errors from the history (p = {p:.3g})"
    if ratio is None:
        return result("inconclusive", f"{band}; the history's mean is 0: no relative change")
    change = ratio - 1.0
    if p < alpha and abs(change) >= min_effect:
        worse = (change > 0) == lower_is_better
        return result("slower" if worse else "faster", f"{change:+.1%}, {band} < {alpha}")
    if low is not None and high is not None and 1.0 - min_effect <= low and high <= 1.0 + min_effect:
        return result("unchanged", f"{change:+.1%}; the 95 % interval lies inside 1 ± {min_effect:.1%}")
    if p < alpha:
        return result("inconclusive", f"{change:+.1%}, {band}: smaller than {min_effect:.1%}")
    return result("inconclusive", f"{change:+.1%}, within the history's noise ({band})")


def stable_segment(values: Sequence[float], changes: Sequence[int], end: int, cap: int = MAX_HISTORY) -> list[float]:
    """The figures of ``values[:end]`` after the last change index before ``end``: the whole segment,
    at most its latest ``cap``."""
    start = max((c for c in changes if c < end), default=0)
    return list(values[max(start, end - cap):end])


def _reference_span(changes: Sequence[int], end: int) -> tuple[list[int], int]:
    """Where the reference of runs judged from ``end`` on ends, and the changes before it: at
    ``end``, unless the latest change before it leaves fewer than ``MIN_HISTORY`` runs: then at that
    change (the segment before it), as the change itself was judged."""
    kept = sorted(c for c in changes if c < end)
    if kept and end - kept[-1] < MIN_HISTORY:
        end = kept.pop()
    return kept, end


def judge_latest(values: Sequence[float], changes: Sequence[int], *, lower_is_better: bool, alpha: float = LATEST_ALPHA,
                 min_effect: float = DEFAULT_MIN_EFFECT, cap: int = MAX_HISTORY) -> HistoryVerdict | None:
    """The latest figure of a series (one per run, oldest first; ``changes``: its change indexes)
    against its stable segment: alone at α·``LATEST_SHARE``, and with the ``SEQUENCE_RUNS - 1`` runs
    before it at the rest of α when no change lies among them; the more significant decides. Else
    the latest run's own verdict (``unchanged`` only when its own interval says so; the runs before
    it would dilute a step at it), or the latest runs' when they all follow a change point (the
    latest run alone has no segment of its own yet). None when the segment before the latest run
    is shorter than ``MIN_HISTORY``. ``cap``: at most this many runs of the segment (the
    benchmark's figures for other caps)."""
    n = len(values)
    verdicts = []
    for k, what, level in ((1, "latest run", alpha * LATEST_SHARE),
                           (SEQUENCE_RUNS, f"latest {SEQUENCE_RUNS} runs", alpha * (1 - LATEST_SHARE))):
        if n <= k or any(n - k < c < n for c in changes):
            continue
        ref = reference(stable_segment(values, *_reference_span(changes, n - k), cap), cap)
        if ref is not None:
            verdicts.append(judge(ref, values[n - k:], lower_is_better=lower_is_better, alpha=level,
                                  min_effect=min_effect, what=what))
    if not verdicts:
        return None
    decided = [v for v in verdicts if v.verdict in ("slower", "faster")]
    if decided:
        pick = min(decided, key=lambda v: (v.p_value, v.n_new))
    else:
        pick = verdicts[0]
    return dataclasses.replace(pick, false_alarm_rate=alpha)
