"""madengine report compare: two perf.csv files, two folders of repeated runs, or two runs of the results
database (real SQLite); every sample, per result identity, with a significance test."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import IN_CI, run_process
from madengine.reports.compare import compare_rows
from madengine.results.direction import lower_is_better
from madengine.results import PerfRecord, append_records
from madengine.results.samples import SAMPLES_FILE, sample_columns, write_samples_file

EXAMPLES = 500 if IN_CI else 200
ENV = dict(executor="docker", gpu_vendor="AMD", gpu_architecture="gfx942", n_gpus="1")


def repeated(model: str, metric: str, samples: list[float] | None, run_id: str = "r1", **fields) -> PerfRecord:
    """A row of a repeated run (``samples`` None: a FAILURE row)."""
    if samples is None:
        return PerfRecord(model=model, metric=metric, status="FAILURE", run_id=run_id, **{**ENV, **fields})
    return PerfRecord(model=model, metric=metric, status="SUCCESS", run_id=run_id, **{**ENV, **fields},
                      **sample_columns(samples))


def noisy(rng: random.Random, centre: float, n: int = 10, cv: float = 0.01) -> list[float]:
    return [centre * rng.lognormvariate(0, cv) for _ in range(n)]


@pytest.fixture
def pair(tmp_path):
    rng = random.Random(7)
    old, new = tmp_path / "old.csv", tmp_path / "new.csv"
    append_records(old, [
        repeated("bert", "samples_per_second", noisy(rng, 100)),
        repeated("same", "samples_per_second", noisy(rng, 100)),
        repeated("lat_better", "latency_ms", noisy(rng, 10)),
        repeated("lat_worse", "latency_ms", noisy(rng, 10)),
        repeated("few", "samples_per_second", [100.0, 101.0]),
        repeated("noisy", "samples_per_second", noisy(rng, 100, cv=0.3)),
        repeated("gone", "x", noisy(rng, 1)),
        repeated("broken_now", "x", noisy(rng, 5)),
        repeated("matmul", "ms", noisy(rng, 2), tag_configs="size=64"),
    ])
    append_records(new, [
        repeated("bert", "samples_per_second", noisy(rng, 120)),
        repeated("bert", "samples_per_second", None),  # the FAILURE row is ignored
        repeated("same", "samples_per_second", noisy(rng, 100.2)),
        repeated("lat_better", "latency_ms", noisy(rng, 8)),
        repeated("lat_worse", "latency_ms", noisy(rng, 12)),
        repeated("few", "samples_per_second", [150.0, 151.0]),
        repeated("noisy", "samples_per_second", noisy(rng, 110, cv=0.3)),
        repeated("added", "x", noisy(rng, 3)),
        repeated("broken_now", "x", None),
        repeated("matmul", "ms", noisy(rng, 2)),  # the default size: another identity than size=64
    ])
    return old, new


def verdicts(data: dict) -> dict[tuple[str, str, str], str]:
    return {(m["model"], m["metric"], m["tag_configs"]): m["verdict"] for m in data["models"]}


def test_verdicts_per_identity(cli, pair):
    out = cli("report", "compare", *map(str, pair), "--json")
    assert out.code == 0, out
    data = json.loads(out.stdout)
    assert verdicts(data) == {
        ("added", "x", ""): "new", ("bert", "samples_per_second", ""): "faster",
        ("broken_now", "x", ""): "missing", ("few", "samples_per_second", ""): "inconclusive",
        ("gone", "x", ""): "missing", ("lat_better", "latency_ms", ""): "faster",
        ("lat_worse", "latency_ms", ""): "slower", ("matmul", "ms", ""): "new",
        ("matmul", "ms", "size=64"): "missing", ("noisy", "samples_per_second", ""): "inconclusive",
        ("same", "samples_per_second", ""): "unchanged"}
    bert = next(m for m in data["models"] if m["model"] == "bert")
    assert (bert["old_rows"], bert["new_rows"], bert["old_n"], bert["new_n"]) == (1, 1, 10, 10)
    assert bert["ratio"] == pytest.approx(1.2, rel=0.02) and bert["ci95_low"] < bert["ratio"] < bert["ci95_high"]
    assert bert["p_value"] < 0.05 and bert["identity"] == "bert · docker · AMD gfx942 · 1 GPU"
    few = next(m for m in data["models"] if m["model"] == "few")
    assert "fewer than 3" in few["reason"] and few["p_value"] is None
    assert data["counts"] == {"faster": 2, "slower": 1, "unchanged": 1, "inconclusive": 2, "new": 2, "missing": 3}
    assert (data["threshold_percent"], data["alpha"]) == (3.0, 0.05) and data["old"].endswith("old.csv")
    assert "2 faster, 1 slower, 1 unchanged, 2 inconclusive, 2 new, 3 missing" in out.stderr


def test_table_output_shows_tag_configs_beside_the_model(cli, pair):
    out = cli("report", "compare", *map(str, pair))
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["result", "metric", "better", "old", "new", "n", "ratio", "95%", "CI", "change",
                                "verdict", "by"]
    assert any(line.startswith("matmul [size=64] · docker") and line.rstrip().endswith("missing") for line in lines)
    worse = next(line for line in lines if line.startswith("lat_worse"))
    assert worse.split()[-3:] == ["slower", "U", "test"] and "10/10" in worse and "latency_ms" in worse


def test_fail_on_regression_only_for_a_significant_slowdown(cli, pair, tmp_path):
    assert cli("report", "compare", *map(str, pair), "--fail-on-regression").code == 1
    wide = cli("report", "compare", *map(str, pair), "--threshold", "25%", "--fail-on-regression", "--json")
    assert wide.code == 0, wide  # the 20 % slowdown is below a 25 % minimum effect
    assert verdicts(json.loads(wide.stdout))[("lat_worse", "latency_ms", "")] != "slower"
    # one sample a side, 2 % apart (the case): inconclusive, never exit 1
    old, new = tmp_path / "a.csv", tmp_path / "b.csv"
    append_records(old, [repeated("m", "samples_per_second", [100.0])])
    append_records(new, [repeated("m", "samples_per_second", [98.0])])
    single = cli("report", "compare", str(old), str(new), "--threshold", "1", "--fail-on-regression", "--json")
    assert single.code == 0 and verdicts(json.loads(single.stdout)) == {("m", "samples_per_second", ""): "inconclusive"}


def test_rows_without_perf_samples_count_as_one_sample_each(tmp_path):
    rows = [{"model": "m", "metric": "x", "status": "SUCCESS", "performance": str(v)} for v in (10, 11, 12)]
    faster = [{**r, "performance": str(float(r["performance"]) * 2)} for r in rows]
    [result] = compare_rows(rows, faster).comparisons
    assert (result.verdict, len(result.old.samples), result.old.rows) == ("inconclusive", 3, 3)
    more = rows + [{**r, "performance": str(float(r["performance"]) + 0.5)} for r in rows]
    [result] = compare_rows(more, [{**r, "performance": str(float(r["performance"]) * 2)} for r in more]).comparisons
    assert result.verdict == "faster" and result.ratio == pytest.approx(2.0, rel=0.05)


def test_environments_are_never_mixed_without_the_flag(cli, tmp_path):
    rng = random.Random(3)
    old, new = tmp_path / "docker.csv", tmp_path / "local.csv"
    append_records(old, [repeated("m", "samples_per_second", noisy(rng, 10))])
    append_records(new, [repeated("m", "samples_per_second", noisy(rng, 130), executor="local")])
    plain = cli("report", "compare", str(old), str(new), "--json")
    assert plain.code == 0
    assert [(m["identity"], m["verdict"]) for m in json.loads(plain.stdout)["models"]] == [
        ("m · docker · AMD gfx942 · 1 GPU", "missing"), ("m · local · AMD gfx942 · 1 GPU", "new")]
    assert "different environment and are not compared: m (executor: docker → local)" in plain.stderr
    crossed = cli("report", "compare", str(old), str(new), "--across-environments", "--json")
    data = json.loads(crossed.stdout)
    [entry] = data["models"]
    assert entry["verdict"] == "faster" and entry["environment_differences"] == ["executor"]
    assert entry["new_identity"] == "m · local · AMD gfx942 · 1 GPU"
    assert "madengine: warning: m: compared across environments (executor: docker → local)" in crossed.stderr
    assert data["warnings"] == ["m: compared across environments (executor: docker → local)"]


def test_folders_of_repeated_runs(cli, tmp_path):
    """A folder: every perf.csv under it, plus the run folders' samples.json not already in one."""
    rng = random.Random(5)
    old, new = tmp_path / "old", tmp_path / "new"
    for folder, centre in ((old, 10.0), (new, 8.0)):
        for run in range(3):  # three runs of 4 repeats each: 12 samples a side
            row = repeated("m", "latency_ms", noisy(rng, centre, n=4), run_id=f"run{run}").to_row()
            write_samples_file(folder / "madengine_runs" / f"run{run}" / "m" / SAMPLES_FILE, [row])
            if run == 0:  # this run is in a perf.csv too: its samples.json is not counted twice
                append_records(folder / "perf.csv", [PerfRecord.from_row(row)])
    out = cli("report", "compare", str(old), str(new), "--json")
    assert out.code == 0, out
    [entry] = json.loads(out.stdout)["models"]
    assert (entry["old_n"], entry["new_n"], entry["old_rows"]) == (12, 12, 3)
    assert entry["verdict"] == "faster"  # latency 10 ms -> 8 ms
    empty = tmp_path / "empty"
    empty.mkdir()
    bad = cli("report", "compare", str(empty), str(new))
    assert bad.code == 2 and "no perf.csv or samples.json with results in this folder" in bad.stderr


def test_bad_samples_are_one_line_errors(cli, pair, tmp_path):
    broken = tmp_path / "broken.csv"
    append_records(broken, [PerfRecord(model="m", metric="x", status="SUCCESS", performance=1.0,
                                       perf_samples="[1, 2, oops]")])
    out = cli("report", "compare", str(broken), str(pair[1]))
    assert out.code == 2 and "broken.csv: row 1 (m): perf_samples is not JSON" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    folder = tmp_path / "runs"
    (folder / "r").mkdir(parents=True)
    (folder / "r" / SAMPLES_FILE).write_text('[{"model": "m", "perf_samples": [1, "x"]}]')
    out = cli("report", "compare", str(folder), str(pair[1]))
    assert out.code == 2 and "samples.json: result 1: perf_samples has a non-number" in out.stderr


def test_verdict_rules_on_rows():
    rows = [{"model": "m", "metric": "x", "status": "success", "performance": " 4 "}] * 3
    assert compare_rows(rows, rows).comparisons[0].verdict == "unchanged"
    loss = [{"model": "m", "metric": "loss", "status": "SUCCESS", "performance": str(v)} for v in
            (-2.0, -2.1, -1.9, -2.05, -1.95)]
    worse = [{**r, "performance": str(float(r["performance"]) + 1)} for r in loss]
    assert compare_rows(loss, worse).comparisons[0].verdict == "slower"  # a loss rising from -2 to -1 got worse


@pytest.mark.parametrize("metric, lower", [
    ("samples_per_second", False), ("tokens/sec", False), ("items_per_second", False), ("img/s", False),
    ("fps", False), ("ms", True), ("latency_ms", True), ("e2e_latency", True), ("time_per_step", True),
    ("step_time_s", True), ("seconds", True), ("ms_per_token", True), ("loss", True), ("TFLOPS", False)])
def test_direction_of_metrics(metric, lower):
    assert lower_is_better(metric) is lower


def test_bad_inputs(cli, pair, tmp_path):
    old, new = map(str, pair)
    malformed = tmp_path / "bad.csv"
    malformed.write_text("model,status\na,SUCCESS,x\n")
    cases = [
        ((old,), "expected two perf.csv files or folders (OLD NEW), got 1"),
        ((old, new, old), "expected two perf.csv files or folders (OLD NEW), got 3"),
        ((old, str(tmp_path / "none.csv")), "none.csv: file not found"),
        ((str(malformed), new), "bad.csv: data row 1 has 3 cells"),
        ((old, new, "--old-run", "a", "--new-run", "b"), "give either two perf.csv files or folders, or both"),
        (("--old-run", "a"), "give either two perf.csv files or folders, or both --old-run"),
    ]
    for argv, expected in cases:
        out = cli("report", "compare", *argv)
        assert out.code == 2 and expected in out.stderr, (argv, out)
        assert len(out.stderr.strip().splitlines()) == 1, out


def test_negative_threshold_is_a_usage_error(cli, pair):
    result = cli("report", "compare", *map(str, pair), "--threshold", "-1")
    assert result.code == 2 and "must be 0 or more" in result.stderr


def test_default_threshold_is_the_minimum_effect_of_the_statistics():
    from madengine.cli.commands.report import DEFAULT_THRESHOLD_PERCENT
    from madengine.stats.compare import DEFAULT_MIN_EFFECT

    assert DEFAULT_THRESHOLD_PERCENT == DEFAULT_MIN_EFFECT * 100


def test_two_runs_from_the_database(cli, tmp_path):
    """Through the database engineer's real SQLite store: update-table, then compare by run id; the
    per-repeat samples come back from the database."""
    from madengine.database import update_table

    rng = random.Random(2)
    perf = tmp_path / "perf.csv"
    append_records(perf, [repeated("bert", "samples_per_second", noisy(rng, 100), run_id="run-1"),
                          repeated("gpt2", "latency_ms", noisy(rng, 20), run_id="run-1")])
    append_records(perf, [repeated("bert", "samples_per_second", noisy(rng, 120), run_id="run-2"),
                          repeated("gpt2", "latency_ms", noisy(rng, 25), run_id="run-2")])
    url = f"sqlite:///{tmp_path / 'results.db'}"
    update_table(perf, url)
    out = cli("report", "compare", "--old-run", "run-1", "--new-run", "run-2", "--db-url", url, "--json")
    assert out.code == 0, out
    data = json.loads(out.stdout)
    assert (data["old"], data["new"]) == ("run-1", "run-2")
    assert {m["model"]: (m["verdict"], m["old_n"]) for m in data["models"]} == {"bert": ("faster", 10),
                                                                               "gpt2": ("slower", 10)}
    by_env = cli("report", "compare", "--old-run", "run-1", "--new-run", "run-2", "--fail-on-regression",
                 environ={"MADENGINE_DB_URL": url})
    assert by_env.code == 1, by_env  # gpt2 got slower
    unknown = cli("report", "compare", "--old-run", "run-1", "--new-run", "run-9", "--db-url", url)
    assert unknown.code == 2 and "--new-run: run 'run-9' has no rows in the database" in unknown.stderr


def test_a_real_process_exits_1_on_a_regression_with_data_on_stdout(pair):
    done = run_process("report", "compare", *map(str, pair), "--json", "--fail-on-regression")
    assert done.returncode == 1, done.stderr
    assert verdicts(json.loads(done.stdout))[("lat_worse", "latency_ms", "")] == "slower"
    assert "1 slower" in done.stderr and "Traceback" not in done.stderr


_cell = st.one_of(st.text(max_size=12), st.floats().map(repr), st.lists(st.floats(), max_size=4).map(json.dumps))


@settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None)
@given(st.lists(st.fixed_dictionaries({"model": st.sampled_from(["a", "b"]), "metric": st.sampled_from(["ms", "x"]),
                                       "status": st.sampled_from(["SUCCESS", "FAILURE", "success", ""]),
                                       "performance": _cell, "perf_samples": _cell,
                                       "executor": st.sampled_from(["docker", "local", ""])}), max_size=12),
       st.lists(st.fixed_dictionaries({"model": st.sampled_from(["a", "b"]), "metric": st.sampled_from(["ms", "x"]),
                                       "status": st.just("SUCCESS"), "performance": _cell,
                                       "executor": st.sampled_from(["docker", "local"])}), max_size=12),
       st.booleans())
def test_any_rows_give_verdicts_or_one_input_error(old, new, across):
    """Whatever the cells hold, compare gives a verdict per identity or an InputError naming the row."""
    from madengine.core.errors import InputError

    try:
        result = compare_rows(old, new, across_environments=across, sources=("old.csv", "new.csv"))
    except InputError as exc:
        assert "perf_samples" in str(exc) and "old.csv" in str(exc)
        return
    for comparison in result.comparisons:
        assert comparison.verdict in ("faster", "slower", "unchanged", "inconclusive", "new", "missing")
        json.dumps(comparison.to_json(), allow_nan=False)  # JSON output never holds NaN or Infinity
