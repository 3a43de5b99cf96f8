"""A command's trace: started with the command, written after every model and at the end.

trace.json goes to the run folder (``--trace FILE`` elsewhere, ``--no-trace`` nowhere); spans are
exported over OTLP when the standard ``OTEL_EXPORTER_OTLP_*`` variables say so. Writing after
every model means an interrupted or crashed run still leaves the trace of what it did.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from madengine.core.events import Reporter
from madengine.core.host import Host
from madengine.execution import RunOptions
from madengine.tracing import TRACE_FILE, FlushResult, Tracer, flush, names


def start_tracer(options: RunOptions, host: Host, reporter: Reporter, run_id: str) -> Any:
    return Tracer.from_environ(host.environ, enabled=options.trace, resource={names.ATTR_RUN_ID: run_id},
                               warn=reporter.message)


def trace_path(options: RunOptions, run_dir: Path) -> Path:
    return Path(options.trace_file) if options.trace_file else Path(run_dir) / TRACE_FILE


def tracer_checkpoint(tracer: Any, options: RunOptions, run_dir: Path, host: Host, reporter: Reporter) -> None:
    """trace.json with everything so far (and the new spans exported)."""
    if tracer.enabled:
        flush(tracer, trace_path(options, run_dir), environ=host.environ, warn=reporter.message)


def finish_tracer(tracer: Any, options: RunOptions, run_dir: Path, host: Host, reporter: Reporter) -> FlushResult:
    return flush(tracer, trace_path(options, run_dir), environ=host.environ, warn=reporter.message)
