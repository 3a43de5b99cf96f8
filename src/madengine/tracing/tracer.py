"""The tracer the run path calls: spans, events, error status, counter tracks, spans recorded after the fact.

One :class:`Tracer` per process and command. Spans nest through a context variable, so ``with
tracer.span(...)`` inside another one becomes its child in the same thread; a thread (a
``--parallel`` slot) continues a span through :meth:`Tracer.bind` or an explicit ``parent=``.
Spans that begin in one thread and end in another use :meth:`Tracer.start_span` / :meth:`Span.end`.
Everything is kept in memory until :func:`madengine.tracing.flush` writes trace.json and exports it.

``--no-trace`` gets :data:`NULL_TRACER`, whose methods do nothing and return the one shared
:data:`NULL_SPAN`: a disabled tracer costs a method call per span and allocates nothing.

Times are nanoseconds since the Unix epoch, taken from the monotonic clock anchored once to the
wall clock, so durations never jump with NTP and processes on one host line up.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, TypeVar

from madengine.core.ids import machine_name
from madengine.tracing.names import ENV_TRACEPARENT, ENV_TRACESTATE
from madengine.tracing.propagation import TraceParent, format_traceparent, new_span_id, new_trace_id, \
    parse_traceparent

F = TypeVar("F", bound=Callable[..., Any])

STATUS_UNSET, STATUS_OK, STATUS_ERROR = "unset", "ok", "error"
SERVICE_NAME = "madengine"

_current: contextvars.ContextVar["Span | None"] = contextvars.ContextVar("madengine_current_span", default=None)


class _CurrentSpan:
    """Marker default of ``parent=``: the span current in this thread (or context)."""


CURRENT = _CurrentSpan()


class Span:
    """One timed operation. Use it as a context manager, or call :meth:`end` (from any thread)."""

    __slots__ = ("name", "trace_id", "span_id", "parent_id", "start_ns", "end_ns", "attributes", "events",
                 "status", "status_message", "thread_id", "thread_name", "category", "_tracer", "_token")

    def __init__(self, name: str, trace_id: str, span_id: str, parent_id: str, start_ns: int, *,
                 attributes: Mapping[str, Any] | None = None, category: str = "madengine",
                 thread_id: int | None = None, thread_name: str | None = None,
                 tracer: "Tracer | None" = None) -> None:
        self.name = name
        self.trace_id = trace_id
        self.span_id = span_id
        self.parent_id = parent_id  #: "" for a root span of a new trace
        self.start_ns = start_ns
        self.end_ns: int | None = None
        self.attributes: dict[str, Any] = {k: v for k, v in (attributes or {}).items() if v is not None}
        self.events: list[tuple[str, int, dict[str, Any]]] = []
        self.status = STATUS_UNSET
        self.status_message = ""
        if thread_id is None:
            thread = threading.current_thread()
            thread_id, thread_name = thread.ident or 0, thread_name or thread.name
        self.thread_id = thread_id
        self.thread_name = thread_name or ""
        self.category = category
        self._tracer = tracer
        self._token: contextvars.Token | None = None

    recording = True

    def __repr__(self) -> str:
        return f"Span({self.name!r}, span_id={self.span_id}, parent_id={self.parent_id or '-'})"

    @property
    def duration_ns(self) -> int | None:
        return None if self.end_ns is None else self.end_ns - self.start_ns

    def set_attribute(self, key: str, value: Any) -> None:
        if value is not None:
            self.attributes[key] = value

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        for key, value in attributes.items():
            self.set_attribute(key, value)

    def add_event(self, name: str, attributes: Mapping[str, Any] | None = None,
                  timestamp_ns: int | None = None) -> None:
        when = timestamp_ns if timestamp_ns is not None else (self._tracer.now_ns() if self._tracer else time.time_ns())
        self.events.append((name, when, {k: v for k, v in (attributes or {}).items() if v is not None}))

    def set_error(self, message: str = "") -> None:
        """Mark the span failed; the message says why (one line)."""
        self.status, self.status_message = STATUS_ERROR, str(message)

    def set_ok(self) -> None:
        if self.status != STATUS_ERROR:
            self.status, self.status_message = STATUS_OK, ""

    def record_exception(self, exc: BaseException) -> None:
        """An ``exception`` event (OpenTelemetry's semantic convention) and the error status."""
        kind = "interrupted" if isinstance(exc, KeyboardInterrupt) else type(exc).__name__
        self.add_event("exception", {"exception.type": kind, "exception.message": str(exc)})
        self.set_error(f"{kind}: {exc}" if str(exc) else kind)

    def end(self, end_ns: int | None = None) -> None:
        """Finish the span (a second call does nothing)."""
        if self.end_ns is not None:
            return
        self.end_ns = end_ns if end_ns is not None else (self._tracer.now_ns() if self._tracer else time.time_ns())
        if self._tracer is not None:
            self._tracer._finished_span(self)

    def __enter__(self) -> "Span":
        self._token = _current.set(self)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc is not None:
            self.record_exception(exc)
        if self._token is not None:
            try:
                _current.reset(self._token)
            except ValueError:  # entered in another context: restore what was there before as well as we can
                _current.set(None)
            self._token = None
        self.end()


class CounterTrack:
    """A time series shown as a counter track (GPU power, RSS, ...): one value per timestamp.

    ``parent_span_id`` names the span it belongs to (the model's), when known.
    """

    __slots__ = ("name", "timestamps_ns", "values", "unit", "attributes", "parent_span_id")

    def __init__(self, name: str, timestamps_ns: list[int], values: list[float], unit: str = "",
                 attributes: dict[str, Any] | None = None, parent_span_id: str = "") -> None:
        if len(timestamps_ns) != len(values):
            raise ValueError(f"counter track {name}: {len(timestamps_ns)} timestamps, {len(values)} values")
        self.name = name
        self.timestamps_ns = timestamps_ns
        self.values = values
        self.unit = unit
        self.attributes = attributes or {}
        self.parent_span_id = parent_span_id

    def __repr__(self) -> str:
        return f"CounterTrack({self.name!r}, {len(self.values)} points, unit={self.unit!r})"


class TraceSnapshot:
    """What a tracer holds at one moment, for the sinks (taken under the tracer's lock)."""

    def __init__(self, trace_id: str, remote_parent_id: str, sampled: bool, origin_ns: int,
                 resource: dict[str, Any], finished: list[Span], unfinished: list[Span],
                 counters: list[CounterTrack], child_traces: list[Path]) -> None:
        self.trace_id = trace_id
        self.remote_parent_id = remote_parent_id
        self.sampled = sampled
        self.origin_ns = origin_ns
        self.resource = resource
        self.finished = finished
        self.unfinished = unfinished
        self.counters = counters
        self.child_traces = child_traces


class Tracer:
    """Records the spans of one process's command. Thread-safe."""

    enabled = True

    def __init__(self, *, parent: TraceParent | None = None, tracestate: str = "",
                 resource: Mapping[str, Any] | None = None) -> None:
        self.trace_id = parent.trace_id if parent else new_trace_id()
        self.remote_parent_id = parent.span_id if parent else ""
        self.sampled = parent.sampled if parent else True
        self.tracestate = tracestate
        self.resource: dict[str, Any] = {"service.name": SERVICE_NAME, "host.name": machine_name(),
                                         "process.pid": os.getpid(),
                                         **{k: v for k, v in (resource or {}).items() if v is not None}}
        self._origin_ns = time.time_ns()
        self._origin_mono = time.monotonic_ns()
        self._lock = threading.Lock()
        self._open: dict[str, Span] = {}
        self._finished: list[Span] = []
        self._counters: list[CounterTrack] = []
        self._child_traces: list[Path] = []
        self._exported = 0  # spans of _finished already sent to OTLP (the list only grows)
        self.file_id = os.urandom(8).hex()  #: this process's trace.json in merged files
        self.warned: set[str] = set()  #: warnings the sinks gave already (each is said once)
        self.export_failed = False  #: after one failed OTLP export the others are not tried
        self.exported_at_ns = self._origin_ns  #: when spans were last handed to the OTLP exporter

    @classmethod
    def from_environ(cls, environ: Mapping[str, str], *, enabled: bool = True,
                     resource: Mapping[str, Any] | None = None,
                     warn: Callable[[str], None] | None = None) -> "Tracer | NullTracer":
        """The tracer of a command: continues ``TRACEPARENT`` when set (a Slurm task, a child run).

        A malformed ``TRACEPARENT`` starts a new trace and says so once through ``warn``:
        tracing never stops a run.
        """
        if not enabled:
            return NULL_TRACER
        text = environ.get(ENV_TRACEPARENT, "")
        parent = parse_traceparent(text)
        if text and parent is None and warn:
            warn(f"madengine: ignoring malformed {ENV_TRACEPARENT}={text[:80]!r}; this run starts a new trace")
        if export_requested(environ):
            _preload_exporter()
        return cls(parent=parent, tracestate=environ.get(ENV_TRACESTATE, "") if parent else "", resource=resource)

    # --- clock ----------------------------------------------------------------------------------

    @property
    def origin_ns(self) -> int:
        """Unix time (ns) when the tracer started: time zero of its trace.json."""
        return self._origin_ns

    def now_ns(self) -> int:
        return self._origin_ns + (time.monotonic_ns() - self._origin_mono)

    def epoch_ns_from_monotonic(self, monotonic_ns: int) -> int:
        """A ``time.monotonic_ns()`` reading of this process (ORT's profiling start) as trace time."""
        return self._origin_ns + (monotonic_ns - self._origin_mono)

    # --- spans ----------------------------------------------------------------------------------

    def current_span(self) -> Span | None:
        span = _current.get()
        return span if span is not None and span._tracer is self else None

    def _parent_id(self, parent: "Span | _CurrentSpan | None") -> str:
        if parent is CURRENT:
            parent = self.current_span()
        if isinstance(parent, Span):
            return parent.span_id
        return self.remote_parent_id  # a root span continues the remote parent, if any

    def start_span(self, name: str, attributes: Mapping[str, Any] | None = None, *,
                   parent: "Span | _CurrentSpan | None" = CURRENT, start_ns: int | None = None,
                   category: str = "madengine") -> Span:
        """A span that the caller ends (:meth:`Span.end`), possibly in another thread.

        It becomes the current span only inside ``with span:`` or :meth:`activate`.
        """
        span = Span(name, self.trace_id, new_span_id(), self._parent_id(parent),
                    start_ns if start_ns is not None else self.now_ns(), attributes=attributes, category=category,
                    tracer=self)
        with self._lock:
            self._open[span.span_id] = span
        return span

    def span(self, name: str, attributes: Mapping[str, Any] | None = None, *,
             parent: "Span | _CurrentSpan | None" = CURRENT, category: str = "madengine") -> Span:
        """``with tracer.span("image_build", {ATTR_IMAGE: tag}) as span:`` — a child of the current span.

        An exception leaving the block marks the span failed and is re-raised.
        """
        return self.start_span(name, attributes, parent=parent, category=category)

    def _finished_span(self, span: Span) -> None:
        with self._lock:
            self._open.pop(span.span_id, None)
            self._finished.append(span)

    @contextlib.contextmanager
    def activate(self, span: Span) -> Iterator[Span]:
        """Make ``span`` the current span in this thread for the block, without ending it."""
        token = _current.set(span)
        try:
            yield span
        finally:
            _current.reset(token)

    def bind(self, function: F, parent: Span | None = None) -> F:
        """``function`` that runs with ``parent`` (default: the span current now) as its current span.

        For threads: ``pool.submit(tracer.bind(run_slot), ...)``; each call may run in any thread.
        """
        parent = parent if parent is not None else self.current_span()
        if parent is None:
            return function

        @functools.wraps(function)
        def bound(*args: Any, **kwargs: Any) -> Any:
            token = _current.set(parent)
            try:
                return function(*args, **kwargs)
            finally:
                _current.reset(token)

        return bound  # type: ignore[return-value]

    def add_event(self, name: str, attributes: Mapping[str, Any] | None = None) -> None:
        """An event on the current span (nothing when there is none)."""
        span = self.current_span()
        if span is not None:
            span.add_event(name, attributes)

    def add_span(self, name: str, start_ns: int, end_ns: int, attributes: Mapping[str, Any] | None = None, *,
                 parent: "Span | _CurrentSpan | None" = CURRENT, category: str = "madengine",
                 error: str | None = None) -> Span:
        """A finished span recorded after the fact (from a profile, a log) with its real times."""
        span = Span(name, self.trace_id, new_span_id(), self._parent_id(parent), start_ns, attributes=attributes,
                    category=category, tracer=None)
        if isinstance(parent, Span):
            span.thread_id, span.thread_name = parent.thread_id, parent.thread_name
        if error is not None:
            span.set_error(error)
        span.end(max(end_ns, start_ns))
        self.add_spans([span])
        return span

    def add_spans(self, spans: Iterable[Span]) -> None:
        """Adopt finished spans made elsewhere (:func:`madengine.tracing.convert.ort_profile_spans`)."""
        adopted = []
        for span in spans:
            if span.end_ns is None:
                span.end_ns = span.start_ns
            span.trace_id = self.trace_id
            adopted.append(span)
        with self._lock:
            self._finished.extend(adopted)

    # --- counters, children ---------------------------------------------------------------------

    def add_counter(self, name: str, timestamps_ns: Iterable[int], values: Iterable[float], *, unit: str = "",
                    attributes: Mapping[str, Any] | None = None, parent: Span | None = None) -> CounterTrack:
        track = CounterTrack(name, list(timestamps_ns), [float(v) for v in values], unit, dict(attributes or {}),
                             parent.span_id if parent else "")
        self.add_counter_track(track)
        return track

    def add_counter_track(self, track: CounterTrack, parent: Span | None = None) -> None:
        if parent is not None and not track.parent_span_id:
            track.parent_span_id = parent.span_id
        with self._lock:
            self._counters.append(track)

    def attach_child_trace(self, path: Path) -> None:
        """A child process's trace.json (a Slurm task's) to merge into this one's trace.json at flush."""
        with self._lock:
            self._child_traces.append(Path(path))

    # --- propagation ----------------------------------------------------------------------------

    def traceparent(self, span: Span | None = None) -> str:
        """``traceparent`` naming ``span`` (default: the current span) as the parent of a child process."""
        span = span or self.current_span()
        return format_traceparent(self.trace_id, span.span_id if span else (self.remote_parent_id or new_span_id()),
                                  self.sampled)

    def child_environ(self, span: Span | None = None) -> dict[str, str]:
        """Variables for a child ``madengine`` process (a Slurm task, a subprocess) to continue the trace."""
        environ = {ENV_TRACEPARENT: self.traceparent(span)}
        if self.tracestate:
            environ[ENV_TRACESTATE] = self.tracestate
        return environ

    # --- for the sinks --------------------------------------------------------------------------

    def take_unexported(self) -> list[Span]:
        """Finished spans not yet handed to the OTLP exporter (each span is exported once)."""
        with self._lock:
            spans = self._finished[self._exported:]
            self._exported = len(self._finished)
            self.exported_at_ns = self.now_ns()
        return spans

    def snapshot(self) -> TraceSnapshot:
        with self._lock:
            return TraceSnapshot(self.trace_id, self.remote_parent_id, self.sampled, self._origin_ns,
                                 dict(self.resource), list(self._finished), list(self._open.values()),
                                 list(self._counters), list(self._child_traces))


def export_requested(environ: Mapping[str, str]) -> bool:
    """Whether the environment names an OTLP collector (the settings themselves are read by ``otlp``)."""
    return bool(environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


_preloading = threading.Lock()
_preloaded = False


def _preload_exporter() -> None:
    """Import the OpenTelemetry SDK in a background thread while the run works.

    Importing it takes a few hundred milliseconds, which the flush at the end would otherwise
    add to the run's wall time; a run mostly waits on its containers and processes, so the
    import overlaps with that wait. The flush's own import then finds the modules loaded.
    """
    global _preloaded
    with _preloading:
        if _preloaded:
            return
        _preloaded = True

    def load() -> None:
        from madengine.tracing.sdk import sdk_available

        sdk_available()

    threading.Thread(target=load, name="madengine-otlp-preload", daemon=True).start()


class _NullSpan:
    """The span of a disabled tracer: every method does nothing."""

    __slots__ = ()
    recording = False
    name = trace_id = span_id = parent_id = status_message = thread_name = category = ""
    status = STATUS_UNSET
    start_ns = end_ns = duration_ns = None
    thread_id = 0

    @property
    def attributes(self) -> dict[str, Any]:
        return {}

    @property
    def events(self) -> list:
        return []

    def set_attribute(self, key: str, value: Any) -> None:
        pass

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        pass

    def add_event(self, name: str, attributes: Mapping[str, Any] | None = None,
                  timestamp_ns: int | None = None) -> None:
        pass

    def set_error(self, message: str = "") -> None:
        pass

    def set_ok(self) -> None:
        pass

    def record_exception(self, exc: BaseException) -> None:
        pass

    def end(self, end_ns: int | None = None) -> None:
        pass

    def __enter__(self) -> "_NullSpan":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        return None


NULL_SPAN = _NullSpan()


class NullTracer:
    """The tracer of ``--no-trace``: records nothing, writes nothing, exports nothing."""

    enabled = False
    trace_id = ""  #: the perf.csv ``trace_id`` column stays empty
    remote_parent_id = ""
    sampled = False
    tracestate = ""
    origin_ns = 0

    def now_ns(self) -> int:
        return time.time_ns()

    def epoch_ns_from_monotonic(self, monotonic_ns: int) -> int:
        return monotonic_ns

    def current_span(self) -> None:
        return None

    def start_span(self, name: str, attributes: Mapping[str, Any] | None = None, **_: Any) -> _NullSpan:
        return NULL_SPAN

    def span(self, name: str, attributes: Mapping[str, Any] | None = None, **_: Any) -> _NullSpan:
        return NULL_SPAN

    def add_span(self, name: str, start_ns: int, end_ns: int, attributes: Mapping[str, Any] | None = None,
                 **_: Any) -> _NullSpan:
        return NULL_SPAN

    @contextlib.contextmanager
    def activate(self, span: Any) -> Iterator[Any]:
        yield span

    def bind(self, function: F, parent: Any = None) -> F:
        return function

    def add_event(self, name: str, attributes: Mapping[str, Any] | None = None) -> None:
        pass

    def add_spans(self, spans: Iterable[Any]) -> None:
        pass

    def add_counter(self, name: str, timestamps_ns: Iterable[int], values: Iterable[float], **_: Any) -> None:
        return None

    def add_counter_track(self, track: CounterTrack, parent: Any = None) -> None:
        pass

    def attach_child_trace(self, path: Path) -> None:
        pass

    def traceparent(self, span: Any = None) -> str:
        return ""

    def child_environ(self, span: Any = None) -> dict[str, str]:
        return {}


NULL_TRACER = NullTracer()
