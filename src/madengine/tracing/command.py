"""A command's trace from start to finish: what ``run``, ``bench`` and ``scorecard`` share.

The tracer starts with the command (continuing ``TRACEPARENT`` when a parent process set it);
trace.json goes to the run folder (``--trace FILE`` elsewhere, ``--no-trace`` nowhere) and is
rewritten after every model, so an interrupted or crashed command still leaves the trace of
what it did; spans are exported over OTLP when the standard ``OTEL_EXPORTER_OTLP_*`` variables
say so. ``settings`` is any object with ``trace`` (bool) and ``trace_file`` (a path or None):
``RunOptions`` and the bench and scorecard requests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Protocol

from madengine.tracing.flush import FlushResult, flush
from madengine.tracing.names import ATTR_RUN_ID, TRACE_FILE
from madengine.tracing.tracer import NullTracer, Tracer

Warn = Callable[[str], None]


class TraceSettings(Protocol):
    trace: bool  #: False with --no-trace
    trace_file: "Path | None"  #: --trace FILE


def start_tracer(settings: TraceSettings, environ: Mapping[str, str], warn: Warn,
                 run_id: str) -> "Tracer | NullTracer":
    return Tracer.from_environ(environ, enabled=settings.trace, resource={ATTR_RUN_ID: run_id}, warn=warn)


def trace_path(settings: TraceSettings, run_dir: Path) -> Path:
    return Path(settings.trace_file) if settings.trace_file else Path(run_dir) / TRACE_FILE


#: a checkpoint exports over OTLP only when this long has passed since the last export: a long
#: command's spans reach the collector as it goes, a short one sends one batch at its end
#: (each export costs a few milliseconds of the command's time)
EXPORT_INTERVAL_S = 10.0


def tracer_checkpoint(tracer: Any, settings: TraceSettings, run_dir: Path, environ: Mapping[str, str],
                      warn: Warn) -> None:
    """trace.json with everything so far (and the new spans exported, every EXPORT_INTERVAL_S)."""
    if tracer.enabled:
        due = tracer.now_ns() - tracer.exported_at_ns >= EXPORT_INTERVAL_S * 1e9
        flush(tracer, trace_path(settings, run_dir), environ=environ, warn=warn, export=due)


def finish_tracer(tracer: Any, settings: TraceSettings, run_dir: Path | None, environ: Mapping[str, str],
                  warn: Warn) -> FlushResult:
    """The last write and export; ``run_dir`` None exports without a file (a command that records nothing)."""
    path = trace_path(settings, run_dir) if run_dir is not None or settings.trace_file else None
    return flush(tracer, path, environ=environ, warn=warn)
