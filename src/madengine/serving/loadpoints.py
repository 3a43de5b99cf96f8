"""The load points of a serving benchmark: how many requests are in flight, or how fast they arrive.

A load point is a closed loop of ``concurrency`` requests in flight (a new one starts as one ends),
or an open loop of Poisson arrivals at ``rate`` requests per second (seeded; ``inf`` sends them all
at once). The lists come from flags (``--concurrency 1,4``, ``--request-rate 2,8,inf``) or the
``serving`` block of models.json; a malformed one is an :class:`InputError` naming its flag or field.
An SLO (``--slo ttft_ms=500,tpot_ms=50``) says which requests count towards goodput; with a sweep,
the rates tried are chosen until the highest one meeting it is found (:class:`RateSweep`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable

from madengine.core.errors import InputError

MAX_CONCURRENCY = 100_000
MAX_RATE = 1e6  #: requests per second; above it a Poisson schedule means nothing on one client
#: the latencies an SLO may bound, in milliseconds
SLO_KEYS = ("ttft_ms", "tpot_ms", "e2e_ms")


@dataclasses.dataclass(frozen=True)
class LoadPoint:
    """One load point: ``concurrency`` requests in flight, or Poisson arrivals at ``rate`` per second."""

    concurrency: int | None = None
    rate: float | None = None  #: requests per second; math.inf: every request at once

    def __post_init__(self) -> None:
        if (self.concurrency is None) == (self.rate is None):
            raise ValueError("a load point has a concurrency or a rate, not both")

    @property
    def kind(self) -> str:
        return "concurrency" if self.concurrency is not None else "rate"

    @property
    def value_text(self) -> str:
        if self.concurrency is not None:
            return str(self.concurrency)
        return "inf" if math.isinf(self.rate or 0) else f"{self.rate:g}"

    @property
    def label(self) -> str:
        """``concurrency=4``, ``rate=2.5``, ``rate=inf``: the row's load point."""
        return f"{self.kind}={self.value_text}"


@dataclasses.dataclass(frozen=True)
class Slo:
    """Upper bounds on a request's latencies (ms); a request meeting all of them counts to goodput."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None

    def __bool__(self) -> bool:
        return any(v is not None for v in (self.ttft_ms, self.tpot_ms, self.e2e_ms))

    @property
    def text(self) -> str:
        """``ttft_ms=500,tpot_ms=50``: how it was given ('' for none)."""
        return ",".join(f"{key}={getattr(self, key):g}" for key in SLO_KEYS if getattr(self, key) is not None)


@dataclasses.dataclass(frozen=True)
class RateSweep:
    """Rates tried from ``start`` doubling while they meet the SLO, then ``steps`` bisections between
    the last rate that met it and the first that did not (at most ``max_rate``)."""

    start: float = 1.0
    steps: int = 3
    max_rate: float = 1024.0
    attainment: float = 0.9  #: the share of requests that must meet the SLO for a rate to meet it


def _items(text: str, flag: str) -> list[str]:
    if not isinstance(text, str) or not text.strip():
        raise InputError("is empty", path=flag, hint="give a comma-separated list, e.g. 1,4,16")
    items = [item.strip() for item in text.split(",")]
    if any(not item for item in items):
        raise InputError(f"{text!r} has an empty item", path=flag, hint="separate the values by single commas")
    return items


def _no_repeats(values: list[Any], flag: str) -> None:
    seen: set[Any] = set()
    for value in values:
        if value in seen:
            raise InputError(f"{value} is given twice", path=flag, hint="each load point once")
        seen.add(value)


def parse_concurrencies(text: str, flag: str = "--concurrency") -> list[int]:
    """``1,4,16`` → [1, 4, 16]: whole numbers from 1 to :data:`MAX_CONCURRENCY`, each once."""
    values = []
    for item in _items(text, flag):
        if not (item.isascii() and item.isdigit()) or not 1 <= int(item) <= MAX_CONCURRENCY:
            raise InputError(f"{item!r} is not a whole number from 1 to {MAX_CONCURRENCY}", path=flag)
        values.append(int(item))
    _no_repeats(values, flag)
    return values


def positive_number(item: str, flag: str, *, allow_inf: bool = False, maximum: float = MAX_RATE) -> float:
    """A finite number above 0 and at most ``maximum`` written in ASCII (``inf`` too when allowed)."""
    if allow_inf and item.lower() == "inf":
        return math.inf
    try:
        value = float(item) if item.isascii() and item.strip() == item else math.nan
    except ValueError:
        value = math.nan
    if not 0 < value <= maximum:  # NaN fails too
        more = " or inf" if allow_inf else ""
        raise InputError(f"{item!r} is not a number above 0 and at most {maximum:g}{more}", path=flag)
    return value


def parse_rates(text: str, flag: str = "--request-rate") -> list[float]:
    """``2,8.5,inf`` → [2.0, 8.5, inf]: requests per second above 0, each once."""
    values = [positive_number(item, flag, allow_inf=True) for item in _items(text, flag)]
    _no_repeats(values, flag)
    return values


def parse_slo(text: str, flag: str = "--slo") -> Slo:
    """``ttft_ms=500,tpot_ms=50`` → :class:`Slo` (keys: ttft_ms, tpot_ms, e2e_ms; each once)."""
    bounds: dict[str, float] = {}
    for item in _items(text, flag):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or key not in SLO_KEYS:
            raise InputError(f"{item!r} is not KEY=MILLISECONDS", path=flag, hint=f"keys: {', '.join(SLO_KEYS)}")
        if key in bounds:
            raise InputError(f"{key} is given twice", path=flag)
        bounds[key] = positive_number(value.strip(), flag, maximum=1e9)
    return Slo(**bounds)


def load_points(concurrencies: Iterable[int] = (), rates: Iterable[float] = ()) -> list[LoadPoint]:
    """The fixed load points, concurrencies first, each in the order given."""
    return [LoadPoint(concurrency=c) for c in concurrencies] + [LoadPoint(rate=r) for r in rates]


def next_sweep_rate(sweep: RateSweep, tried: list[tuple[float, bool]]) -> float | None:
    """The next rate of a sweep given the rates tried so far and whether each met the SLO; None
    when the sweep is over (a rate not met at the start, the bisections done, or ``max_rate`` met)."""
    if not tried:
        return sweep.start
    met = [rate for rate, ok in tried if ok]
    missed = [rate for rate, ok in tried if not ok]
    if not met:
        return None
    best = max(met)
    above = [rate for rate in missed if rate > best]
    if not above:
        doubled = best * 2
        return doubled if doubled <= sweep.max_rate and doubled not in (r for r, _ in tried) else None
    bisections = sum(1 for rate, _ in tried if rate not in _doubling(sweep))
    if bisections >= sweep.steps:
        return None
    return (best + min(above)) / 2


def _doubling(sweep: RateSweep) -> set[float]:
    rates, rate = set(), sweep.start
    while rate <= sweep.max_rate:
        rates.add(rate)
        rate *= 2
    return rates


def best_rate(tried: list[tuple[float, bool]]) -> float | None:
    """The highest rate tried that met the SLO (None: none did)."""
    met = [rate for rate, ok in tried if ok]
    return max(met) if met else None
