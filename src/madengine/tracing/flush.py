"""Writing a tracer out: trace.json always (atomically), OTLP when the environment asks for it.

``flush`` may be called more than once (after each model, and at the end): trace.json is
rewritten with everything so far, and each finished span is exported once. Nothing here raises
for the trace's sake: a file that cannot be written, a child trace that cannot be read, a
collector that is down each become one warning line, given to ``warn`` (the CLI prints it on
stderr) and kept in the result.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Mapping, NamedTuple

from madengine.tracing.tracer import NullTracer, Tracer, export_requested


class FlushResult(NamedTuple):
    path: Path | None  #: the trace.json written (None when tracing is off or it could not be written)
    spans: int  #: spans in it
    exported: int  #: spans the OTLP collector accepted in this flush
    warnings: list[str]  #: the warning lines given (also to ``warn``)


def flush(tracer: "Tracer | NullTracer", path: Path | None, *, environ: Mapping[str, str],
          warn: Callable[[str], None] | None = None, export: bool = True) -> FlushResult:
    """Write ``path`` (trace.json) and export new spans over OTLP when ``OTEL_EXPORTER_OTLP_*ENDPOINT`` is set.

    ``path`` None skips the file (a process whose parent collects its spans some other way).
    Child traces attached with :meth:`Tracer.attach_child_trace` are merged into the file.
    """
    warnings: list[str] = []

    if not tracer.enabled or not isinstance(tracer, Tracer):
        return FlushResult(None, 0, 0, warnings)

    def say(text: str) -> None:
        line = text if text.startswith("madengine:") else f"madengine: {text}"
        if line in tracer.warned:
            return
        tracer.warned.add(line)
        warnings.append(line)
        if warn is not None:
            warn(line)
    snapshot = tracer.snapshot()
    written, exported = None, 0
    try:
        written = _write_file(tracer, snapshot, path, say) if path is not None else None
        exported = _export(tracer, snapshot, environ, say, written) if export else 0
    except Exception as exc:  # a bug in tracing must not cost the run its results; the tests see the warning
        say(f"trace not completed (internal error, please report it): {type(exc).__name__}: {exc}")
    return FlushResult(written, len(snapshot.finished) + len(snapshot.unfinished), exported, warnings)


def _write_file(tracer: Tracer, snapshot, path: Path, say: Callable[[str], None]) -> Path | None:
    from madengine.core.errors import InputError
    from madengine.tracing import chrome  # JSON writing only when a trace is written

    doc = chrome.document(snapshot, now_ns=tracer.now_ns(), file_id=tracer.file_id)
    children = []
    for child in snapshot.child_traces:
        try:
            children.append(chrome.read_document(child))
        except InputError as exc:
            say(f"trace of a child process not merged: {exc}")
    if children:
        chrome.merge_documents(doc, children)
    try:
        return chrome.write_document(Path(path), doc)
    except OSError as exc:
        say(f"cannot write the trace file {path}: {exc.strerror or exc}")
        return None


def _export(tracer: Tracer, snapshot, environ: Mapping[str, str], say: Callable[[str], None],
            written: Path | None) -> int:
    if not export_requested(environ):
        return 0  # the common case costs no import
    from madengine.tracing import otlp  # urllib and the SDK only when a flush may export

    try:
        settings = otlp.settings_from_environ(environ)
    except otlp.OtlpSettingsError as exc:
        say(f"no OTLP export: {exc}")
        return 0
    if settings is None or not tracer.sampled or tracer.export_failed:  # an unsampled parent asks us not to send
        return 0
    where = f"; the trace is in {written}" if written else ""

    def failed(text: str) -> None:
        tracer.export_failed = True  # one warning, and no second wait on a collector that is down
        say(text + where)

    return otlp.export(tracer.take_unexported(), snapshot, settings, counters=snapshot.counters, warn=failed)
