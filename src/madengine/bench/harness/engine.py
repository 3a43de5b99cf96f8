"""Sessions, providers, the timing loop and one model's benchmark.

Method: a session (intra-op threads as asked, one inter-op thread, sequential execution), one
set of generated inputs, ``warmup`` un-timed runs (the first one's time is kept apart as
``first_inference_ms``), then timed runs: a fixed count (``iterations``) or for at least
``min_time`` seconds and ``min_iterations`` runs. Each run is timed alone with
``time.perf_counter_ns`` around ``session.run(None, feeds)``; nothing else happens between the two
clock reads, which is why the harness adds no measurable overhead to a bare loop (see
``benchmarks/onnx_overhead.py``). Profiling, when asked, uses a *separate* session afterwards, so
the profiler's own cost never lands in the timed figures.

Phases: ``benchmark`` and ``measure`` take a ``phase`` hook, ``phase(name)`` → a context manager
around each phase (session creation, first inference, warm-up, the timed loop, profiling); madengine
passes one that opens a trace span, the harness alone (in a container) none. The hook is called
around whole phases, never inside the timed loop.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any, Callable, ContextManager

from . import inputs as model_inputs
from . import precision as precisions
from . import profiling
from .errors import HarnessError, HarnessInputError, ProviderNotInitialised
from .stats import stability_warnings, summarize

DEFAULT_WARMUP = 10
DEFAULT_MIN_TIME = 1.0
DEFAULT_MIN_ITERATIONS = 10
#: the profiling session drops up to this many warm-up runs and profiles up to PROFILE_RUNS runs
PROFILE_WARMUP = 5
PROFILE_RUNS = 50

#: short names → ONNX Runtime execution provider names
PROVIDERS = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
    "rocm": "ROCMExecutionProvider",
    "migraphx": "MIGraphXExecutionProvider",
    "openvino": "OpenVINOExecutionProvider",
    "dml": "DmlExecutionProvider",
    "coreml": "CoreMLExecutionProvider",
    "qnn": "QNNExecutionProvider",
    "dnnl": "DnnlExecutionProvider",
    "azure": "AzureExecutionProvider",
}
ALIASES = {"trt": "tensorrt", "gpu": "cuda"}

#: a provider that cannot run every op falls back to these, in order (when installed)
FALLBACKS = {
    "TensorrtExecutionProvider": ("CUDAExecutionProvider", "CPUExecutionProvider"),
    "MIGraphXExecutionProvider": ("ROCMExecutionProvider", "CPUExecutionProvider"),
}

GPU_VENDORS = {"CUDAExecutionProvider": "NVIDIA", "TensorrtExecutionProvider": "NVIDIA",
               "ROCMExecutionProvider": "AMD", "MIGraphXExecutionProvider": "AMD"}

#: graph optimisation levels by name → the ``onnxruntime.GraphOptimizationLevel`` member
OPTIMIZATION_LEVELS = {"disabled": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC",
                       "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}

#: phase names given to the ``phase`` hook (the span names of madengine.tracing.names)
PHASE_SESSION_CREATE = "session_create"
PHASE_FIRST_INFERENCE = "first_inference"
PHASE_WARMUP = "warmup"
PHASE_INFERENCE = "inference"
PHASE_PROFILE = "profile"

#: ``phase(name)`` → a context manager around one phase of a benchmark
Phase = Callable[[str], ContextManager[Any]]


def no_phase(name: str) -> ContextManager[Any]:
    """The default hook: phases are not observed."""
    return contextlib.nullcontext()


#: perf.csv's ``performance`` for each ``--metric``: both are the median's (see stats.summarize)
METRICS = {"throughput": ("median_samples_per_second", "samples_per_second"), "p50": ("p50_ms", "p50_latency_ms")}


@dataclasses.dataclass
class BenchOptions:
    """How to benchmark one model (every field has the CLI's default)."""

    provider: str = "cpu"
    threads: int | None = None  # intra-op threads; None: ONNX Runtime's default (one per physical core)
    warmup: int = DEFAULT_WARMUP
    iterations: int | None = None
    min_time: float | None = None  # used when iterations is None (DEFAULT_MIN_TIME when both are None)
    min_iterations: int = DEFAULT_MIN_ITERATIONS
    seed: int = 0
    batch_size: int | None = None
    shapes: dict[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)
    axes: dict[str, int] = dataclasses.field(default_factory=dict)
    profile: bool = False
    artifacts_dir: str | None = None  # profile files go here
    preoptimized: bool = False  # the file is an ORT-optimized copy: load it without re-optimizing
    optimized_output: str | None = None  # write the ORT-optimized model here while creating the session
    provider_options: dict[str, str] = dataclasses.field(default_factory=dict)
    optimization: str = "all"  # graph optimisation level (OPTIMIZATION_LEVELS); ignored when preoptimized
    precision: str = precisions.DEFAULT  # what the provider may compute in (harness.precision); f32 unless asked

    def mode(self) -> str:
        return "iterations" if self.iterations is not None else "min_time"

    def effective_min_time(self) -> float:
        return DEFAULT_MIN_TIME if self.min_time is None else self.min_time


@dataclasses.dataclass
class Timing:
    first_inference_ms: float | None
    latencies_ms: list[float]
    wall_s: float


def import_onnxruntime() -> Any:
    try:
        import onnxruntime
    except ImportError as exc:
        raise HarnessInputError(f"onnxruntime cannot be imported ({exc})",
                                hint="pip install onnxruntime (or onnxruntime-gpu), e.g. pip install 'madengine[onnx]'") from None
    return onnxruntime


def short_provider(full_name: str) -> str:
    for short, name in PROVIDERS.items():
        if name == full_name:
            return short
    suffix = "ExecutionProvider"
    return (full_name[: -len(suffix)] if full_name.endswith(suffix) else full_name).lower()


def provider_name(text: str) -> str:
    """``cuda`` / ``CUDA`` / ``CUDAExecutionProvider`` → ``CUDAExecutionProvider``."""
    key = text.strip().lower()
    key = ALIASES.get(key, key)
    if key in PROVIDERS:
        return PROVIDERS[key]
    for name in PROVIDERS.values():
        if name.lower() == key:
            return name
    if key.endswith("executionprovider"):
        return text.strip()
    raise HarnessInputError(f"unknown provider '{text}'", field="--provider",
                            hint="known: " + ", ".join(PROVIDERS))


def require_provider(full_name: str, available: list[str]) -> None:
    """A clear error listing what this onnxruntime offers when it lacks ``full_name``."""
    if full_name not in available:
        raise HarnessInputError(
            f"{short_provider(full_name)} ({full_name}) is not offered by this onnxruntime",
            field="--provider",
            hint="available: " + ", ".join(f"{short_provider(p)}" for p in available)
                 + ("; install onnxruntime-gpu for cuda/tensorrt" if full_name in GPU_VENDORS else ""))


def provider_chain(full_name: str, available: list[str], provider_options: dict[str, str]) -> list[Any]:
    """The providers a session gets: the asked one first (with its options), then its fallbacks."""
    chain: list[Any] = [(full_name, dict(provider_options)) if provider_options else full_name]
    for fallback in FALLBACKS.get(full_name, ("CPUExecutionProvider",)):
        if fallback != full_name and fallback in available:
            chain.append(fallback)
    return chain


def session_options(ort: Any, options: BenchOptions, *, profile_prefix: str | None = None,
                    optimized_output: str | None = None) -> Any:
    so = ort.SessionOptions()
    so.log_severity_level = 3  # errors only: ORT's warnings would interleave with the results
    level = "disabled" if options.preoptimized else options.optimization
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, OPTIMIZATION_LEVELS[level])
    so.intra_op_num_threads = options.threads or 0
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    if optimized_output:
        so.optimized_model_filepath = optimized_output
    if profile_prefix:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    return so


def open_session(model_path: str, options: BenchOptions, *, profile_prefix: str | None = None,
                 optimized_output: str | None = None) -> tuple[Any, float]:
    """An InferenceSession on the asked provider, and how long creating it took (ms)."""
    ort = import_onnxruntime()
    full_name = provider_name(options.provider)
    available = list(ort.get_available_providers())
    require_provider(full_name, available)
    if GPU_VENDORS.get(full_name) == "NVIDIA":
        _preload_cuda_libraries(ort)
    so = session_options(ort, options, profile_prefix=profile_prefix, optimized_output=optimized_output)
    provider_options = {**options.provider_options,
                        **precisions.ort_provider_options(full_name, options.precision, model_path)}
    started = time.perf_counter_ns()
    try:
        # enable_fallback=0: an EP that fails to initialise is an error here, not ORT's silent retry
        # on the next provider (which also prints its notice to stdout, where --json data goes)
        with contextlib.redirect_stdout(sys.stderr):
            session = ort.InferenceSession(model_path, so, enable_fallback=0,
                                           providers=provider_chain(full_name, available, provider_options))
    except Exception as exc:  # ORT raises its own exception types (Fail, InvalidGraph, ...)
        raise HarnessError(f"onnxruntime cannot load {model_path}: {_one_line(exc)}") from None
    created_ms = (time.perf_counter_ns() - started) / 1e6
    used = session.get_providers()
    if not used or used[0] != full_name:
        raise ProviderNotInitialised(f"{full_name} is offered by this onnxruntime but did not initialise "
                           f"(the session would run on {', '.join(used) or 'nothing'})",
                           hint="check the CUDA/cuDNN/TensorRT libraries this onnxruntime build needs")
    return session, created_ms


def _preload_cuda_libraries(ort: Any) -> None:
    """Let onnxruntime-gpu find CUDA/cuDNN from the nvidia-* pip packages beside it (when ORT has it);
    best effort: its notes go to stderr, so stdout stays the command's data."""
    preload = getattr(ort, "preload_dlls", None)
    if preload is None:
        return
    try:
        with contextlib.redirect_stdout(sys.stderr):
            preload()
    except Exception:  # missing libraries surface as the provider failing to initialise, with a hint
        pass


def measure(run_once: Callable[[], Any], *, warmup: int, iterations: int | None = None,
            min_time: float | None = None, min_iterations: int = DEFAULT_MIN_ITERATIONS,
            phase: Phase = no_phase) -> Timing:
    """Warm-up runs, then timed runs of ``run_once()`` (see the module doc).

    ``run_once`` is one inference with its inputs already bound, e.g.
    ``functools.partial(session.run, None, feeds)``; any backend's own call works the same way, so
    every backend is timed by this one loop. ``phase`` is told of the warm-up and the timed loop.
    """
    clock = time.perf_counter_ns
    first_ns = None
    if warmup:
        with phase(PHASE_WARMUP):
            for index in range(warmup):
                started = clock()
                run_once()
                if index == 0:
                    first_ns = clock() - started
    with phase(PHASE_INFERENCE):
        wall_started = clock()
        if iterations is not None:
            samples = [0] * iterations
            for index in range(iterations):
                started = clock()
                run_once()
                samples[index] = clock() - started
        else:
            deadline = wall_started + int((DEFAULT_MIN_TIME if min_time is None else min_time) * 1e9)
            samples = []
            append = samples.append
            while True:
                started = clock()
                run_once()
                ended = clock()
                append(ended - started)
                if ended >= deadline and len(samples) >= min_iterations:
                    break
        wall_s = (clock() - wall_started) / 1e9
    if first_ns is None and samples:
        first_ns = samples[0]
    return Timing(None if first_ns is None else first_ns / 1e6, [s / 1e6 for s in samples], wall_s)


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(ort: Any) -> dict[str, Any]:
    import numpy

    return {"ort_version": ort.__version__, "ort_providers": list(ort.get_available_providers()),
            "numpy_version": numpy.__version__, "python": platform.python_version(), "machine": platform.machine(),
            "cpu_model": cpu_model(), "cpu_flags": precisions.cpu_flags(), "cpu_count": os.cpu_count() or 0,
            "versions": {"onnxruntime": ort.__version__, "numpy": numpy.__version__,
                         "python": platform.python_version()}}


def benchmark(model_path: str, options: BenchOptions, phase: Phase = no_phase) -> dict[str, Any]:
    """Benchmark one model; the result is plain JSON (see docs/bench.md for its fields).

    ``phase`` is told of each phase: session creation, the first inference (the first warm-up
    run, timed apart), the other warm-up runs, the timed loop and, with ``profile``, the profiling.
    """
    ort = import_onnxruntime()
    full_name = provider_name(options.provider)
    with phase(PHASE_SESSION_CREATE):
        session, created_ms = open_session(model_path, options, optimized_output=options.optimized_output)
    signature = model_inputs.signature_from_session(session)
    resolved = model_inputs.resolve_shapes(signature, options.shapes, options.axes, options.batch_size)
    batch_size = model_inputs.batch_size_of(signature, resolved, options.batch_size)
    feeds = model_inputs.generate(signature, resolved, options.seed)
    run_once = functools.partial(session.run, None, feeds)
    try:
        first_ms = None
        if options.warmup:  # the first warm-up run, alone: its time is first_inference_ms
            with phase(PHASE_FIRST_INFERENCE):
                started = time.perf_counter_ns()
                run_once()
                first_ms = (time.perf_counter_ns() - started) / 1e6
        timing = measure(run_once, warmup=max(options.warmup - 1, 0), iterations=options.iterations,
                         min_time=options.effective_min_time(), min_iterations=options.min_iterations, phase=phase)
    except Exception as exc:
        raise HarnessError(f"session.run failed: {_one_line(exc)}") from None
    if first_ms is not None:
        timing.first_inference_ms = first_ms
    summary = summarize(timing.latencies_ms, batch_size)
    result: dict[str, Any] = {
        "model_path": str(model_path),
        "provider": short_provider(full_name),
        "provider_name": full_name,
        "session_providers": list(session.get_providers()),
        "precision": precisions.ort_session_precision(session, full_name, model_path),  # what it computes in
        "precision_requested": options.precision,
        "threads": options.threads or 0, "seed": options.seed,
        "warmup": options.warmup, "mode": options.mode(),
        "min_time_s": None if options.iterations is not None else options.effective_min_time(),
        "batch_size": batch_size,
        "inputs": model_inputs.describe(signature, resolved),
        "input_shapes": model_inputs.shapes_text(resolved),
        "session_create_ms": created_ms,
        "first_inference_ms": timing.first_inference_ms,
        "timed_wall_s": timing.wall_s,
        "stats": summary,
        "warnings": stability_warnings(summary),
        "latencies_ms": timing.latencies_ms,
        "environment": environment(ort),
        "profile": None,
        "profile_files": [],
    }
    del session
    if options.profile:
        with phase(PHASE_PROFILE):
            table, files, started_ns = profile(model_path, options, feeds, runs=min(summary["n"], PROFILE_RUNS),
                                               phase=phase)
        result["profile"], result["profile_files"] = table, [str(f) for f in files]
        result["profile_start_ns"], result["profile_warmup"] = started_ns, min(options.warmup, PROFILE_WARMUP)
    return result


def profile(model_path: str, options: BenchOptions, feeds: Any, *, runs: int,
            phase: Phase = no_phase) -> tuple[dict[str, Any], list[Path], int]:
    """Per-operator table from ORT's profiler, on a session of its own; files go to artifacts_dir.

    Also ORT's ``get_profiling_start_time_ns()``: the time its profile's timestamps count from.
    """
    folder = Path(options.artifacts_dir or ".")
    folder.mkdir(parents=True, exist_ok=True)
    with phase(PHASE_SESSION_CREATE):
        session, _ = open_session(model_path, options, profile_prefix=str(folder / "ort_profile"))
    warmup = min(options.warmup, PROFILE_WARMUP)
    try:
        with phase(PHASE_INFERENCE):
            for _ in range(warmup + max(runs, 1)):
                session.run(None, feeds)
        started_ns = int(session.get_profiling_start_time_ns())
        trace = Path(session.end_profiling())
    except Exception as exc:
        raise HarnessError(f"profiling run failed: {_one_line(exc)}") from None
    if not trace.is_absolute():
        trace = Path.cwd() / trace
    table = profiling.operator_table(profiling.load_events(trace), skip_runs=warmup)
    target = folder / "ort_profile.json"
    if trace.resolve() != target.resolve():
        os.replace(trace, target)
    return table, [target, *profiling.save(table, folder)], started_ns


def metric_value(summary: dict[str, Any], metric: str) -> tuple[float, str]:
    """The figure perf.csv's ``performance`` gets for ``metric`` (throughput | p50), and its unit name."""
    try:
        key, name = METRICS[metric]
    except KeyError:
        raise HarnessInputError(f"unknown metric '{metric}'", field="--metric", hint="use throughput or p50") from None
    return float(summary[key]), name


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:500] + ("…" if len(text) > 500 else "")

