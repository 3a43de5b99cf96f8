"""One streamed request's record and what vLLM's benchmark derives from it (pure: no HTTP here).

Times are ``time.monotonic_ns()`` readings: ``sent`` when the request went out, one per streamed
chunk that carried text (``token_times``), ``ended`` when the stream ended. Definitions
(docs/serving.md, as vLLM's ``benchmark_serving``):

* TTFT: the first text chunk's arrival − sent;
* ITL: every gap between two successive text chunks;
* E2E: the stream's end − sent;
* TPOT: (E2E − TTFT) / (output tokens − 1), for requests of two output tokens or more.

Output tokens are the server's ``usage.completion_tokens`` when the stream carried it, else the
number of text chunks (``token_source`` says which).
"""

from __future__ import annotations

import dataclasses
from typing import Any

NS_PER_MS = 1e6


@dataclasses.dataclass
class RequestRecord:
    index: int
    sent: int = 0  #: monotonic ns
    token_times: list[int] = dataclasses.field(default_factory=list)
    ended: int = 0
    usage_output: int | None = None  #: usage.completion_tokens, when the server sent it
    usage_input: int | None = None  #: usage.prompt_tokens
    http_status: int | None = None
    error: str = ""  #: '' for a success
    finish_reason: str = ""
    slot: int = 0  #: which stream of the load point sent it (its trace track)

    @property
    def ok(self) -> bool:
        return not self.error

    @property
    def output_tokens(self) -> int:
        return self.usage_output if self.usage_output is not None else len(self.token_times)

    @property
    def token_source(self) -> str:
        return "usage" if self.usage_output is not None else "stream"

    @property
    def ttft_ms(self) -> float | None:
        return (self.token_times[0] - self.sent) / NS_PER_MS if self.token_times else None

    @property
    def e2e_ms(self) -> float | None:
        return (self.ended - self.sent) / NS_PER_MS if self.ended else None

    @property
    def itl_ms(self) -> list[float]:
        times = self.token_times
        return [(later - earlier) / NS_PER_MS for earlier, later in zip(times, times[1:])]

    @property
    def tpot_ms(self) -> float | None:
        ttft, e2e, tokens = self.ttft_ms, self.e2e_ms, self.output_tokens
        if ttft is None or e2e is None or tokens < 2:
            return None
        return (e2e - ttft) / (tokens - 1)

    def to_json(self, origin_ns: int) -> dict[str, Any]:
        """The request's line of the per-request JSONL file (times in ms, ``sent`` from ``origin_ns``)."""
        return {"index": self.index, "ok": self.ok, "error": self.error, "http_status": self.http_status,
                "sent_ms": _ms(self.sent - origin_ns), "ttft_ms": _ms(self.ttft_ms), "tpot_ms": _ms(self.tpot_ms),
                "e2e_ms": _ms(self.e2e_ms), "itl_ms": [_ms(gap) for gap in self.itl_ms],
                "input_tokens": self.usage_input, "output_tokens": self.output_tokens,
                "token_source": self.token_source, "chunks": len(self.token_times),
                "finish_reason": self.finish_reason}


def _ms(value: float | None) -> float | None:
    if value is None:
        return None
    return round(value / NS_PER_MS if isinstance(value, int) else value, 4)
