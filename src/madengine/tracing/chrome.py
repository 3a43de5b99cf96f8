"""trace.json: the Chrome trace-event format (JSON object form), which ui.perfetto.dev and chrome://tracing open.

One file per traced command, written atomically:

* a span is a complete event (``ph: "X"``, integer microseconds since the trace's origin) whose
  ``args`` hold its attributes and ``span.id`` / ``span.parent_id`` / ``span.status``, so the file
  alone rebuilds the span tree (``report trace-diff``, :func:`merge_documents`);
* a span event is an instant event (``ph: "i"``) on the span's track; a counter track is a series
  of counter events (``ph: "C"``); thread and process names are metadata events (``ph: "M"``);
* ``otherData`` holds the trace id, the origin (Unix ns), the file's own id and the ids of the
  child files merged into it.

Slices on one thread track must nest. Spans of one thread that overlap without nesting (a span
ended by another thread, operator spans of parallel ORT kernels) go to extra tracks of that
thread ("main (2)"), so the file is always well formed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import tempfile
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from madengine.core import jsonio
from madengine.core.inputfile import MAX_RECORD_BYTES
from madengine.core.errors import InputError
from madengine.core.redact import redact
from madengine.tracing.tracer import STATUS_ERROR, STATUS_UNSET, Span, TraceSnapshot

FORMAT = "madengine-trace/1"
ARG_SPAN_ID, ARG_PARENT_ID, ARG_STATUS, ARG_STATUS_MESSAGE = "span.id", "span.parent_id", "span.status", \
    "span.status_message"
ARG_UNFINISHED = "span.unfinished"


def _us(ns: int, origin_ns: int) -> int:
    # integer microseconds: floor is monotone, so nested spans stay nested after rounding
    return (ns - origin_ns) // 1000


def json_value(value: Any) -> Any:
    """An attribute value as JSON (and OTLP) can carry it; text is redacted."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    return redact(str(value))


def _args(attributes: Mapping[str, Any]) -> dict[str, Any]:
    return {key: json_value(value) for key, value in attributes.items()}


@dataclasses.dataclass
class _Slice:
    span: Span
    ts: int
    end: int


def _assign_lanes(slices: Sequence[_Slice]) -> list[list[_Slice]]:
    """Split one thread's slices into lanes in which every slice nests or follows (first fit)."""
    lanes: list[list[_Slice]] = []  # each lane: the stack of slices open at the current time
    placed: list[list[_Slice]] = []
    for item in sorted(slices, key=lambda s: (s.ts, -s.end)):
        for index, stack in enumerate(lanes):
            while stack and stack[-1].end <= item.ts:
                stack.pop()
            if not stack or item.end <= stack[-1].end:
                stack.append(item)
                placed[index].append(item)
                break
        else:
            lanes.append([item])
            placed.append([item])
    return placed


def document(snapshot: TraceSnapshot, *, now_ns: int, file_id: str | None = None,
             process_name: str | None = None) -> dict[str, Any]:
    """The trace.json object of a tracer's snapshot; unfinished spans end at ``now_ns``."""
    origin = snapshot.origin_ns
    pid = int(snapshot.resource.get("process.pid") or os.getpid())
    name = process_name or " ".join(str(p) for p in ("madengine", snapshot.resource.get("madengine.run_id"),
                                                     snapshot.resource.get("host.name")) if p)
    events: list[dict[str, Any]] = [{"ph": "M", "name": "process_name", "ts": 0, "pid": pid, "tid": 0,
                                     "args": {"name": name}}]
    by_thread: dict[int, list[_Slice]] = {}
    thread_names: dict[int, str] = {}
    spans = [(s, False) for s in snapshot.finished] + [(s, True) for s in snapshot.unfinished]
    unfinished_ids = {s.span_id for s in snapshot.unfinished}
    for span, _ in spans:
        end = span.end_ns if span.end_ns is not None else max(now_ns, span.start_ns)
        by_thread.setdefault(span.thread_id, []).append(_Slice(span, _us(span.start_ns, origin), _us(end, origin)))
        thread_names.setdefault(span.thread_id, span.thread_name)
    next_tid = 1
    span_tid: dict[str, int] = {}
    # threads in order of their first span, so the main thread is track 1
    for thread_id in sorted(by_thread, key=lambda t: min(s.ts for s in by_thread[t])):
        for lane_index, lane in enumerate(_assign_lanes(by_thread[thread_id])):
            tid = next_tid
            next_tid += 1
            label = thread_names[thread_id] or f"thread {thread_id}"
            events.append({"ph": "M", "name": "thread_name", "ts": 0, "pid": pid, "tid": tid,
                           "args": {"name": label if lane_index == 0 else f"{label} ({lane_index + 1})"}})
            events.append({"ph": "M", "name": "thread_sort_index", "ts": 0, "pid": pid, "tid": tid,
                           "args": {"sort_index": tid}})
            for item in lane:
                span_tid[item.span.span_id] = tid
                events.append(_complete_event(item, pid, tid, unfinished=item.span.span_id in unfinished_ids))
                for event_name, when, attributes in list(item.span.events):
                    events.append({"ph": "i", "s": "t", "name": event_name, "cat": item.span.category,
                                   "ts": min(max(_us(when, origin), item.ts), item.end), "pid": pid, "tid": tid,
                                   "args": _args(attributes)})
    for track in snapshot.counters:
        tid = span_tid.get(track.parent_span_id, 1)
        key = track.unit or "value"
        for when, value in zip(track.timestamps_ns, track.values):
            if when < origin:
                continue  # a sample from before this trace began (a stale file) has no place on it
            events.append({"ph": "C", "name": track.name, "ts": _us(when, origin), "pid": pid, "tid": tid,
                           "args": {key: value}})
    other = {"format": FORMAT, "trace_id": snapshot.trace_id, "origin_unix_ns": str(origin),
             "parent_span_id": snapshot.remote_parent_id, "file_id": file_id or secrets.token_hex(8),
             "merged_file_ids": ""}
    other.update({f"resource.{k}": str(json_value(v)) for k, v in snapshot.resource.items()})
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def _complete_event(item: _Slice, pid: int, tid: int, *, unfinished: bool) -> dict[str, Any]:
    span = item.span
    args = _args(dict(span.attributes))  # a copy: another thread may still set attributes of an open span
    args[ARG_SPAN_ID] = span.span_id
    args[ARG_PARENT_ID] = span.parent_id
    if span.status != STATUS_UNSET:
        args[ARG_STATUS] = span.status
    if span.status == STATUS_ERROR and span.status_message:
        args[ARG_STATUS_MESSAGE] = redact(span.status_message)
    if unfinished:
        args[ARG_UNFINISHED] = True
    return {"ph": "X", "name": span.name, "cat": span.category, "ts": item.ts, "dur": item.end - item.ts,
            "pid": pid, "tid": tid, "args": args}


def write_document(path: Path, doc: Mapping[str, Any]) -> Path:
    """Write atomically (a temporary file in the same folder, then rename): readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(jsonio.dumps(doc))
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return path


def read_document(path: Path, *, shown: str | None = None) -> dict[str, Any]:
    """A trace.json as a dict, or one :class:`InputError` naming the file."""
    doc = jsonio.read_json_file(path, shown=shown, missing="trace file not found", limit=MAX_RECORD_BYTES)
    if isinstance(doc, list):  # the JSON array form of the format
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise InputError("not a trace-event file (no traceEvents list)", path=shown or str(path))
    return doc


# --- merging a child process's trace.json (Slurm tasks) ---------------------------------------

@dataclasses.dataclass
class MergeResult:
    merged: list[str]  #: file ids merged now
    skipped: list[str]  #: file ids merged before (a second collect)
    other_traces: list[str]  #: trace ids of merged files that belong to another trace


def _other(doc: Mapping[str, Any]) -> dict[str, Any]:
    other = doc.get("otherData")
    return other if isinstance(other, dict) else {}


def _origin(doc: Mapping[str, Any]) -> int:
    try:
        return int(_other(doc).get("origin_unix_ns", 0))
    except (TypeError, ValueError):
        return 0


def merge_documents(parent: dict[str, Any], children: Iterable[Mapping[str, Any]]) -> MergeResult:
    """Merge child trace documents into ``parent`` in place.

    Each child's processes get pids of their own (tasks on two nodes may share a pid), its times
    move onto the parent's origin, and a flow arrow links the parent's span that propagated the
    trace to the child's root spans. A child merged before (same ``file_id``) is skipped, so
    collecting twice does not duplicate.
    """
    other = parent.setdefault("otherData", {})
    done = set(filter(None, str(other.get("merged_file_ids", "")).split(",")))
    done.add(str(other.get("file_id", "")))
    events: list[dict[str, Any]] = parent["traceEvents"]
    used_pids = {e.get("pid") for e in events}
    by_span_id = {e["args"][ARG_SPAN_ID]: e for e in events
                  if e.get("ph") == "X" and isinstance(e.get("args"), dict) and ARG_SPAN_ID in e["args"]}
    result = MergeResult([], [], [])
    origin = _origin(parent)
    for child in children:
        child_other = _other(child)
        file_id = str(child_other.get("file_id", "")) or secrets.token_hex(8)
        if file_id in done:
            result.skipped.append(file_id)
            continue
        if child_other.get("trace_id") and child_other.get("trace_id") != other.get("trace_id"):
            result.other_traces.append(str(child_other.get("trace_id")))
        shift = (_origin(child) - origin) // 1000 if origin and _origin(child) else 0
        first_flow = _max_flow_id(events)
        pid_map: dict[Any, int] = {}
        roots = []
        for event in child.get("traceEvents", []):
            if not isinstance(event, dict):
                continue
            event = dict(event)
            event["pid"] = _child_pid(event.get("pid"), pid_map, used_pids)
            if event.get("ph") != "M" and isinstance(event.get("ts"), (int, float)):
                event["ts"] = event["ts"] + shift
            if event.get("ph") in ("s", "f") and isinstance(event.get("id"), int):
                event["id"] = event["id"] + first_flow  # keep the child's flow ids apart from ours
            events.append(event)
            if event.get("ph") == "X" and isinstance(event.get("args"), dict) and ARG_SPAN_ID in event["args"]:
                by_span_id.setdefault(event["args"][ARG_SPAN_ID], event)  # a grandchild may link to it
            if _is_root_of(event, child_other):
                roots.append(event)
        flow_id = _max_flow_id(events)
        for root in roots:
            source = by_span_id.get(root["args"][ARG_PARENT_ID])
            if source is not None:
                flow_id += 1
                events.extend(_flow(source, root, flow_id))
        done.add(file_id)
        merged_before = str(child_other.get("merged_file_ids", ""))
        done.update(filter(None, merged_before.split(",")))
        result.merged.append(file_id)
    other["merged_file_ids"] = ",".join(sorted(done - {str(other.get("file_id", ""))}))
    _rebase_negative(parent)
    return result


def _max_flow_id(events: Sequence[Mapping[str, Any]]) -> int:
    return max((e["id"] for e in events if e.get("ph") in ("s", "f") and isinstance(e.get("id"), int)), default=0)


def _child_pid(pid: Any, pid_map: dict[Any, int], used_pids: set) -> int:
    """The child's pid, unless the parent (or an earlier child) uses it already: then a new one."""
    if pid not in pid_map:
        new_pid = pid if isinstance(pid, int) and pid not in used_pids else \
            max([p for p in used_pids if isinstance(p, int)] or [0]) + 1
        pid_map[pid] = new_pid
        used_pids.add(new_pid)
    return pid_map[pid]


def _is_root_of(event: Mapping[str, Any], child_other: Mapping[str, Any]) -> bool:
    """A child's span whose parent is the remote span that propagated the trace to it."""
    args = event.get("args")
    remote = child_other.get("parent_span_id")
    return event.get("ph") == "X" and isinstance(args, dict) and bool(remote) and args.get(ARG_PARENT_ID) == remote


def _flow(source: Mapping[str, Any], target: Mapping[str, Any], flow_id: int) -> list[dict[str, Any]]:
    """A flow arrow from the parent's span to a child's root span."""
    start = min(max(target["ts"], source["ts"]), source["ts"] + source.get("dur", 0))
    return [{"ph": "s", "id": flow_id, "name": "propagate", "cat": "madengine", "ts": start,
             "pid": source["pid"], "tid": source["tid"]},
            {"ph": "f", "bp": "e", "id": flow_id, "name": "propagate", "cat": "madengine", "ts": target["ts"],
             "pid": target["pid"], "tid": target["tid"]}]


def _rebase_negative(doc: dict[str, Any]) -> None:
    """A child that started before the parent (clocks of two nodes) would have negative times: move all."""
    times = [e["ts"] for e in doc["traceEvents"] if e.get("ph") != "M" and isinstance(e.get("ts"), (int, float))]
    low = min(times, default=0)
    if low >= 0:
        return
    for event in doc["traceEvents"]:
        if event.get("ph") != "M" and isinstance(event.get("ts"), (int, float)):
            event["ts"] -= low
    other = doc.setdefault("otherData", {})
    other["origin_unix_ns"] = str(_origin(doc) + int(low) * 1000)


def merge_trace_files(target: Path, children: Iterable[Path]) -> MergeResult:
    """Merge child trace.json files into ``target`` (rewritten atomically). Unreadable children raise InputError."""
    parent = read_document(target)
    result = merge_documents(parent, [read_document(Path(c)) for c in children])
    write_document(target, parent)
    return result
