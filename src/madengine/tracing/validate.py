"""A checker of the Chrome trace-event format, for the tests and for anyone handed a trace.json.

It checks what viewers rely on: every event has ``ph``, ``ts``, ``pid`` and ``tid`` of the right
types; complete events have a non-negative ``dur``; ``B``/``E`` events pair up per thread with
matching names; slices on one thread nest (a slice that starts inside another ends inside it);
counter events carry numbers; flow starts and ends pair up by id.
https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU
"""

from __future__ import annotations

from typing import Any, Mapping

KNOWN_PHASES = frozenset("BEXiIC" "bnesftMPOND" "vVRc()")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_event(event: Any, index: int) -> list[str]:
    if not isinstance(event, dict):
        return [f"event {index}: not an object"]
    problems = []
    for key in ("ph", "ts", "pid", "tid"):
        if key not in event:
            problems.append(f"event {index} ({event.get('name', '?')}): no {key}")
    if "ph" in event and event["ph"] not in KNOWN_PHASES:
        problems.append(f"event {index}: unknown ph {event['ph']!r}")
    if "ts" in event and not _number(event["ts"]):
        problems.append(f"event {index}: ts is not a number")
    for key in ("pid", "tid"):
        if key in event and not isinstance(event[key], (int, str)):
            problems.append(f"event {index}: {key} is not an integer or string")
    if event.get("ph") == "X" and (not _number(event.get("dur")) or event.get("dur", 0) < 0):
        problems.append(f"event {index} ({event.get('name')}): complete event without a non-negative dur")
    if event.get("ph") == "C":
        args = event.get("args")
        if not isinstance(args, dict) or not args or not all(_number(v) for v in args.values()):
            problems.append(f"event {index} ({event.get('name')}): counter without numeric args")
    return problems


def check_trace(doc: Any) -> list[str]:
    """Every problem found (empty when the trace is well formed)."""
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        return ["no traceEvents list"]
    problems = [p for i, e in enumerate(events) for p in check_event(e, i)]
    if problems:
        return problems
    return _check_pairs(events) + _check_nesting(events) + _check_flows(events)


def _check_pairs(events: list[Mapping[str, Any]]) -> list[str]:
    stacks: dict[tuple, list[Mapping[str, Any]]] = {}
    problems = []
    for event in sorted((e for e in events if e["ph"] in ("B", "E")), key=lambda e: e["ts"]):
        stack = stacks.setdefault((event["pid"], event["tid"]), [])
        if event["ph"] == "B":
            stack.append(event)
        elif not stack:
            problems.append(f"E of {event.get('name', '?')} at ts {event['ts']} has no B")
        else:
            begin = stack.pop()
            if event.get("name") and event.get("name") != begin.get("name"):
                problems.append(f"E of {event['name']} at ts {event['ts']} closes B of {begin.get('name')}")
    for (pid, tid), stack in stacks.items():
        problems.extend(f"B of {e.get('name')} (pid {pid}, tid {tid}) never ends" for e in stack)
    return problems


def _slices(events: list[Mapping[str, Any]]) -> dict[tuple, list[tuple[float, float, str]]]:
    """(start, end, name) of every slice per thread: X events, and B/E pairs."""
    by_thread: dict[tuple, list[tuple[float, float, str]]] = {}
    open_slices: dict[tuple, list[Mapping[str, Any]]] = {}
    for event in sorted(events, key=lambda e: e["ts"]):
        key = (event["pid"], event["tid"])
        if event["ph"] == "X":
            by_thread.setdefault(key, []).append((event["ts"], event["ts"] + event["dur"], str(event.get("name"))))
        elif event["ph"] == "B":
            open_slices.setdefault(key, []).append(event)
        elif event["ph"] == "E" and open_slices.get(key):
            begin = open_slices[key].pop()
            by_thread.setdefault(key, []).append((begin["ts"], event["ts"], str(begin.get("name"))))
    return by_thread


def _check_nesting(events: list[Mapping[str, Any]]) -> list[str]:
    problems = []
    for (pid, tid), slices in _slices(events).items():
        stack: list[tuple[float, float, str]] = []
        for start, end, name in sorted(slices, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1][1] <= start:
                stack.pop()
            if stack and end > stack[-1][1]:
                problems.append(f"pid {pid} tid {tid}: {name} [{start}, {end}] overlaps {stack[-1][2]} "
                                f"[{stack[-1][0]}, {stack[-1][1]}] without nesting")
            stack.append((start, end, name))
    return problems


def _check_flows(events: list[Mapping[str, Any]]) -> list[str]:
    starts = {(e.get("cat"), e.get("id")) for e in events if e["ph"] == "s"}
    ends = {(e.get("cat"), e.get("id")) for e in events if e["ph"] == "f"}
    return [f"flow {key[1]} ({key[0]}) has a start and no end" for key in sorted(starts - ends, key=str)] + \
        [f"flow {key[1]} ({key[0]}) has an end and no start" for key in sorted(ends - starts, key=str)]
