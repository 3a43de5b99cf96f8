"""A real OTLP/HTTP trace receiver for the tests: an HTTP server on 127.0.0.1 that decodes the protobuf.

``ExportTraceServiceRequest`` bodies (gzip/deflate when the client says so) are decoded with
``opentelemetry-proto`` into :class:`ReceivedSpan` records with hex ids and plain attribute
values, so tests assert on names, parent–child structure and attributes. ``fail_with`` makes the
receiver answer every export with that HTTP status (a collector that refuses).

Use the ``otlp_receiver`` fixture (registered in conftest.py): it yields a started receiver; its
``environ`` holds the ``OTEL_EXPORTER_OTLP_ENDPOINT`` that points at it.
"""

from __future__ import annotations

import dataclasses
import gzip
import http.server
import threading
import time
import zlib
from typing import Any

import pytest


@dataclasses.dataclass
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[tuple[str, int, dict[str, Any]]]
    status_code: int  #: 0 unset, 1 ok, 2 error
    status_message: str
    resource: dict[str, Any]
    scope: str


def any_value(value: Any) -> Any:
    """An OTLP ``AnyValue`` as a Python value."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


def attributes(key_values: Any) -> dict[str, Any]:
    return {kv.key: any_value(kv.value) for kv in key_values}


def decode(body: bytes) -> list[ReceivedSpan]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        resource = attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(ReceivedSpan(
                    name=span.name, trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                    parent_span_id=span.parent_span_id.hex(), start_ns=span.start_time_unix_nano,
                    end_ns=span.end_time_unix_nano, attributes=attributes(span.attributes),
                    events=[(e.name, e.time_unix_nano, attributes(e.attributes)) for e in span.events],
                    status_code=span.status.code, status_message=span.status.message, resource=resource,
                    scope=scope_spans.scope.name))
    return spans


class OtlpReceiver:
    """The server; ``spans`` collects every span received, ``requests`` counts the exports."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests: list[dict[str, str]] = []  # headers of each export request
        self.fail_with: int | None = None
        self._lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                encoding = (self.headers.get("Content-Encoding") or "").lower()
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                with receiver._lock:
                    receiver.requests.append({k.lower(): v for k, v in self.headers.items()})
                if receiver.fail_with is not None:
                    self.send_response(receiver.fail_with)
                    self.end_headers()
                    return
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                spans = decode(body)
                with receiver._lock:
                    receiver.spans.extend(spans)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:  # keep pytest's output clean
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.environ = {"OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint}
        self._thread = threading.Thread(target=self.server.serve_forever, name="otlp-receiver", daemon=True)

    def start(self) -> "OtlpReceiver":
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def wait_for(self, count: int, timeout: float = 60.0) -> list[ReceivedSpan]:
        """The spans received once there are at least ``count`` (exports from a child process arrive late)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.spans) >= count:
                    return list(self.spans)
            time.sleep(0.02)
        with self._lock:
            return list(self.spans)

    def by_name(self, name: str) -> list[ReceivedSpan]:
        with self._lock:
            return [s for s in self.spans if s.name == name]


@pytest.fixture
def otlp_receiver():
    """A started OTLP/HTTP receiver on 127.0.0.1 (a free port); stopped after the test."""
    receiver = OtlpReceiver().start()
    yield receiver
    receiver.stop()
