"""Performance parsing, multiple_results CSVs, and perf.csv appends."""

from __future__ import annotations

import csv
import multiprocessing
from pathlib import Path

import pytest

from madengine.core.errors import InputError
from madengine.results import PERF_COLUMNS, PerfRecord, Status, append_records, parse_performance, read_rows
from madengine.results.columns import ALL_COLUMNS
from madengine.results.parsing import as_number, parse_multiple_results
from madengine.results.perfcsv import append_rows, read_header


@pytest.mark.parametrize("line, expected", [
    ("performance: 14164 samples_per_second", (14164.0, "samples_per_second")),
    ("performance: 14164/s, samples_per_second", (14164.0, "samples_per_second")),
    ("performance: 1.5e+3 tokens/sec", (1500.0, "tokens/sec")),
    ("performance: -0.5, loss", (-0.5, "loss")),
    ("performance: .5 ms", (0.5, "ms")),
    ("  [rank0] performance: 2E-3 s", (0.002, "s")),
])
def test_performance_forms(line, expected):
    perf = parse_performance(line)
    assert (perf.value, perf.metric) == expected


@pytest.mark.parametrize("line", ["performance:12 x", "performance: 12", "performance: 1,000 items", "perf: 3 x",
                                  "performance: nan x"])
def test_not_a_figure(line):
    assert parse_performance(line) is None


def test_last_figure_counts():
    out = "warmup\nperformance: 1 img/s\nmore\nperformance: 3.5 img/s\ndone\n"
    assert parse_performance(out).value == 3.5


def test_ansi_colour_codes_are_ignored():
    assert parse_performance("\x1b[32mperformance: 7 x\x1b[0m").value == 7


@pytest.mark.parametrize("printed", ["7", "7.0", "7.50", "-0.5", "1.5e+3", ".5", "2E-3", "1e-400", "14164"])
def test_figure_is_recorded_as_the_model_wrote_it(printed):
    perf = parse_performance(f"performance: {printed} x")
    assert perf.value == float(printed)  # a number for statistics, charts and comparisons
    assert PerfRecord(model="m", status=Status.SUCCESS, performance=perf.value).to_row()["performance"] == printed
    assert as_number(f" {printed} ") == float(printed) and repr(as_number(printed)) == printed


def test_figure_survives_pickling_and_copies():
    import copy
    import pickle

    value = parse_performance("performance: 7 x").value
    for clone in (pickle.loads(pickle.dumps(value)), copy.deepcopy(value)):
        assert clone == 7 and repr(clone) == "7"
    assert f"{value:g}" == "7" and value + 1 == 8.0


def test_multiple_results_rows_keep_their_text(tmp_path):
    path = tmp_path / "multi.csv"
    path.write_text("model,performance,metric\na,7,x\nb,2.50,y\n")
    rows = [PerfRecord(model=r["model"], status=Status.SUCCESS, performance=as_number(r["performance"])).to_row()
            for r in parse_multiple_results(path)]
    assert [r["performance"] for r in rows] == ["7", "2.50"]


def test_multiple_results_broken_quoting_is_an_error(tmp_path):
    path = tmp_path / "multi.csv"
    path.write_text('model,performance,metric\na,"1,x\nb,2,y\n')
    with pytest.raises(InputError, match="multi.csv: malformed CSV"):
        parse_multiple_results(path)
    path.write_text("model,performance,metric\na,1,x,extra\n")
    with pytest.raises(InputError, match="line 2 has 4 cells"):
        parse_multiple_results(path)


def test_multiple_results_csv(tmp_path):
    path = tmp_path / "r.csv"
    path.write_text("model, performance , metric, extra\na,1,x,e1\n\nb,,x,e2\n")
    assert parse_multiple_results(path) == [
        {"model": "a", "performance": "1", "metric": "x", "extra": "e1"},
        {"model": "b", "performance": "", "metric": "x", "extra": "e2"},
    ]
    path.write_text("model,value\n")
    with pytest.raises(InputError, match="missing column"):
        parse_multiple_results(path)
    with pytest.raises(InputError, match="did not write"):
        parse_multiple_results(tmp_path / "none.csv")


def test_new_file_gets_standard_header_in_order(tmp_path):
    perf = tmp_path / "perf.csv"
    append_records(perf, [PerfRecord(model="m", status=Status.SUCCESS, performance=1.0, metric="x")])
    header = read_header(perf)
    assert tuple(header[: len(PERF_COLUMNS)]) == PERF_COLUMNS and tuple(header) == ALL_COLUMNS


def test_append_keeps_rows_and_adds_new_columns_at_end(tmp_path):
    perf = tmp_path / "perf.csv"
    perf.write_text("model, n_gpus, performance, status\nold,1,5,SUCCESS\n")  # v1-style spaced header
    record = PerfRecord(model="new", status=Status.SUCCESS, performance=2.0, metric="x", run_id="r1")
    record.extra = {"temperature": "0.5"}
    append_records(perf, [record])
    rows = read_rows(perf)
    assert [r["model"] for r in rows] == ["old", "new"]
    header = read_header(perf)
    assert header[:4] == ["model", "n_gpus", "performance", "status"]
    assert header[-1] == "temperature" and rows[0]["temperature"] == "" and rows[1]["temperature"] == "0.5"


def test_append_to_file_without_trailing_newline(tmp_path):
    perf = tmp_path / "perf.csv"
    perf.write_text("model,status\na,SUCCESS")
    append_rows(perf, [{"model": "b", "status": "FAILURE"}])
    assert [r["model"] for r in read_rows(perf)] == ["a", "b"]


def _writer(args):
    path, worker = args
    for i in range(50):
        append_records(Path(path), [PerfRecord(model=f"w{worker}_{i}", status=Status.SUCCESS, performance=float(i),
                                               metric="x", extra={f"col_w{worker}": "v"} if i == 25 else {})])


def test_concurrent_appends_never_lose_or_corrupt_rows(tmp_path):
    perf = tmp_path / "perf.csv"
    with multiprocessing.get_context("fork").Pool(4) as pool:
        pool.map(_writer, [(str(perf), w) for w in range(4)])
    rows = read_rows(perf)
    assert len(rows) == 200 and len({r["model"] for r in rows}) == 200
    with open(perf, newline="") as handle:
        widths = {len(r) for r in csv.reader(handle)}
    assert len(widths) == 1  # every row has exactly the header's width


def test_secrets_never_reach_rows(tmp_path):
    from madengine.core.redact import clear_secrets, register_secret

    register_secret("hunter2-canary")
    try:
        row = PerfRecord(model="m", reason="login hunter2-canary failed").to_row()
        assert "hunter2-canary" not in "".join(row.values())
    finally:
        clear_secrets()


def test_run_records_performance_as_printed_and_reports_read_it_as_a_number(tmp_path, monkeypatch):
    import json

    from conftest import run_cli

    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "run.sh").write_text("echo 'performance: 7 x'\n")
    (tmp_path / "models.json").write_text(json.dumps([{"name": "seven", "scripts": "s/run.sh"}]))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MODEL_DIR", raising=False)
    done = run_cli("run", "--tags", "seven", "--executor", "local")
    assert done.code == 0, done
    [row] = read_rows(tmp_path / "perf.csv")
    assert (row["status"], row["performance"]) == ("SUCCESS", "7")
    compared = run_cli("report", "compare", "perf.csv", "perf.csv", "--json")
    assert compared.code == 0 and json.loads(compared.stdout)["models"][0]["ratio"] == 1.0, compared
