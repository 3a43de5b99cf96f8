"""The tracer API, trace.json (checked against the trace-event format), merging, and the converters.

Everything runs for real: threads for ``--parallel`` slots, the CPU monitor on a real command,
the GPU sampler replaying recorded nvidia-smi output (no GPU here), ONNX Runtime's profiler on a
model generated at test time.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import IN_CI, require_service
from madengine import tracing
from madengine.core.redact import MASK, register_secret
from madengine.tracing import chrome, convert, names
from madengine.tracing.propagation import format_traceparent, is_span_id, is_trace_id, parse_traceparent
from madengine.tracing.validate import check_trace

SCRIPTS = Path(__file__).resolve().parents[1] / "src" / "madengine" / "scripts" / "tools"
OUTPUTS = Path(__file__).resolve().parent / "fixtures" / "tools_outputs"
PROPERTY = settings(derandomize=True, max_examples=500 if IN_CI else 200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def written(tracer, path: Path) -> dict:
    result = tracing.flush(tracer, path, environ={})
    assert result.path == path and result.warnings == []
    doc = json.loads(path.read_text())
    assert check_trace(doc) == [], check_trace(doc)
    return doc


def slices(doc: dict) -> dict[str, dict]:
    return {e["args"][chrome.ARG_SPAN_ID]: e for e in doc["traceEvents"] if e["ph"] == "X"}


def by_name(doc: dict, name: str) -> list[dict]:
    return [e for e in doc["traceEvents"] if e["ph"] == "X" and e["name"] == name]


# --- ids and traceparent -----------------------------------------------------------------------

def test_ids_have_the_opentelemetry_format():
    tracer = tracing.Tracer()
    with tracer.span("x") as span:
        pass
    assert is_trace_id(tracer.trace_id) and is_span_id(span.span_id)
    assert len({tracing.Tracer().trace_id for _ in range(100)}) == 100


@pytest.mark.parametrize("text, expected", [
    ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
     ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", True)),
    ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
     ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", False)),
    (" 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\n",
     ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", True)),
    ("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future",  # a later version may add fields
     ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", True)),
])
def test_traceparent_parsed(text, expected):
    assert tuple(parse_traceparent(text)) == expected


@pytest.mark.parametrize("text", [
    "", "garbage", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
    "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # version ff is invalid
    "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # all-zero trace id
    "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # all-zero span id
    "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  # upper case
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",  # version 00 has four fields
    "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
])
def test_malformed_traceparent_is_none(text):
    assert parse_traceparent(text) is None


@PROPERTY
@given(st.text(max_size=80))
def test_traceparent_parser_never_raises_and_only_accepts_valid_ids(text):
    parent = parse_traceparent(text)
    assert parent is None or (is_trace_id(parent.trace_id) and is_span_id(parent.span_id))


@PROPERTY
@given(st.integers(1, 2**128 - 1), st.integers(1, 2**64 - 1), st.booleans())
def test_traceparent_round_trips(trace, span, sampled):
    text = format_traceparent(f"{trace:032x}", f"{span:016x}", sampled)
    assert parse_traceparent(text) == (f"{trace:032x}", f"{span:016x}", sampled)


def test_environment_continues_a_trace_and_a_bad_one_starts_a_new_one():
    parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    tracer = tracing.Tracer.from_environ({"TRACEPARENT": parent, "TRACESTATE": "vendor=1"})
    with tracer.span(names.SPAN_RUN) as root:
        with tracer.span(names.SPAN_MODEL) as model:
            environ = tracer.child_environ()
    assert tracer.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert root.parent_id == "00f067aa0ba902b7" and model.parent_id == root.span_id
    assert environ == {"TRACEPARENT": f"00-{tracer.trace_id}-{model.span_id}-01", "TRACESTATE": "vendor=1"}
    warnings: list[str] = []
    fresh = tracing.Tracer.from_environ({"TRACEPARENT": "nonsense"}, warn=warnings.append)
    assert fresh.trace_id != tracer.trace_id and len(warnings) == 1 and "TRACEPARENT" in warnings[0]


# --- the tracer ----------------------------------------------------------------------------

def test_spans_nest_carry_attributes_events_and_errors(tmp_path):
    tracer = tracing.Tracer(resource={names.ATTR_RUN_ID: "run-1"})
    with tracer.span(names.SPAN_RUN, {names.ATTR_EXECUTOR: "local"}) as run:
        with tracer.span(names.SPAN_MODEL, {names.ATTR_MODEL: "numpy_matmul", "none": None}) as model:
            tracer.add_event("checkpoint", {"step": 1})
            model.set_attributes({names.ATTR_STATUS: "FAILURE", names.ATTR_EXIT_CODE: 3})
            with pytest.raises(ValueError):
                with tracer.span(names.SPAN_MODEL_STEP, {names.ATTR_REPEAT: 1}):
                    raise ValueError("model crashed")
    assert tracer.current_span() is None
    doc = written(tracer, tmp_path / "trace.json")
    events = slices(doc)
    step = by_name(doc, names.SPAN_MODEL_STEP)[0]
    assert events[run.span_id]["args"][names.ATTR_EXECUTOR] == "local"
    assert events[model.span_id]["args"] == {names.ATTR_MODEL: "numpy_matmul", names.ATTR_STATUS: "FAILURE",
                                             names.ATTR_EXIT_CODE: 3, chrome.ARG_SPAN_ID: model.span_id,
                                             chrome.ARG_PARENT_ID: run.span_id}
    assert step["args"][chrome.ARG_PARENT_ID] == model.span_id
    assert step["args"][chrome.ARG_STATUS] == "error"
    assert step["args"][chrome.ARG_STATUS_MESSAGE] == "ValueError: model crashed"
    instants = {e["name"]: e for e in doc["traceEvents"] if e["ph"] == "i"}
    assert instants["checkpoint"]["args"] == {"step": 1}
    assert instants["exception"]["args"]["exception.type"] == "ValueError"
    assert doc["otherData"]["trace_id"] == tracer.trace_id
    assert doc["otherData"]["resource.madengine.run_id"] == "run-1"
    names_of = {e["name"]: e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["tid"] == 0}
    assert "run-1" in names_of["process_name"]


def test_parallel_slots_in_threads_keep_one_trace(tmp_path):
    tracer = tracing.Tracer()
    barrier = threading.Barrier(4)

    def slot(index: int) -> None:
        with tracer.span(names.SPAN_PARALLEL_SLOT, {names.ATTR_SLOT: index}):
            barrier.wait(timeout=10)  # all four slots overlap in time
            for model in range(3):
                with tracer.span(names.SPAN_MODEL, {names.ATTR_MODEL: f"m{index}-{model}"}):
                    with tracer.span(names.SPAN_MODEL_STEP):
                        time.sleep(0.001)

    with tracer.span(names.SPAN_RUN) as run:
        threads = [threading.Thread(target=tracer.bind(slot), args=(i,), name=f"slot-{i}") for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    doc = written(tracer, tmp_path / "trace.json")
    events = slices(doc)
    slots = by_name(doc, names.SPAN_PARALLEL_SLOT)
    assert len(slots) == 4 and {s["args"][chrome.ARG_PARENT_ID] for s in slots} == {run.span_id}
    assert len({s["tid"] for s in slots}) == 4  # one track per thread
    for model in by_name(doc, names.SPAN_MODEL):
        parent = events[model["args"][chrome.ARG_PARENT_ID]]
        assert parent["name"] == names.SPAN_PARALLEL_SLOT and parent["tid"] == model["tid"]
    thread_names = {e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {f"slot-{i}" for i in range(4)} <= thread_names


def test_flushing_while_threads_record_gives_a_valid_file_each_time(tmp_path):
    tracer = tracing.Tracer()
    stop = threading.Event()

    def busy(index: int) -> None:
        for count in range(400):  # bounded: the file is validated after every flush
            if stop.is_set():
                return
            with tracer.span(names.SPAN_MODEL_STEP) as span:
                for key in range(20):
                    span.set_attribute(f"k{key}", count)
                span.add_event("tick")
            time.sleep(0.0005)

    with tracer.span(names.SPAN_RUN):
        threads = [threading.Thread(target=tracer.bind(busy), args=(i,)) for i in range(3)]
        for thread in threads:
            thread.start()
        try:
            for _ in range(10):
                doc = written(tracer, tmp_path / "trace.json")  # open spans included, still well formed
                assert by_name(doc, names.SPAN_RUN)[0]["args"][chrome.ARG_UNFINISHED] is True
        finally:
            stop.set()
            for thread in threads:
                thread.join()
    assert len(by_name(written(tracer, tmp_path / "trace.json"), names.SPAN_MODEL_STEP)) > 10


def test_span_ended_by_another_thread_and_overlaps_stay_well_formed(tmp_path):
    tracer = tracing.Tracer()
    with tracer.span(names.SPAN_RUN):
        first = tracer.start_span("job-1")
        second = tracer.start_span("job-2")  # overlaps job-1 on the same thread without nesting
        time.sleep(0.002)
        ender = threading.Thread(target=first.end)
        ender.start()
        ender.join()
        time.sleep(0.002)
        second.end()
        second.end()  # a second end changes nothing
    doc = written(tracer, tmp_path / "trace.json")
    one, two = by_name(doc, "job-1")[0], by_name(doc, "job-2")[0]
    assert one["tid"] != two["tid"]  # moved to a second track of the thread so that slices nest
    assert one["dur"] < two["dur"]


def test_unfinished_spans_are_written_as_far_as_they_got(tmp_path):
    tracer = tracing.Tracer()
    run = tracer.start_span(names.SPAN_RUN)
    with tracer.activate(run):
        with tracer.span(names.SPAN_MODEL):
            pass
    doc = written(tracer, tmp_path / "trace.json")
    assert by_name(doc, names.SPAN_RUN)[0]["args"][chrome.ARG_UNFINISHED] is True
    run.end()
    assert chrome.ARG_UNFINISHED not in by_name(written(tracer, tmp_path / "trace.json"), names.SPAN_RUN)[0]["args"]


def test_secrets_are_masked_in_the_trace(tmp_path):
    register_secret("hunter2-password")
    tracer = tracing.Tracer()
    with pytest.raises(RuntimeError):
        with tracer.span("login", {"url": "https://user:hunter2-password@host/"}):
            raise RuntimeError("bad password hunter2-password")
    text = (written(tracer, tmp_path / "trace.json") and (tmp_path / "trace.json").read_text())
    assert "hunter2-password" not in text and MASK in text


def test_disabled_tracer_records_and_writes_nothing(tmp_path):
    tracer = tracing.Tracer.from_environ({"TRACEPARENT": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
                                         enabled=False)
    assert tracer is tracing.NULL_TRACER and tracer.trace_id == ""
    with tracer.span(names.SPAN_RUN, {"a": 1}) as span:
        span.set_attribute("b", 2)
        span.add_event("e")
        span.set_error("x")
        tracer.add_span("late", 1, 2)
        tracer.add_counter("c", [1], [1.0])
    assert span is tracing.NULL_SPAN and tracer.child_environ() == {} and tracer.bind(len) is len
    result = tracing.flush(tracer, tmp_path / "trace.json", environ={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"})
    assert result.path is None and not (tmp_path / "trace.json").exists()


def test_trace_file_is_replaced_atomically(tmp_path):
    tracer = tracing.Tracer()
    with tracer.span("a"):
        pass
    target = tmp_path / "run" / "trace.json"
    written(tracer, target)
    written(tracer, target)
    assert sorted(p.name for p in target.parent.iterdir()) == ["trace.json"]  # no temporary file left


def test_unwritable_trace_file_is_one_warning_not_a_failure(tmp_path):
    tracer = tracing.Tracer()
    with tracer.span("a"):
        pass
    (tmp_path / "file").write_text("x")
    warnings: list[str] = []
    result = tracing.flush(tracer, tmp_path / "file" / "trace.json", environ={}, warn=warnings.append)
    assert result.path is None and len(warnings) == 1 and "cannot write the trace file" in warnings[0]


def test_counter_tracks(tmp_path):
    tracer = tracing.Tracer()
    with tracer.span(names.SPAN_MODEL) as model:
        now = tracer.now_ns()
        tracer.add_counter("gpu.power_w", [now, now + 1_000_000], [100.0, 250.5], unit="W", parent=model)
    doc = written(tracer, tmp_path / "trace.json")
    counters = [e for e in doc["traceEvents"] if e["ph"] == "C"]
    assert [c["args"] for c in counters] == [{"W": 100.0}, {"W": 250.5}]
    assert counters[1]["ts"] - counters[0]["ts"] == 1000
    assert counters[0]["tid"] == by_name(doc, names.SPAN_MODEL)[0]["tid"]


# --- merging child traces ----------------------------------------------------------------------

def _child_trace(parent_tracer, parent_span, path: Path, model: str) -> str:
    child = tracing.Tracer.from_environ(parent_tracer.child_environ(parent_span))
    with child.span(names.SPAN_RUN) as root:
        with child.span(names.SPAN_MODEL, {names.ATTR_MODEL: model}):
            time.sleep(0.001)
    tracing.flush(child, path, environ={})
    return root.span_id


def test_child_traces_merge_once_with_their_own_processes_and_arrows(tmp_path):
    parent = tracing.Tracer()
    with parent.span(names.SPAN_RUN):
        tasks = [parent.start_span(names.SPAN_SLURM_TASK, {names.ATTR_SLURM_TASK_ID: i}) for i in range(2)]
        roots = [_child_trace(parent, task, tmp_path / f"task{i}.json", f"m{i}") for i, task in enumerate(tasks)]
        for task in tasks:
            task.end()
    target = tmp_path / "trace.json"
    written(parent, target)
    result = tracing.merge_trace_files(target, [tmp_path / "task0.json", tmp_path / "task1.json"])
    assert len(result.merged) == 2 and result.other_traces == []
    doc = json.loads(target.read_text())
    assert check_trace(doc) == []
    assert len({e["pid"] for e in doc["traceEvents"]}) == 3  # the tasks share our pid, yet get their own
    flows = [e for e in doc["traceEvents"] if e["ph"] in ("s", "f")]
    assert len(flows) == 4
    events = slices(doc)
    for task, root in zip(tasks, roots):
        assert events[root]["args"][chrome.ARG_PARENT_ID] == task.span_id
    again = tracing.merge_trace_files(target, [tmp_path / "task0.json"])
    assert again.merged == [] and len(again.skipped) == 1
    assert len(json.loads(target.read_text())["traceEvents"]) == len(doc["traceEvents"])


def test_attached_child_trace_is_merged_at_flush_and_a_bad_one_is_a_warning(tmp_path):
    parent = tracing.Tracer()
    with parent.span(names.SPAN_RUN) as run:
        _child_trace(parent, run, tmp_path / "child.json", "m")
    (tmp_path / "broken.json").write_text("{")
    parent.attach_child_trace(tmp_path / "child.json")
    parent.attach_child_trace(tmp_path / "broken.json")
    warnings: list[str] = []
    result = tracing.flush(parent, tmp_path / "trace.json", environ={}, warn=warnings.append)
    doc = json.loads(result.path.read_text())
    assert check_trace(doc) == [] and len(by_name(doc, names.SPAN_MODEL)) == 1
    assert len(warnings) == 1 and "broken.json" in warnings[0]


def test_validator_finds_what_viewers_reject():
    good = {"ph": "X", "name": "a", "ts": 0, "dur": 10, "pid": 1, "tid": 1}
    assert check_trace({"traceEvents": [good]}) == []
    assert "no tid" in check_trace([{"ph": "X", "name": "a", "ts": 0, "dur": 1, "pid": 1}])[0]
    overlap = [good, {**good, "name": "b", "ts": 5, "dur": 10}]
    assert "without nesting" in check_trace(overlap)[0]
    assert "never ends" in check_trace([{"ph": "B", "name": "a", "ts": 0, "pid": 1, "tid": 1}])[0]
    assert "has no B" in check_trace([{"ph": "E", "name": "a", "ts": 0, "pid": 1, "tid": 1}])[0]
    paired = [{"ph": "B", "name": "a", "ts": 0, "pid": 1, "tid": 1}, {"ph": "E", "ts": 5, "pid": 1, "tid": 1},
              {**good, "name": "c", "ts": 4, "dur": 3}]
    assert "without nesting" in check_trace(paired)[0]
    assert "counter" in check_trace([{"ph": "C", "name": "c", "ts": 0, "pid": 1, "tid": 1, "args": {"v": "x"}}])[0]
    assert "no end" in check_trace([{"ph": "s", "id": 1, "ts": 0, "pid": 1, "tid": 1}])[0]


def test_perfetto_trace_processor_loads_the_file(tmp_path):
    """Perfetto's own importer, when its trace_processor_shell binary is at hand.

    The ``perfetto`` package downloads that binary on first use; this workplace (and CI) cannot
    reach the internet, so the test needs PERFETTO_TRACE_PROCESSOR=/path/to/trace_processor_shell.
    """
    binary = os.environ.get("PERFETTO_TRACE_PROCESSOR") or shutil.which("trace_processor_shell")
    if not binary:
        pytest.skip("skipped here and in CI alike: the perfetto package downloads trace_processor_shell at first "
                    "use and there is no internet; set PERFETTO_TRACE_PROCESSOR to a local binary to run it")
    from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig

    tracer = tracing.Tracer()
    with tracer.span(names.SPAN_RUN):
        with tracer.span(names.SPAN_MODEL):
            pass
    path = tmp_path / "trace.json"
    written(tracer, path)
    processor = TraceProcessor(trace=str(path), config=TraceProcessorConfig(bin_path=binary))
    rows = {(r.name, r.depth) for r in processor.query("select name, depth from slice")}
    processor.close()
    assert rows == {(names.SPAN_RUN, 0), (names.SPAN_MODEL, 1)}


# --- converters --------------------------------------------------------------------------------

def test_ort_profile_becomes_child_spans_of_the_inference_span(tmp_path):
    try:
        import onnxruntime as ort
    except ImportError:
        ort = None
    require_service("onnxruntime", ort is not None, "installed by the onnx extra: pip install -e '.[all]'")
    import numpy as np

    from test_bench_harness import build_mlp

    model = build_mlp(tmp_path / "mlp.onnx")
    tracer = tracing.Tracer()
    with tracer.span(names.SPAN_INFERENCE) as inference:
        options = ort.SessionOptions()
        options.enable_profiling = True
        options.profile_file_prefix = str(tmp_path / "ort_profile")
        session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        start = session.get_profiling_start_time_ns()
        feeds = {i.name: np.ones([2 if not isinstance(d, int) else d for d in i.shape], np.float32)
                 for i in session.get_inputs()}
        for _ in range(6):
            session.run(None, feeds)
        profile = Path(session.end_profiling())
    spans = convert.ort_profile_spans(profile, inference, start_ns=convert.ort_start_ns(tracer, start),
                                      skip_runs=2, max_runs=3)
    runs = [s for s in spans if s.name == names.SPAN_ORT_MODEL_RUN]
    assert [r.attributes[names.ATTR_ORT_RUN_INDEX] for r in runs] == [2, 3, 4]
    assert {r.parent_id for r in runs} == {inference.span_id}
    ops = [s for s in spans if s.name != names.SPAN_ORT_MODEL_RUN]
    assert ops and {o.parent_id for o in ops} <= {r.span_id for r in runs}
    assert all(o.attributes[names.ATTR_ORT_PROVIDER] == "CPUExecutionProvider" for o in ops)
    for span in spans:  # placed on our clock: inside the inference span
        assert inference.start_ns <= span.start_ns <= span.end_ns <= inference.end_ns
    tracer.add_spans(spans)
    doc = written(tracer, tmp_path / "trace.json")
    assert len([e for e in doc["traceEvents"] if e.get("cat") == "ort"]) == len(spans)
    # without the start time, the profile is placed at the inference span's start
    placed = convert.ort_profile_spans(profile, inference)
    assert min(s.start_ns for s in placed) >= inference.start_ns
    assert convert.ort_profile_spans(profile, tracing.NULL_SPAN) == []


def test_cpu_monitor_samples_become_counter_tracks(tmp_path):
    out = tmp_path / "cpu_monitor.csv"
    # 0.6 s of CPU time, however long a loaded machine takes to give it
    busy = "import time\nwhile time.process_time() < 0.6: pass\n"
    subprocess.run([sys.executable, str(SCRIPTS / "cpu_monitor.py"), "--output", str(out), "--summary",
                    str(tmp_path / "summary.json"), "--interval", "0.05", "--", sys.executable, "-c", busy],
                   check=True, timeout=60)
    tracks = {t.name: t for t in convert.tool_counter_tracks(out)}
    assert {"cpu_monitor.cpu_percent", "cpu_monitor.rss_mb", "cpu_monitor.processes"} <= set(tracks)
    cpu = tracks["cpu_monitor.cpu_percent"]
    assert len(cpu.values) >= 3 and cpu.unit == "%"
    assert cpu.timestamps_ns == sorted(cpu.timestamps_ns)
    # the samples add up to the CPU time the command used (each covers the time since the one before;
    # the first window and the last are not all seen), whatever share of a CPU it got
    windows = zip(cpu.timestamps_ns, cpu.timestamps_ns[1:], cpu.values[1:])
    assert 0.3 < sum(percent / 100 * (end - start) / 1e9 for start, end, percent in windows) < 1.2, cpu.values
    assert abs(cpu.timestamps_ns[0] / 1e9 - time.time()) < 3600  # the epoch's clock, not the monotonic one


def test_gpu_sampler_samples_become_one_track_per_device(tmp_path):
    # no GPU here: a fake nvidia-smi replays a recording of an 8-GPU H100 machine to the real sampler
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(f"#!/usr/bin/env bash\ncat {OUTPUTS / 'nvidia_smi_h100_nounits.csv'}\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    out = tmp_path / "gpu_info_power_profiler_output.csv"
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}
    subprocess.run([sys.executable, str(SCRIPTS / "gpu_sampler.py"), "--backend", "nvidia-smi", "--output", str(out),
                    "--interval", "0.05", "--max-seconds", "0.3"], env=env, check=True, timeout=60)
    tracks = {t.name: t for t in convert.tool_counter_tracks(out)}
    assert {f"gpu_power.gpu{d}.power_w" for d in range(8)} <= set(tracks)
    assert tracks["gpu_power.gpu0.power_w"].values[0] == 698.41 and tracks["gpu_power.gpu0.power_w"].unit == "W"
    assert tracks["gpu_power.gpu0.vram_used_mb"].values[0] == 70913.0
    assert tracks["gpu_power.gpu0.power_w"].attributes == {"gpu.device": "0"}


def test_converters_tolerate_missing_and_partial_files(tmp_path):
    assert convert.tool_counter_tracks(tmp_path / "cpu_monitor.csv") == []
    assert convert.tool_counter_tracks(tmp_path / "other.csv") == []
    partial = tmp_path / "cpu_monitor.csv"
    partial.write_text("timestamp,elapsed_s,processes,cpu_percent,rss_mb\n1790000000.5,0.5,1,50,12\n1790000001,1")
    tracks = convert.cpu_monitor_tracks(partial)
    assert [t.values for t in tracks] == [[50.0], [12.0], [1.0]]
    (tmp_path / "ort_profile.json").write_text('[{"cat": "Session", "name": "model_run", "ts": 1')  # cut short
    tracer = tracing.Tracer()
    with tracer.span(names.SPAN_INFERENCE) as inference:
        pass
    assert convert.ort_profile_spans(tmp_path / "ort_profile.json", inference) == []
    assert convert.ort_profile_spans(tmp_path / "missing.json", inference) == []


@PROPERTY
@given(st.lists(st.dictionaries(st.sampled_from(["timestamp", "device", "power_w", "vram_used_mb", "cpu_percent"]),
                                st.one_of(st.text(max_size=8), st.floats(allow_nan=True), st.none())), max_size=8))
def test_converters_never_raise_on_odd_rows(rows):
    for track in convert.cpu_monitor_tracks(rows) + convert.gpu_sampler_tracks(rows):
        assert len(track.timestamps_ns) == len(track.values) and all(v == v for v in track.values)


@PROPERTY
@given(st.lists(st.fixed_dictionaries({"cat": st.sampled_from(["Session", "Node", "x"]),
                                       "name": st.sampled_from(["model_run", "a_kernel_time", "b"]),
                                       "ts": st.one_of(st.integers(-5, 10**6), st.text(max_size=3)),
                                       "dur": st.one_of(st.integers(0, 10**4), st.none())}), max_size=12))
def test_ort_converter_never_raises_on_odd_events(events):
    tracer = tracing.Tracer()
    with tracer.span(names.SPAN_INFERENCE) as inference:
        pass
    for span in convert.ort_profile_spans(events, inference):
        assert span.end_ns >= span.start_ns
