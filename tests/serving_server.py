"""A deterministic OpenAI-compatible streaming server of the tests' own (standard library only).

It emits the tokens of every request at known times: the first ``--ttft-ms`` after the request was
read, then one every ``--itl-ms``, each moved by a seeded uniform jitter of at most ``--jitter-ms``
(kept below half a gap, so tokens stay in order). Every request's truth (when it was read, when each
token was written to the socket, measured with the same system-wide monotonic clock the client
reads, and how long each write took: a write the scheduler interrupted has a late time) goes to
``--truth FILE`` as one JSON line, so tests compare madengine's figures with what the server
actually did. Faults on demand: HTTP 500 on every Nth request (``--fail-every``), a malformed
SSE line (``--malformed-every``), a stream cut after 3 tokens (``--cut-every``), an error object in
the stream (``--error-every``), readiness never reached (``--never-ready``).

    python3 tests/serving_server.py --port 0 --truth truth.jsonl   # prints "port N" when listening

:class:`ServerProcess` runs it as a child process for the tests and benchmarks/serving_client.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

MODEL = "test-model"


class Server:
    def __init__(self, args: argparse.Namespace, clock: Callable[[], int] = time.monotonic_ns) -> None:
        self.args = args
        self.clock = clock
        self.count = 0
        self.records: list[dict] = []  #: every request's truth (also in --truth FILE)
        self.truth = open(args.truth, "a", encoding="utf-8") if args.truth else None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                received = self.clock()
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
                body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
                received = self.clock()
                if not await self.route(method, path, body, received, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def route(self, method: str, path: str, body: bytes, received: int, writer: asyncio.StreamWriter) -> bool:
        if method == "GET" and path in ("/health", "/v1/models"):
            if self.args.never_ready:
                return self.respond(writer, 503, {"error": "loading"})
            payload = {"status": "ok"} if path == "/health" else {"object": "list", "data": [{"id": MODEL}]}
            return self.respond(writer, 200, payload)
        if method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
            await self.stream(json.loads(body), path.endswith("chat/completions"), received, writer)
            return True
        return self.respond(writer, 404, {"error": f"no route {path}"})

    def respond(self, writer: asyncio.StreamWriter, status: int, payload: Any) -> bool:
        data = json.dumps(payload).encode()
        writer.write(f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
                     .encode() + data)
        return True

    async def stream(self, request: dict, chat: bool, received: int, writer: asyncio.StreamWriter) -> None:
        self.count += 1
        number = self.count
        args = self.args
        if args.fail_every and number % args.fail_every == 0:
            self.respond(writer, 500, {"error": {"message": "injected failure"}})
            self.record(number, received, [], "http 500", request)
            return
        tokens = int(request.get("max_tokens") or 16)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        rng = random.Random(args.seed * 1_000_003 + number)
        loop = asyncio.get_running_loop()
        start = loop.time() - (self.clock() - received) / 1e9  # the request's read, on the loop's clock
        written: list[int] = []
        writing: list[int] = []  #: ns each write took: a write interrupted by the scheduler makes its time late
        for index in range(tokens):
            jitter = rng.uniform(-args.jitter_ms, args.jitter_ms) if args.jitter_ms else 0.0
            target = start + (args.ttft_ms + index * args.itl_ms + jitter) / 1000
            delay = target - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            if args.cut_every and number % args.cut_every == 0 and index == 3:
                writer.transport.abort()  # the connection drops mid-stream
                self.record(number, received, written, "cut", request)
                return
            if args.malformed_every and number % args.malformed_every == 0 and index == 2:
                self.chunk(writer, b"data: {not json\n\n")
                self.record(number, received, written, "malformed", request)
                return self.end(writer)
            if args.error_every and number % args.error_every == 0 and index == 2:
                self.chunk(writer, b'data: {"error": {"message": "out of memory"}}\n\n')
                self.record(number, received, written, "error", request)
                return self.end(writer)
            piece = {"delta": {"content": f" t{index}"}} if chat else {"text": f" t{index}"}
            before = self.clock()
            self.event(writer, {"id": str(number), "choices": [{"index": 0, **piece, "finish_reason": None}]})
            written.append(self.clock())
            writing.append(written[-1] - before)
        finish = {"index": 0, "finish_reason": "length", **({"delta": {}} if chat else {"text": ""})}
        self.event(writer, {"id": str(number), "choices": [finish]})
        if not args.no_usage:
            self.event(writer, {"id": str(number), "choices": [], "usage": {
                "prompt_tokens": len(str(request.get("prompt") or request.get("messages")).split()),
                "completion_tokens": tokens, "total_tokens": tokens}})
        if not args.no_done:
            self.chunk(writer, b"data: [DONE]\n\n")
        self.end(writer)
        self.record(number, received, written, "", request, writing)
        await writer.drain()

    def event(self, writer: asyncio.StreamWriter, payload: dict) -> None:
        self.chunk(writer, b"data: " + json.dumps(payload).encode() + b"\n\n")

    @staticmethod
    def chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    @staticmethod
    def end(writer: asyncio.StreamWriter) -> None:
        writer.write(b"0\r\n\r\n")

    def record(self, number: int, received: int, written: list[int], fault: str, request: dict,
               writing: list[int] | None = None) -> None:
        prompt = request.get("prompt") or json.dumps(request.get("messages"))
        self.records.append({"request": number, "received": received, "tokens": written, "fault": fault,
                             "prompt": prompt, "writing": writing or []})
        if self.truth is not None:
            self.truth.write(json.dumps(self.records[-1]) + "\n")
            self.truth.flush()


class VirtualClock:
    """Time that passes only when nothing is left to do: the event loop's ``time()`` and the
    clock of the client and the server in it. When every task waits (a server sleeping until its
    next token, a client waiting for it) and no socket has data after a short real wait, the clock
    jumps to the next timer. Loopback sockets carry a write at once, so a token written at virtual
    time T is read at T: what the client measures is exactly what the server scheduled, however
    busy the machine is."""

    REAL_WAIT_S = 0.001  #: how long sockets are watched in real time before the clock jumps

    def __init__(self) -> None:
        self.ns = 1_000_000_000

    def __call__(self) -> int:
        return self.ns

    def loop(self) -> asyncio.AbstractEventLoop:
        clock = self

        class Selector(selectors.DefaultSelector):  # type: ignore[misc, valid-type]
            def select(self, timeout: float | None = None) -> list:
                events = super().select(0 if timeout == 0 else self_wait(timeout))
                if events or timeout == 0:
                    return events
                if timeout is None:
                    return super().select(None)
                clock.ns += max(0, round(timeout * 1e9))
                return []

        def self_wait(timeout: float | None) -> float:
            return clock.REAL_WAIT_S if timeout is None else min(timeout, clock.REAL_WAIT_S)

        class Loop(asyncio.SelectorEventLoop):
            def time(self) -> float:
                return clock.ns / 1e9

        return Loop(Selector())

    def run(self, coroutine: Any) -> Any:
        """Run ``coroutine`` to its end on a loop of this clock."""
        loop = self.loop()
        try:
            return loop.run_until_complete(coroutine)
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()


async def start(args: argparse.Namespace, clock: Callable[[], int] = time.monotonic_ns) -> tuple[asyncio.AbstractServer, Server]:
    """The server in this process's running loop (tests in virtual time): the listener and the server."""
    server = Server(args, clock)
    listener = await asyncio.start_server(server.handle, "127.0.0.1", args.port, limit=1 << 20, backlog=1024)
    return listener, server


async def serve(args: argparse.Namespace) -> None:
    server = Server(args)
    listener = await asyncio.start_server(server.handle, "127.0.0.1", args.port, limit=1 << 20, backlog=1024)
    print(f"port {listener.sockets[0].getsockname()[1]}", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with listener:
        await stop.wait()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ttft-ms", type=float, default=200.0)
    parser.add_argument("--itl-ms", type=float, default=20.0)
    parser.add_argument("--jitter-ms", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--truth", default="")
    for fault in ("fail", "malformed", "cut", "error"):
        parser.add_argument(f"--{fault}-every", type=int, default=0)
    parser.add_argument("--never-ready", action="store_true")
    parser.add_argument("--no-usage", action="store_true", help="send no usage chunk (tokens counted from the stream)")
    parser.add_argument("--no-done", action="store_true", help="end streams without data: [DONE]")
    args = parser.parse_args(argv)
    if args.jitter_ms * 2 >= args.itl_ms > 0:
        parser.error("--jitter-ms must stay below half of --itl-ms")
    return args


class ServerProcess:
    """The server as a child process: ``url`` once it listens; ``truth()`` its requests so far."""

    def __init__(self, folder: Path, *options: str, cpu: int | None = None) -> None:
        self.truth_path = Path(folder) / f"truth-{os.getpid()}-{time.monotonic_ns()}.jsonl"
        command = [sys.executable, __file__, "--truth", str(self.truth_path), *options]
        if cpu is not None:
            command = ["taskset", "-c", str(cpu), *command]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        line = self.process.stdout.readline() if self.process.stdout else ""
        if not line.startswith("port "):
            self.stop()
            raise RuntimeError(f"the test server did not start: {line!r}")
        self.port = int(line.split()[1])
        self.url = f"http://127.0.0.1:{self.port}/v1"

    def truth(self) -> list[dict]:
        if not self.truth_path.exists():
            return []
        return [json.loads(line) for line in self.truth_path.read_text().splitlines() if line.strip()]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


if __name__ == "__main__":
    asyncio.run(serve(parse_args()))
