"""A serving benchmark from its settings to one result per load point: what ``serve-bench`` and a
``serving`` model share.

:func:`check_plan` refuses bad settings before any request (an :class:`InputError` naming the flag
or the block's field) and makes the prompts; :func:`run_plan` waits for the endpoint, then runs the
load points in order (the fixed ones, then the rates of an SLO sweep), writing each point's
requests to a JSONL file as it ends and handing its :class:`PointResult` to ``on_result`` at once.
An endpoint that does not answer makes every load point a FAILURE naming the URL.
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
import time
from pathlib import Path
from typing import Any, Callable

from madengine.core.errors import InputError
from madengine.serving.loadpoints import LoadPoint, RateSweep, Slo, best_rate, next_sweep_rate
from madengine.serving.metrics import DEFAULT_MAX_ERROR_RATE, PointFigures, failure_reason, figures
from madengine.serving.prompts import MAX_LEN, Prompt, sharegpt, synthetic
from madengine.serving.requests import RequestRecord
from madengine.tracing import names

DEFAULT_INPUT_LEN = 128
DEFAULT_OUTPUT_LEN = 128
MAX_REQUESTS = 1_000_000


@dataclasses.dataclass(kw_only=True)
class ServingPlan:
    """What to measure: the endpoint, the load points, the prompts, what counts as good."""

    url: str  #: the base URL, ``http://HOST:PORT/v1``
    model: str  #: the served model's name, sent in every request
    name: str = ""  #: the rows' ``model`` (default: ``model``)
    server: str = "openai"  #: the rows' ``backend``: vllm, sglang, transformers, ...
    api: str = "completions"
    points: list[LoadPoint] = dataclasses.field(default_factory=list)
    sweep: RateSweep | None = None
    slo: Slo = dataclasses.field(default_factory=Slo)
    requests: int = 100  #: per load point
    input_len: int = DEFAULT_INPUT_LEN
    output_len: int | None = None  #: None: DEFAULT_OUTPUT_LEN, or each ShareGPT reply's length
    dataset: Path | None = None
    seed: int = 0
    ignore_eos: bool = False
    max_error_rate: float = DEFAULT_MAX_ERROR_RATE
    ready_timeout: float = 0.0
    request_timeout: float = 600.0
    api_key: str = dataclasses.field(default="", repr=False)
    #: how each setting was given, for errors: flag names (serve-bench) or the block's fields
    names: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def row_name(self) -> str:
        return self.name or self.model

    @property
    def dataset_label(self) -> str:
        return re.sub(r"[^A-Za-z0-9_.-]+", "_", self.dataset.stem) if self.dataset else ""

    def flag(self, field: str) -> str:
        return self.names.get(field, f"--{field.replace('_', '-')}")


@dataclasses.dataclass
class PointResult:
    point: LoadPoint
    records: list[RequestRecord]
    figures: PointFigures | None
    reason: str = ""  #: why the row is FAILURE ('' when it is not)
    requests_file: Path | None = None
    slo_met: bool | None = None  #: for a sweep's rates: whether the SLO's attainment was reached
    sweep: bool = False

    @property
    def ok(self) -> bool:
        return not self.reason


@dataclasses.dataclass
class SweepResult:
    """The answer of an SLO sweep: the highest rate tried that met the SLO (None: none did)."""

    best_rate: float | None
    tried: list[tuple[float, bool]]


def check_plan(plan: ServingPlan) -> list[Prompt]:
    """Refuse what cannot run (exit 2, naming the flag or field); the prompts of one load point."""
    if not plan.url.startswith(("http://", "https://")):
        raise InputError(f"{plan.url!r} is not an http:// or https:// URL", path=plan.flag("url"),
                         hint="e.g. http://127.0.0.1:8000/v1")
    if not plan.model.strip():
        raise InputError("is empty", path=plan.flag("model"), hint="the served model's name (GET /v1/models)")
    if plan.api not in ("completions", "chat"):
        raise InputError(f"{plan.api!r} is not completions or chat", path=plan.flag("api"))
    if not plan.points and plan.sweep is None:
        raise InputError("no load point", path=plan.flag("concurrency"),
                         hint="give --concurrency N,..., --request-rate R,... or --sweep with --slo")
    if plan.sweep is not None and not plan.slo:
        raise InputError("a sweep needs an SLO to meet", path=plan.flag("sweep"), hint="add --slo ttft_ms=X,tpot_ms=Y")
    _check_count(plan.requests, plan.flag("requests"), 1, MAX_REQUESTS)
    _check_count(plan.input_len, plan.flag("input_len"), 1, MAX_LEN)
    if plan.output_len is not None:
        _check_count(plan.output_len, plan.flag("output_len"), 1, MAX_LEN)
    if not 0 <= plan.max_error_rate <= 1:
        raise InputError(f"{plan.max_error_rate} is not a share from 0 to 1", path=plan.flag("max_error_rate"))
    if plan.dataset is not None:
        return sharegpt(plan.dataset, plan.requests, plan.output_len, plan.seed, flag=plan.flag("dataset"))
    return synthetic(plan.requests, plan.input_len, plan.output_len or DEFAULT_OUTPUT_LEN, plan.seed)


def require_client(what: str) -> None:
    """The async HTTP client (aiohttp, the ``serving`` extra) is installed, else an InputError (exit 2)
    before anything runs."""
    import importlib.util

    if importlib.util.find_spec("aiohttp") is None:
        raise InputError(f"{what} needs aiohttp, which is not installed", hint="pip install 'madengine[serving]'")


def _check_count(value: Any, flag: str, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InputError(f"{value!r} is not a whole number from {low} to {high}", path=flag)


def endpoint_of(plan: ServingPlan) -> Any:
    from madengine.serving.client import Endpoint

    headers = (("Authorization", f"Bearer {plan.api_key}"),) if plan.api_key else ()
    return Endpoint(base_url=plan.url, model=plan.model, api=plan.api, headers=headers, ignore_eos=plan.ignore_eos,
                    timeout_s=plan.request_timeout)


def output_len_of(plan: ServingPlan) -> int | None:
    """The rows' output length: the one asked, else the default (synthetic) or None (each reply's)."""
    if plan.output_len is not None:
        return plan.output_len
    return None if plan.dataset is not None else DEFAULT_OUTPUT_LEN


async def run_plan(plan: ServingPlan, prompts: list[Prompt], folder: Path, *, tracer: Any,
                   on_result: Callable[[PointResult], None], message: Callable[[str], None] = lambda text: None,
                   stopped: threading.Event | None = None, clock: Callable[[], int] = time.monotonic_ns
                   ) -> SweepResult | None:
    """Every load point of ``plan`` (see the module doc); the sweep's answer when it has one.
    ``clock``: the time source of every request (see :func:`madengine.serving.client.send`)."""
    from madengine.serving.readiness import stop_flag, wait_ready

    endpoint = endpoint_of(plan)
    with tracer.span(names.SPAN_SERVING_READY, {"url.full": plan.url}) as span:
        not_ready = await wait_ready(plan.url, plan.ready_timeout, dict(endpoint.headers), stop_flag(stopped))
        if not_ready:
            span.set_error(not_ready)
    if not_ready:
        reason = f"endpoint {plan.url} not ready after {plan.ready_timeout:g} s: {not_ready}" \
            if plan.ready_timeout else f"endpoint {plan.url} unreachable: {not_ready}"
        for point in plan.points or [LoadPoint(rate=plan.sweep.start)]:  # type: ignore[union-attr]
            on_result(PointResult(point, [], None, reason=reason))
        return None
    for point in plan.points:
        if stopped is not None and stopped.is_set():
            return None
        on_result(await _measure(plan, endpoint, point, prompts, folder, tracer, message, clock))
    if plan.sweep is None:
        return None
    return await _sweep(plan, endpoint, prompts, folder, tracer, message, on_result, stopped, clock)


async def _sweep(plan: ServingPlan, endpoint: Any, prompts: list[Prompt], folder: Path, tracer: Any,
                 message: Callable[[str], None], on_result: Callable[[PointResult], None],
                 stopped: threading.Event | None, clock: Callable[[], int]) -> SweepResult:
    sweep = plan.sweep
    assert sweep is not None
    tried: list[tuple[float, bool]] = []
    while (rate := next_sweep_rate(sweep, tried)) is not None:
        if stopped is not None and stopped.is_set():
            break
        result = await _measure(plan, endpoint, LoadPoint(rate=rate), prompts, folder, tracer, message, clock,
                                sweep=sweep)
        tried.append((rate, bool(result.slo_met)))
        on_result(result)
    best = best_rate(tried)
    message(f"madengine: SLO sweep ({plan.slo.text}, {sweep.attainment:.0%} of requests): "
            + (f"the highest rate meeting it is {best:g} req/s" if best is not None else
               f"no rate met it (from {sweep.start:g} req/s)"))
    return SweepResult(best, tried)


async def _measure(plan: ServingPlan, endpoint: Any, point: LoadPoint, prompts: list[Prompt], folder: Path,
                   tracer: Any, message: Callable[[str], None], clock: Callable[[], int],
                   sweep: RateSweep | None = None) -> PointResult:
    from madengine.serving.loadgen import request_span, run_point

    message(f"madengine: {plan.row_name} at {point.label}: {len(prompts)} request(s) to {endpoint.url}")
    attributes = {names.ATTR_LOAD_POINT: point.label, names.ATTR_MODEL: plan.row_name, names.ATTR_BACKEND: plan.server}
    with tracer.span(names.SPAN_SERVING_LOAD_POINT, attributes) as span:
        records = await run_point(endpoint, point, prompts, seed=plan.seed, clock=clock,
                                  done=lambda record: request_span(tracer, record, span, point))
        measured = figures(records, plan.slo)
        reason = failure_reason(measured, plan.max_error_rate)
        slo_met = measured.attainment >= sweep.attainment if sweep is not None else None
        if reason:
            span.set_error(reason)
    return PointResult(point, records, measured, reason, write_requests(folder, point, records), slo_met,
                       sweep=sweep is not None)


def write_requests(folder: Path, point: LoadPoint, records: list[RequestRecord]) -> Path:
    """The per-request JSONL file of one load point (``requests_concurrency=4.jsonl``; ``…_2.jsonl`` for
    a load point measured twice, as a sweep may measure a rate also given as a fixed point)."""
    folder.mkdir(parents=True, exist_ok=True)
    path, number = folder / f"requests_{point.label}.jsonl", 1
    while path.exists():
        number += 1
        path = folder / f"requests_{point.label}_{number}.jsonl"
    origin = min((r.sent for r in records), default=0)
    with open(path, "w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record.to_json(origin)) + "\n")
    return path
