"""The figures of one load point, from its requests' records (pure; definitions in docs/serving.md).

Latency percentiles are over the successful requests (ITL over every gap of every successful
request), by linear interpolation between closest ranks (numpy's default, as vLLM's benchmark).
Throughputs divide by the load point's duration: from its first request sent to its last stream's
end. Goodput counts the successful requests that meet every bound of the SLO.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Iterable, Sequence

from madengine.serving.loadpoints import Slo
from madengine.serving.requests import RequestRecord
from madengine.stats.summary import percentile

PERCENTILES = (50, 90, 99)
LATENCIES = ("ttft", "tpot", "itl", "e2e")
DEFAULT_MAX_ERROR_RATE = 0.05


@dataclasses.dataclass
class PointFigures:
    """What one load point measured."""

    requests: int
    completed: int
    errors: int
    duration_s: float
    input_tokens: int
    output_tokens: int
    token_source: str  #: usage | stream | usage+stream (some requests each)
    latencies: dict[str, dict[str, float | None]]  #: ttft/tpot/itl/e2e → mean, p50, p90, p99 (ms)
    good: int  #: successful requests within the SLO (all of them without one)
    error_kinds: dict[str, int]  #: error text (numbers dropped) → count, most frequent first

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 0.0

    def per_second(self, count: float) -> float | None:
        return count / self.duration_s if self.duration_s > 0 else None

    @property
    def attainment(self) -> float:
        """The share of all requests (failed ones included) that met the SLO."""
        return self.good / self.requests if self.requests else 0.0


def _distribution(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, **{f"p{q}": None for q in PERCENTILES}}
    ordered = sorted(values)
    return {"mean": sum(ordered) / len(ordered), **{f"p{q}": percentile(ordered, q) for q in PERCENTILES}}


def meets(record: RequestRecord, slo: Slo) -> bool:
    """Whether a successful request is within every bound of ``slo`` (TPOT bounds pass a one-token reply)."""
    if not record.ok:
        return False
    checks = ((slo.ttft_ms, record.ttft_ms), (slo.tpot_ms, record.tpot_ms), (slo.e2e_ms, record.e2e_ms))
    return all(bound is None or value is None or value <= bound for bound, value in checks)


def figures(records: Iterable[RequestRecord], slo: Slo) -> PointFigures:
    records = list(records)
    good_records = [r for r in records if r.ok]
    latencies = {
        "ttft": _distribution([r.ttft_ms for r in good_records if r.ttft_ms is not None]),
        "tpot": _distribution([r.tpot_ms for r in good_records if r.tpot_ms is not None]),
        "itl": _distribution([gap for r in good_records for gap in r.itl_ms]),
        "e2e": _distribution([r.e2e_ms for r in good_records if r.e2e_ms is not None]),
    }
    sources = sorted({r.token_source for r in good_records})
    start = min((r.sent for r in records), default=0)
    end = max((r.ended for r in records), default=0)
    return PointFigures(
        requests=len(records), completed=len(good_records), errors=len(records) - len(good_records),
        duration_s=(end - start) / 1e9 if end > start else 0.0,
        input_tokens=sum(r.usage_input or 0 for r in good_records),
        output_tokens=sum(r.output_tokens for r in good_records), token_source="+".join(sources),
        latencies=latencies, good=sum(1 for r in good_records if meets(r, slo)),
        error_kinds=error_kinds(r.error for r in records if not r.ok))


def error_kinds(errors: Iterable[str]) -> dict[str, int]:
    """How often each kind of error happened (:func:`_kind`), most frequent first."""
    counter = collections.Counter(_kind(text) for text in errors)
    return dict(counter.most_common())


def _kind(text: str) -> str:
    """An error's kind: its text up to the first ': ' (``HTTP 500``, ``stream cut``, ``cannot reach URL``)."""
    return text.split(": ", 1)[0][:160]


def failure_reason(figures_: PointFigures, max_error_rate: float) -> str:
    """Why the load point's row is FAILURE ('' when it is not): no request succeeded, or the error
    rate passed ``max_error_rate``."""
    if figures_.requests and not figures_.completed:
        return f"no request succeeded ({_kinds_text(figures_)})"
    if figures_.error_rate > max_error_rate:
        return (f"error rate {figures_.error_rate:.1%} above the limit of {max_error_rate:.1%} "
                f"({figures_.errors} of {figures_.requests} requests: {_kinds_text(figures_)})")
    return ""


def _kinds_text(figures_: PointFigures, shown: int = 3) -> str:
    items = list(figures_.error_kinds.items())
    text = ", ".join(f"{kind} ×{count}" for kind, count in items[:shown])
    return text + (f", {len(items) - shown} other kind(s)" if len(items) > shown else "")

