"""madengine report compare: two perf.csv files, or two runs of the results database (real SQLite)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from madengine.reports.compare import compare_rows, verdict
from madengine.reports.metrics import lower_is_better
from madengine.results import PerfRecord, append_records


def write(path: Path, figures: list[tuple[str, str, float | None]], run_id: str = "") -> Path:
    """Rows of (model, metric, performance); performance None is a FAILURE row."""
    append_records(path, [PerfRecord(model=m, metric=metric, performance=p, run_id=run_id,
                                     status="SUCCESS" if p is not None else "FAILURE") for m, metric, p in figures])
    return path


@pytest.fixture
def pair(tmp_path):
    old = write(tmp_path / "old.csv", [
        ("fast", "samples_per_second", 100.0), ("fast", "samples_per_second", 110.0),  # mean 105
        ("slow", "samples_per_second", 100.0), ("same", "samples_per_second", 100.0),
        ("lat_better", "latency_ms", 10.0), ("lat_worse", "latency_ms", 10.0), ("gone", "x", 1.0),
        ("broken_now", "x", 5.0)])
    new = write(tmp_path / "new.csv", [
        ("fast", "samples_per_second", 120.0), ("fast", None, None),  # the FAILURE row is ignored
        ("slow", "samples_per_second", 90.0), ("same", "samples_per_second", 104.0),
        ("lat_better", "latency_ms", 8.0), ("lat_worse", "latency_ms", 12.0), ("added", "x", 3.0),
        ("broken_now", "x", None)])
    return old, new


def test_verdicts_per_model(cli, pair):
    out = cli("report", "compare", *map(str, pair), "--json")
    assert out.code == 0, out
    data = json.loads(out.stdout)
    verdicts = {(m["model"], m["metric"]): m["verdict"] for m in data["models"]}
    assert verdicts == {
        ("added", "x"): "new", ("broken_now", "x"): "missing", ("fast", "samples_per_second"): "faster",
        ("gone", "x"): "missing", ("lat_better", "latency_ms"): "faster", ("lat_worse", "latency_ms"): "slower",
        ("same", "samples_per_second"): "unchanged", ("slow", "samples_per_second"): "slower"}
    fast = next(m for m in data["models"] if m["model"] == "fast")
    assert fast == {"model": "fast", "metric": "samples_per_second", "lower_is_better": False, "old_mean": 105.0,
                    "new_mean": 120.0, "old_rows": 2, "new_rows": 1, "ratio": pytest.approx(120 / 105),
                    "verdict": "faster", "change_percent": pytest.approx(14.286, abs=1e-3)}
    assert data["counts"] == {"faster": 2, "slower": 2, "unchanged": 1, "new": 1, "missing": 2}
    assert data["threshold_percent"] == 5.0 and data["old"].endswith("old.csv")
    assert "2 faster, 2 slower, 1 unchanged, 1 new, 2 missing" in out.stderr


def test_table_output(cli, pair):
    out = cli("report", "compare", *map(str, pair))
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["model", "metric", "better", "old", "new", "ratio", "change", "verdict"]
    assert any(line.split() == ["lat_worse", "latency_ms", "lower", "10", "12", "1.200", "+20.0%", "slower"]
               for line in lines)
    assert any(line.split() == ["added", "x", "higher", "3", "new"] for line in lines)


def test_threshold_and_fail_on_regression(cli, pair):
    assert cli("report", "compare", *map(str, pair), "--fail-on-regression").code == 1
    wide = cli("report", "compare", *map(str, pair), "--threshold", "25%", "--fail-on-regression", "--json")
    assert wide.code == 0, wide
    assert json.loads(wide.stdout)["counts"] == {"faster": 0, "slower": 0, "unchanged": 5, "new": 1, "missing": 2}
    tight = json.loads(cli("report", "compare", *map(str, pair), "--threshold", "3", "--json").stdout)
    assert {m["model"]: m["verdict"] for m in tight["models"]}["same"] == "faster"  # +4 % passes a 3 % threshold


def test_verdict_edges():
    assert verdict(100.0, 105.0, False, 0.05)[2] == "unchanged"  # exactly the threshold is unchanged
    assert verdict(100.0, 105.01, False, 0.05)[2] == "faster"
    assert verdict(0.0, 0.0, False, 0.05) == (None, None, "unchanged")
    assert verdict(0.0, 1.0, True, 0.05) == (None, None, "slower")
    assert verdict(-2.0, -1.0, True, 0.05)[2] == "slower"  # a loss rising from -2 to -1 got worse
    rows = [{"model": "m", "metric": "x", "status": "success", "performance": " 4 "}]
    assert compare_rows(rows, rows)[0].verdict == "unchanged"


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
        ((old,), "expected two perf.csv files (OLD NEW), got 1"),
        ((old, new, old), "expected two perf.csv files (OLD NEW), got 3"),
        ((old, str(tmp_path / "none.csv")), "none.csv: file not found"),
        ((str(malformed), new), "bad.csv: data row 1 has 3 cells"),
        ((old, new, "--old-run", "a", "--new-run", "b"), "give either two perf.csv files or both --old-run"),
        (("--old-run", "a"), "give either two perf.csv files or both --old-run"),
    ]
    for argv, expected in cases:
        out = cli("report", "compare", *argv)
        assert out.code == 2 and expected in out.stderr, (argv, out)
        assert len(out.stderr.strip().splitlines()) == 1, out


def test_negative_threshold_is_a_usage_error(cli, pair):
    result = cli("report", "compare", *map(str, pair), "--threshold", "-1")
    assert result.code == 2 and "must be 0 or more" in result.stderr


def test_two_runs_from_the_database(cli, tmp_path):
    """Through the database engineer's real SQLite store: update-table, then compare by run id."""
    from madengine.database import update_table

    perf = tmp_path / "perf.csv"
    write(perf, [("bert", "samples_per_second", 100.0), ("gpt2", "latency_ms", 20.0)], run_id="run-1")
    write(perf, [("bert", "samples_per_second", 120.0), ("gpt2", "latency_ms", 25.0)], run_id="run-2")
    url = f"sqlite:///{tmp_path / 'results.db'}"
    update_table(perf, url)
    out = cli("report", "compare", "--old-run", "run-1", "--new-run", "run-2", "--db-url", url, "--json")
    assert out.code == 0, out
    data = json.loads(out.stdout)
    assert (data["old"], data["new"]) == ("run-1", "run-2")
    assert {m["model"]: m["verdict"] for m in data["models"]} == {"bert": "faster", "gpt2": "slower"}
    by_env = cli("report", "compare", "--old-run", "run-1", "--new-run", "run-2", "--fail-on-regression",
                 environ={"MADENGINE_DB_URL": url})
    assert by_env.code == 1, by_env  # gpt2 got slower
    unknown = cli("report", "compare", "--old-run", "run-1", "--new-run", "run-9", "--db-url", url)
    assert unknown.code == 2 and "--new-run: run 'run-9' has no rows in the database" in unknown.stderr
