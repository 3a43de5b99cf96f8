"""The benchmark statistics as perf.csv extra columns (shared by ``madengine bench`` and models.json).

Both paths turn a harness result (see :func:`madengine.bench.harness.engine.benchmark`) into the
same columns with :func:`bench_columns`, so a row means the same whichever path wrote it. Where a
result was measured is the same in bench and scorecard rows: the CPU model and its relevant flags
(:func:`environment_columns`), and the versions of what computed it in perf.csv's own
``framework_versions`` (:func:`runtime_versions`). The precision it was computed at is perf.csv's own
``training_precision`` (``precision_source`` = ``reported``): :func:`set_reported`.
"""

from __future__ import annotations

from typing import Any

from madengine.bench.harness.engine import metric_value

#: extra perf.csv columns, in this order, after madengine's own
BENCH_COLUMNS = (
    "ort_provider", "ort_version", "cpu_model", "cpu_flags", "threads", "model_sha256",
    "batch_size", "input_shapes",
    "warmup", "latency_n", "latency_mean_ms", "latency_stddev_ms", "latency_cv", "latency_min_ms",
    "latency_p50_ms", "latency_p90_ms", "latency_p95_ms", "latency_p99_ms", "latency_max_ms",
    "median_samples_per_second", "inferences_per_second", "samples_per_second", "session_create_ms",
    "first_inference_ms", "prepared_cache",
)

_STATS = {"latency_n": "n", "latency_mean_ms": "mean_ms", "latency_stddev_ms": "stddev_ms", "latency_cv": "cv",
          "latency_min_ms": "min_ms", "latency_p50_ms": "p50_ms", "latency_p90_ms": "p90_ms",
          "latency_p95_ms": "p95_ms", "latency_p99_ms": "p99_ms", "latency_max_ms": "max_ms",
          "median_samples_per_second": "median_samples_per_second",
          "inferences_per_second": "inferences_per_second", "samples_per_second": "samples_per_second"}


def significant(value: Any, digits: int = 6) -> Any:
    """Floats rounded to ``digits`` significant digits (perf.csv cells stay readable)."""
    if isinstance(value, float):
        return float(f"{value:.{digits}g}")
    return value


def bench_columns(result: dict[str, Any], *, model_sha256: str = "", cache: str = "") -> dict[str, Any]:
    """The extra columns of one benchmark result."""
    stats = result["stats"]
    environment = result.get("environment", {})
    where = environment_columns(environment)
    columns: dict[str, Any] = {
        "ort_provider": result.get("provider", ""),
        "ort_version": environment.get("ort_version", ""),
        "cpu_model": where["cpu_model"],
        "cpu_flags": where["cpu_flags"],
        "threads": result.get("threads") or "auto",
        "model_sha256": model_sha256 or result.get("model_sha256", ""),
        "batch_size": result.get("batch_size", ""),
        "input_shapes": result.get("input_shapes", ""),
        "warmup": result.get("warmup", ""),
    }
    columns.update(latency_columns(stats))
    columns["session_create_ms"] = significant(result.get("session_create_ms"))
    columns["first_inference_ms"] = significant(result.get("first_inference_ms"))
    columns["prepared_cache"] = cache or result.get("prepared_cache", "off")
    return columns


def environment_columns(environment: dict[str, Any]) -> dict[str, Any]:
    """``cpu_model`` and ``cpu_flags`` (the relevant ones, space-separated as in /proc/cpuinfo) of a
    result's environment (a harness result's, or a scorecard cell's)."""
    return {"cpu_model": environment.get("cpu_model", ""), "cpu_flags": " ".join(environment.get("cpu_flags", []))}


def runtime_versions(environment: dict[str, Any]) -> dict[str, str]:
    """Package → version of what computed a result (``versions`` of its environment; a harness result
    from before it had them names onnxruntime alone): a row's ``framework_versions``."""
    versions = environment.get("versions")
    if versions is None and environment.get("ort_version"):
        versions = {"onnxruntime": environment["ort_version"]}
    return dict(sorted((versions or {}).items()))


def set_reported(record: Any, precision: str, environment: dict[str, Any]) -> None:
    """A bench or scorecard row's precision as the runtime reported it, and the versions that computed it."""
    record.training_precision = precision
    record.precision_source = "reported" if precision else ""
    record.framework_versions = runtime_versions(environment)


def set_host_load(record: Any, start: float | None, end: float | None) -> None:
    """How busy the host was when a benchmark started and ended, and the note of a host busier than
    its CPUs: the same columns and words as a ``run`` row's (:mod:`madengine.execution.provenance`)."""
    from madengine.execution.provenance import load_notes, rounded_load

    record.host_load_start, record.host_load_end = rounded_load(start), rounded_load(end)
    record.add_warnings(load_notes(start, end))


def latency_columns(stats: dict[str, Any]) -> dict[str, Any]:
    """``latency_n`` … ``samples_per_second`` of a harness summary (the same names everywhere)."""
    return {column: significant(stats[key]) for column, key in _STATS.items()}


def performance(result: dict[str, Any], metric: str) -> tuple[float, str]:
    """perf.csv's ``performance`` and ``metric`` for ``metric`` = throughput | p50: the median's."""
    value, name = metric_value(result["stats"], metric)
    return significant(value), name


def headline(record: Any, stats: dict[str, Any] | None) -> str:
    """A benchmark's progress line after its model and backend: the status, the row's figure (the
    median's) and the median latency before the mean (``SUCCESS 1234 samples_per_second (p50 0.81 ms,
    mean 0.95 ms)``), or why it failed."""
    if not record.ok:
        return f"{record.status} ({record.reason})"
    latencies = f" (p50 {stats['p50_ms']:.4g} ms, mean {stats['mean_ms']:.4g} ms)" if stats else ""
    return f"{record.status} {record.performance} {record.metric}{latencies}"


def set_column(record: Any, name: str, value: Any) -> None:
    """A standard column when perf.csv defines one of that name, else an extra column (``backend``
    and ``tag_configs`` join the standard columns with the result identity)."""
    if hasattr(record, name):
        setattr(record, name, value)
    else:
        record.extra[name] = value
