"""run --repeat / --warmup-runs / the model field ``repeat``: the model step runs N times in the
same container (or work folder); the row carries the median and the spread of every kept sample,
samples.json keeps them, and each repeat is a span of the trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import BASE_IMAGE
from madengine.results import read_rows
from madengine.tracing.validate import check_trace

#: prints the number of times it ran in this work folder: runs 1, 2, 3... give figures 1, 2, 3...
COUNTER = ("n=$(( $(cat count 2>/dev/null || echo 0) + 1 )); echo $n > count\n"
           "echo \"performance: $n runs\"\n")


def make_repo(root: Path, models: list[dict], scripts: dict[str, str]) -> Path:
    (root / "docker").mkdir(parents=True)
    (root / "docker" / "rep.Dockerfile").write_text(f"FROM {BASE_IMAGE}\n")
    (root / "scripts").mkdir()
    for name, text in scripts.items():
        (root / "scripts" / name).write_text("#!/usr/bin/env bash\n" + text)
    (root / "models.json").write_text(json.dumps([{"dockerfile": "docker/rep", "tags": ["rep"], **m} for m in models]))
    return root


@pytest.fixture
def repo(tmp_path, monkeypatch):
    root = make_repo(tmp_path / "repo", [
        {"name": "rep_counter", "scripts": "scripts/counter.sh"},
        {"name": "rep_field", "scripts": "scripts/counter.sh", "repeat": 3},
        {"name": "rep_fails", "scripts": "scripts/fails.sh"},
        {"name": "rep_multi", "scripts": "scripts/multi.sh", "multiple_results": "out.csv"},
    ], {"counter.sh": COUNTER,
        "fails.sh": COUNTER + "if [ \"$n\" -ge 3 ]; then python3 -c 'raise ValueError(\"bad shape (3, 4)\")'; exit; fi\n",
        "multi.sh": COUNTER + "printf 'model,performance,metric\\na,%s,x\\nb,%s,y\\n' $n $((n * 10)) > out.csv\n"})
    monkeypatch.chdir(root)
    return root


def rows(repo: Path) -> dict[str, dict[str, str]]:
    return {r["model"]: r for r in read_rows(repo / "perf.csv")}


@pytest.mark.parametrize("executor", ["local", "docker"])
def test_repeats_after_warmup_give_the_median_and_every_sample(repo, cli, executor, request):
    if executor == "docker":
        request.getfixturevalue("docker_client")
        request.getfixturevalue("docker_cleanup").append("ci-rep_")
    result = cli("run", "--tags", "rep_counter", "--executor", executor, "--repeat", "5", "--warmup-runs", "2")
    assert result.code == 0, result
    row = rows(repo)["rep_counter"]
    # the same work folder (and container) throughout: the counter went 1..7, the first two discarded
    assert json.loads(row["perf_samples"]) == [3.0, 4.0, 5.0, 6.0, 7.0]
    assert float(row["performance"]) == 5 and row["perf_n"] == "5" and row["warmup_runs"] == "2"
    assert float(row["perf_mean"]) == 5 and float(row["perf_min"]) == 3 and float(row["perf_max"]) == 7
    assert float(row["perf_ci95_low"]) < 5 < float(row["perf_ci95_high"])
    assert abs(float(row["perf_stddev"]) - 1.5811388) < 1e-6
    run_dir = next((repo / "madengine_runs").iterdir())
    kept = json.loads(next(run_dir.glob("*/samples.json")).read_text())
    assert kept[0]["perf_samples"] == [3.0, 4.0, 5.0, 6.0, 7.0]
    log = next(run_dir.glob("*/run.log")).read_text()
    assert "model (warm-up 1)" in log and "model (repeat 5)" in log
    trace = json.loads((run_dir / "trace.json").read_text())
    check_trace(trace)
    repeats = [e["args"] for e in trace["traceEvents"] if e.get("name") == "model_step"]
    assert [a["madengine.repeat"] for a in repeats] == [1, 2, 3, 4, 5, 6, 7]
    assert [a["madengine.warmup"] for a in repeats] == [True, True, False, False, False, False, False]


def test_model_field_repeat_and_the_flag_overriding_it(repo, cli):
    assert cli("run", "--tags", "rep_field", "--executor", "local").code == 0
    assert rows(repo)["rep_field"]["perf_n"] == "3"
    assert cli("run", "--tags", "rep_field", "--executor", "local", "--repeat", "2").code == 0
    assert read_rows(repo / "perf.csv")[-1]["perf_n"] == "2"


def test_one_run_keeps_the_figure_as_printed_with_no_spread(repo, cli):
    assert cli("run", "--tags", "rep_counter", "--executor", "local").code == 0
    row = rows(repo)["rep_counter"]
    assert row["performance"] == "1" and row["perf_n"] == "1" and row["perf_samples"] == "[1.0]"
    assert row["perf_stddev"] == row["perf_cv"] == row["perf_ci95_low"] == ""


def test_a_failing_repeat_fails_the_model_with_what_it_said(repo, cli):
    result = cli("run", "--tags", "rep_fails", "--executor", "local", "--repeat", "4")
    assert result.code == 1
    reason = rows(repo)["rep_fails"]["reason"]
    assert reason == "model script (run 3 of 4) exited with code 1: ValueError: bad shape (3, 4)", reason
    assert "log " in result.stderr and "run.log" in result.stderr  # where to look, printed under the table


def test_multiple_results_get_samples_per_result_name(repo, cli):
    assert cli("run", "--tags", "rep_multi", "--executor", "local", "--repeat", "3").code == 0
    got = rows(repo)
    assert json.loads(got["rep_multi_a"]["perf_samples"]) == [1.0, 2.0, 3.0]
    assert json.loads(got["rep_multi_b"]["perf_samples"]) == [10.0, 20.0, 30.0]
    assert float(got["rep_multi_b"]["performance"]) == 20 and got["rep_multi_b"]["metric"] == "y"


def test_unstable_samples_are_warned_about(repo, cli):
    result = cli("run", "--tags", "rep_counter", "--executor", "local", "--repeat", "3")
    assert "warning: rep_counter: unstable" in result.stderr  # 1, 2, 3: a CV of 50 %


@pytest.mark.parametrize("value", [0, -1, "x", "²", 1.5, True])
def test_a_bad_repeat_field_is_bad_input_naming_it(tmp_path, monkeypatch, cli, value):
    root = make_repo(tmp_path / "r", [{"name": "rep_bad", "scripts": "scripts/c.sh", "repeat": value}],
                     {"c.sh": COUNTER})
    monkeypatch.chdir(root)
    result = cli("run", "--tags", "rep_bad", "--executor", "local")
    assert result.code == 2 and "rep_bad.repeat" in result.stderr and len(result.stderr.splitlines()) == 1, result
    assert not (root / "perf.csv").exists()


def test_repeat_flags_are_checked(repo, cli):
    for flags in (["--repeat", "0"], ["--repeat", "x"], ["--warmup-runs", "-1"]):
        result = cli("run", "--tags", "rep_counter", *flags)
        assert result.code == 2 and len(result.stderr.strip().splitlines()) == 1, result
