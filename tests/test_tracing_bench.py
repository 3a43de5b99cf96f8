"""bench, bench SCRIPT.py and scorecard are traced like run: spans over OTLP to a real receiver and in
trace.json (ORT's per-operator events under the profiled inference span), trace_id in every row;
and a run's tool time series (the real CPU monitor) become counter tracks of its model span."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from conftest import FIXTURES, run_process
from test_bench_harness import build_mlp
from madengine.bench.backends import base as backends_base
from madengine.bench.harness import engine
from madengine.results import read_rows
from madengine.tracing import names
from madengine.tracing.validate import check_trace

FAST = ("--iterations", "20", "--warmup", "3", "--threads", "1")


def _tree(spans) -> tuple[dict, dict]:
    """(spans by id, spans by name)."""
    by_id = {s.span_id: s for s in spans}
    by_name: dict[str, list] = {}
    for span in spans:
        by_name.setdefault(span.name, []).append(span)
    return by_id, by_name


def _children(spans, parent) -> dict[str, list]:
    found: dict[str, list] = {}
    for span in spans:
        if span.parent_span_id == parent.span_id:
            found.setdefault(span.name, []).append(span)
    return found


def _trace_file(runs: Path) -> dict:
    (path,) = list(runs.glob("*/trace.json"))
    document = json.loads(path.read_text())
    check_trace(document)
    return document


def test_the_harness_names_its_phases_with_the_span_names():
    assert (engine.PHASE_SESSION_CREATE, engine.PHASE_FIRST_INFERENCE, engine.PHASE_WARMUP, engine.PHASE_INFERENCE,
            engine.PHASE_PROFILE, backends_base.PHASE_PREPARE) == (
        names.SPAN_SESSION_CREATE, names.SPAN_FIRST_INFERENCE, names.SPAN_WARMUP, names.SPAN_INFERENCE,
        names.SPAN_PROFILE, names.SPAN_PREPARE)


def test_bench_profile_spans_reach_the_collector_with_ort_operators_under_the_inference_span(tmp_path,
                                                                                           otlp_receiver):
    model = build_mlp(tmp_path / "mlp.onnx", batch_dim=4)
    done = run_process("bench", str(model), "--profile", *FAST, "-o", "perf.csv", cwd=tmp_path,
                       env=otlp_receiver.environ)
    assert done.returncode == 0, done.stderr
    spans = otlp_receiver.spans
    by_id, by_name = _tree(spans)
    (root,) = by_name[names.SPAN_BENCH]
    assert root.parent_span_id == "" and root.attributes[names.ATTR_EXECUTOR] == "bench"
    (model_span,) = by_name[names.SPAN_MODEL]
    assert model_span.parent_span_id == root.span_id
    attributes = model_span.attributes
    assert attributes[names.ATTR_MODEL] == "mlp" and attributes[names.ATTR_BACKEND] == "onnxruntime-cpu"
    assert attributes[names.ATTR_STATUS] == "SUCCESS" and attributes[names.ATTR_METRIC] == "samples_per_second"
    assert attributes[names.ATTR_PERFORMANCE] > 0
    phases = _children(spans, model_span)
    assert {names.SPAN_SESSION_CREATE, names.SPAN_FIRST_INFERENCE, names.SPAN_WARMUP, names.SPAN_INFERENCE,
            names.SPAN_PROFILE, names.SPAN_RECORDING} <= set(phases)
    (timed,) = phases[names.SPAN_INFERENCE]
    assert names.ATTR_PROFILED not in timed.attributes
    (profile,) = phases[names.SPAN_PROFILE]
    inside = _children(spans, profile)
    assert set(inside) == {names.SPAN_SESSION_CREATE, names.SPAN_INFERENCE}
    (profiled,) = inside[names.SPAN_INFERENCE]
    assert profiled.attributes[names.ATTR_PROFILED] is True
    runs = _children(spans, profiled)[names.SPAN_ORT_MODEL_RUN]
    assert len(runs) == 10  # the steady-state runs (warm-up runs left out), at most 10
    for run in runs:
        assert profiled.start_ns <= run.start_ns <= run.end_ns <= profiled.end_ns
    operators = [s for s in spans if by_id.get(s.parent_span_id) in runs]
    assert operators and all(s.attributes[names.ATTR_ORT_OP_TYPE] == s.name for s in operators)
    assert {s.attributes[names.ATTR_ORT_PROVIDER] for s in operators} == {"CPUExecutionProvider"}
    assert {s.trace_id for s in spans} == {root.trace_id}
    (row,) = read_rows(tmp_path / "perf.csv")
    assert row["trace_id"] == root.trace_id
    assert f'href="madengine_runs/{row["run_id"]}/trace.json"' in (tmp_path / "perf.html").read_text()
    document = _trace_file(tmp_path / "madengine_runs")
    assert document["otherData"]["trace_id"] == root.trace_id
    events = {e["args"]["span.id"]: e for e in document["traceEvents"] if e["ph"] == "X"}
    profiled_event = events[profiled.span_id]
    # ORT's clock and the tracer's agree: the operators nest on the profiled inference's own track
    assert {events[s.span_id]["tid"] for s in runs + operators} == {profiled_event["tid"]}


def test_bench_no_trace_and_trace_file(tmp_path, cli, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = build_mlp(tmp_path / "mlp.onnx", batch_dim=2)
    result = cli("bench", str(model), *FAST, "--no-trace", "--json", "--no-html")
    assert result.code == 0, result
    assert json.loads(result.stdout)["trace_id"] == "" and read_rows(tmp_path / "perf.csv")[0]["trace_id"] == ""
    assert not list((tmp_path / "madengine_runs").glob("*/trace.json"))
    target = tmp_path / "elsewhere" / "bench.trace.json"
    result = cli("bench", str(model), *FAST, "--trace", str(target), "--json", "--no-html")
    assert result.code == 0, result
    summary = json.loads(result.stdout)
    assert summary["trace"] == str(target) and f"trace {target}" in result.stderr
    document = json.loads(target.read_text())
    check_trace(document)
    assert document["otherData"]["trace_id"] == summary["trace_id"] == read_rows(tmp_path / "perf.csv")[1]["trace_id"]


def test_scorecard_spans_per_cell_reach_the_collector(tmp_path, otlp_receiver):
    build_mlp(tmp_path / "mlp.onnx", batch_dim=2)
    (tmp_path / "suite.yaml").write_text("models:\n  - name: mlp\n    path: mlp.onnx\n")
    done = run_process("scorecard", "suite.yaml", "--backends", "onnxruntime-cpu-opt-all", *FAST, "-o", "perf.csv",
                       cwd=tmp_path, env=otlp_receiver.environ)
    assert done.returncode == 0, done.stderr
    spans = otlp_receiver.spans
    _, by_name = _tree(spans)
    (root,) = by_name[names.SPAN_SCORECARD]
    assert root.parent_span_id == "" and root.attributes[names.ATTR_EXECUTOR] == "scorecard"
    cells = {s.attributes[names.ATTR_BACKEND]: s for s in by_name[names.SPAN_MODEL]}
    assert set(cells) == {"onnxruntime-cpu-opt-disabled", "onnxruntime-cpu-opt-all"}  # the reference, then the cell
    for backend, cell in cells.items():
        assert cell.parent_span_id == root.span_id and cell.attributes[names.ATTR_MODEL] == "mlp"
        assert cell.attributes[names.ATTR_SCORECARD_STATUS] == "PASS" and cell.attributes[names.ATTR_STATUS] == "SUCCESS"
        assert cell.attributes[names.ATTR_PERFORMANCE] > 0
        phases = set(_children(spans, cell))
        assert {names.SPAN_PREPARE, names.SPAN_FIRST_INFERENCE, names.SPAN_WARMUP, names.SPAN_INFERENCE,
                names.SPAN_RECORDING} <= phases
        assert (names.SPAN_CHECK in phases) == (backend == "onnxruntime-cpu-opt-all")  # the reference is not checked
    assert cells["onnxruntime-cpu-opt-all"].attributes[names.ATTR_LATENCY_RATIO] > 0
    assert len(otlp_receiver.requests) == 1  # a short command sends one batch, at its end
    assert {r["trace_id"] for r in read_rows(tmp_path / "perf.csv")} == {root.trace_id}
    assert _trace_file(tmp_path / "madengine_runs")["otherData"]["trace_id"] == root.trace_id


def test_bench_script_spans_per_model_and_backend(tmp_path):
    shutil.copy(FIXTURES / "scripts" / "two_models.py", tmp_path / "two_models.py")
    done = run_process("bench", "two_models.py", "--iterations", "3", "--warmup", "1", "--threads", "1",
                       "--cache-dir", "cache", "-o", "perf.csv", "--no-html", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    document = _trace_file(tmp_path / "madengine_runs")
    spans = {e["args"]["span.id"]: e for e in document["traceEvents"] if e["ph"] == "X"}

    def parent(event):
        return spans.get(event["args"]["span.parent_id"])

    (script,) = [e for e in spans.values() if e["name"] == names.SPAN_SCRIPT]
    assert parent(script)["name"] == names.SPAN_BENCH and script["args"][names.ATTR_SCRIPT] == "two_models.py"
    assert [parent(e) for e in spans.values() if e["name"] == names.SPAN_ANALYSIS] == [script]
    builds = [e for e in spans.values() if e["name"] == names.SPAN_ONNX_BUILD]
    assert len(builds) == 2 and all(b["args"][names.ATTR_BUILD_CACHE] == "built" for b in builds)
    models = [e for e in spans.values() if e["name"] == names.SPAN_MODEL]
    assert sorted((m["args"][names.ATTR_MODEL].split("::")[0], m["args"][names.ATTR_BACKEND]) for m in models) == [
        ("two_models", "onnxruntime-cpu"), ("two_models", "onnxruntime-cpu"), ("two_models", "torch-eager"),
        ("two_models", "torch-eager")]
    for model in models:
        assert parent(model) is script and model["args"][names.ATTR_STATUS] == "SUCCESS"
        phases = {e["name"] for e in spans.values() if parent(e) is model}
        assert {names.SPAN_PREPARE, names.SPAN_FIRST_INFERENCE, names.SPAN_INFERENCE} <= phases
        assert (names.SPAN_CHECK in phases) == (model["args"][names.ATTR_BACKEND] == "onnxruntime-cpu")
    assert {r["trace_id"] for r in read_rows(tmp_path / "perf.csv")} == {document["otherData"]["trace_id"]}


def test_trace_diff_of_two_bench_runs_lines_up_their_phases(tmp_path, cli, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = build_mlp(tmp_path / "mlp.onnx", batch_dim=2)
    for _ in range(2):
        assert cli("bench", str(model), *FAST, "--no-html").code == 0
    first, second = sorted(p.name for p in (tmp_path / "madengine_runs").iterdir())
    result = cli("report", "trace-diff", first, second, "mlp", "--json")
    assert result.code == 0, result
    (model_diff,) = json.loads(result.stdout)["models"]
    assert model_diff["model"] == "mlp (onnxruntime-cpu)"
    assert [p["phase"] for p in model_diff["phases"]] == [
        names.SPAN_SESSION_CREATE, names.SPAN_FIRST_INFERENCE, names.SPAN_WARMUP, names.SPAN_INFERENCE,
        names.SPAN_RECORDING, "total"]


def test_cpu_monitor_samples_become_counter_tracks_of_the_model_span(model_repo, otlp_receiver):
    context = "{'tools': [{'name': 'cpu_monitor', 'env_vars': {'CPU_MONITOR_SAMPLING_RATE': '0.2'}}]}"
    done = run_process("run", "--tags", "tooltests_busy", "--executor", "local", "--additional-context", context,
                       cwd=model_repo, env=otlp_receiver.environ)
    assert done.returncode == 0, done.stderr
    (model_span,) = otlp_receiver.by_name(names.SPAN_MODEL)
    counters = {attrs["counter.name"]: attrs for name, _, attrs in model_span.events if name == "counter_track"}
    assert {"cpu_monitor.cpu_percent", "cpu_monitor.rss_mb", "cpu_monitor.processes"} <= set(counters)
    assert counters["cpu_monitor.cpu_percent"]["counter.samples"] >= 3
    assert counters["cpu_monitor.cpu_percent"]["counter.unit"] == "%"
    document = _trace_file(model_repo / "madengine_runs")
    model_event = next(e for e in document["traceEvents"] if e.get("args", {}).get("span.id") == model_span.span_id)
    samples = [e for e in document["traceEvents"] if e["ph"] == "C" and e["name"] == "cpu_monitor.cpu_percent"]
    assert len(samples) == counters["cpu_monitor.cpu_percent"]["counter.samples"]
    assert {e["tid"] for e in samples} == {model_event["tid"]}  # on the model's track
    assert all(model_event["ts"] <= e["ts"] <= model_event["ts"] + model_event["dur"] for e in samples)
    rss = [e["args"]["MiB"] for e in document["traceEvents"] if e["ph"] == "C" and e["name"] == "cpu_monitor.rss_mb"]
    assert max(rss) >= 64  # busy.py holds 64 MiB: the real samples, not placeholders
    assert re.fullmatch(r"[0-9a-f]{32}", read_rows(model_repo / "perf.csv")[0]["trace_id"])


def test_checkpoints_export_every_interval_and_always_write_the_file(tmp_path, otlp_receiver, monkeypatch):
    from types import SimpleNamespace

    from madengine.tracing import command

    settings = SimpleNamespace(trace=True, trace_file=None)
    tracer = command.start_tracer(settings, otlp_receiver.environ, print, "r1")
    with tracer.span(names.SPAN_MODEL):
        pass
    command.tracer_checkpoint(tracer, settings, tmp_path, otlp_receiver.environ, print)
    assert (tmp_path / names.TRACE_FILE).is_file() and otlp_receiver.requests == []  # not due yet
    monkeypatch.setattr(command, "EXPORT_INTERVAL_S", 0.0)
    command.tracer_checkpoint(tracer, settings, tmp_path, otlp_receiver.environ, print)
    assert [s.name for s in otlp_receiver.spans] == [names.SPAN_MODEL]
    with tracer.span(names.SPAN_RECORDING):
        pass
    command.finish_tracer(tracer, settings, tmp_path, otlp_receiver.environ, print)
    assert [s.name for s in otlp_receiver.spans] == [names.SPAN_MODEL, names.SPAN_RECORDING]  # each span once
