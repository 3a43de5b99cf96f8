"""Every run is traced across the stack: spans over OTLP to a real receiver and in trace.json,
trace_id in every row, a trace link in perf.html, the exporter that is down never in the way."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from conftest import BASE_IMAGE, run_process
from madengine.results import read_rows
from madengine.tracing.validate import check_trace

SCRIPT = "#!/usr/bin/env bash\necho 'performance: 42 items/s'\n"


@pytest.fixture
def repo(tmp_path, monkeypatch):
    root = tmp_path / "repo"
    (root / "docker").mkdir(parents=True)
    (root / "docker" / "tr.Dockerfile").write_text(f"FROM {BASE_IMAGE}\n")
    (root / "scripts").mkdir()
    (root / "scripts" / "run.sh").write_text(SCRIPT)
    (root / "models.json").write_text(json.dumps([
        {"name": "tr_one", "dockerfile": "docker/tr", "scripts": "scripts/run.sh", "tags": ["tr"]},
        {"name": "tr_two", "dockerfile": "docker/tr", "scripts": "scripts/run.sh", "tags": ["tr"]}]))
    monkeypatch.chdir(root)
    return root


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("executor", ["local", "docker"])
def test_run_spans_reach_the_collector_with_their_tree_and_attributes(repo, executor, otlp_receiver, request):
    if executor == "docker":
        request.getfixturevalue("docker_client")
        request.getfixturevalue("docker_cleanup").append("ci-tr_")
    done = run_process("run", "--tags", "tr", "--executor", executor, "--repeat", "2", cwd=repo,
                       env=otlp_receiver.environ)
    assert done.returncode == 0, done.stderr
    spans = {s.span_id: s for s in otlp_receiver.spans}
    by_name: dict[str, list] = {}
    for span in spans.values():
        by_name.setdefault(span.name, []).append(span)
    (run,) = by_name["madengine.run"]
    assert run.parent_span_id == "" and run.attributes["madengine.executor"] == executor
    assert spans[by_name["context_detection"][0].parent_span_id].name == "madengine.run"
    models = {s.attributes["madengine.model"]: s for s in by_name["model"]}
    assert set(models) == {"tr_one", "tr_two"}
    for model in models.values():
        assert model.parent_span_id == run.span_id and model.attributes["madengine.status"] == "SUCCESS"
        assert model.attributes["madengine.performance"] == 42 and model.attributes["madengine.metric"] == "items/s"
    steps = [s for s in by_name["model_step"] if s.parent_span_id == models["tr_one"].span_id]
    assert sorted(s.attributes["madengine.repeat"] for s in steps) == [1, 2]
    if executor == "docker":
        assert {"image_build", "container_start"} <= set(by_name)
        starts = [s for s in by_name["container_start"] if s.parent_span_id == models["tr_one"].span_id]
        assert starts and starts[0].attributes["madengine.image"] == "ci-tr_one_tr"
    assert all(s.trace_id == run.trace_id for s in spans.values())
    rows = read_rows(repo / "perf.csv")
    assert {r["trace_id"] for r in rows} == {run.trace_id}
    trace_file = next((repo / "madengine_runs").glob("*/trace.json"))
    document = json.loads(trace_file.read_text())
    check_trace(document)
    assert document["otherData"]["trace_id"] == run.trace_id
    assert 'href="madengine_runs/' in (repo / "perf.html").read_text()  # each row links to its trace


def test_no_trace_and_trace_file(repo, cli, tmp_path):
    assert cli("run", "--tags", "tr_one", "--executor", "local", "--no-trace").code == 0
    assert read_rows(repo / "perf.csv")[0]["trace_id"] == ""
    assert not list((repo / "madengine_runs").glob("*/trace.json"))
    target = tmp_path / "elsewhere" / "run.trace.json"
    assert cli("run", "--tags", "tr_one", "--executor", "local", "--trace", str(target)).code == 0
    check_trace(json.loads(target.read_text()))


def test_a_collector_that_is_down_never_fails_or_holds_up_the_run(repo):
    done = run_process("run", "--tags", "tr", "--executor", "local", cwd=repo, timeout=120,
                       env={"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{_closed_port()}",
                            "OTEL_EXPORTER_OTLP_TIMEOUT": "30"})
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "OTLP export" in line]
    assert len(warnings) == 1 and "failed" in warnings[0], done.stderr  # said once, not per model
    assert next((repo / "madengine_runs").glob("*/trace.json")).is_file()


def test_trace_diff_of_two_real_runs(repo, cli):
    for _ in range(2):
        assert cli("run", "--tags", "tr_one", "--executor", "local").code == 0
    first, second = sorted(p.name for p in (repo / "madengine_runs").iterdir())
    result = cli("report", "trace-diff", first, second, "tr_one", "--json")
    assert result.code == 0, result
    phases = {p["phase"] for m in json.loads(result.stdout)["models"] for p in m["phases"]}
    assert {"model_step #1", "parsing", "recording"} <= phases or {"model_step", "parsing"} <= phases, phases


def test_parallel_slots_keep_one_trace(repo, cli):
    assert cli("run", "--tags", "tr", "--executor", "local", "--parallel", "2").code == 0
    document = json.loads(next((repo / "madengine_runs").glob("*/trace.json")).read_text())
    check_trace(document)
    ids = {e["args"].get("span.id"): e for e in document["traceEvents"] if e.get("ph") == "X"}
    (run,) = [e for e in ids.values() if e["name"] == "madengine.run"]
    models = [e for e in ids.values() if e["name"] == "model"]
    assert len(models) == 2
    for model in models:  # each slot's model hangs off the run, through its slot span
        parent = ids[model["args"]["span.parent_id"]]
        assert parent["name"] in ("madengine.run", "parallel_slot")
        if parent["name"] == "parallel_slot":
            assert parent["args"]["span.parent_id"] == run["args"]["span.id"]
