"""``madengine bench SCRIPT.py`` and the Python API: analyse, build, benchmark, check, record.

Checks first (exit 2 before any script runs): torch and onnxruntime import, the provider is
offered, every script exists, every flag parses. Then, script by script:

1. **Analysis** (:mod:`.analysis`): the script runs under the hook; its labels are read.
   ``--analyze-only`` stops here.
2. **Selection**: every model found, or those named by ``SCRIPT.py::HASH``.
3. **Build** (:mod:`.export`, :mod:`madengine.bench.cache.builds`): from the cache when up to
   date, else exported, optimised, converted. ``--build-only`` stops here.
4. **Benchmark**: ``torch-eager`` (the module itself) and ONNX Runtime on ``--provider`` (graph
   optimisation ALL, like ``madengine bench``), both through
   :func:`madengine.bench.backends.measure_backend`, the harness's loop and statistics, on the
   same inputs: those of the model's first observed call.
5. **Check**: ORT's outputs against eager's (:mod:`madengine.bench.correctness`); a MISMATCH
   makes the ORT row a FAILURE; an INCONCLUSIVE check (a degenerate eager output) a warning on it.

Rows: one per model and backend, appended to perf.csv as soon as they exist. ``model`` is
``<script stem>::<hash>`` (the selection syntax), ``backend`` ``torch-eager`` or
``onnxruntime-<provider>``; the labels are the ``tags``. A model whose calls all raised, or
whose export failed, gets a FAILURE row with the message and the others go on; a script that
raised before any model ran, or in which no model was found, gets a FAILURE row named
``<script stem>``. Any FAILURE makes the command exit 1.

Trace: a ``madengine.bench`` span, a ``script`` span per script (``analysis``, then per model its
``onnx_build`` and one ``model`` span per backend with the phases of
:func:`madengine.bench.backends.measure_backend` and the ``check``), in the run folder's trace.json
(an analysis, ``--analyze-only``, writes one only to ``--trace FILE``; its spans are exported all the same).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from pathlib import Path
from typing import Any, Iterator

from madengine.bench.cache import builds as build_cache
from madengine.bench.cache.root import cache_root
from madengine.bench.columns import (bench_columns, headline, performance, set_column, set_host_load, set_reported,
                                     significant)
from madengine.bench.correctness import MISMATCH
from madengine.bench.flags import PROVIDER, SCRIPT_FLAGS, TIMING_FLAGS, args_cell, timing_values
from madengine.bench.harness import engine
from madengine.bench.pytorch import parsing
from madengine.bench.pytorch.results import BackendResult, BuildInfo, ModelResult, ScriptBenchSummary, ScriptResult
from madengine.bench.recording import Recording
from madengine.bench.runner import folder_name, gpu_architecture, unused_folder
from madengine.bench.spans import PhaseSpans, model_attributes
from madengine.core.clock import utc_now
from madengine.core.errors import InputError
from madengine.core.events import Reporter
from madengine.results import PerfRecord, Status, append_records
from madengine.results.record import Provenance, RecordFactory
from madengine.results.spans import describe_span
from madengine.tracing import names
from madengine.tracing.command import finish_tracer, start_tracer, tracer_checkpoint

TORCH_HINT = "pip install 'madengine[torch]' (torch, onnxscript, transformers)"
EAGER = "torch-eager"
#: eager vs ONNX Runtime: different kernels (fused, reordered) round differently
FP32_TOLERANCE = (1e-3, 1e-3)
FP16_TOLERANCE = (2e-2, 2e-2)


@dataclasses.dataclass
class ScriptRequest(Recording):
    """Everything ``madengine bench SCRIPT.py ...`` (or the API) was asked, typed."""

    scripts: list[str] = dataclasses.field(default_factory=list)  # SCRIPT.py or SCRIPT.py::HASH1,HASH2
    all_scripts: bool = False
    search_dir: str | None = None
    labels: list[str] = dataclasses.field(default_factory=list)  # KEY::VALUE filters
    script_args: str = ""
    max_depth: int = 0
    analyze_only: bool = False
    build_only: bool = False
    rebuild: str = "if_needed"
    cache_dir: str | None = None
    opset: int = 18
    fp16: bool = False
    provider: str = "cpu"
    warmup: int = engine.DEFAULT_WARMUP
    iterations: int | None = None
    min_time: float | None = None
    threads: int | None = None
    metric: str = "throughput"
    atol: float | None = None
    rtol: float | None = None


@dataclasses.dataclass
class _Context:
    """What one command shares between its scripts and models."""

    request: ScriptRequest
    reporter: Reporter
    summary: ScriptBenchSummary
    provider: str  # the ORT provider's full name
    settings: Any  # export.ExportSettings
    versions: dict[str, str]
    tolerance: Any  # correctness.Tolerance
    script_args: list[str]
    records: RecordFactory  # every row's provenance (run id, machine, command line, trace id...)
    tracer: Any  # the command's tracer (NULL_TRACER with --no-trace)


# -- entry points ----------------------------------------------------------------------------------
def run_scripts(request: ScriptRequest, reporter: Reporter | None = None) -> ScriptBenchSummary:
    """Analyse, build and benchmark every script of ``request`` (see the module doc)."""
    reporter = reporter or Reporter()
    context = _start(request, reporter)
    with _traced(context):
        for spec, labels in _scripts(request, reporter):
            with context.tracer.span(names.SPAN_SCRIPT, {names.ATTR_SCRIPT: str(spec.path)}) as span:
                script = _run_script(spec, labels, context)
                if not script.ok:
                    span.set_error(script.error or "; ".join(r.reason for r in script.failures) or "a model failed")
            context.summary.scripts.append(script)
            _checkpoint(context)
    return context.summary


def run_model(model: Any, args: tuple, kwargs: dict, name: str, request: ScriptRequest,
              reporter: Reporter | None = None) -> tuple[ScriptBenchSummary, ModelResult]:
    """Build and benchmark one module on one call (``madengine.benchmark_model``)."""
    from madengine.bench.pytorch.analysis import analyze_call

    reporter = reporter or Reporter()
    context = _start(request, reporter)
    with _traced(context):
        with context.tracer.span(names.SPAN_ANALYSIS):
            analysis = analyze_call(model, args, kwargs)
        if not analysis.found:
            raise InputError(f"calling the model failed: {analysis.error}" if analysis.error
                             else "the model was not called as an nn.Module", path="model")
        script = ScriptResult(path=Path(name), found=analysis.models, run_time_s=analysis.run_time_s)
        context.summary.scripts.append(script)
        result = _run_found(analysis.found[0], name, {}, context, source=name)
        script.models.append(result)
    return context.summary, result


@contextlib.contextmanager
def _traced(context: _Context) -> Iterator[None]:
    """The command's ``madengine.bench`` span; the trace is written (and exported) at the end."""
    summary, request = context.summary, context.request
    try:
        with context.tracer.span(names.SPAN_BENCH, {names.ATTR_RUN_ID: summary.run_id,
                                                    names.ATTR_EXECUTOR: "bench"}):
            yield
    finally:
        summary.trace = finish_tracer(context.tracer, request, _trace_dir(context), request.environ,
                                      context.reporter.message)


def _trace_dir(context: _Context) -> Path | None:
    """The run folder, where trace.json goes; None for an analysis, which writes no file."""
    return None if context.request.analyze_only else context.summary.run_dir


def _checkpoint(context: _Context) -> None:
    """trace.json after each script (an analysis writes it once, at the end, and only to --trace FILE)."""
    if not context.request.analyze_only:
        tracer_checkpoint(context.tracer, context.request, context.summary.run_dir, context.request.environ,
                          context.reporter.message)


# -- checks before anything runs ------------------------------------------------------------------
def _start(request: ScriptRequest, reporter: Reporter) -> _Context:
    from madengine.bench.correctness import Tolerance
    from madengine.bench.pytorch import export
    from madengine.core.ids import machine_name, new_run_id

    _check(request)
    script_args = parsing.parse_script_args(request.script_args)
    request = dataclasses.replace(request, rebuild=parsing.parse_rebuild(request.rebuild))  # the caller's stays
    _require_torch()
    ort = _require_onnxruntime()
    provider = _provider(request.provider, list(ort.get_available_providers()))
    atol, rtol = FP16_TOLERANCE if request.fp16 else FP32_TOLERANCE
    try:
        tolerance = Tolerance(atol if request.atol is None else request.atol,
                              rtol if request.rtol is None else request.rtol)
    except ValueError as exc:
        raise InputError(str(exc), path="--atol/--rtol") from None
    run_id = new_run_id()
    root = cache_root(request.environ, request.cache_dir)
    tracer = start_tracer(request, request.environ, reporter.message, run_id)
    summary = ScriptBenchSummary(run_id=run_id, perf_csv=Path(request.output) if request.output else None,
                                 run_dir=Path(request.runs_dir) / run_id, cache_dir=root, trace_id=tracer.trace_id)
    provenance = Provenance.of(run_id=run_id, executor="bench", command_line=request.command_line,
                               environ=request.environ, context={}, machine_name=machine_name(),
                               trace_id=tracer.trace_id)
    return _Context(request, reporter, summary, provider, export.ExportSettings(request.opset, request.fp16, provider),
                    export.versions(), tolerance, script_args, RecordFactory(provenance, utc_now), tracer)


def _check(request: ScriptRequest) -> None:
    if request.iterations is not None and request.min_time is not None:
        raise InputError("--iterations and --min-time exclude each other", path="--iterations")
    if request.metric not in engine.METRICS:
        raise InputError(f"unknown metric '{request.metric}'", path="--metric", hint="use throughput or p50")
    for name, value, low in (("--iterations", request.iterations, 1), ("--warmup", request.warmup, 0),
                             ("--threads", request.threads, 1), ("--max-depth", request.max_depth, 0),
                             ("--opset", request.opset, 7)):
        if value is not None and value < low:
            raise InputError(f"must be {low} or more, got {value}", path=name)
    if request.min_time is not None and not request.min_time > 0:
        raise InputError(f"must be more than 0 seconds, got {request.min_time}", path="--min-time")
    if request.analyze_only and request.build_only:
        raise InputError("--analyze-only and --build-only exclude each other", path="--analyze-only")


def _require_torch() -> None:
    try:
        import torch  # noqa: F401
    except ImportError as exc:
        raise InputError(f"PyTorch is not installed ({exc})", path="torch", hint=TORCH_HINT) from None


def _require_onnxruntime() -> Any:
    try:
        return engine.import_onnxruntime()
    except Exception as exc:  # HarnessInputError with its hint
        raise InputError(str(exc), path="onnxruntime") from None


def _provider(text: str, available: list[str]) -> str:
    from madengine.bench.harness import HarnessInputError

    try:
        full_name = engine.provider_name(text)
        engine.require_provider(full_name, available)
    except HarnessInputError as exc:
        raise InputError(exc.message, path="--provider", hint=exc.hint) from None
    return full_name


def _scripts(request: ScriptRequest, reporter: Reporter) -> list[tuple[parsing.ScriptSpec, dict]]:
    """The scripts to run, with their labels: the named ones, then ``--all``'s, filtered by ``--labels``."""
    wanted = parsing.parse_label_filter(request.labels)
    specs = [parsing.parse_script_spec(text) for text in request.scripts]
    search = Path(request.search_dir or ".")
    if request.search_dir and not search.is_dir():
        raise InputError("folder not found", path=str(search), hint="--search-dir names the folder of the scripts")
    specs = [_located(spec, search if request.search_dir else None) for spec in specs]
    if request.all_scripts:
        if not search.is_dir():
            raise InputError("folder not found", path=str(search))
        specs += [parsing.ScriptSpec(p) for p in sorted(search.glob("*.py")) if not p.name.startswith("_")]
    if not specs:
        raise InputError("no script to benchmark", hint="give SCRIPT.py, or --all --search-dir DIR")
    chosen = []
    for spec in specs:
        labels, problems = parsing.read_script_labels(spec.path)
        for token in problems:
            reporter.message(f"madengine: warning: {spec.path}: '# labels:' token '{token}' is not KEY::VALUE[,VALUE]; "
                             f"ignored")
        if wanted and not parsing.labels_match(labels, wanted):
            reporter.message(f"madengine: {spec.path}: skipped (its labels do not match --labels)")
            continue
        chosen.append((spec, labels))
    if not chosen:
        raise InputError("no script has the asked labels", path="--labels",
                         hint="labels come from a '# labels: key::value' line at the top of a script")
    return chosen


def _located(spec: parsing.ScriptSpec, search: Path | None) -> parsing.ScriptSpec:
    path = spec.path
    if not path.is_file() and search is not None and not path.is_absolute() and (search / path).is_file():
        path = search / path
    if not path.is_file():
        raise InputError("script not found" if not path.exists() else "not a file", path=str(spec.path))
    if path.suffix != ".py":
        raise InputError("not a Python script (.py)", path=str(path))
    return parsing.ScriptSpec(path, spec.hashes)


# -- one script ----------------------------------------------------------------------------------
def _run_script(spec: parsing.ScriptSpec, labels: dict, context: _Context) -> ScriptResult:
    from madengine.bench.pytorch.analysis import analyze_script

    request, reporter = context.request, context.reporter
    reporter.message(f"madengine: {spec.path}: running under the analysis hook"
                     + (f" (--max-depth {request.max_depth})" if request.max_depth else ""))
    with context.tracer.span(names.SPAN_ANALYSIS):
        analysis = analyze_script(spec.path, context.script_args, max_depth=request.max_depth,
                                  keep_inputs=not request.analyze_only)
    script = ScriptResult(path=spec.path, labels=labels, found=analysis.models, error=analysis.error,
                          run_time_s=analysis.run_time_s)
    reporter.message(f"madengine: {spec.path}: {len(analysis.found)} model(s) found in {analysis.run_time_s:.2f} s"
                     + (f"; the script raised: {analysis.error}" if analysis.error else ""))
    stem = spec.path.stem
    for model, reason in _script_failures(spec, analysis):
        script.failures.append(_failure_record(model or stem, reason, labels, context))
    if not request.analyze_only:  # an analysis records nothing in perf.csv
        _append(context, script.failures)
    if request.analyze_only:
        return script
    for found in analysis.found:
        if not spec.hashes or found.info.hash in spec.hashes:
            script.models.append(_run_found(found, stem, labels, context, source=str(spec.path)))
    return script


def _script_failures(spec: parsing.ScriptSpec, analysis: Any) -> list[tuple[str, str]]:
    """Script-level FAILURE rows (model name or "" for the script's stem, reason): no model found,
    a selected hash not found, the script raising outside a model's failing call."""
    stem = spec.path.stem
    if not analysis.found:
        return [("", f"the script raised before any PyTorch model ran: {analysis.error}" if analysis.error
                 else "no PyTorch model (torch.nn.Module with parameters) was called by the script")]
    failures = []
    hashes = [f.info.hash for f in analysis.found]
    missing = [h for h in spec.hashes if h not in hashes]
    if missing:
        failures.append((f"{stem}::{missing[0]}", f"no model with hash {', '.join(missing)} in the script "
                                                  f"(found: {', '.join(hashes)})"))
    in_model = any(f.info.error and f.info.error in analysis.error for f in analysis.found)
    if analysis.error and not in_model:
        failures.append(("", f"the script raised: {analysis.error}"))
    return failures


# -- one model ------------------------------------------------------------------------------------
def _run_found(found: Any, stem: str, labels: dict, context: _Context, *, source: str) -> ModelResult:
    """Build, benchmark and check one model found by the analysis."""
    from madengine.bench.pytorch import export

    info = found.info
    result = ModelResult(info=info, perf_model=f"{stem}::{info.hash}")
    if found.example is None:
        reason = f"no call of the model succeeded: {info.error}" if info.error else "the model was never called"
        result.results.append(_failed(result, EAGER, reason, labels, context))
        return result
    try:
        example = export.prepare_example(found.module, *found.example)
    except Exception as exc:  # the model's own code failing in eval() mode
        result.results.append(_failed(result, EAGER, f"the reference run in eval() mode failed: "
                                      f"{export.one_line(exc)}", labels, context))
        return result
    with context.tracer.span(names.SPAN_ONNX_BUILD, {names.ATTR_MODEL: result.perf_model}) as span:
        result.build = _build(found, stem, example, labels, context, source)
        span.set_attribute(names.ATTR_BUILD_CACHE, result.build.status)
        if not result.build.ok:
            span.set_error(result.build.error)
    ort_backend = _ort_backend_id(context.provider)
    if context.request.build_only:
        if not result.build.ok:
            result.results.append(_failed(result, ort_backend, result.build.error, labels, context))
        return result
    eager = _measure_eager(found, example, result, labels, context)
    result.results.append(eager)
    if result.build.ok:
        result.results.append(_measure_ort(example, result, example.outputs, labels, context))
    else:
        result.results.append(_failed(result, ort_backend, result.build.error, labels, context))
    return result


def _build(found: Any, stem: str, example: Any, labels: dict, context: _Context, source: str) -> BuildInfo:
    from madengine.bench.pytorch import export, hashing
    from madengine.results.perfcsv import locked

    request, reporter, info = context.request, context.reporter, found.info
    root = context.summary.cache_dir
    name = build_cache.build_name(stem, info.hash)
    folder = build_cache.build_folder(root, name)
    key = build_cache.BuildKey(
        model_hash=info.hash, structure_sha256=hashing.sha256_text(found.structure),
        code_sha256=hashing.code_digest(found.module), weights_sha256=hashing.weights_digest(found.module),
        inputs="\n".join(i.text() for i in info.inputs), settings=context.settings.key(),
        script_args=tuple(context.script_args), versions=context.versions)
    with locked(build_cache.lock_path(root, name)):
        existed = folder.is_dir()
        state = build_cache.read_state(folder)
        action, reasons = build_cache.decide(request.rebuild, state, key)
        if not existed:
            reasons = []
        if action in ("use", "use-stale"):
            if action == "use-stale":
                reporter.message(f"madengine: warning: build {name} is stale ({'; '.join(reasons)}); used anyway "
                                 f"(--rebuild never)")
            final = folder / (state.get("files") or {}).get("final", "")
            if final.is_file():
                reporter.message(f"madengine: {name}: up-to-date build in the cache" if action == "use"
                                 else f"madengine: {name}: stale build used (--rebuild never)")
                export.rename_feeds(example, (state.get("onnx") or {}).get("inputs") or list(example.feeds))
                return BuildInfo(name, folder, "hit" if action == "use" else "stale", final, tuple(reasons),
                                 timings=state.get("timings") or {})
            action, reasons = "rebuild", ["its ONNX file is missing"]
        reporter.message(f"madengine: building {name}" + (f" ({'; '.join(reasons)})" if reasons else ""))
        build_cache.reset_folder(folder)
        base_state = {"name": name, "status": "building", "key": key.to_json(), "created_at": utc_now(),
                      "model": {"script": source, "name": info.name, "class": info.model_class,
                                "built_at": info.built_at, "parameters": info.parameters,
                                "parameter_bytes": info.parameter_bytes, "labels": labels,
                                "inputs": [i.to_json() for i in info.inputs]}}
        build_cache.write_state(folder, base_state)
        try:
            exported = export.export(found.module, example, folder, name, context.settings)
        except export.ExportError as exc:
            build_cache.write_state(folder, dict(base_state, status="failed", error=str(exc)))
            reporter.message(f"madengine: build {name} failed: {exc}")
            return BuildInfo(name, folder, "failed", None, tuple(reasons), error=str(exc))
        files = {"base": _relative(exported.base, folder), "optimized": _relative(exported.optimized, folder),
                 "final": _relative(exported.final, folder), "inputs": "inputs.npz", "log": "log_export.txt"}
        if exported.fp16:
            files["fp16"] = _relative(exported.fp16, folder)
        build_cache.write_state(folder, dict(base_state, status="success", files=files, timings=exported.timings,
                                             onnx={"inputs": exported.input_names, "outputs": exported.output_names,
                                                   "leaf_names": example.leaf_names,
                                                   "sha256": engine.sha256_file(exported.final)}))
        return BuildInfo(name, folder, "rebuilt" if existed else "built", exported.final, tuple(reasons),
                         timings=exported.timings)


def _relative(path: Path, folder: Path) -> str:
    return str(Path(path).relative_to(folder))


# -- benchmarks ------------------------------------------------------------------------------------
def _measure_eager(found: Any, example: Any, result: ModelResult, labels: dict, context: _Context) -> BackendResult:
    from madengine.bench.backends.torch_eager import TorchEagerBackend

    backend = TorchEagerBackend(found.module, example.args, example.kwargs, example.leaf_names)
    return _measure(backend, EAGER, None, example, result, labels, context)


def _measure_ort(example: Any, result: ModelResult, reference: dict, labels: dict,
                 context: _Context) -> BackendResult:
    from madengine.bench.backends.onnxruntime import OnnxRuntimeBackend
    from madengine.bench.correctness import compare_outputs

    backend = OnnxRuntimeBackend(engine.short_provider(context.provider), "all")
    measured = _measure(backend, _ort_backend_id(context.provider), result.build.onnx_path, example, result, labels,
                        context, reference=reference, compare=compare_outputs)
    return measured


def _measure(backend: Any, backend_id: str, model_path: Path | None, example: Any, result: ModelResult,
             labels: dict, context: _Context, *, reference: dict | None = None, compare: Any = None) -> BackendResult:
    with context.tracer.span(names.SPAN_MODEL, model_attributes(result.perf_model, backend_id, "bench")) as span:
        return _measured(backend, backend_id, model_path, example, result, labels, context, span,
                         reference=reference, compare=compare)


def _measured(backend: Any, backend_id: str, model_path: Path | None, example: Any, result: ModelResult,
              labels: dict, context: _Context, span: Any, *, reference: dict | None, compare: Any) -> BackendResult:
    from madengine.bench.backends import BackendError, measure_backend

    request, reporter = context.request, context.reporter
    started_at, started = utc_now(), time.monotonic()
    record = _record(result, backend_id, backend.device_vendor, labels, context, started_at)
    shapes = {name: tuple(value.shape) for name, value in example.feeds.items()}
    batch = _batch_size(example)
    reporter.message(f"madengine: benchmarking {result.perf_model} on {backend_id}")
    load_start = request.load()
    try:
        run = measure_backend(backend, model_path or "", example.feeds, shapes, threads=request.threads,
                              warmup=request.warmup, iterations=request.iterations,
                              min_time=request.min_time if request.iterations is None else None, batch_size=batch,
                              phase=PhaseSpans(context.tracer))
    except BackendError as exc:
        record.reason = str(exc)
        record.test_duration = time.monotonic() - started
        set_host_load(record, load_start, request.load())
        return _finish(BackendResult(backend_id, record), result, context, span)
    set_host_load(record, load_start, request.load())
    harness_result = _harness_result(run, backend, context, batch, example, request)
    record.status = Status.SUCCESS
    set_reported(record, run.precision, harness_result["environment"])
    record.performance, record.metric = performance(harness_result, request.metric)
    record.test_duration = time.monotonic() - started
    record.context = {"backend": backend_id, "ort_version": context.versions["onnxruntime"],
                      "torch_version": context.versions["torch"], "cpu_model": engine.cpu_model(),
                      "threads": request.threads or "auto", "metric": request.metric}
    columns = bench_columns(harness_result, model_sha256=_file_sha(model_path), cache="off")
    if backend_id == EAGER:
        columns["ort_provider"] = columns["ort_version"] = ""
    record.extra.update(columns)
    correctness = None
    if compare is not None and reference is not None:
        with context.tracer.span(names.SPAN_CHECK):
            verdict = compare(run.outputs, reference, context.tolerance)
        correctness = verdict.to_json()
        record.extra.update({"correctness": verdict.status, "max_abs_error": significant(verdict.max_abs_error),
                             "max_rel_error": significant(verdict.max_rel_error), "mismatch_output":
                             verdict.output if not verdict.ok else ""})
        if verdict.status == MISMATCH:
            record.status, record.reason = Status.FAILURE, f"MISMATCH vs {EAGER}: {verdict.reason()}"
            record.performance = None
        elif not verdict.ok:  # INCONCLUSIVE: eager's output cannot tell a right answer from a wrong one
            record.add_warnings([f"output check INCONCLUSIVE vs {EAGER}: {verdict.reason()}"])
    record.artifacts = [str(_save_result(context, result, backend_id, harness_result, run, correctness))]
    return _finish(BackendResult(backend_id, record, run.stats, correctness), result, context, span)


def _harness_result(run: Any, backend: Any, context: _Context, batch: int, example: Any,
                    request: ScriptRequest) -> dict[str, Any]:
    """A backend run in the shape of the harness's result, so the perf.csv columns are bench's own."""
    from madengine.bench.backends.cell import environment

    return {"provider": engine.short_provider(context.provider) if backend.id != EAGER else "",
            "environment": {"ort_version": context.versions["onnxruntime"], **environment(backend)},
            "precision": run.precision,
            "threads": request.threads or 0, "batch_size": batch,
            "input_shapes": ";".join(f"{n}={'x'.join(str(d) for d in v.shape)}" for n, v in example.feeds.items()),
            "warmup": request.warmup, "stats": run.stats, "session_create_ms": run.prepare_ms,
            "first_inference_ms": run.first_inference_ms}


def _finish(backend_result: BackendResult, result: ModelResult, context: _Context, span: Any) -> BackendResult:
    """The row to perf.csv; its status and figure on the ``model`` span."""
    record = backend_result.record
    describe_span(span, record)
    with context.tracer.span(names.SPAN_RECORDING):
        _append(context, [record])
    context.reporter.message(f"madengine: {record.model} [{backend_result.backend}]: "
                             f"{headline(record, backend_result.stats)}")
    for warning in record.warning_list():
        context.reporter.message(f"madengine: warning: {record.model} [{backend_result.backend}]: {warning}")
    if result.build is not None and result.build.status != "failed":
        stats = backend_result.stats or {}
        build_cache.record_results(result.build.folder, backend_result.backend, {
            "status": record.status, "p50_ms": significant(stats.get("p50_ms")),
            "mean_ms": significant(stats.get("mean_ms")),
            "samples_per_second": significant(stats.get("median_samples_per_second")),
            "correctness": (backend_result.correctness or {}).get("status", ""), "run_id": record.run_id})
    return backend_result


def _save_result(context: _Context, result: ModelResult, backend_id: str, harness_result: dict, run: Any,
                 correctness: dict | None) -> Path:
    folder = unused_folder(context.summary.run_dir / folder_name(result.perf_model, backend_id))
    path = folder / "bench_result.json"
    data = dict(harness_result, backend=backend_id, model=result.perf_model, latencies_ms=run.latencies_ms,
                warnings=run.warnings, details=run.details, correctness=correctness,
                build=result.build.to_json() if result.build else None)
    path.write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")
    return path


def _batch_size(example: Any) -> int:
    """Dimension 0 of the first input (bench's rule), 1 for a scalar or no input."""
    for value in example.feeds.values():
        return int(value.shape[0]) if getattr(value, "ndim", 0) else 1
    return 1


def _file_sha(path: Path | None) -> str:
    return engine.sha256_file(path) if path else ""


def _ort_backend_id(provider: str) -> str:
    return f"onnxruntime-{engine.short_provider(provider)}"


# -- records ---------------------------------------------------------------------------------------
def _record(result: ModelResult, backend_id: str, vendor: str, labels: dict, context: _Context,
            started_at: str) -> PerfRecord:
    info = result.info
    record = _new_record(result.perf_model, vendor, labels, context, started_at=started_at)
    set_column(record, "backend", backend_id)
    record.extra.update({"script": result.perf_model.split("::")[0], "model_name": info.name,
                         "model_class": info.model_class, "model_hash": info.hash, "parameters": info.parameters,
                         "build_name": result.build.name if result.build else "",
                         "build_cache": result.build.status if result.build else "",
                         "torch_version": context.versions["torch"], "onnx_opset": context.request.opset,
                         "fp16": context.request.fp16})
    return record


def _new_record(model: str, vendor: str, labels: dict, context: _Context, **values: Any) -> PerfRecord:
    """A FAILURE record with the command's provenance, the device's columns, the workload's args and the labels."""
    return context.records.new(model, Status.FAILURE, n_gpus="0" if vendor == "CPU" else "1", gpu_vendor=vendor,
                               gpu_architecture=gpu_architecture(vendor), args=_args_text(context.request, context),
                               tags=parsing.labels_text(labels), **values)


def _failed(result: ModelResult, backend_id: str, reason: str, labels: dict, context: _Context) -> BackendResult:
    with context.tracer.span(names.SPAN_MODEL, model_attributes(result.perf_model, backend_id, "bench")) as span:
        record = _record(result, backend_id, "CPU", labels, context, utc_now())
        record.reason = reason
        return _finish(BackendResult(backend_id, record), result, context, span)


def _failure_record(model: str, reason: str, labels: dict, context: _Context) -> PerfRecord:
    record = _new_record(model, "CPU", labels, context, reason=reason)
    set_column(record, "backend", "")
    context.reporter.message(f"madengine: {model}: FAILURE ({reason})")
    return record


def _args_text(request: ScriptRequest, context: _Context) -> str:
    """The settings that define the measured workload, as one perf.csv ``args`` cell."""
    import shlex

    return args_cell((PROVIDER, *TIMING_FLAGS, *SCRIPT_FLAGS), {
        "provider": engine.short_provider(context.provider),
        **timing_values(request.warmup, request.iterations, request.min_time, request.threads),
        "opset": request.opset, "fp16": request.fp16, "max_depth": request.max_depth,
        "script_args": shlex.join(context.script_args)})


def _append(context: _Context, records: list[PerfRecord]) -> None:
    if context.summary.perf_csv is not None and records:
        append_records(context.summary.perf_csv, records)
