"""Two runs' phase timelines side by side: which phase grew, and by how much (``report trace-diff``).

A run is found by its id under the runs folder (``madengine_runs/<run id>/trace.json``), by its
folder, or by the trace file itself. Spans are rebuilt from trace.json (``span.id`` and
``span.parent_id`` in each complete event's args); each phase span (names.PHASES) counts for the
nearest enclosing ``model`` span, or for ``(run)`` when there is none (context detection).
Model steps are listed per repeat when either run repeated them. ``bench`` and ``scorecard``
traces line up the same way: a model on one backend is one ``model`` span, and its benchmark
phases (names.BENCH_PHASES) count when they are the model's own children (the profiling
session's inner phases are part of ``profile``).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from madengine.core.errors import InputError
from madengine.tracing import chrome
from madengine.tracing.names import ATTR_BACKEND, ATTR_MODEL, ATTR_TAG_CONFIGS, BENCH_PHASES, PHASES, TRACE_FILE, \
    SPAN_BENCH, SPAN_MODEL, SPAN_MODEL_STEP, SPAN_PARSING, SPAN_RUN, SPAN_SCORECARD

RUN_GROUP = "(run)"
TOTAL = "total"
#: the root span of each command: its length is the ``(run)`` total
ROOTS = (SPAN_RUN, SPAN_BENCH, SPAN_SCORECARD)
#: the rows' order: a run's phases with a benchmark's where the model step is (before parsing, recording)
ORDER = (*PHASES[:PHASES.index(SPAN_PARSING)], *BENCH_PHASES, *PHASES[PHASES.index(SPAN_PARSING):])


@dataclasses.dataclass
class LoadedSpan:
    name: str
    span_id: str
    parent_id: str
    start_us: float
    duration_us: float
    args: Mapping[str, Any]


def resolve_trace(run: str, runs_dir: Path, *, label: str) -> Path:
    """The trace.json a RUN argument names: a trace file, a run folder, or a run id under ``runs_dir``."""
    given = Path(run)
    if given.is_file():
        return given
    if given.is_dir():
        if (given / TRACE_FILE).is_file():
            return given / TRACE_FILE
        raise InputError(f"the run folder has no {TRACE_FILE} (was it run with --no-trace?)",
                         path=f"{label} {run}")
    by_id = Path(runs_dir) / run / TRACE_FILE
    if by_id.is_file():
        return by_id
    raise InputError(f"'{run}' is not a trace file, a run folder, or a run id under {runs_dir}", path=label,
                     hint="give a run id (see the run folder names), --runs-dir DIR, or a path to trace.json")


def load_spans(doc: Mapping[str, Any]) -> list[LoadedSpan]:
    """The spans of a trace document (complete events that carry a span id)."""
    spans = []
    for event in doc.get("traceEvents", []):
        if not isinstance(event, dict) or event.get("ph") != "X":
            continue
        args = event.get("args")
        if not isinstance(args, dict) or not isinstance(args.get(chrome.ARG_SPAN_ID), str):
            continue
        start, duration = event.get("ts"), event.get("dur")
        if not _finite_number(start) or not _finite_number(duration):
            continue  # not a span's time (JSON's Infinity and NaN included: no difference can be taken)
        spans.append(LoadedSpan(str(event.get("name", "")), args[chrome.ARG_SPAN_ID],
                                str(args.get(chrome.ARG_PARENT_ID) or ""), float(start), float(duration), args))
    return spans


def _finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def model_label(args: Mapping[str, Any]) -> str:
    """``numpy_matmul [size=64]``; a benchmark's model names its backend: ``mlp (onnxruntime-cpu)``."""
    model = str(args.get(ATTR_MODEL) or "?")
    tags = str(args.get(ATTR_TAG_CONFIGS) or "")
    backend = str(args.get(ATTR_BACKEND) or "")
    return model + (f" [{tags}]" if tags else "") + (f" ({backend})" if backend else "")


def bare_model(label: str) -> str:
    """The model name of a label (without its tag configs and backend)."""
    return label.split(" [", 1)[0].split(" (", 1)[0]


def phase_timelines(spans: Sequence[LoadedSpan]) -> dict[str, dict[str, list[float]]]:
    """``{model label: {phase: [seconds of each span, in start order]}}``; ``total`` is the model span."""
    by_id = {s.span_id: s for s in spans}
    timelines: dict[str, dict[str, list[float]]] = {}

    def owner(span: LoadedSpan) -> str:
        seen = set()
        parent = by_id.get(span.parent_id)
        while parent is not None and parent.span_id not in seen:
            if parent.name == SPAN_MODEL:
                return model_label(parent.args)
            seen.add(parent.span_id)
            parent = by_id.get(parent.parent_id)
        return RUN_GROUP

    for span in sorted(spans, key=lambda s: s.start_us):
        if span.name == SPAN_MODEL:
            timelines.setdefault(model_label(span.args), {}).setdefault(TOTAL, []).append(span.duration_us / 1e6)
        elif span.name in ROOTS:
            timelines.setdefault(RUN_GROUP, {}).setdefault(TOTAL, []).append(span.duration_us / 1e6)
        elif span.name in PHASES or (span.name in BENCH_PHASES and getattr(by_id.get(span.parent_id), "name", "")
                                     == SPAN_MODEL):
            phases = timelines.setdefault(owner(span), {})
            phases.setdefault(span.name, []).append(span.duration_us / 1e6)
    return timelines


@dataclasses.dataclass
class PhaseDiff:
    phase: str
    a_s: float | None  #: seconds in run A (None: the phase did not happen there)
    b_s: float | None

    @property
    def delta_s(self) -> float | None:
        return None if self.a_s is None or self.b_s is None else self.b_s - self.a_s

    @property
    def change(self) -> float | None:
        """Relative change B/A - 1 (None when A is 0 or missing)."""
        return None if self.delta_s is None or not self.a_s else self.delta_s / self.a_s

    def to_json(self) -> dict[str, Any]:
        return {"phase": self.phase, "a_s": self.a_s, "b_s": self.b_s, "delta_s": self.delta_s,
                "change": self.change}


@dataclasses.dataclass
class ModelDiff:
    model: str
    phases: list[PhaseDiff]

    @property
    def grew_most(self) -> PhaseDiff | None:
        """The phase (not the total) that grew by the most seconds, if any grew."""
        grown = [p for p in self.phases if p.phase != TOTAL and (p.delta_s or 0) > 0]
        return max(grown, key=lambda p: p.delta_s or 0, default=None)

    def to_json(self) -> dict[str, Any]:
        grew = self.grew_most
        return {"model": self.model, "phases": [p.to_json() for p in self.phases],
                "grew_most": grew.to_json() if grew else None}


def _rows(a: Mapping[str, list[float]], b: Mapping[str, list[float]]) -> list[PhaseDiff]:
    rows = []
    for phase in (*ORDER, TOTAL):
        left, right = a.get(phase, []), b.get(phase, [])
        if not left and not right:
            continue
        if phase == SPAN_MODEL_STEP and max(len(left), len(right)) > 1:
            for index in range(max(len(left), len(right))):
                rows.append(PhaseDiff(f"{phase} #{index + 1}", _at(left, index), _at(right, index)))
            continue
        rows.append(PhaseDiff(phase, sum(left) if left else None, sum(right) if right else None))
    return rows


def _at(values: Sequence[float], index: int) -> float | None:
    return values[index] if index < len(values) else None


def diff_timelines(a: Mapping[str, Mapping[str, list[float]]], b: Mapping[str, Mapping[str, list[float]]],
                   model: str | None = None) -> list[ModelDiff]:
    """Per model (run order of A, then models only B has), the phases side by side."""
    names = list(dict.fromkeys([*a, *b]))
    if model is not None:
        wanted = [n for n in names if n == model or bare_model(n) == model]
        if not wanted:
            raise InputError(f"model '{model}' is in neither trace", path="MODEL",
                             hint="models: " + (", ".join(n for n in names if n != RUN_GROUP) or "none"))
        names = wanted
    return [ModelDiff(name, _rows(a.get(name, {}), b.get(name, {}))) for name in names]


def load_timelines(path: Path, *, label: str) -> dict[str, dict[str, list[float]]]:
    spans = load_spans(chrome.read_document(path, shown=str(path)))
    if not spans:
        raise InputError("no madengine spans in it (not a trace.json that madengine wrote)", path=f"{label} {path}")
    return phase_timelines(spans)


def trace_diff(run_a: str, run_b: str, model: str | None = None, *,
               runs_dir: Path = Path("madengine_runs")) -> tuple[Path, Path, list[ModelDiff]]:
    """Resolve, load and line up two runs' traces: (trace A, trace B, per-model differences)."""
    path_a = resolve_trace(run_a, runs_dir, label="RUN_A")
    path_b = resolve_trace(run_b, runs_dir, label="RUN_B")
    return path_a, path_b, diff_timelines(load_timelines(path_a, label="RUN_A"),
                                          load_timelines(path_b, label="RUN_B"), model)


def summary_lines(diffs: Iterable[ModelDiff]) -> list[str]:
    """One line per model whose phases grew: the phase that grew most and by how much."""
    lines = []
    for model in diffs:
        grew = model.grew_most
        if grew is None:
            continue
        change = "" if grew.change is None else f" ({grew.change * 100:+.0f}%)"
        lines.append(f"{model.model}: {grew.phase} grew most, {grew.delta_s:+.3f} s{change}")
    return lines
