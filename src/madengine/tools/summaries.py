"""Summaries of tool outputs as extra perf row values (columns at the end of perf.csv).

The parsing lives once, in the bundled stand-alone scripts (they run inside containers with
only ``python3``); this module loads those same files to summarise their outputs on the host.

| summary | file | perf columns |
|---|---|---|
| ``cpu_monitor`` | ``cpu_monitor_summary.json`` (else ``cpu_monitor.csv``) | ``cpu_util_mean``, ``cpu_util_peak``, ``rss_peak_mb``, ``cpu_freq_mean_mhz`` |
| ``gpu_power`` | ``gpu_info_power_profiler_output.csv`` | ``power_mean_w``, ``power_peak_w`` |
| ``gpu_vram`` | ``gpu_info_vram_profiler_output.csv`` | ``vram_peak_mb``, ``gpu_util_mean``, ``gpu_util_peak`` |
| ``library_trace`` | ``library_trace.csv`` | ``library_trace_calls``, ``library_trace_configs`` |
"""

from __future__ import annotations

import functools
import importlib.util
import json
import posixpath
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from madengine.core.spec import RunSpec
from madengine.tools.config import BUNDLED_SCRIPTS

CPU_MONITOR_CSV = "cpu_monitor.csv"
CPU_MONITOR_SUMMARY = "cpu_monitor_summary.json"
GPU_POWER_CSV = "gpu_info_power_profiler_output.csv"
GPU_VRAM_CSV = "gpu_info_vram_profiler_output.csv"
LIBRARY_TRACE_CSV = "library_trace.csv"


@functools.lru_cache(maxsize=None)
def script_module(name: str) -> ModuleType:
    """A bundled tool script (``scripts/tools/<name>.py``) loaded as a module."""
    path = BUNDLED_SCRIPTS / "tools" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"madengine_tool_script_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def output_file(spec: RunSpec, cwd: str, name: str) -> Path | None:
    """A tool's output: the collected copy in the artifacts folder, else the one in the work folder."""
    for candidate in (spec.artifacts_dir / name, spec.workdir / posixpath.join(cwd, name)):
        if candidate.is_file():
            return candidate
    return None


def cpu_monitor(spec: RunSpec, cwd: str) -> dict[str, Any]:
    module = script_module("cpu_monitor")
    summary_path = output_file(spec, cwd, CPU_MONITOR_SUMMARY)
    summary: dict[str, Any] | None = None
    if summary_path is not None:
        try:
            summary = json.loads(summary_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            summary = None
    if not isinstance(summary, dict):  # killed before it could write one: summarise the samples
        csv_path = output_file(spec, cwd, CPU_MONITOR_CSV)
        summary = module.summarise(module.read_rows(str(csv_path)) if csv_path else [])
    return {key: summary.get(key, "") for key in module.SUMMARY_COLUMNS}


def gpu_power(spec: RunSpec, cwd: str) -> dict[str, Any]:
    values = _gpu_summary(spec, cwd, GPU_POWER_CSV)
    return {"power_mean_w": values["power_mean_w"], "power_peak_w": values["power_peak_w"]}


def gpu_vram(spec: RunSpec, cwd: str) -> dict[str, Any]:
    values = _gpu_summary(spec, cwd, GPU_VRAM_CSV)
    return {key: values[key] for key in ("vram_peak_mb", "gpu_util_mean", "gpu_util_peak")}


def _gpu_summary(spec: RunSpec, cwd: str, name: str) -> dict[str, Any]:
    module = script_module("gpu_sampler")
    path = output_file(spec, cwd, name)
    return module.summarise(module.read_rows(str(path)) if path else [])


def library_trace(spec: RunSpec, cwd: str) -> dict[str, Any]:
    module = script_module("library_trace")
    path = output_file(spec, cwd, LIBRARY_TRACE_CSV)
    if path is None:
        return {"library_trace_calls": "", "library_trace_configs": ""}
    return module.summarise(module.read_rows(str(path)))


_SUMMARIES: dict[str, Callable[[RunSpec, str], dict[str, Any]]] = {
    "cpu_monitor": cpu_monitor, "gpu_power": gpu_power, "gpu_vram": gpu_vram, "library_trace": library_trace,
}


def finalizer(name: str, cwd: str) -> Callable[[RunSpec], dict[str, Any]]:
    """The run finalizer of summary ``name`` for a model whose folder is ``cwd`` in the work folder."""
    summarise = _SUMMARIES[name]

    def finalize(spec: RunSpec) -> dict[str, Any]:
        return summarise(spec, cwd)

    finalize.__name__ = f"summarise_{name}"
    return finalize
