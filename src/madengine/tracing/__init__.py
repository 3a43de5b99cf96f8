"""Tracing of every run: spans in memory, a Perfetto-compatible trace.json, OTLP export when asked.

Layer: imports only :mod:`madengine.core`; OpenTelemetry is imported inside the OTLP export, and
only when ``OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT`` is set. See docs/tracing.md.

The run path, in short::

    from madengine import tracing
    from madengine.tracing import names

    tracer = tracing.Tracer.from_environ(env.environ, enabled=not args.no_trace,
                                         resource={names.ATTR_RUN_ID: run_id}, warn=env.message)
    with tracer.span(names.SPAN_RUN, {names.ATTR_EXECUTOR: "docker"}):
        with tracer.span(names.SPAN_MODEL, {names.ATTR_MODEL: "numpy_matmul"}) as model:
            ...
            model.set_attribute(names.ATTR_STATUS, "SUCCESS")
    tracing.flush(tracer, run_dir / "trace.json", environ=env.environ, warn=env.message)
    row["trace_id"] = tracer.trace_id    # "" with --no-trace
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from madengine.tracing.flush import FlushResult, flush
from madengine.tracing.names import TRACE_FILE
from madengine.tracing.propagation import TraceParent, format_traceparent, parse_traceparent
from madengine.tracing.tracer import CURRENT, NULL_SPAN, NULL_TRACER, CounterTrack, NullTracer, Span, Tracer

__all__ = ["CURRENT", "NULL_SPAN", "NULL_TRACER", "TRACE_FILE", "CounterTrack", "FlushResult", "NullTracer", "Span",
           "TraceParent", "Tracer", "flush", "format_traceparent", "merge_trace_files", "parse_traceparent"]


def merge_trace_files(target: Path, children: Iterable[Path]):
    """Merge child processes' trace.json files into ``target`` (:func:`madengine.tracing.chrome.merge_trace_files`)."""
    from madengine.tracing.chrome import merge_trace_files as merge

    return merge(target, children)
