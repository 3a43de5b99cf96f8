"""``madengine bench``: benchmark ONNX models in-process and record one perf.csv row per result.

Order, so that bad input never costs a benchmark: every model file is found and hashed (and its
sha256 checked), every provider is checked against what the installed onnxruntime offers, every
precision named, and every model's input shapes are resolved from its declared signature; only then
does anything run. Each result is appended to perf.csv as soon as it exists. A model that fails to
load or run gets a FAILURE row and the others still run. Every provider computes at f32 unless
``--precision`` asks otherwise; a precision a provider cannot compute is a SKIPPED row
(``UNSUPPORTED: ...``), never a run at another precision. The precision ONNX Runtime reports
(:func:`madengine.bench.harness.precision.ort_session_precision`) is the row's ``training_precision``.

Trace: a ``madengine.bench`` span, a ``model`` span per model × provider (model, backend, status,
figure, metric) with the harness's phases under it (session_create, first_inference, warmup,
inference; ``profile`` with ORT's per-operator spans under its inference span), written to
trace.json in the run folder after each result (see docs/tracing.md).
"""

from __future__ import annotations

import dataclasses
import json
import platform
import re
import time
from pathlib import Path
from typing import Any

from madengine.bench import cache as prepared_cache
from madengine.bench.columns import bench_columns, headline, performance, set_host_load, set_reported
from madengine.bench.flags import ONNX_FLAGS, TIMING_FLAGS, args_cell, timing_values
from madengine.bench.harness import HarnessError, HarnessInputError, engine
from madengine.bench.harness import precision as numerics
from madengine.bench.harness.errors import PrecisionUnsupported
from madengine.bench.harness.inputs import InputSpec, parse_axes, parse_shapes, resolve_shapes
from madengine.bench.recording import Recording
from madengine.bench.spans import PhaseSpans, add_ort_profile, model_attributes
from madengine.bench.suite import ModelEntry, chosen_precisions, entry_from_path, load_suite
from madengine.core.clock import utc_now
from madengine.core.errors import InputError
from madengine.core.events import Reporter
from madengine.results import PerfRecord, Status, append_records
from madengine.results.spans import describe_span
from madengine.tracing import names
from madengine.tracing.command import finish_tracer, start_tracer, tracer_checkpoint

METRICS = tuple(engine.METRICS)


@dataclasses.dataclass
class BenchRequest(Recording):
    """Everything ``madengine bench`` was asked (the CLI's flags, already typed)."""

    models: list[str] = dataclasses.field(default_factory=list)
    suite: str | None = None
    providers: list[str] = dataclasses.field(default_factory=lambda: ["cpu"])
    batch_size: int | None = None
    shapes: list[str] = dataclasses.field(default_factory=list)  # NAME=d0,d1,... (command-line models)
    axes: list[str] = dataclasses.field(default_factory=list)  # NAME=N (command-line models)
    warmup: int = engine.DEFAULT_WARMUP
    iterations: int | None = None
    min_time: float | None = None
    threads: int | None = None
    seed: int = 0
    profile: bool = False
    metric: str = "throughput"
    use_cache: bool = True
    precisions: list[str] = dataclasses.field(default_factory=lambda: [numerics.DEFAULT])  # --precision


@dataclasses.dataclass
class BenchOutcome:
    """One model on one provider: its perf.csv record and the harness's full result (None on failure)."""

    entry: ModelEntry
    provider: str
    record: PerfRecord
    result: dict[str, Any] | None = None


@dataclasses.dataclass
class BenchSummary:
    run_id: str
    perf_csv: Path
    run_dir: Path
    outcomes: list[BenchOutcome] = dataclasses.field(default_factory=list)
    trace_id: str = ""  #: the trace of the command ("" with --no-trace)
    trace: Any = None  #: how the trace was written (``tracing.FlushResult``)

    @property
    def failed(self) -> list[BenchOutcome]:
        return [o for o in self.outcomes if o.record.status == Status.FAILURE]

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "perf_csv": str(self.perf_csv), "run_dir": str(self.run_dir),
                "trace_id": self.trace_id, "trace": trace_file_text(self.trace),
                "results": [_outcome_json(o) for o in self.outcomes]}


def trace_file_text(flushed: Any) -> str | None:
    """Where the trace.json of a command went (None: not written)."""
    path = getattr(flushed, "path", None)
    return str(path) if path else None


def _outcome_json(outcome: BenchOutcome) -> dict[str, Any]:
    record, result = outcome.record, outcome.result or {}
    out: dict[str, Any] = {
        "model": record.model, "path": str(outcome.entry.path), "provider": outcome.provider,
        "backend": record.backend, "precision": record.training_precision,
        "status": record.status, "reason": record.reason, "performance": record.performance,
        "metric": record.metric, "columns": {k: v for k, v in record.extra.items()},
        "artifacts": record.artifacts,
    }
    for key in ("stats", "warnings", "inputs", "environment", "session_providers", "profile"):
        if key in result:
            out[key] = result[key]
    return out


@dataclasses.dataclass
class _Plan:
    entry: ModelEntry
    provider: str  # the ORT provider name
    sha256: str
    precision: str = numerics.DEFAULT

    @property
    def backend(self) -> str:
        """perf.csv ``backend``: ``onnxruntime-<provider>``, ``:<precision>`` added when not f32."""
        from madengine.bench.backends import cell_name

        return cell_name(f"onnxruntime-{engine.short_provider(self.provider)}", self.precision)


def run_bench(request: BenchRequest, reporter: Reporter | None = None) -> BenchSummary:
    """Benchmark every model of ``request``; every result lands in perf.csv (see the module doc)."""
    from madengine.core.ids import new_run_id

    reporter = reporter or Reporter()
    _check_request(request)
    entries = _entries(request)
    ort = _onnxruntime()
    plans = _plans(entries, request, list(ort.get_available_providers()))
    run_id = new_run_id()
    summary = BenchSummary(run_id=run_id, perf_csv=Path(request.output), run_dir=Path(request.runs_dir) / run_id)
    reporter.message(f"madengine: bench {run_id}: {len(plans)} benchmark(s) on onnxruntime {ort.__version__}; "
                     f"results → {request.output}")
    tracer = start_tracer(request, request.environ, reporter.message, run_id)
    summary.trace_id = tracer.trace_id
    try:
        with tracer.span(names.SPAN_BENCH, {names.ATTR_RUN_ID: run_id, names.ATTR_EXECUTOR: "bench"}):
            for plan in plans:
                _bench_and_record(plan, request, summary, ort.__version__, reporter, tracer)
                tracer_checkpoint(tracer, request, summary.run_dir, request.environ, reporter.message)
    finally:
        summary.trace = finish_tracer(tracer, request, summary.run_dir, request.environ, reporter.message)
    return summary


def _bench_and_record(plan: _Plan, request: BenchRequest, summary: BenchSummary, ort_version: str,
                      reporter: Reporter, tracer: Any) -> None:
    """One benchmark in its ``model`` span; its row goes to perf.csv at once."""
    with tracer.span(names.SPAN_MODEL, model_attributes(plan.entry.name, plan.backend, "bench")) as span:
        outcome = _bench_one(plan, request, summary, ort_version, reporter, tracer)
        describe_span(span, outcome.record)
        with tracer.span(names.SPAN_RECORDING):
            append_records(request.output, [outcome.record])
    summary.outcomes.append(outcome)
    record = outcome.record
    label = plan.backend.removeprefix("onnxruntime-")
    reporter.message(f"madengine: {record.model} [{label}]: {headline(record, (outcome.result or {}).get('stats'))}")
    for warning in [*(outcome.result or {}).get("warnings", []), *record.warning_list()]:
        reporter.message(f"madengine: warning: {record.model} [{label}]: {warning}")


# -- checks before anything runs ------------------------------------------------------------------
def _check_request(request: BenchRequest) -> None:
    if request.iterations is not None and request.min_time is not None:
        raise InputError("--iterations and --min-time exclude each other", path="--iterations")
    if request.metric not in METRICS:
        raise InputError(f"unknown metric '{request.metric}'", path="--metric", hint="use " + " or ".join(METRICS))
    for name, value, low in (("--iterations", request.iterations, 1), ("--warmup", request.warmup, 0),
                             ("--batch-size", request.batch_size, 1), ("--threads", request.threads, 1)):
        if value is not None and value < low:
            raise InputError(f"must be {low} or more, got {value}", path=name)
    if request.min_time is not None and not request.min_time > 0:
        raise InputError(f"must be more than 0 seconds, got {request.min_time}", path="--min-time")
    chosen_precisions(request.precisions)


def _entries(request: BenchRequest) -> list[ModelEntry]:
    try:
        shapes, axes = parse_shapes(request.shapes), parse_axes(request.axes)
    except HarnessInputError as exc:
        raise InputError(exc.message, path=exc.field, hint=exc.hint) from None
    entries = [entry_from_path(path, shapes, axes) for path in request.models]
    if request.suite:
        entries += load_suite(request.suite)
    if not entries:
        raise InputError("no model to benchmark", hint="give MODEL.onnx files and/or --suite FILE")
    return entries


def _onnxruntime() -> Any:
    try:
        return engine.import_onnxruntime()
    except HarnessInputError as exc:
        raise InputError(exc.message, hint=exc.hint) from None


def _plans(entries: list[ModelEntry], request: BenchRequest, available: list[str]) -> list[_Plan]:
    plans = []
    for entry in entries:
        sha256 = _verified_sha256(entry)
        _check_signature(entry, entry.batch_size or request.batch_size)
        for provider in entry.providers or request.providers:
            try:
                full_name = engine.provider_name(provider)
                engine.require_provider(full_name, available)
            except HarnessInputError as exc:
                raise InputError(exc.message, path=entry.source or exc.field,
                                 field=f"model '{entry.name}'" if entry.source else None, hint=exc.hint) from None
            for precision in chosen_precisions(request.precisions):
                _require_mode(entry, full_name, precision)
                plans.append(_Plan(entry, full_name, sha256, precision))
    return plans


def _require_mode(entry: ModelEntry, provider: str, precision: str) -> None:
    """A precision the provider has no way to compute this model at, on any machine, is bad input: exit
    2 naming it and what the provider can run, before anything runs (never a run at another precision)."""
    try:
        numerics.ort_provider_options(provider, precision, entry.path)
    except PrecisionUnsupported as exc:
        raise InputError(f"{precision} on {engine.short_provider(provider)}: {exc.message}", path="--precision",
                         field=f"model '{entry.name}'", hint=exc.hint) from None


def _verified_sha256(entry: ModelEntry) -> str:
    where = {"path": entry.source, "field": f"model '{entry.name}'"} if entry.source else {"path": str(entry.path)}
    if not entry.path.is_file():
        raise InputError(f"model file {entry.path} not found" if entry.source else "model file not found", **where)
    actual = engine.sha256_file(entry.path)
    if entry.sha256 and entry.sha256 != actual:
        raise InputError(f"sha256 mismatch for {entry.path}: expected {entry.sha256}, file has {actual}",
                         hint="the file changed or the list is out of date; nothing was run", **where)
    return actual


def declared_signature(path: Path) -> list[InputSpec] | None:
    """The model's inputs as declared in the file (None when the onnx package is not installed)."""
    try:
        import onnx
    except ImportError:
        return None
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # onnx raises DecodeError, ValueError, ... for a file that is not a model
        raise InputError(f"not a readable ONNX model ({' '.join(str(exc).split())[:200]})", path=str(path)) from None
    initializers = {init.name for init in model.graph.initializer}
    specs = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        if not value.type.HasField("tensor_type"):
            specs.append(InputSpec(value.name, None, f"({value.type.WhichOneof('value')})"))
            continue
        tensor = value.type.tensor_type
        type_name = onnx.TensorProto.DataType.Name(tensor.elem_type).lower()
        dims = None
        if tensor.HasField("shape"):
            dims = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value >= 0
                         else (d.dim_param or None) for d in tensor.shape.dim)
        specs.append(InputSpec(value.name, dims, f"tensor({type_name})"))
    return specs


def _check_signature(entry: ModelEntry, batch_size: int | None) -> None:
    """Resolve the input shapes now, so an unresolved dimension stops the run before it starts."""
    signature = declared_signature(entry.path)
    if signature is None:
        return
    try:
        resolve_shapes(signature, entry.shapes, entry.axes, batch_size)
        for spec in signature:
            spec.dtype  # noqa: B018 - raises for a type inputs cannot be generated for
    except HarnessInputError as exc:
        raise InputError(exc.message, path=entry.source or str(entry.path),
                         field=" / ".join(p for p in (f"model '{entry.name}'" if entry.source else "", exc.field) if p),
                         hint=exc.hint) from None


# -- one benchmark --------------------------------------------------------------------------------
def _bench_one(plan: _Plan, request: BenchRequest, summary: BenchSummary, ort_version: str,
               reporter: Reporter, tracer: Any) -> BenchOutcome:
    entry, short = plan.entry, engine.short_provider(plan.provider)
    artifacts = unused_folder(summary.run_dir / folder_name(entry.name, plan.backend.removeprefix("onnxruntime-")))
    started_at = utc_now()
    started = time.monotonic()
    options = engine.BenchOptions(
        provider=plan.provider, threads=request.threads, warmup=request.warmup, iterations=request.iterations,
        min_time=request.min_time, seed=request.seed, batch_size=entry.batch_size or request.batch_size,
        shapes=entry.shapes, axes=entry.axes, profile=request.profile, artifacts_dir=str(artifacts),
        precision=plan.precision)
    reporter.message(f"madengine: benchmarking {entry.name} on {plan.backend.removeprefix('onnxruntime-')}")
    cpu = engine.cpu_model()
    prepared = prepared_cache.prepare(entry.path, plan.sha256, plan.provider, ort_version, cpu, platform.machine(),
                                      request.environ, request.use_cache, precision=plan.precision)
    record = _base_record(entry, plan, request, summary.run_id, started_at, tracer.trace_id)
    phases = PhaseSpans(tracer)
    load_start = request.load()
    try:
        result, prepared = _run_prepared(entry, options, prepared, phases)
    except HarnessInputError as exc:
        raise InputError(exc.message, path=entry.source or str(entry.path), field=exc.field, hint=exc.hint) from None
    except HarnessError as exc:  # PrecisionUnsupported: a SKIPPED row (the scorecard's UNSUPPORTED)
        unsupported = isinstance(exc, PrecisionUnsupported)
        record.status = Status.SKIPPED if unsupported else Status.FAILURE
        record.reason = f"UNSUPPORTED: {exc}" if unsupported else str(exc)
        record.test_duration = time.monotonic() - started
        set_host_load(record, load_start, request.load())
        return BenchOutcome(entry, short, record, None)
    set_host_load(record, load_start, request.load())
    add_ort_profile(tracer, result, phases)
    result["model_sha256"] = plan.sha256
    result["prepared_cache"] = prepared.status
    stats_file = artifacts / "bench_result.json"
    stats_file.write_text(json.dumps(result, indent=1), encoding="utf-8")
    record.status = Status.SUCCESS
    set_reported(record, result.get("precision", ""), result.get("environment", {}))
    record.performance, record.metric = performance(result, request.metric)
    record.test_duration = time.monotonic() - started
    record.artifacts = [str(stats_file), *result.get("profile_files", [])]
    record.context = {"provider": short, "ort_version": ort_version, "cpu_model": cpu,
                      "threads": request.threads or "auto", "metric": request.metric}
    record.extra = bench_columns(result, model_sha256=plan.sha256, cache=prepared.status)
    return BenchOutcome(entry, short, record, result)


def _run_prepared(entry: ModelEntry, options: engine.BenchOptions, prepared: prepared_cache.Prepared,
                  phase: engine.Phase = engine.no_phase) -> tuple[dict[str, Any], prepared_cache.Prepared]:
    """Benchmark the prepared form; a cached copy that will not load (or cannot be saved) is
    dropped and the original file benchmarked instead, so the cache can never fail a run."""
    try:
        result = engine.benchmark(str(prepared.path), _with_prepared(options, prepared), phase)
    except PrecisionUnsupported:  # nothing was created: the cached copy (if any) is fine
        raise
    except HarnessInputError:
        prepared_cache.discard(prepared)
        raise
    except HarnessError:
        if prepared.status not in ("hit", "miss"):
            raise
        prepared_cache.discard(prepared)
        prepared = prepared_cache.Prepared(path=entry.path, status="off")
        result = engine.benchmark(str(entry.path), _with_prepared(options, prepared), phase)
    prepared_cache.commit(prepared)
    return result, prepared


def _with_prepared(options: engine.BenchOptions, prepared: prepared_cache.Prepared) -> engine.BenchOptions:
    return dataclasses.replace(options, preoptimized=prepared.preoptimized,
                               optimized_output=str(prepared.optimized_output) if prepared.optimized_output else None,
                               provider_options=dict(prepared.provider_options))


def _base_record(entry: ModelEntry, plan: _Plan, request: BenchRequest, run_id: str, started_at: str,
                 trace_id: str) -> PerfRecord:
    from madengine.core.version import __version__
    from madengine.core.ids import machine_name

    vendor = engine.GPU_VENDORS.get(plan.provider, "CPU")
    return PerfRecord(
        model=entry.name, status=Status.FAILURE, n_gpus="0" if vendor == "CPU" else "1",
        args=_args_text(entry, plan, request), tags=entry.set, machine_name=machine_name(),
        gpu_architecture=gpu_architecture(vendor), pipeline=request.environ.get("pipeline", ""),
        build_number=request.environ.get("BUILD_NUMBER", "0"), run_id=run_id, trace_id=trace_id, executor="bench",
        started_at=started_at, gpu_vendor=vendor, madengine_version=__version__,
        command_line=request.command_line, backend=plan.backend)  # part of the result identity


def gpu_architecture(vendor: str) -> str:
    """perf.csv ``gpu_architecture`` of a result on ``vendor``: the machine type for CPU, else the
    detected GPU architecture."""
    if vendor == "CPU":
        return platform.machine()
    from madengine.context.detect import detect_gpus

    gpus = detect_gpus()
    return gpus.architecture if gpus.vendor == vendor else ""


def _args_text(entry: ModelEntry, plan: _Plan, request: BenchRequest) -> str:
    """The settings that define the measured workload, as one perf.csv ``args`` cell."""
    return args_cell((*ONNX_FLAGS, *TIMING_FLAGS), {
        "provider": engine.short_provider(plan.provider),
        "precision": None if plan.precision == numerics.DEFAULT else plan.precision,
        "batch_size": entry.batch_size or request.batch_size,
        "shape": [f"{name}={','.join(str(d) for d in dims)}" for name, dims in entry.shapes.items()],
        "axes": [f"{name}={size}" for name, size in entry.axes.items()],
        **timing_values(request.warmup, request.iterations, request.min_time, request.threads), "seed": request.seed})


def unused_folder(path: Path) -> Path:
    """``path``, or ``path_2``, ``path_3``... when a model is benchmarked twice in one run."""
    candidate, number = path, 1
    while candidate.exists():
        number += 1
        candidate = path.with_name(f"{path.name}_{number}")
    candidate.mkdir(parents=True)
    return candidate


def folder_name(name: str, provider: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", f"bench_{name}_{provider}").strip("_")
