"""Recorded data turned into trace data, after the fact: ORT per-operator events, tool time series.

Pure functions of the files (or already parsed data) that return spans or counter tracks for
:meth:`Tracer.add_spans` / :meth:`Tracer.add_counter_track`. They never raise for a missing or
partly written tool output (a run killed on timeout leaves half a CSV): what can be read is used.

* ``ort_profile_spans``: ONNX Runtime's profile (``ort_profile.json``, written by ``bench
  --profile``) → an ``ort.model_run`` span per ``session.run`` and, inside it, a span per node
  kernel named by its op type, all children of the inference span.
* ``cpu_monitor_tracks`` (``cpu_monitor.csv``) and ``gpu_sampler_tracks``
  (``gpu_info_{power,vram}_profiler_output.csv``) → counter tracks; ``tool_counter_tracks``
  picks the right one by file name.
"""

from __future__ import annotations

import bisect
import csv
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from madengine.core import jsonio
from madengine.core.errors import InputError
from madengine.core.inputfile import MAX_RECORD_BYTES
from madengine.tracing.names import ATTR_ORT_NODE, ATTR_ORT_OP_TYPE, ATTR_ORT_PROVIDER, ATTR_ORT_RUN_INDEX, \
    SPAN_ORT_MODEL_RUN
from madengine.tracing.propagation import new_span_id
from madengine.tracing.tracer import CounterTrack, Span

#: ORT names a node's kernel event ``<node>_kernel_time`` (as bench.harness.profiling reads it)
ORT_KERNEL_SUFFIX = "_kernel_time"
#: operator spans of this many steady-state runs at most: a profile of 1,000 runs would be 100,000s of spans
DEFAULT_MAX_RUNS = 10


# --- ONNX Runtime profile ----------------------------------------------------------------------

def load_ort_events(source: Path | Sequence[Any]) -> list[dict[str, Any]]:
    """The event list of an ORT profile file (a list, or ``{"traceEvents": [...]}``), or the list given.

    A profile that cannot be read gives no events: the operator spans are an extra, never a failure.
    """
    events: Any = source
    if isinstance(source, (str, Path)):
        try:
            events = jsonio.read_json_file(source, shown=str(source), limit=MAX_RECORD_BYTES)
        except InputError:
            return []
    if isinstance(events, dict):
        events = events.get("traceEvents", [])
    return [e for e in events if isinstance(e, dict)] if isinstance(events, list) else []


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def ort_start_ns(tracer: Any, profiling_start_ns: int) -> int:
    """Trace time of ``session.get_profiling_start_time_ns()``.

    ORT documents it as comparable to ``time.monotonic_ns()``; ORT 1.32 returns Unix time. A value
    past 2001 in Unix nanoseconds (10**18) cannot be a monotonic reading (31 years of uptime).
    """
    if profiling_start_ns >= 10**18:
        return profiling_start_ns
    return tracer.epoch_ns_from_monotonic(profiling_start_ns)


def ort_profile_spans(source: Path | Sequence[Any], parent: Span, *, start_ns: int | None = None,
                      skip_runs: int = 0, max_runs: int | None = DEFAULT_MAX_RUNS) -> list[Span]:
    """Spans of the ORT profile as children of ``parent`` (the inference span).

    ``start_ns``: the trace time of the profile's zero — ``ort_start_ns(tracer,
    session.get_profiling_start_time_ns())`` when the session is in this process. Without it (a
    profile made in a container) the profile's first event is placed at the parent's start.
    ``skip_runs`` leaves out the warm-up runs (as the operator table does); ``max_runs`` bounds
    the number of runs kept.
    """
    if not getattr(parent, "recording", False):
        return []  # tracing is off
    events = load_ort_events(source)
    runs = sorted((ts, dur) for ts, dur in ((_int(e.get("ts")), _int(e.get("dur"))) for e in events
                                            if e.get("cat") == "Session" and e.get("name") == "model_run")
                  if ts is not None and dur is not None)
    if not runs:
        return []
    first = min(t for t in (_int(e.get("ts")) for e in events) if t is not None)
    zero = start_ns if start_ns is not None else parent.start_ns - first * 1000
    kept = range(skip_runs, len(runs) if max_runs is None else min(len(runs), skip_runs + max_runs))
    run_spans: dict[int, Span] = {}
    spans: list[Span] = []
    for index in kept:
        ts, dur = runs[index]
        span = _child(SPAN_ORT_MODEL_RUN, parent, parent.span_id, zero + ts * 1000, zero + (ts + dur) * 1000,
                      {ATTR_ORT_RUN_INDEX: index})
        run_spans[index] = span
        spans.append(span)
    starts = [ts for ts, _ in runs]
    for event in events:
        name = str(event.get("name", ""))
        ts, dur = _int(event.get("ts")), _int(event.get("dur"))
        if event.get("cat") != "Node" or not name.endswith(ORT_KERNEL_SUFFIX) or ts is None or dur is None:
            continue
        run = run_spans.get(bisect.bisect_right(starts, ts) - 1)
        if run is None:
            continue  # a warm-up run, or one past max_runs
        args = event.get("args") if isinstance(event.get("args"), dict) else {}
        node = name[: -len(ORT_KERNEL_SUFFIX)]
        op_type = str(args.get("op_name") or node)
        spans.append(_child(op_type, parent, run.span_id, zero + ts * 1000, zero + (ts + dur) * 1000,
                            {ATTR_ORT_NODE: node, ATTR_ORT_OP_TYPE: op_type,
                             ATTR_ORT_PROVIDER: str(args.get("provider", "")),
                             ATTR_ORT_RUN_INDEX: run.attributes[ATTR_ORT_RUN_INDEX]}))
    return spans


def _child(name: str, parent: Span, parent_id: str, start_ns: int, end_ns: int,
           attributes: Mapping[str, Any]) -> Span:
    span = Span(name, parent.trace_id, new_span_id(), parent_id, start_ns, attributes=attributes, category="ort",
                thread_id=parent.thread_id, thread_name=parent.thread_name)
    span.end_ns = max(end_ns, start_ns)
    return span


# --- tool time series --------------------------------------------------------------------------

#: cpu_monitor.csv columns that are counters (docs/tools.md)
CPU_MONITOR_SERIES = ("cpu_percent", "rss_mb", "system_cpu_percent", "system_mem_used_mb", "cpu_freq_mhz",
                      "processes")
#: gpu_sampler.py columns that are counters, one track per device
GPU_SAMPLER_SERIES = ("power_w", "vram_used_mb")
_UNITS = {"cpu_percent": "%", "system_cpu_percent": "%", "rss_mb": "MiB", "system_mem_used_mb": "MiB",
          "cpu_freq_mhz": "MHz", "processes": "", "power_w": "W", "vram_used_mb": "MiB"}
TOOL_FILES = {"cpu_monitor.csv": "cpu_monitor", "gpu_info_power_profiler_output.csv": "gpu_power",
              "gpu_info_vram_profiler_output.csv": "gpu_vram"}


def read_csv_rows(source: Path | Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Rows of a CSV file (none when it is missing or unreadable), or the rows given."""
    if not isinstance(source, (str, Path)):
        return list(source)
    try:
        with open(source, newline="", encoding="utf-8", errors="replace") as handle:
            return list(csv.DictReader(handle))
    except (OSError, csv.Error):
        return []


#: seconds since the epoch beyond which a sample's time is not a time (year 5138)
_LAST_SECOND = 1e11


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number and number not in (float("inf"), float("-inf")) else None


def _series(rows: Iterable[Mapping[str, Any]], column: str) -> tuple[list[int], list[float]]:
    times, values = [], []
    for row in rows:
        when, value = _number(row.get("timestamp")), _number(row.get(column))
        # a timestamp past float's range in nanoseconds is no time a sample was taken
        if when is not None and value is not None and 0 < when < _LAST_SECOND:
            times.append(int(when * 1e9))
            values.append(value)
    return times, values


def cpu_monitor_tracks(source: Path | Iterable[Mapping[str, Any]], *,
                       prefix: str = "cpu_monitor") -> list[CounterTrack]:
    """A counter track per column of the CPU monitor's samples that has any value."""
    rows = read_csv_rows(source)
    tracks = []
    for column in CPU_MONITOR_SERIES:
        times, values = _series(rows, column)
        if values:
            tracks.append(CounterTrack(f"{prefix}.{column}", times, values, unit=_UNITS[column]))
    return tracks


def gpu_sampler_tracks(source: Path | Iterable[Mapping[str, Any]], *, prefix: str = "gpu") -> list[CounterTrack]:
    """A counter track per device and column (power, VRAM used) of the GPU sampler's CSV."""
    by_device: dict[str, list[Mapping[str, Any]]] = {}
    for row in read_csv_rows(source):
        by_device.setdefault(str(row.get("device", "") or "0").strip(), []).append(row)
    tracks = []
    for device in sorted(by_device, key=lambda d: (len(d), d)):
        for column in GPU_SAMPLER_SERIES:
            times, values = _series(by_device[device], column)
            if values:
                tracks.append(CounterTrack(f"{prefix}.gpu{device}.{column}", times, values, unit=_UNITS[column],
                                           attributes={"gpu.device": device}))
    return tracks


def tool_counter_tracks(path: Path) -> list[CounterTrack]:
    """The counter tracks of one collected tool output, by its file name; none for other files."""
    kind = TOOL_FILES.get(Path(path).name)
    if kind == "cpu_monitor":
        return cpu_monitor_tracks(path)
    if kind in ("gpu_power", "gpu_vram"):
        return gpu_sampler_tracks(path, prefix=kind)
    return []
