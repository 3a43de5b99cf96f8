"""Trace spans of benchmarks: the harness's phases as spans, ORT's per-operator profile under them.

The portable harness and backends know nothing of madengine's tracing: they call a ``phase`` hook
around each phase (:data:`madengine.bench.harness.engine.Phase`). :class:`PhaseSpans` is that
hook for a tracer: each phase becomes a span, a child of the span current when it starts (the
model × backend's ``model`` span, or the ``profile`` span), so the tree follows the harness's
own nesting. With ``--no-trace`` the tracer is the NULL_TRACER and every span costs nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from madengine.tracing import names


class PhaseSpans:
    """The ``phase`` hook of the harness and backends: ``phase(name)`` opens a span of ``tracer``."""

    def __init__(self, tracer: Any) -> None:
        self.tracer = tracer
        self.opened: list[Any] = []

    def __call__(self, name: str) -> Any:
        span = self.tracer.span(name)
        self.opened.append(span)
        return span

    def last(self, name: str) -> Any:
        """The span of the last phase called ``name`` (None when there was none)."""
        return next((span for span in reversed(self.opened) if span.name == name), None)


def model_attributes(model: str, backend: str, executor: str) -> dict[str, str]:
    """Attributes of the ``model`` span of one model on one backend (the result adds the rest)."""
    return {names.ATTR_MODEL: model, names.ATTR_BACKEND: backend, names.ATTR_EXECUTOR: executor}


def add_ort_profile(tracer: Any, result: dict[str, Any], phases: PhaseSpans) -> int:
    """ORT's per-operator events of ``bench --profile`` as children of the profiled ``inference`` span.

    The profiling session runs last, so its inference span is the last one; its warm-up runs are
    left out as in the operator table. Returns the number of spans added (0 without a profile).
    """
    from madengine.tracing import convert

    inference = phases.last(names.SPAN_INFERENCE)
    profile_file = next((f for f in result.get("profile_files") or [] if Path(f).name == "ort_profile.json"), None)
    if inference is None or profile_file is None or not tracer.enabled:
        return 0
    inference.set_attribute(names.ATTR_PROFILED, True)
    started = result.get("profile_start_ns")
    spans = convert.ort_profile_spans(Path(profile_file), inference,
                                      start_ns=convert.ort_start_ns(tracer, started) if started else None,
                                      skip_runs=int(result.get("profile_warmup") or 0))
    tracer.add_spans(spans)
    return len(spans)
