"""Streamed requests to an OpenAI-compatible endpoint on aiohttp (the ``serving`` extra).

One :class:`Endpoint` per benchmark: the base URL (``http://HOST:PORT/v1``), the API
(``completions`` or ``chat``), the served model's name and the headers (the API key's, never
shown). :func:`send` streams one request and fills its :class:`RequestRecord`; whatever goes wrong
(an HTTP error status, a refused connection, a malformed SSE line, a stream cut before its end, a
timeout) is the record's ``error``, never an exception: every request is counted.

SSE as the OpenAI API streams it: ``data: {json}`` lines, blank lines between events, ``data:
[DONE]`` at the end. A stream is whole when it ends with ``[DONE]`` or after a chunk with a
``finish_reason`` (some servers send no ``[DONE]``); one that ends otherwise was cut.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any, Callable

import aiohttp

from madengine.core.jsonio import dumps, loads
from madengine.core.values import one_line
from madengine.serving.arrivals import arrival_socket, socket_of
from madengine.serving.prompts import Prompt
from madengine.serving.requests import RequestRecord

APIS = ("completions", "chat")
ERROR_TEXT = 160  #: characters of a server's error body kept in a request's error
MAX_LINE = 1 << 20  #: bytes of one SSE line; a longer one is a malformed stream

Clock = Callable[[], int]


@dataclasses.dataclass(frozen=True)
class Endpoint:
    base_url: str  #: ``http://HOST:PORT/v1``
    model: str
    api: str = "completions"
    headers: tuple[tuple[str, str], ...] = ()
    ignore_eos: bool = False  #: vLLM and SGLang: generate exactly max_tokens
    timeout_s: float = 600.0  #: one request, start to end of its stream

    @property
    def request_headers(self) -> dict[str, str]:
        return {"Content-Type": "application/json", **dict(self.headers)}

    @property
    def url(self) -> str:
        return f"{self.base_url.rstrip('/')}/{'chat/completions' if self.api == 'chat' else 'completions'}"

    def payload(self, prompt: Prompt) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "max_tokens": prompt.output_len, "stream": True,
                                "stream_options": {"include_usage": True}}
        if self.api == "chat":
            body["messages"] = [{"role": "user", "content": prompt.text}]
        else:
            body["prompt"] = prompt.text
        if self.ignore_eos:
            body["ignore_eos"] = True
        return body


def new_session(connections: int, clock: Clock = time.monotonic_ns, arrival_times: bool = True) -> aiohttp.ClientSession:
    """One session for a benchmark: ``connections`` kept-alive connections at most (0: no limit).

    A request counts from the moment its body went to the socket (aiohttp's ``on_request_chunk_sent``
    signal), not from when its coroutine began: requests that wait behind others for the client's one
    thread (a burst of 64 at once) are not charged for that wait. A token counts from when it reached
    the machine (:mod:`madengine.serving.arrivals`), not from when its stream's reader got to it,
    where ``clock`` is the system's (the arrival times are on it) and ``arrival_times`` is left on;
    otherwise (the tests' virtual clock; the benchmark's comparison) ``clock`` is read as a read returns.
    """
    loads(b"{}")  # the JSON parser is imported on first use: not while the first chunk is timed
    tracing = aiohttp.TraceConfig()
    tracing.on_request_chunk_sent.append(_body_sent)
    connector = aiohttp.TCPConnector(limit=connections, limit_per_host=0, ttl_dns_cache=300,
                                     socket_factory=arrival_socket if arrival_times and clock is time.monotonic_ns else None)
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None),
                                 auto_decompress=False, trace_configs=[tracing])


async def _body_sent(session: Any, context: Any, params: Any) -> None:
    timing = context.trace_request_ctx
    if isinstance(timing, dict) and "record" in timing:
        timing["record"].sent = timing["clock"]()


async def open_connections(session: aiohttp.ClientSession, endpoint: Endpoint, count: int) -> None:
    """Open ``count`` kept-alive connections before the clock starts (``GET /v1/models`` on each at
    once): a load point measures serving, not TCP handshakes. One that fails is left to the requests."""
    async def one() -> None:
        try:
            async with session.get(f"{endpoint.base_url.rstrip('/')}/models", headers=dict(endpoint.headers)) as response:
                await response.read()
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError):
            pass

    try:
        await asyncio.wait_for(asyncio.gather(*(one() for _ in range(count))), 30)
    except asyncio.TimeoutError:
        pass


async def send(session: aiohttp.ClientSession, endpoint: Endpoint, prompt: Prompt, record: RequestRecord,
               clock: Clock = time.monotonic_ns) -> None:
    """Stream one request into ``record`` (see the module doc). ``clock`` gives every time in ns
    (the system's monotonic clock; tests give their event loop's virtual one)."""
    record.sent = clock()
    try:
        await asyncio.wait_for(_stream(session, endpoint, prompt, record, clock), endpoint.timeout_s)
    except asyncio.TimeoutError:
        record.error = f"timeout: the stream had not ended after {endpoint.timeout_s:g} s"
    except aiohttp.ClientResponseError as exc:
        record.error = f"HTTP {exc.status}: {one_line(str(exc.message), ERROR_TEXT)}"
    except (aiohttp.ClientError, OSError) as exc:
        record.error = _connection_error(exc, endpoint)
    except ValueError as exc:  # aiohttp's "Line is too long", a body that is not UTF-8
        record.error = f"malformed stream: {one_line(str(exc), ERROR_TEXT)}"
    if not record.ended:
        record.ended = clock()


def _connection_error(exc: BaseException, endpoint: Endpoint) -> str:
    text = one_line(str(exc) or type(exc).__name__, ERROR_TEXT)
    if isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError)):
        return f"stream cut: {text}"
    return f"cannot reach {endpoint.url}: {text}"


async def _stream(session: aiohttp.ClientSession, endpoint: Endpoint, prompt: Prompt, record: RequestRecord,
                  clock: Clock) -> None:
    body = dumps(endpoint.payload(prompt)).encode()
    async with session.post(endpoint.url, data=body, headers=endpoint.request_headers,
                            trace_request_ctx={"record": record, "clock": clock}) as response:
        record.http_status = response.status
        if response.status != 200:
            text = await response.content.read(4096)
            record.error = f"HTTP {response.status}: {one_line(text.decode('utf-8', 'replace').strip(), ERROR_TEXT)}"
            return
        state = _StreamState(record, endpoint.api)
        arrival = _arrival_clock(response, clock)
        await _read_events(response.content, state, arrival)
        record.ended = arrival()
        state.finish()


def _arrival_clock(response: aiohttp.ClientResponse, clock: Clock) -> Clock:
    """When the bytes read last reached the machine: the arrival time of the response's socket's
    last read, or ``clock`` now where the socket is not an arrival socket (the tests' virtual time)."""
    sock = socket_of(response)
    return clock if sock is None else (lambda: sock.arrived)


async def _read_events(content: Any, state: "_StreamState", clock: Clock) -> None:
    """The body's lines to ``state`` as they come, each with ``clock()`` as its read returned (the
    arrival of the socket read that completed it): one await per read of the socket, not per line."""
    pending = b""
    async for data in content.iter_any():
        now = clock()
        pending += data
        if b"\n" not in data:
            if len(pending) > MAX_LINE:
                state.fail(f"malformed stream: a line longer than {MAX_LINE} bytes")
                return
            continue
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if state.feed(line, now):
                return
    if pending.strip():
        state.feed(pending, clock())


class _StreamState:
    """What the SSE lines of one response said so far."""

    def __init__(self, record: RequestRecord, api: str) -> None:
        self.record = record
        self.chat = api == "chat"
        self.done = False
        self.chunks = 0

    def feed(self, raw: bytes, now: int) -> bool:
        """Take one line; True at ``[DONE]`` or at an error (the stream is over)."""
        line = raw.strip()
        if not line or line.startswith(b":") or not line.startswith(b"data:"):
            return False  # blank separators, comments, event:/id:/retry: fields
        data = line[5:].strip()
        if data == b"[DONE]":
            self.done = True
            return True
        try:
            chunk = loads(data)
        except ValueError:
            return self.fail(f"malformed SSE: a data line is not JSON: {one_line(data.decode('utf-8', 'replace'), 60)}")
        if not isinstance(chunk, dict):
            return self.fail("malformed SSE: a data line is not a JSON object")
        if "error" in chunk:
            error = chunk["error"]
            message = error.get("message", error) if isinstance(error, dict) else error
            return self.fail(f"server error in the stream: {one_line(str(message), ERROR_TEXT)}")
        self.chunks += 1
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._take_usage(usage)
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            return self.fail("malformed SSE: a chunk has no 'choices' list")
        for choice in choices[:1]:
            if not isinstance(choice, dict):
                return self.fail("malformed SSE: a choice is not a JSON object")
            if self._text(choice):
                self.record.token_times.append(now)
            if choice.get("finish_reason"):
                self.record.finish_reason = str(choice["finish_reason"])
        return False

    def _text(self, choice: dict) -> str:
        if self.chat:
            delta = choice.get("delta")
            if not isinstance(delta, dict):
                return ""
            return (delta.get("content") or "") + (delta.get("reasoning_content") or "")
        text = choice.get("text")
        return text if isinstance(text, str) else ""

    def _take_usage(self, usage: dict) -> None:
        completion, prompt = usage.get("completion_tokens"), usage.get("prompt_tokens")
        if isinstance(completion, int) and not isinstance(completion, bool) and completion >= 0:
            self.record.usage_output = completion
        if isinstance(prompt, int) and not isinstance(prompt, bool) and prompt >= 0:
            self.record.usage_input = prompt

    def fail(self, message: str) -> bool:
        self.record.error = message
        return True

    def finish(self) -> None:
        """At the stream's end: one cut short, or one without a token, is an error."""
        record = self.record
        if record.error:
            return
        if not self.done and not self.chunks:
            record.error = "not an SSE stream: the answer had no 'data:' line (does the server stream?)"
        elif not self.done and not record.finish_reason:
            record.error = (f"stream cut: it ended after {len(record.token_times)} token(s) with no finish_reason "
                            "and no [DONE]")
        elif not record.token_times:
            record.error = "the response carried no token"
