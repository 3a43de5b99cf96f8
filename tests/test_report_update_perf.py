"""madengine report update-perf: appending result files to perf.csv without losing anything."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from conftest import run_process
from madengine.core.redact import MASK, clear_secrets, register_secret
from madengine.results.columns import ALL_COLUMNS, PERF_COLUMNS


def read(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        header = [h.strip() for h in next(reader)]
        return header, [dict(zip(header, cells)) for cells in reader]


def write_json(path: Path, data) -> Path:
    path.write_text(json.dumps(data))
    return path


def test_single_result_creates_perf_csv_with_standard_header(cli, tmp_path):
    result = write_json(tmp_path / "r.json", {"model": "bert", "performance": 14164, "metric": "samples_per_second",
                                              "tags": ["pyt", "nlp"], " n_gpus ": 8, "configs": {"a": 1}})
    perf = tmp_path / "perf.csv"
    out = cli("report", "update-perf", "--single_result", str(result), "--perf-csv", str(perf))
    assert out.code == 0, out
    assert "appended 1 row" in out.stderr
    header, rows = read(perf)
    assert header == list(ALL_COLUMNS)  # standard columns first, in order; 'configs' is dropped
    assert rows == [{**dict.fromkeys(ALL_COLUMNS, ""), "model": "bert", "performance": "14164",
                     "metric": "samples_per_second", "tags": "pyt,nlp", "n_gpus": "8", "status": "SUCCESS"}]


def test_single_result_without_number_is_failure_and_stated_status_wins(cli, tmp_path):
    perf = tmp_path / "perf.csv"
    cli("report", "update-perf", "--single-result", str(write_json(tmp_path / "a.json", {"model": "a"})),
        "--perf-csv", str(perf))
    cli("report", "update-perf", "--single_result",
        str(write_json(tmp_path / "b.json", {"model": "b", "status": "skipped"})), "--perf-csv", str(perf))
    assert [(r["model"], r["status"]) for r in read(perf)[1]] == [("a", "FAILURE"), ("b", "SKIPPED")]


def test_appends_to_v1_header_with_spaces_never_rewriting_old_rows(cli, tmp_path):
    perf = tmp_path / "perf.csv"
    old_text = ", ".join(PERF_COLUMNS) + "\n" + ",".join(["old"] + [""] * (len(PERF_COLUMNS) - 1)) + "\n"
    perf.write_text(old_text)
    inode = perf.stat().st_ino
    result = write_json(tmp_path / "r.json", {"model": "new", "performance": "1.5", "metric": "x"})
    assert cli("report", "update-perf", "--single_result", str(result), "--perf-csv", str(perf)).code == 0
    text = perf.read_text()
    assert text.startswith(old_text) and perf.stat().st_ino == inode  # appended, not rewritten
    header, rows = read(perf)
    assert header == list(PERF_COLUMNS)
    assert [(r["model"], r["performance"], r["status"]) for r in rows] == [("old", "", ""), ("new", "1.5", "SUCCESS")]


def test_new_columns_go_at_the_end_and_keep_every_old_row(cli, tmp_path):
    perf = tmp_path / "perf.csv"
    first = write_json(tmp_path / "1.json", {"model": "m1", "performance": 1, "metric": "x"})
    second = write_json(tmp_path / "2.json", {"model": "m2", "performance": 2, "metric": "x", "temperature": "0.7"})
    cli("report", "update-perf", "--single_result", str(first), "--perf-csv", str(perf))
    cli("report", "update-perf", "--single_result", str(second), "--perf-csv", str(perf))
    header, rows = read(perf)
    assert header == [*ALL_COLUMNS, "temperature"]
    assert [(r["model"], r["temperature"]) for r in rows] == [("m1", ""), ("m2", "0.7")]


@pytest.mark.parametrize("flag", ["--exception-result", "--failed-result", "--exception_result", "--failed_result"])
def test_exception_and_failed_results_are_failures(cli, tmp_path, flag):
    result = write_json(tmp_path / "e.json", {"model": "boom", "status": "SUCCESS", "performance": "",
                                              "reason": "timeout"})
    perf = tmp_path / "perf.csv"
    assert cli("report", "update-perf", flag, str(result), "--perf-csv", str(perf)).code == 0
    [row] = read(perf)[1]
    assert (row["model"], row["status"], row["reason"]) == ("boom", "FAILURE", "timeout")


def test_multiple_results_with_common_info_and_model_name(cli, tmp_path):
    multi = tmp_path / "perf_dummy.csv"
    multi.write_text("model , performance, metric, temperature\n1,10.5,tok/s,0.1\n2,,tok/s,0.2\n")
    common = write_json(tmp_path / "common_info.json", {
        "model": "ignored", "performance": "ignored", "status": "ignored", "n_gpus": "8",
        "tags": ["a", "b"], "machine_name": "node1", "run_id": "r-1"})
    perf = tmp_path / "perf.csv"
    out = cli("report", "update-perf", "--multiple-results", str(multi), "--common-info", str(common),
              "--model-name", "dummy_multi", "--perf-csv", str(perf), "--json")
    assert out.code == 0, out
    header, rows = read(perf)
    assert header[-1] == "temperature" and header[:len(ALL_COLUMNS)] == list(ALL_COLUMNS)
    picked = [(r["model"], r["performance"], r["metric"], r["status"], r["temperature"], r["n_gpus"], r["tags"],
               r["machine_name"], r["run_id"]) for r in rows]
    assert picked == [("dummy_multi_1", "10.5", "tok/s", "SUCCESS", "0.1", "8", "a,b", "node1", "r-1"),
                      ("dummy_multi_2", "", "tok/s", "FAILURE", "0.2", "8", "a,b", "node1", "r-1")]
    assert "no performance number" in rows[1]["reason"]
    assert [r["model"] for r in json.loads(out.stdout)] == ["dummy_multi_1", "dummy_multi_2"]


def test_model_name_fills_a_result_without_model_and_common_info_applies(cli, tmp_path):
    result = write_json(tmp_path / "r.json", [{"performance": 3, "metric": "x"},
                                              {"model": "named", "performance": 4, "metric": "x"}])
    common = write_json(tmp_path / "c.json", {"machine_name": "host9", "metric": "overridden"})
    perf = tmp_path / "perf.csv"
    assert cli("report", "update-perf", "--single_result", str(result), "--model-name", "fallback",
               "--common-info", str(common), "--perf-csv", str(perf)).code == 0
    assert [(r["model"], r["metric"], r["machine_name"]) for r in read(perf)[1]] == [
        ("fallback", "x", "host9"), ("named", "x", "host9")]


def test_no_result_only_creates_the_header(cli, tmp_path):
    perf = tmp_path / "sub" / "perf.csv"
    out = cli("report", "update-perf", "--perf-csv", str(perf))
    assert out.code == 0 and "no result given" in out.stderr
    assert read(perf) == (list(ALL_COLUMNS), [])


def test_registered_secrets_never_reach_perf_csv(cli, tmp_path):
    register_secret("hunter2-token")
    try:
        result = write_json(tmp_path / "r.json", {"model": "m", "performance": 1, "metric": "x",
                                                  "args": "--token hunter2-token"})
        perf = tmp_path / "perf.csv"
        cli("report", "update-perf", "--single_result", str(result), "--perf-csv", str(perf))
        text = perf.read_text()
        assert "hunter2-token" not in text and f"--token {MASK}" in text
    finally:
        clear_secrets()


def test_bad_inputs_are_one_line_errors_and_leave_perf_csv_alone(cli, tmp_path):
    perf = tmp_path / "perf.csv"
    perf.write_text("model,performance\nkeep,1\n")
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"model": "x",\n "performance": }')
    not_object = write_json(tmp_path / "n.json", 42)
    list_of_numbers = write_json(tmp_path / "l.json", [1, 2])
    no_columns = tmp_path / "multi.csv"
    no_columns.write_text("name,value\na,1\n")
    good = write_json(tmp_path / "g.json", {"model": "g"})
    cases = [
        (("--single_result", str(tmp_path / "missing.json")), "missing.json: file not found"),
        (("--single_result", str(bad_json)), "bad.json: malformed JSON at line 2"),
        (("--exception-result", str(not_object)), "expected a JSON object"),
        (("--single_result", str(list_of_numbers)), "expected a JSON object"),
        (("--single_result", str(tmp_path)), "is a folder"),
        (("--multiple-results", str(tmp_path / "nope.csv")), "nope.csv"),
        (("--multiple-results", str(no_columns)), "missing column(s) model, performance, metric"),
        (("--single_result", str(good), "--common-info", str(not_object)), "expected a JSON object"),
        (("--single_result", str(good), "--common-info", str(bad_json)), "malformed JSON"),
    ]
    for argv, expected in cases:
        out = cli("report", "update-perf", *argv, "--perf-csv", str(perf))
        assert out.code == 2, (argv, out)
        assert expected in out.stderr, (argv, out)
        assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr, (argv, out)
    assert perf.read_text() == "model,performance\nkeep,1\n"


def test_one_result_at_a_time(cli, tmp_path):
    good = write_json(tmp_path / "g.json", {"model": "g"})
    out = cli("report", "update-perf", "--single_result", str(good), "--failed-result", str(good),
              "--perf-csv", str(tmp_path / "perf.csv"))
    assert out.code == 2 and "not allowed with argument" in out.stderr
    assert not (tmp_path / "perf.csv").exists()


def test_as_a_process(tmp_path):
    result = write_json(tmp_path / "r.json", {"model": "proc", "performance": 2.5, "metric": "x"})
    done = run_process("report", "update-perf", "--single_result", str(result), "--perf-csv", "perf.csv",
                       cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" and "appended 1 row(s) to perf.csv" in done.stderr
    assert read(tmp_path / "perf.csv")[1][0]["model"] == "proc"
    missing = run_process("report", "update-perf", "--single_result", "absent.json", cwd=tmp_path, timeout=120)
    assert missing.returncode == 2 and missing.stderr.strip() == "madengine: error: absent.json: file not found"
