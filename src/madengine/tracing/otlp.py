"""OTLP over HTTP through the OpenTelemetry SDK, when ``OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT`` is set.

The tracer's finished spans are replayed into the SDK as ``ReadableSpan`` objects with their real
ids, parents and times, and sent by the SDK's ``OTLPSpanExporter`` (http/protobuf). The standard
variables are read from the command's environment: ``OTEL_EXPORTER_OTLP_[TRACES_]{ENDPOINT,
HEADERS, TIMEOUT, COMPRESSION, CERTIFICATE, CLIENT_KEY, CLIENT_CERTIFICATE, PROTOCOL}``,
``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_SDK_DISABLED``, ``OTEL_TRACES_EXPORTER``.
``OTEL_EXPORTER_OTLP_TIMEOUT`` is in seconds, as the Python SDK reads it.

Never in the way of a run: the export is bounded by the timeout (default 5 s) whatever the
collector does, a closed port fails at once (a connection check precedes the SDK, whose retries
of refused connections would otherwise wait out the timeout), and every failure becomes one
warning line for the caller to print. The SDK's own log records are kept off stderr. Without the
OpenTelemetry packages, the caller is told once to ``pip install madengine[trace]``.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
import threading
import urllib.parse
from typing import Any, Callable, Mapping, Sequence

from madengine.core.redact import redact, register_secret
from madengine.tracing.chrome import json_value
from madengine.tracing.sdk import sdk_available
from madengine.tracing.tracer import STATUS_ERROR, STATUS_OK, CounterTrack, Span, TraceSnapshot

INSTALL_HINT = "pip install madengine[trace]"
DEFAULT_TIMEOUT_S = 5.0
SUPPORTED_PROTOCOL = "http/protobuf"

_missing_said = threading.Event()


class OtlpSettingsError(ValueError):
    """A standard OTEL_* variable asks for something this exporter does not do."""


@dataclasses.dataclass
class OtlpSettings:
    endpoint: str  #: the full traces URL (``.../v1/traces``)
    headers: str = ""  #: W3C-baggage-style ``k=v,k2=v2``, parsed by the SDK
    timeout_s: float = DEFAULT_TIMEOUT_S
    compression: str = "none"
    certificate_file: str | None = None
    client_key_file: str | None = None
    client_certificate_file: str | None = None
    service_name: str = "madengine"
    resource_attributes: dict[str, str] = dataclasses.field(default_factory=dict)


def _first(environ: Mapping[str, str], suffix: str) -> str:
    """``OTEL_EXPORTER_OTLP_TRACES_<suffix>``, else ``OTEL_EXPORTER_OTLP_<suffix>``."""
    return (environ.get(f"OTEL_EXPORTER_OTLP_TRACES_{suffix}") or environ.get(f"OTEL_EXPORTER_OTLP_{suffix}")
            or "").strip()


def traces_endpoint(environ: Mapping[str, str]) -> str:
    """The traces URL the spec derives: the signal variable as is, else the base + ``/v1/traces``."""
    signal = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if signal:
        return signal
    base = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    return f"{base.rstrip('/')}/v1/traces" if base else ""


def parse_resource_attributes(text: str) -> dict[str, str]:
    """``OTEL_RESOURCE_ATTRIBUTES`` (``k=v,k2=v2``, values percent-encoded); malformed entries are skipped."""
    attributes = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            attributes[key.strip()] = urllib.parse.unquote(value.strip())
    return attributes


def settings_from_environ(environ: Mapping[str, str]) -> OtlpSettings | None:
    """The export settings, or None when no export is asked for. Raises OtlpSettingsError."""
    endpoint = traces_endpoint(environ)
    if not endpoint:
        return None
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    exporters = [e.strip().lower() for e in environ.get("OTEL_TRACES_EXPORTER", "").split(",") if e.strip()]
    if exporters and "otlp" not in exporters:
        return None
    protocol = _first(environ, "PROTOCOL") or SUPPORTED_PROTOCOL
    if protocol != SUPPORTED_PROTOCOL:
        raise OtlpSettingsError(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol} is not supported; madengine exports "
                                f"{SUPPORTED_PROTOCOL} (set it, and the endpoint of the collector's HTTP port)")
    timeout_text = _first(environ, "TIMEOUT")
    try:
        timeout = float(timeout_text) if timeout_text else DEFAULT_TIMEOUT_S
    except ValueError:
        raise OtlpSettingsError(f"OTEL_EXPORTER_OTLP_TIMEOUT={timeout_text!r} is not a number of seconds") from None
    if timeout <= 0:
        raise OtlpSettingsError(f"OTEL_EXPORTER_OTLP_TIMEOUT={timeout_text!r} must be more than 0 seconds")
    compression = (_first(environ, "COMPRESSION") or "none").lower()
    if compression not in ("none", "gzip", "deflate"):
        raise OtlpSettingsError(f"OTEL_EXPORTER_OTLP_COMPRESSION={compression!r} is not none, gzip or deflate")
    resource = parse_resource_attributes(environ.get("OTEL_RESOURCE_ATTRIBUTES", ""))
    service = environ.get("OTEL_SERVICE_NAME", "").strip() or resource.get("service.name") or "madengine"
    return OtlpSettings(endpoint=endpoint, headers=_first(environ, "HEADERS"), timeout_s=timeout,
                        compression=compression, certificate_file=_first(environ, "CERTIFICATE") or None,
                        client_key_file=_first(environ, "CLIENT_KEY") or None,
                        client_certificate_file=_first(environ, "CLIENT_CERTIFICATE") or None,
                        service_name=service, resource_attributes=resource)


# --- replaying spans into the SDK --------------------------------------------------------------

def _otel_value(value: Any) -> Any:
    value = json_value(value)
    if isinstance(value, list):  # OpenTelemetry arrays are homogeneous and flat
        kinds = {type(v) for v in value}
        if len(kinds) > 1 or (kinds and not kinds <= {str, bool, int, float}):
            return str(value)
    return value


def _attributes(attributes: Mapping[str, Any]) -> dict[str, Any]:
    return {key: _otel_value(value) for key, value in attributes.items()}


def _counter_events(counters: Sequence[CounterTrack]) -> dict[str, list[tuple[str, int, dict[str, Any]]]]:
    """A counter track has no OTLP trace form: its parent span gets one summary event per track."""
    events: dict[str, list[tuple[str, int, dict[str, Any]]]] = {}
    for track in counters:
        if not track.parent_span_id or not track.values:
            continue
        values = track.values
        events.setdefault(track.parent_span_id, []).append(
            ("counter_track", track.timestamps_ns[0],
             {"counter.name": track.name, "counter.unit": track.unit, "counter.samples": len(values),
              "counter.min": min(values), "counter.max": max(values), "counter.mean": sum(values) / len(values),
              "counter.last": values[-1]}))
    return events


def readable_spans(spans: Sequence[Span], snapshot: TraceSnapshot, settings: OtlpSettings,
                   counters: Sequence[CounterTrack] = ()) -> list[Any]:
    """The SDK's ``ReadableSpan`` of every span, with its real ids, parent, times, events and status."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext, SpanKind, TraceFlags
    from opentelemetry.trace.status import Status, StatusCode

    from madengine.core.version import __version__

    resource = Resource.create({**{k: _otel_value(v) for k, v in snapshot.resource.items()},
                                **settings.resource_attributes, "service.name": settings.service_name})
    scope = InstrumentationScope("madengine", __version__)
    flags = TraceFlags(TraceFlags.SAMPLED)
    extra_events = _counter_events(counters)
    out = []
    for span in spans:
        trace_id = int(span.trace_id, 16)
        context = SpanContext(trace_id, int(span.span_id, 16), is_remote=False, trace_flags=flags)
        parent = (SpanContext(trace_id, int(span.parent_id, 16), is_remote=span.parent_id == snapshot.remote_parent_id,
                              trace_flags=flags) if span.parent_id else None)
        if span.status == STATUS_ERROR:
            status = Status(StatusCode.ERROR, redact(span.status_message) or None)
        else:
            status = Status(StatusCode.OK if span.status == STATUS_OK else StatusCode.UNSET)
        events = [Event(name, _attributes(attrs), timestamp=when)
                  for name, when, attrs in [*span.events, *extra_events.get(span.span_id, ())]]
        out.append(ReadableSpan(name=span.name, context=context, parent=parent, resource=resource,
                                attributes=_attributes(span.attributes), events=events, kind=SpanKind.INTERNAL,
                                status=status, start_time=span.start_ns, end_time=span.end_ns,
                                instrumentation_scope=scope))
    return out


# --- sending ---------------------------------------------------------------------------------

class _Captured(logging.Handler):
    """Keeps the SDK's log records (its reasons for a failure) instead of printing them."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.WARNING:
            try:
                self.messages.append(record.getMessage())
            except Exception:  # a record that cannot format itself is no reason to fail
                self.messages.append(str(record.msg))


def _direct_connection(url: str) -> tuple[str, int] | None:
    """(host, port) to check before sending, or None when a proxy is in between (then the SDK decides)."""
    import urllib.request

    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    proxies = urllib.request.getproxies()
    if proxies.get(parts.scheme) and not urllib.request.proxy_bypass(parts.hostname):
        return None
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    return parts.hostname, port


def _check_reachable(url: str, timeout: float) -> str | None:
    """Why the collector cannot be reached (refused, unknown host, no answer), or None when it can."""
    target = _direct_connection(url)
    if target is None:
        return None
    try:
        with socket.create_connection(target, timeout=timeout):
            return None
    except ConnectionRefusedError:
        return "connection refused"
    except socket.gaierror as exc:
        return f"cannot resolve {target[0]} ({exc.strerror or exc})"
    except TimeoutError:
        return f"no answer from {target[0]}:{target[1]} within {timeout:g} s"
    except OSError as exc:
        return exc.strerror or str(exc)


def _sdk_reason(messages: Sequence[str]) -> str:
    """The SDK's last word on a failed export (its log records)."""
    return messages[-1] if messages else "the collector did not accept it"


def export(spans: Sequence[Span], snapshot: TraceSnapshot, settings: OtlpSettings, *,
           counters: Sequence[CounterTrack] = (), warn: Callable[[str], None]) -> int:
    """Send ``spans``; the number the collector accepted (0 after a warning). Never raises for the collector."""
    if not spans:
        return 0
    if not sdk_available():
        if not _missing_said.is_set():
            _missing_said.set()
            warn(f"OTLP export needs the OpenTelemetry packages: {INSTALL_HINT}")
        return 0
    outcome: dict[str, Any] = {}
    exporter = _exporter(settings, outcome)
    batch = readable_spans(spans, snapshot, settings, counters)
    captured = _Captured()
    sdk_logger = logging.getLogger("opentelemetry")
    saved = sdk_logger.propagate
    sdk_logger.addHandler(captured)
    sdk_logger.propagate = False
    try:
        _send_within(exporter, batch, settings, outcome)
    finally:
        exporter.shutdown()  # also cuts short a retry the SDK is waiting to make
        sdk_logger.removeHandler(captured)
        sdk_logger.propagate = saved
    if outcome.get("ok"):
        return len(batch)
    reason = outcome.get("error") or outcome.get("http") or _sdk_reason(captured.messages)
    warn(redact(f"OTLP export of {len(batch)} span(s) to {settings.endpoint} failed: {reason}"))
    return 0


def _exporter(settings: OtlpSettings, outcome: dict[str, Any]) -> Any:
    """The SDK's OTLP/HTTP span exporter for ``settings``; an HTTP error answer lands in ``outcome``."""
    import requests
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.util.re import parse_env_headers

    headers = dict(parse_env_headers(settings.headers, liberal=True)) if settings.headers else None
    for value in (headers or {}).values():
        register_secret(value)  # API keys travel in headers; never show them in a warning
    session = requests.Session()

    def remember_status(response: Any, *args: Any, **kwargs: Any) -> None:
        if response.status_code >= 400:  # the SDK logs only its own summary when it gives up
            outcome["http"] = f"HTTP {response.status_code} {response.reason}".strip()

    session.hooks["response"].append(remember_status)
    return OTLPSpanExporter(endpoint=settings.endpoint, certificate_file=settings.certificate_file,
                            client_key_file=settings.client_key_file,
                            client_certificate_file=settings.client_certificate_file, headers=headers,
                            timeout=settings.timeout_s, compression=Compression(settings.compression),
                            session=session)


def _send_within(exporter: Any, batch: Sequence[Any], settings: OtlpSettings, outcome: dict[str, Any]) -> None:
    """Export ``batch`` on a thread of its own, waiting at most the timeout (and a second): ``ok``
    or ``error`` in ``outcome``. The exporter's failure must never become the run's."""
    from opentelemetry.sdk.trace.export import SpanExportResult

    def send() -> None:
        try:
            problem = _check_reachable(settings.endpoint, min(settings.timeout_s, 2.0))
            if problem:
                outcome["error"] = problem
                return
            outcome["ok"] = exporter.export(batch) is SpanExportResult.SUCCESS
        except Exception as exc:
            outcome["error"] = f"{type(exc).__name__}: {exc}"

    worker = threading.Thread(target=send, name="madengine-otlp-export", daemon=True)
    worker.start()
    worker.join(settings.timeout_s + 1.0)
    if worker.is_alive():
        outcome.setdefault("error", f"no answer within {settings.timeout_s:g} s")
