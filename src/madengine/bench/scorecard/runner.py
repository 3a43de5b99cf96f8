"""``madengine scorecard``: every model of a suite on every backend, outputs checked, timings side by side.

Order, so that bad input never costs a run: the suite is read and every backend name checked; each
model named by URL is fetched (data providers) and every model file hashed against its sha256 (a
mismatch or a failed fetch stops *that* model: its cells are ERROR, nothing of it runs); every
model's input shapes are resolved from its declared signature (an unresolved one is bad input,
exit 2). Then, per model: the same seeded inputs for every backend; the reference first
(onnxruntime CPU without graph optimisation, a cell of its own, or onnx's reference evaluator, an
untimed oracle); then each backend, measured by :func:`madengine.bench.backends.measure_backend`
(the harness's loop and statistics) and its outputs checked against the reference's
(:mod:`madengine.bench.correctness`). Each cell becomes one perf.csv row as soon as it exists.

A cell is one backend at one precision (``openvino-cpu`` at f32, the default for every backend;
``openvino-cpu:bf16`` opt-in, by name or ``--precision``); the reference always computes at f32.
A reduced-precision cell is checked with its precision's tolerance
(:func:`madengine.bench.correctness.tolerance_for`). A cell is PASS, MISMATCH (a FAILURE row: a wrong
answer is never a success), INCONCLUSIVE (a SUCCESS row with its figure and a warning: the reference
output is degenerate, ~0, constant, NaN or infinite, so the check cannot tell; the reference cell
itself says so), UNSUPPORTED (a SKIPPED row: an operator the backend lacks, a GPU that is
absent, a backend not installed, a precision the backend or the CPU cannot compute natively) or
ERROR (a FAILURE row). The latency ratio is the cell's p50 over the p50 of onnxruntime CPU without
optimisation (at f32) on the same model.

Trace: a ``madengine.scorecard`` span, a ``model`` span per cell (model, backend, status, figure,
metric, cell status, ratio) with the phases of :func:`measure_backend` (prepare, first_inference,
warmup, inference) and the ``check`` under it; ``--image`` cells have container_start and
model_step instead. trace.json goes to the run folder after each model (docs/tracing.md).
"""

from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path
from typing import Any, Callable

from madengine.bench.backends import CPU_BACKENDS, GPU_BACKENDS, cell_name, split_cell
from madengine.bench.backends.cell import ERROR as CELL_ERROR
from madengine.bench.backends.cell import RAN, run_cell
from madengine.bench.correctness import Tolerance, compare_outputs, degenerate, tolerance_for
from madengine.bench.harness import HarnessInputError
from madengine.bench.harness import precision as numerics
from madengine.bench.harness.engine import sha256_file
from madengine.bench.harness.inputs import generate, resolve_shapes
from madengine.bench.scorecard.card import (BASELINE, DEFAULT_REFERENCE, Cell, ModelCard, ScorecardRequest,
                                            ScorecardSummary)
from madengine.bench.scorecard.cells import ERROR, INCONCLUSIVE, PASS, TIMED, UNSUPPORTED
from madengine.bench.spans import PhaseSpans, model_attributes
from madengine.bench.suite import ModelEntry, chosen_precisions, load_suite
from madengine.core.errors import ExecutionError, InputError
from madengine.core.events import Reporter
from madengine.results import append_records
from madengine.results.spans import describe_span
from madengine.tracing import names
from madengine.tracing.command import finish_tracer, start_tracer, tracer_checkpoint

@dataclasses.dataclass(frozen=True)
class Begun:
    """When a cell began, and how busy the host was then (its row's host_load_start)."""

    monotonic: float
    load: float | None

    @classmethod
    def now(cls, request: ScorecardRequest) -> "Begun":
        return cls(time.monotonic(), request.load())


#: runs one cell: (backend id, model file, feeds, shapes, timed, batch size, key, phase hook, precision)
#: → (run_cell JSON, outputs)
CellRunner = Callable[..., "tuple[dict[str, Any], dict[str, Any]]"]


def run_scorecard(request: ScorecardRequest, reporter: Reporter | None = None) -> ScorecardSummary:
    """Run the scorecard of ``request`` (see the module doc); every cell lands in perf.csv."""
    from madengine.core.ids import new_run_id

    reporter = reporter or Reporter()
    _check_request(request)
    cards = [_card(entry, request) for entry in load_suite(request.suite)]
    run_id = new_run_id()
    summary = ScorecardSummary(run_id=run_id, perf_csv=Path(request.output),
                               run_dir=Path(request.runs_dir) / run_id, image=request.image or "")
    summary.run_dir.mkdir(parents=True, exist_ok=True)
    for card in cards:
        _prepare(card, request, summary.run_dir, reporter)
        _require_modes(card, request)
    runner, close = _cell_runner(request, summary, reporter)
    reporter.message(f"madengine: scorecard {run_id}: {len(cards)} model(s), "
                     f"{sum(len(c.backends) for c in cards)} cell(s)"
                     + (f" in image {request.image}" if request.image else "") + f"; results → {request.output}")
    tracer = start_tracer(request, request.environ, reporter.message, run_id)
    summary.trace_id = tracer.trace_id
    try:
        with tracer.span(names.SPAN_SCORECARD, {names.ATTR_RUN_ID: run_id,
                                                names.ATTR_EXECUTOR: _executor(summary)}):
            for card in cards:
                summary.models.append(card)
                _score(card, request, summary, runner, reporter, tracer)
                tracer_checkpoint(tracer, request, summary.run_dir, request.environ, reporter.message)
    finally:
        close()
        summary.trace = finish_tracer(tracer, request, summary.run_dir, request.environ, reporter.message)
    return summary


def _executor(summary: ScorecardSummary) -> str:
    """perf.csv ``executor`` of the scorecard's rows: docker with --image, else scorecard."""
    return "docker" if summary.image else "scorecard"


# -- checks and preparation, before anything runs ---------------------------------------------------
def _check_request(request: ScorecardRequest) -> None:
    if request.iterations is not None and request.min_time is not None:
        raise InputError("--iterations and --min-time exclude each other", path="--iterations")
    for name, value, low in (("--iterations", request.iterations, 1), ("--warmup", request.warmup, 0),
                             ("--threads", request.threads, 1)):
        if value is not None and value < low:
            raise InputError(f"must be {low} or more, got {value}", path=name)
    if request.min_time is not None and not request.min_time > 0:
        raise InputError(f"must be more than 0 seconds, got {request.min_time}", path="--min-time")
    if request.metric not in ("throughput", "p50"):
        raise InputError(f"unknown metric '{request.metric}'", path="--metric", hint="use throughput or p50")
    for name, value in (("--atol", request.atol), ("--rtol", request.rtol)):
        if value is not None and not 0 <= value < float("inf"):
            raise InputError(f"must be a finite number of 0 or more, got {value}", path=name)
    for name in request.backends or []:
        try:
            backend, _ = split_cell(name)
        except ValueError as exc:
            raise InputError(str(exc), path="--backends") from None
        if backend == "onnx-reference":
            raise InputError("onnx-reference is a correctness oracle, not a timed backend", path="--backends",
                             hint="set 'reference: onnx-reference' on a model of the suite")
    chosen_precisions(request.precisions)


def _card(entry: ModelEntry, request: ScorecardRequest) -> ModelCard:
    reference = entry.reference or DEFAULT_REFERENCE
    chosen = _cells(_chosen_backends(entry, request), chosen_precisions(request.precisions))
    if reference != "onnx-reference":  # the reference is a cell of its own (at f32), first
        chosen = [reference] + [b for b in chosen if b != reference]
    tolerance = Tolerance(atol=entry.tolerance.get("atol", request.atol if request.atol is not None
                                                   else Tolerance.atol),
                          rtol=entry.tolerance.get("rtol", request.rtol if request.rtol is not None
                                                   else Tolerance.rtol))
    return ModelCard(entry=entry, backends=chosen, reference=reference, tolerance=tolerance)


def _chosen_backends(entry: ModelEntry, request: ScorecardRequest) -> list[str]:
    """``--backends`` ∩ the model's own list (by backend); either alone; else the default backends."""
    own = [b for b in entry.backends if split_cell(b)[0] != "onnx-reference"]
    if request.backends and own:
        own_backends = {split_cell(b)[0] for b in own}
        return [b for b in request.backends if split_cell(b)[0] in own_backends]
    return list(request.backends or own or default_backends(request.image))


def _cells(names: list[str], default_precisions: list[str]) -> list[str]:
    """Cell names: a name with a precision of its own is that cell; a bare backend is one cell per
    ``--precision`` (f32 by default). Duplicates dropped, order kept."""
    cells: list[str] = []
    for name in names:
        backend, own = split_cell(name)
        for precision in [own] if own else default_precisions:
            cell = cell_name(backend, precision)
            if cell not in cells:
                cells.append(cell)
    return cells


def default_backends(image: str | None = None) -> list[str]:
    """The CPU backends, and the GPU backends whose GPU this host has (in-process runs only)."""
    if image:
        return list(CPU_BACKENDS)
    from madengine.context.detect import detect_gpus

    nvidia = detect_gpus().vendor == "NVIDIA"
    present = {"onnxruntime-cuda": nvidia, "onnxruntime-tensorrt": nvidia, "openvino-gpu": Path("/dev/dri").is_dir()}
    return list(CPU_BACKENDS) + [b for b in GPU_BACKENDS if present.get(b)]


def _prepare(card: ModelCard, request: ScorecardRequest, run_dir: Path, reporter: Reporter) -> None:
    """Fetch (url), hash and check the sha256, resolve the shapes; a model that fails the first two
    gets ``problem`` (its cells are ERROR), an unresolved shape is bad input."""
    entry = card.entry
    if entry.url:
        from madengine.bench.fetch import fetch_model

        try:
            fetch_model(entry, log_path=run_dir / "fetch.log", environ=request.environ, message=reporter.message)
        except ExecutionError as exc:
            card.problem = f"not fetched: {exc}"
            return
    if not entry.path.is_file():
        raise InputError(f"model file {entry.path} not found", path=entry.source, field=f"model '{entry.name}'")
    card.sha256 = sha256_file(entry.path)
    if entry.sha256 and entry.sha256 != card.sha256:
        card.problem = (f"sha256 mismatch for {entry.path}: expected {entry.sha256}, file has {card.sha256}; "
                        "nothing of this model was run")
        return
    card.shapes, card.batch_size = _shapes(entry)


def _require_modes(card: ModelCard, request: ScorecardRequest) -> None:
    """A cell at a precision its backend has no way to compute this model at, on any machine (ONNX
    Runtime's CPU provider or TVM at bf16: no mode, and not the model's own type), is bad input: exit 2
    naming the cell and what its backend can run. What this machine lacks (a CPU without bf16
    instructions) is an UNSUPPORTED cell instead: a fact about the host, not about the request."""
    from madengine.bench.backends import BackendError, get_backend

    if card.problem:
        return
    for name in card.backends:
        backend, precision = split_cell(name)
        if not precision:
            continue
        try:
            get_backend(backend).check_mode(precision, card.entry.path)
        except BackendError as exc:
            named_by = "--backends" if name in (request.backends or []) else \
                card.entry.source if name in card.entry.backends else "--precision"
            raise InputError(f"cell {name}: {exc.message}", path=named_by, field=f"model '{card.entry.name}'",
                             hint="name the cells that can, e.g. --backends openvino-cpu:bf16") from None


def _shapes(entry: ModelEntry) -> tuple[dict[str, tuple[int, ...]], int]:
    from madengine.bench.harness.inputs import batch_size_of
    from madengine.bench.runner import declared_signature

    signature = declared_signature(entry.path)
    if signature is None:
        raise InputError("the onnx package is needed to read the model's inputs", hint="pip install 'madengine[onnx]'")
    try:
        resolved = resolve_shapes(signature, entry.shapes, entry.axes, entry.batch_size)
        for spec in signature:
            spec.dtype  # noqa: B018 - raises for a type inputs cannot be generated for
    except HarnessInputError as exc:
        raise InputError(exc.message, path=entry.source, field=f"model '{entry.name}' / {exc.field}",
                         hint=exc.hint) from None
    return resolved, batch_size_of(signature, resolved, entry.batch_size)


def _cell_runner(request: ScorecardRequest, summary: ScorecardSummary,
                 reporter: Reporter) -> tuple[CellRunner, Callable[[], None]]:
    options = {"threads": request.threads, "warmup": request.warmup, "iterations": request.iterations,
               "min_time": request.min_time}
    if request.image:
        from madengine.bench.scorecard.container import ContainerCells

        cells = ContainerCells(request.image, summary.run_dir, summary.run_id, options, request.environ)
        return cells.run, cells.close

    def in_process(backend: str, model: Path, feeds: Any, shapes: Any, *, timed: bool, batch_size: int,
                   key: str, phase: Any, precision: str = numerics.DEFAULT) -> tuple[dict[str, Any], dict[str, Any]]:
        return run_cell(backend, model, feeds, shapes, timed=timed, batch_size=batch_size, phase=phase,
                        precision=precision, **options)

    return in_process, lambda: None


# -- one model ----------------------------------------------------------------------------------------
def _score(card: ModelCard, request: ScorecardRequest, summary: ScorecardSummary, runner: CellRunner,
           reporter: Reporter, tracer: Any) -> None:
    entry = card.entry
    if card.problem:
        for backend in card.backends:
            with _cell_span(tracer, card, backend, summary) as span:
                _finish(card, Cell(backend, ERROR, card.problem, is_reference=backend == card.reference), request,
                        summary, reporter, Begun.now(request), tracer, span)
        return
    import onnx  # noqa: F401 - declared_signature needed it already; the feeds need numpy

    from madengine.bench.runner import declared_signature

    feeds = generate(declared_signature(entry.path) or [], card.shapes, request.seed)
    reference_outputs, reference_failure = None, ""
    if card.reference == "onnx-reference":
        reporter.message(f"madengine: {entry.name}: reference outputs from onnx's reference evaluator")
        with _cell_span(tracer, card, "onnx-reference", summary) as span:
            answer, outputs = runner("onnx-reference", entry.path, feeds, card.shapes, timed=False,
                                     batch_size=card.batch_size, key=_key(entry.name, "onnx-reference"),
                                     phase=PhaseSpans(tracer))
            if answer["outcome"] != RAN:
                span.set_error(answer["reason"])
        reference_outputs = outputs if answer["outcome"] == RAN else None
        reference_failure = "" if reference_outputs is not None else answer["reason"]
    baseline: float | None = None
    for name in card.backends:
        with _cell_span(tracer, card, name, summary) as span:
            started = Begun.now(request)
            is_reference = name == card.reference
            if reference_failure or (reference_outputs is None and not is_reference):
                why = reference_failure or "the reference produced no outputs"
                _finish(card, Cell(name, ERROR, f"not checked: the reference {card.reference} failed ({why})"),
                        request, summary, reporter, started, tracer, span)
                continue
            reporter.message(f"madengine: {entry.name} on {name}" + (" (reference)" if is_reference else ""))
            backend, precision = split_cell(name)
            phases = PhaseSpans(tracer)
            answer, outputs = runner(backend, entry.path, feeds, card.shapes, timed=True, batch_size=card.batch_size,
                                     key=_key(entry.name, name), phase=phases, precision=precision or numerics.DEFAULT)
            cell = _judge(name, answer, outputs, reference_outputs, card.tolerance, is_reference, phases)
            if is_reference:
                reference_outputs = outputs if cell.status in TIMED else None
                if reference_outputs is None:
                    reference_failure = cell.reason
            if name == BASELINE and cell.p50_ms:
                baseline = cell.p50_ms
            if baseline and cell.p50_ms:
                cell.ratio = cell.p50_ms / baseline
            _finish(card, cell, request, summary, reporter, started, tracer, span)


def _cell_span(tracer: Any, card: ModelCard, backend: str, summary: ScorecardSummary) -> Any:
    """The ``model`` span of one cell (one model on one backend)."""
    return tracer.span(names.SPAN_MODEL, model_attributes(card.entry.name, backend, _executor(summary)))


def _judge(name: str, answer: dict[str, Any], outputs: dict[str, Any], reference: dict[str, Any] | None,
           model_tolerance: Tolerance, is_reference: bool, phase: Any) -> Cell:
    """The cell's verdict; its outputs are checked with the tolerance of the precision the runtime
    reports it computed in (the model's own at f32)."""
    outcome = answer["outcome"]
    if outcome != RAN:
        status = ERROR if outcome == CELL_ERROR else UNSUPPORTED
        return Cell(name, status, answer.get("reason", ""), answer.get("operator"), is_reference, answer)
    if is_reference:
        cannot_tell = [f"output '{key}': {why}" for key, why in ((k, degenerate(v)) for k, v in outputs.items()) if why]
        if cannot_tell:
            return Cell(name, INCONCLUSIVE, "; ".join(cannot_tell) + ": no backend's answer can be told right or wrong "
                        "against it", None, True, answer)
        return Cell(name, PASS, "reference", None, True, answer)
    tolerance = tolerance_for(answer.get("precision") or answer.get("precision_requested") or numerics.DEFAULT,
                              model_tolerance)
    with phase(names.SPAN_CHECK):
        verdict = compare_outputs(outputs, reference or {}, tolerance)
    return Cell(name, verdict.status, verdict.reason(), None, False, answer, verdict, tolerance=tolerance)


def _finish(card: ModelCard, cell: Cell, request: ScorecardRequest, summary: ScorecardSummary, reporter: Reporter,
            started: Begun, tracer: Any, span: Any) -> None:
    """The cell's row to perf.csv at once; its status, figure and ratio on its span."""
    from madengine.bench.columns import set_host_load
    from madengine.bench.scorecard.records import cell_record

    cell.record = cell_record(card, cell, request, summary, time.monotonic() - started.monotonic)
    set_host_load(cell.record, started.load, request.load())
    describe_span(span, cell.record)
    span.set_attribute(names.ATTR_SCORECARD_STATUS, cell.status)
    if cell.ratio:
        span.set_attribute(names.ATTR_LATENCY_RATIO, cell.ratio)
    with tracer.span(names.SPAN_RECORDING, parent=span):
        append_records(request.output, [cell.record])
    card.cells.append(cell)
    shown = f" p50 {cell.p50_ms:.4g} ms" if cell.p50_ms else ""
    shown += f" ({cell.ratio:.2f}x)" if cell.ratio else ""
    reporter.message(f"madengine: {card.entry.name} × {cell.backend}: {cell.status}{shown}"
                     + (f" ({cell.reason})" if cell.status != PASS else ""))
    for warning in cell.record.warning_list():
        reporter.message(f"madengine: warning: {card.entry.name} × {cell.backend}: {warning}")


def _key(model: str, backend: str) -> str:
    return re.sub(r"[^a-z0-9_.-]+", "_", f"scorecard_{model}_{backend}".lower()).strip("_")


