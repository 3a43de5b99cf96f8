"""Waiting for a server to answer: ``GET /health`` (at the URL's root) or ``GET /v1/models``.

vLLM, SGLang and ``transformers serve`` answer both once their model is loaded; an external
endpoint may offer only ``/v1/models``. Either answering 200 is ready. The wait is bounded by a
deadline (a serving model's timeout, ``--ready-timeout`` of serve-bench) and ends early when
``stopped`` is set (the model's server exited, the run was interrupted).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Callable

import aiohttp

from madengine.core.values import one_line

POLL_S = 0.5
PROBE_TIMEOUT_S = 5.0


def probe_urls(base_url: str) -> tuple[str, str]:
    """``(root/health, base/models)`` of a base URL such as ``http://HOST:PORT/v1``."""
    base = base_url.rstrip("/")
    root = base[: -len("/v1")] if base.endswith("/v1") else base
    return f"{root}/health", f"{base}/models"


async def wait_ready(base_url: str, timeout_s: float, headers: dict[str, str] | None = None,
                     stopped: Callable[[], bool] = lambda: False) -> str:
    """'' once the endpoint answers; else why not (the last error) when ``timeout_s`` passed or
    ``stopped()`` said so. ``timeout_s`` 0 tries once."""
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    timeout = aiohttp.ClientTimeout(total=min(PROBE_TIMEOUT_S, max(timeout_s, 1.0)))
    async with aiohttp.ClientSession(timeout=timeout) as session:
        while True:
            for url in probe_urls(base_url):
                try:
                    async with session.get(url, headers=headers or {}) as response:
                        if response.status == 200:
                            return ""
                        last = f"{url} answered HTTP {response.status}"
                except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
                    last = f"{url}: {one_line(str(exc) or type(exc).__name__, 160)}"
            if stopped() or time.monotonic() + POLL_S > deadline:
                return last
            await asyncio.sleep(POLL_S)


def stop_flag(event: threading.Event | None) -> Callable[[], bool]:
    return event.is_set if event is not None else (lambda: False)
