"""The load generator: the requests of one load point, each streamed, each recorded.

A concurrency point runs ``concurrency`` streams, each sending its next request as soon as its
last one ended (requests taken in order). A rate point sends request *i* at the *i*-th arrival of a
Poisson process of that rate (exponential gaps from a seeded generator, on an absolute schedule so
that delays do not add up); ``inf`` sends them all at once. Every request becomes a
:class:`RequestRecord`, errors included, and a span of the trace (``serving.request`` under the
load point's span, with its real times).
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from typing import Any, Callable, Iterator

from madengine.serving.client import Clock, Endpoint, new_session, open_connections, send
from madengine.serving.loadpoints import LoadPoint
from madengine.serving.prompts import Prompt
from madengine.serving.requests import RequestRecord
from madengine.tracing import names

async def run_point(endpoint: Endpoint, point: LoadPoint, prompts: list[Prompt], *, seed: int = 0,
                    done: Callable[[RequestRecord], None] = lambda record: None,
                    clock: Clock = time.monotonic_ns, arrival_times: bool = True) -> list[RequestRecord]:
    """Send every prompt at ``point``; the records in request order (``done`` called as each ends;
    ``clock``, ``arrival_times``: see :func:`~madengine.serving.client.new_session`)."""
    records = [RequestRecord(index) for index in range(len(prompts))]

    async def one(index: int, slot: int, session: Any) -> None:
        record = records[index]
        record.slot = slot
        await send(session, endpoint, prompts[index], record, clock)
        done(record)

    if point.concurrency is not None:
        streams = min(point.concurrency, len(prompts))
        queue = iter(range(len(prompts)))
        async with new_session(streams, clock, arrival_times) as session:
            await open_connections(session, endpoint, streams)
            await asyncio.gather(*(_stream(one, slot, queue, session) for slot in range(streams)))
    else:
        async with new_session(0, clock, arrival_times) as session:
            await _arrivals(one, point.rate or math.inf, len(prompts), seed, session)
    return records


async def _stream(one: Callable, slot: int, queue: Iterator[int], session: Any) -> None:
    """One of a concurrency point's streams: the next request of the shared queue as soon as its
    last one ended (one event loop: taking from the iterator needs no lock)."""
    for index in queue:
        await one(index, slot, session)


async def _arrivals(one: Callable, rate: float, count: int, seed: int, session: Any) -> None:
    loop = asyncio.get_running_loop()
    rng = random.Random(seed)
    start = loop.time()
    at = 0.0
    tasks = []
    for index in range(count):
        if not math.isinf(rate):
            at += rng.expovariate(rate)
            delay = start + at - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(index, index, session)))
    await asyncio.gather(*tasks)


def request_span(tracer: Any, record: RequestRecord, parent: Any, point: LoadPoint) -> None:
    """The request as a finished span of the trace, with its figures as attributes."""
    if not tracer.enabled:
        return
    attributes: dict[str, Any] = {"madengine.serving.request": record.index, names.ATTR_LOAD_POINT: point.label,
                                  "madengine.serving.output_tokens": record.output_tokens}
    for key, value in (("ttft_ms", record.ttft_ms), ("tpot_ms", record.tpot_ms), ("e2e_ms", record.e2e_ms)):
        if value is not None:
            attributes[f"madengine.serving.{key}"] = round(value, 3)
    if record.http_status is not None:
        attributes["http.response.status_code"] = record.http_status
    tracer.add_span(names.SPAN_SERVING_REQUEST, tracer.epoch_ns_from_monotonic(record.sent),
                    tracer.epoch_ns_from_monotonic(record.ended or record.sent), attributes, parent=parent,
                    category="serving", error=record.error or None)
