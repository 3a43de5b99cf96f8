"""``madengine report trace-diff``: two runs' phase timelines, from trace.json files the tracer wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from conftest import IN_CI
from madengine import tracing
from madengine.core.errors import InputError
from madengine.tracing import diff, names

MS = 1_000_000


def write_run(runs_dir: Path, run_id: str, phases: dict[str, dict[str, float | list[float]]]) -> Path:
    """A trace.json as the run path writes it, with phase durations (ms) laid out end to end."""
    tracer = tracing.Tracer(resource={names.ATTR_RUN_ID: run_id})
    clock = tracer.now_ns()
    run = tracer.start_span(names.SPAN_RUN, start_ns=clock)
    context = tracer.add_span(names.SPAN_CONTEXT_DETECTION, clock, clock + 5 * MS, parent=run)
    clock = context.end_ns
    for model, timings in phases.items():
        name, _, tags = model.partition(":")
        start = clock
        model_span = tracer.start_span(names.SPAN_MODEL, {names.ATTR_MODEL: name, names.ATTR_TAG_CONFIGS: tags},
                                       parent=run, start_ns=start)
        for phase, value in timings.items():
            for repeat, ms in enumerate(value if isinstance(value, list) else [value], start=1):
                attributes = {names.ATTR_REPEAT: repeat} if phase == names.SPAN_MODEL_STEP else None
                tracer.add_span(phase, clock, clock + int(ms * MS), attributes, parent=model_span)
                clock += int(ms * MS)
        model_span.end(clock)
    run.end(clock)
    path = runs_dir / run_id / "trace.json"
    tracing.flush(tracer, path, environ={})
    return path


@pytest.fixture
def two_runs(tmp_path):
    runs = tmp_path / "madengine_runs"
    write_run(runs, "run-a", {"numpy_matmul": {names.SPAN_IMAGE_BUILD: 100, names.SPAN_MODEL_STEP: [20, 21],
                                               names.SPAN_PARSING: 1},
                              "numpy_matmul:size=64": {names.SPAN_MODEL_STEP: 10}})
    write_run(runs, "run-b", {"numpy_matmul": {names.SPAN_IMAGE_BUILD: 400, names.SPAN_MODEL_STEP: [20, 30, 19],
                                               names.SPAN_PARSING: 1},
                              "shell_checksum": {names.SPAN_MODEL_STEP: 7}})
    return runs


def test_table_shows_which_phase_grew(cli, two_runs):
    result = cli("report", "trace-diff", "run-a", "run-b", "--runs-dir", str(two_runs))
    assert result.code == 0, result

    def line(model: str, phase: str) -> list[str]:
        found = [row for row in result.stdout.splitlines() if row.startswith(f"{model}  ") and f" {phase}  " in row]
        assert len(found) == 1, (model, phase, result.stdout)
        return found[0].split()

    assert line("numpy_matmul", names.SPAN_IMAGE_BUILD)[2:] == ["0.100", "0.400", "+0.300", "+300.0%", "grew", "most"]
    assert line("numpy_matmul", "model_step #2")[3:] == ["0.021", "0.030", "+0.009", "+42.9%"]
    assert line("numpy_matmul", "model_step #3")[3:] == ["-", "0.019"]
    assert line("shell_checksum", names.SPAN_MODEL_STEP)[2:] == ["-", "0.007"]
    assert "madengine: numpy_matmul: image_build grew most, +0.300 s (+300%)" in result.stderr


def test_json_has_every_phase_per_model_and_repeat(cli, two_runs):
    result = cli("report", "trace-diff", str(two_runs / "run-a"), str(two_runs / "run-b" / "trace.json"), "--json")
    assert result.code == 0, result
    report = json.loads(result.stdout)
    models = {m["model"]: m for m in report["models"]}
    assert list(models) == ["(run)", "numpy_matmul", "numpy_matmul [size=64]", "shell_checksum"]
    phases = {p["phase"]: p for p in models["numpy_matmul"]["phases"]}
    assert list(phases) == [names.SPAN_IMAGE_BUILD, "model_step #1", "model_step #2", "model_step #3",
                            names.SPAN_PARSING, diff.TOTAL]
    assert (phases["model_step #2"]["a_s"], phases["model_step #2"]["b_s"]) == pytest.approx((0.021, 0.03))
    assert phases["model_step #3"]["a_s"] is None and phases["model_step #3"]["delta_s"] is None
    assert models["numpy_matmul"]["grew_most"]["phase"] == names.SPAN_IMAGE_BUILD
    assert models["numpy_matmul [size=64]"]["phases"][0]["b_s"] is None
    assert models["(run)"]["phases"][0]["phase"] == names.SPAN_CONTEXT_DETECTION


def test_one_model(cli, two_runs):
    result = cli("report", "trace-diff", "run-a", "run-b", "numpy_matmul", "--runs-dir", str(two_runs), "--json")
    assert [m["model"] for m in json.loads(result.stdout)["models"]] == ["numpy_matmul", "numpy_matmul [size=64]"]
    exact = cli("report", "trace-diff", "run-a", "run-b", "numpy_matmul [size=64]", "--runs-dir", str(two_runs),
                "--json")
    assert [m["model"] for m in json.loads(exact.stdout)["models"]] == ["numpy_matmul [size=64]"]


def test_bad_input_is_one_line_and_exit_2(cli, two_runs, tmp_path):
    (tmp_path / "empty_run").mkdir()
    (tmp_path / "broken.json").write_text("{")
    (tmp_path / "other.json").write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "a", "ts": 0, "dur": 1,
                                                                       "pid": 1, "tid": 1}]}))
    (tmp_path / "list.json").write_text("[1, 2]")
    cases = {("nope", "run-b"): "RUN_A: 'nope' is not a trace file, a run folder, or a run id",
             ("run-a", str(tmp_path / "empty_run")): "has no trace.json",
             ("run-a", str(tmp_path / "broken.json")): "malformed JSON at line 1",
             (str(tmp_path / "other.json"), "run-b"): "no madengine spans",
             ("run-a", str(tmp_path / "list.json")): "no madengine spans",
             ("run-a", "run-b", "resnet"): "model 'resnet' is in neither trace (models: numpy_matmul"}
    for argv, words in cases.items():
        result = cli("report", "trace-diff", *argv, "--runs-dir", str(two_runs))
        assert result.code == 2, result
        assert words in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "Traceback" not in result.stderr


JSON_VALUES = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=5)),
                           lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                   st.dictionaries(st.text(max_size=5), inner, max_size=4)),
                           max_leaves=12)
EVENTS = st.lists(st.one_of(JSON_VALUES, st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "B", "i"]), "name": st.sampled_from(list(names.PHASES) + [names.SPAN_MODEL, "x"]),
     "ts": JSON_VALUES, "dur": JSON_VALUES,
     "args": st.fixed_dictionaries({"span.id": st.sampled_from(["a", "b", 3]),
                                    "span.parent_id": st.sampled_from(["a", "b", "", None]),
                                    names.ATTR_MODEL: JSON_VALUES})})), max_size=8)


@settings(derandomize=True, max_examples=500 if IN_CI else 200, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.one_of(JSON_VALUES, st.fixed_dictionaries({"traceEvents": EVENTS})))
@example({"traceEvents": [{"ph": "X", "name": names.PHASES[0], "ts": 0, "dur": float("inf"),
                           "args": {"span.id": "a", "span.parent_id": "a", names.ATTR_MODEL: None}}]})
def test_any_json_is_a_diff_or_one_input_error(tmp_path, document):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(document))
    try:
        timelines = diff.load_timelines(path, label="RUN_A")
    except InputError as exc:
        assert "\n" not in str(exc)
        return
    for model in diff.diff_timelines(timelines, timelines):
        assert all(p.delta_s in (0, None) for p in model.phases)
