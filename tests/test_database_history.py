"""What an import keeps per result series (SQLite, always runs): streamed batches, one pass per series,
incremental change points as alerts with triage, relative_change, and `report alerts`.

The same importer runs against MariaDB (tests/test_database_mysql.py) and MongoDB (mockupdb,
tests/test_database_mongo.py).
"""

from __future__ import annotations

import csv
import json
import math
import os
import random
import re
import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from madengine.core.errors import InputError
from madengine.core.events import Reporter
from madengine.database import importer, rows as rowlib, series, update_table
from madengine.database.rows import PerfCsv, content_keys
from madengine.database.sql import SqlStore
from madengine.stats.changepoint import detect
from test_database_helpers import every_table, history, one_error_line, relative, write_perf_csv


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("MADENGINE_DB_URL", "TUNA_DB_HOSTNAME", "MONGO_HOST"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("USER", "tester")
    return tmp_path


def db_rows(path, table="dlm_table", order="id"):
    connection = sqlite3.connect(path)
    connection.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in connection.execute(f"SELECT * FROM {table} ORDER BY {order}")]
    finally:
        connection.close()


def stepped(model: str, n: int, at: int, seed: int = 1, step: float = 0.10, prefix: str = "run") -> list[dict]:
    """``n`` runs of one result at ~100 with 0.5 % noise, ``step`` higher from run ``at`` on."""
    rng = random.Random(seed)
    return [dict(model=model, performance=round(100 * (1 + step * (k >= at)) * (1 + rng.gauss(0, 0.005)), 3),
                 run_id=f"{prefix}{k:03d}", started_at=f"2026-01-01T{k // 60:02d}:{k % 60:02d}:00Z") for k in range(n)]


# --- streaming -----------------------------------------------------------------------------------

def test_a_perf_csv_is_imported_in_batches_with_the_keys_of_the_whole_file(workdir, monkeypatch):
    rows = [*history("a", [1, 2, 3, 4, 5, 6, 7]), *history("b", [5, 5, 5]),
            dict(model="a", performance=9.0, run_id="twin"), dict(model="a", performance=9.0, run_id="twin")]
    write_perf_csv(workdir / "perf.csv", rows)
    whole = content_keys(rowlib.read_perf_rows(workdir / "perf.csv"))
    assert len(set(whole)) == len(whole) == 12  # the identical twins get occurrence numbers 0 and 1
    monkeypatch.setattr(rowlib, "BATCH_ROWS", 5)
    source = PerfCsv(workdir / "perf.csv")
    assert source.check() == 12
    batches = list(source.batches(size=5))
    assert [len(b) for b in batches] == [5, 5, 2]
    assert [r.key for b in batches for r in b] == whole
    result = update_table(workdir / "perf.csv", "sqlite:///m.db")
    assert (result.inserted, result.series) == (12, 2)
    again = update_table(workdir / "perf.csv", "sqlite:///m.db")
    assert (again.inserted, again.already_stored, again.new_alerts) == (0, 12, 0)


def test_a_big_import_checked_as_it_is_read_writes_what_a_small_one_writes(workdir, monkeypatch):
    """A big perf.csv is checked as it is read rather than whole first: what is stored is the same,
    every table as the import of the same rows checked whole first writes."""
    rows = [*stepped("a", 40, 25), *stepped("b", 40, 60, seed=2),
            *[dict(model="c", performance=1.0 + k % 3, run_id=f"run{k:03d}", extra={"zone": "x" * (k % 2)})
              for k in range(30)],
            dict(model="c", performance=7.0, run_id="twin"), dict(model="c", performance=7.0, run_id="twin"),
            dict(model="d", status="FAILURE", reason="out of memory", run_id="run001")]
    write_perf_csv(workdir / "perf.csv", rows)
    write_perf_csv(workdir / "next.csv", stepped("a", 3, 0, seed=5, prefix="next"))
    monkeypatch.setattr(rowlib, "BATCH_ROWS", 7)
    checked = []
    monkeypatch.setattr(PerfCsv, "check", lambda self, check=PerfCsv.check: checked.append(self.path.name) or check(self))
    for name, threshold in (("small.db", 10**9), ("big.db", 1)):
        monkeypatch.setattr(importer, "CHECK_WHOLE_BELOW", threshold)
        first = update_table(workdir / "perf.csv", f"sqlite:///{name}")
        assert (first.inserted, first.series) == (len(rows), 4)
        assert update_table(workdir / "next.csv", f"sqlite:///{name}").inserted == 3
    assert checked == ["perf.csv", "next.csv"]  # the small import's files only
    assert every_table(workdir / "big.db") == every_table(workdir / "small.db")


def test_rows_appended_while_importing_wait_for_the_next_import(workdir):
    write_perf_csv(workdir / "perf.csv", history("m", [1, 2, 3]))
    source = PerfCsv(workdir / "perf.csv")
    assert source.check() == 3
    write_perf_csv(workdir / "perf.csv", history("m", [4], run_prefix="later"))  # a run appends meanwhile
    assert sum(len(b) for b in source.batches()) == 3
    header = (workdir / "perf.csv").read_text().split("\n", 1)
    (workdir / "perf.csv").write_text("model,changed\n" + header[1])
    with pytest.raises(InputError, match="the file changed while it was imported"):
        list(source.batches())


def test_canonical_text_is_the_json_of_earlier_releases():
    """orjson writes the key text json.dumps wrote, so the keys of stored rows stay the same."""
    @given(st.dictionaries(st.text(max_size=8), st.text(max_size=12), max_size=8))
    def check(row):
        expected = json.dumps({k: v for k, v in row.items() if v != "" and k != "relative_change"}, sort_keys=True,
                              ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        assert rowlib._canonical(row) == expected

    check()


_NAMES = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp")), min_size=1, max_size=6)
_CELLS = st.sampled_from(["", " ", "1.5", " a b ", "x,y", 'say "hi"', "line\nbreak", "ü", "Ω\t"])


@settings(max_examples=150, deadline=None)
@given(names=st.lists(_NAMES, min_size=1, max_size=6, unique_by=str.strip), with_relative=st.booleans(),
       rows=st.lists(st.lists(_CELLS, min_size=1, max_size=9), min_size=1, max_size=12), twins=st.integers(0, 3))
def test_the_streamed_keys_are_the_keys_of_the_rows_as_read(tmp_path_factory, names, with_relative, rows, twins):
    """A perf.csv's content keys from PerfCsv (cells picked by a layout made once, in sorted column
    order) are content_keys() of its rows read as dicts: any column names, quoted commas, quotes and
    newlines, whitespace, short rows, a relative_change column, identical twins."""
    header = [name.strip() for name in names if name.strip() not in ("model", "relative_change")] + ["model"]
    if with_relative:
        header.insert(len(header) // 2, "relative_change")
    body = [[*cells[:len(header)]] for cells in rows] + [list(rows[0][:len(header)])] * twins
    for cells in body:
        cells += [""] * (len(header) - len(cells))
        cells[header.index("model")] = cells[header.index("model")].strip() or "m"
    path = tmp_path_factory.mktemp("keys") / "perf.csv"
    with open(path, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([header, *body])
    source = PerfCsv(path)
    assert source.check() == len(body)
    as_read = [dict(zip(header, (cell.strip() for cell in cells))) for cells in body]
    assert [row.key for batch in source.batches(size=4) for row in batch] == content_keys(as_read)


class Lines(Reporter):
    def __init__(self) -> None:
        self.lines: list[str] = []

    def message(self, text: str) -> None:
        self.lines.append(text)


def test_a_long_import_says_how_far_it_got(workdir, monkeypatch):
    write_perf_csv(workdir / "perf.csv", [*stepped("a", 30, 20), *stepped("b", 30, 40)])
    monkeypatch.setattr(importer, "PROGRESS_EVERY_S", 0.0)
    monkeypatch.setattr(rowlib, "BATCH_ROWS", 10)
    lines = Lines()
    update_table(workdir / "perf.csv", "sqlite:///m.db", reporter=lines)
    assert any("of 60 rows" in line for line in lines.lines), lines.lines
    assert any("of 2 series" in line for line in lines.lines), lines.lines
    quiet = Lines()
    write_perf_csv(workdir / "more.csv", stepped("c", 5, 10))
    monkeypatch.setattr(importer, "PROGRESS_EVERY_S", 5.0)
    update_table(workdir / "more.csv", "sqlite:///m.db", reporter=quiet)
    assert quiet.lines == []  # a short import prints nothing


# --- relative_change: one pass per series --------------------------------------------------------

def expected_relative(values: list[float]) -> list[dict]:
    """relative_change by its definition: each run against the mean of the (up to 5) runs before it
    after the last change point before it, the change points of the whole series."""
    changes = [c.index for c in detect(values)] if len(values) >= 6 else []
    out = []
    for j, value in enumerate(values):
        start = max([c for c in changes if c <= j - 1], default=0)
        window = values[max(start, j - 5):j]
        if not window:
            out.append({})
            continue
        mean = math.fsum(window) / len(window)
        out.append({"pct_change": round((value - mean) / mean * 100, 4), "baseline_avg": round(mean, 6),
                    "sample_count": len(window)})
    return out


@settings(max_examples=40)  # an import each: a database file per case
@given(st.lists(st.floats(90, 110), min_size=1, max_size=40), st.integers(0, 40), st.floats(0.0, 0.3))
def test_relative_change_of_a_series_imported_at_once(tmp_path_factory, base, at, step):
    folder = tmp_path_factory.mktemp("rc")
    values = [round(v * (1 + step * (k >= at)), 3) for k, v in enumerate(base)]
    write_perf_csv(folder / "perf.csv", [dict(model="m", performance=v, run_id=f"r{k:03d}",
                                              started_at=f"2026-01-01T00:{k // 60:02d}:{k % 60:02d}Z")
                                         for k, v in enumerate(values)])
    update_table(folder / "perf.csv", f"sqlite:///{folder / 'm.db'}")
    assert [relative(r) for r in db_rows(folder / "m.db")] == expected_relative(values)


_FIGURES = st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.floats(-1e10, 1e10),
                    st.decimals(-10**9, 10**9, places=7).map(float), st.decimals(-10**9, 10**9, places=5).map(float))


@settings(max_examples=3000)
@given(_FIGURES, _FIGURES)
def test_relative_change_text_is_what_json_dumps_of_round_writes(value, base):
    """The cell's text keeps what earlier releases wrote (``json.dumps`` of ``round``) on the fast path
    too: every magnitude, and decimals one place past the rounding (ties)."""
    text = series.relative_change_text(value, [base])
    change = (value - base) / base * 100 if base else math.nan
    if not math.isfinite(change):
        assert text == ""
        return
    assert text == json.dumps({"baseline_avg": round(base, 6), "pct_change": round(change, 4), "sample_count": 1},
                              sort_keys=True)


@settings(max_examples=2000)
@given(st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.floats(-1e10, 1e10),
                 st.decimals(-10**9, 10**9, places=7).map(float)), st.sampled_from((4, 6)))
def test_the_rounded_figures_of_relative_change_are_what_repr_of_round_writes(value, digits):
    """The cell's text keeps what earlier releases wrote (``json.dumps`` of ``round``) on the fast path
    too: every magnitude, and decimals one place past the rounding (ties)."""
    assert series.rounded_text(value, digits) == repr(round(value, digits))


def test_rows_of_earlier_imports_are_never_rewritten(workdir):
    rows = stepped("m", 40, 25)
    write_perf_csv(workdir / "part1.csv", rows[:27])
    update_table(workdir / "part1.csv", "sqlite:///m.db")
    before = [r["relative_change"] for r in db_rows(workdir / "m.db")]
    write_perf_csv(workdir / "part2.csv", rows[27:])
    update_table(workdir / "part2.csv", "sqlite:///m.db")
    after = db_rows(workdir / "m.db")
    assert [r["relative_change"] for r in after[:27]] == before
    # the later rows are compared with the runs after the step only
    assert relative(after[-1])["baseline_avg"] == pytest.approx(110, rel=0.02)


def test_the_rows_an_import_keeps_give_what_reading_them_back_gives(workdir, monkeypatch):
    """The series pass and the summaries work from the cells the import kept as it wrote its rows
    (kept.KeptRows, summary.Tally), or read them back where the store does not confirm their ids:
    every table the same, into an empty table and into one with rows (a step within the appended
    rows corrects the relative_change the running window wrote)."""
    first = [*stepped("a", 40, 25), *stepped("b", 40, 999, seed=2),
             *[dict(model="c", performance=1.0 + k % 3, run_id=f"run{k // 2:03d}", tags=f"t{k % 2}") for k in range(30)],
             dict(model="c", performance=7.0, run_id="twin"), dict(model="c", performance=7.0, run_id="twin"),
             dict(model="c", performance=5.0), dict(model="c", performance=6.0, started_at="2026-02-01T00:00:00Z"),
             *[dict(model="s", performance=float(k), perf_samples=json.dumps([k, k + 0.5, k + 1.0]), run_id=f"run{k:03d}")
               for k in range(1, 12)],
             dict(model="d", status="FAILURE", reason="out of memory", run_id="run001"),
             dict(model="d", status="SKIPPED", run_id="run002"), dict(model="a", status="FAILURE", run_id="run041")]
    second = [*stepped("a", 3, 0, seed=5, prefix="next"),
              *[{**row, "run_id": f"late{k:03d}"} for k, row in enumerate(stepped("b", 30, 10, seed=3))],
              *stepped("e", 12, 6, seed=4), dict(model="c", performance=2.0, run_id="run003")]
    write_perf_csv(workdir / "first.csv", first)
    write_perf_csv(workdir / "second.csv", second)
    monkeypatch.setattr(rowlib, "BATCH_ROWS", 16)
    read_back = []
    new_rows = SqlStore.new_rows
    monkeypatch.setattr(SqlStore, "new_rows", lambda self, *a: read_back.append(name) or new_rows(self, *a))
    for name, numbered in (("kept.db", SqlStore.numbered), ("read.db", lambda self, mark, count: False)):
        monkeypatch.setattr(SqlStore, "numbered", numbered)
        assert update_table(workdir / "first.csv", f"sqlite:///{name}").inserted == len(first)
        assert update_table(workdir / "second.csv", f"sqlite:///{name}").inserted == len(second)
        assert update_table(workdir / "first.csv", f"sqlite:///{name}").inserted == 0
    assert set(read_back) == {"read.db"}
    kept, read = every_table(workdir / "kept.db"), every_table(workdir / "read.db")
    assert kept == read
    assert any(row for row in kept["dlm_table_alerts"])  # the steps were found


def test_a_figure_that_keeps_its_text_reads_the_rows_back(workdir, monkeypatch):
    """An empty perf_samples list falls back to a performance that keeps its text (parsing.Figure):
    the kept rows give up, the series pass reads the rows back, the same tables as a read-back import."""
    rows = [*stepped("m", 20, 99), dict(model="m", performance=7, perf_samples="[]", run_id="whole")]
    write_perf_csv(workdir / "perf.csv", rows)
    read_back = []
    new_rows = SqlStore.new_rows
    monkeypatch.setattr(SqlStore, "new_rows", lambda self, *a: read_back.append(name) or new_rows(self, *a))
    for name, numbered in (("kept.db", SqlStore.numbered), ("read.db", lambda self, mark, count: False)):
        monkeypatch.setattr(SqlStore, "numbered", numbered)
        assert update_table(workdir / "perf.csv", f"sqlite:///{name}").inserted == 21
    assert read_back == ["kept.db", "read.db"]
    assert every_table(workdir / "kept.db") == every_table(workdir / "read.db")


def test_an_import_after_a_gap_in_the_ids_reads_its_rows_back(workdir, monkeypatch):
    """AUTOINCREMENT numbers after a deleted newest row: the import's rows are not the ids after the
    table's newest, so the series pass reads them back."""
    write_perf_csv(workdir / "first.csv", stepped("m", 20, 99))
    write_perf_csv(workdir / "second.csv", stepped("m", 20, 5, prefix="next"))
    update_table(workdir / "first.csv", "sqlite:///m.db")
    with sqlite3.connect(workdir / "m.db") as connection:
        connection.execute("DELETE FROM dlm_table WHERE id = (SELECT MAX(id) FROM dlm_table)")
    read_back = []
    new_rows = SqlStore.new_rows
    monkeypatch.setattr(SqlStore, "new_rows", lambda self, *a: read_back.append(a) or new_rows(self, *a))
    assert update_table(workdir / "second.csv", "sqlite:///m.db").inserted == 20
    assert read_back
    stored = db_rows(workdir / "m.db")
    assert [r["id"] for r in stored[-20:]] == list(range(21, 41))  # id 20 was used by the deleted row


# --- change points as alerts ---------------------------------------------------------------------

def alerts_of(path):
    return db_rows(path, "dlm_table_alerts", "position")


def test_a_step_is_an_alert_when_the_import_returns_and_appends_keep_it(workdir, cli):
    rows = stepped("m", 60, 40) + stepped("flat", 60, 999, seed=2)
    write_perf_csv(workdir / "perf.csv", rows[:45] + rows[60:105])
    result = json.loads(cli("database", "update-table", "--csv-file-path", "perf.csv", "--json").stdout)
    assert result["series"] == 2 and result["new_alerts"] == 1
    [alert] = alerts_of(workdir / "madengine.db")
    assert (alert["model"], alert["kind"], alert["after_run"], alert["state"], alert["detected"]) == \
        ("m", "improvement", "run040", "untriaged", 1)
    # one run at a time: the region re-examined grows, the alert stays one, its triage with it
    marked = cli("report", "alerts", "set", alert["alert_id"][:8], "--state", "expected", "--note", "new kernel",
                 "--link", "0123abcd")
    assert marked.code == 0, marked
    for k in range(45, 60):
        write_perf_csv(workdir / f"run{k}.csv", [rows[k], rows[60 + k]])
        assert cli("database", "update-table", "--csv-file-path", f"run{k}.csv").code == 0
    assert cli("database", "update-table", "--csv-file-path", "perf.csv").code == 0  # a re-import adds nothing
    [kept] = alerts_of(workdir / "madengine.db")
    assert (kept["alert_id"], kept["state"], kept["note"], kept["updated_by"]) == \
        (alert["alert_id"], "expected", "new kernel", "tester")
    assert json.loads(kept["links"]) == ["0123abcd"]


def test_create_table_finds_the_changes_of_rows_an_earlier_release_wrote(workdir, cli):
    write_perf_csv(workdir / "perf.csv", stepped("m", 30, 15))
    assert cli("database", "update-table", "--csv-file-path", "perf.csv").code == 0
    connection = sqlite3.connect(workdir / "madengine.db")
    connection.execute("DROP TABLE dlm_table_series")  # as a release without them left the table
    connection.execute("DROP TABLE dlm_table_alerts")
    connection.commit()
    connection.close()
    assert cli("database", "create-table").code == 0
    assert [a["after_run"] for a in alerts_of(workdir / "madengine.db")] == ["run015"]


# --- report alerts -------------------------------------------------------------------------------

def test_report_alerts_lists_shows_and_sets(workdir, cli):
    write_perf_csv(workdir / "perf.csv", stepped("slow", 30, 15, step=-0.1) + stepped("fast", 30, 20, seed=3))
    assert cli("database", "update-table", "--csv-file-path", "perf.csv").code == 0
    listed = cli("report", "alerts", "list", "--json")
    assert listed.code == 0, listed
    alerts = json.loads(listed.stdout)["alerts"]
    assert [(a["model"], a["kind"]) for a in alerts] == [("slow", "regression"), ("fast", "improvement")]
    assert "detector precision n/a (0 invalid of 0 triaged, 2 untriaged)" in listed.stderr
    regression = alerts[0]["alert_id"]
    done = cli("report", "alerts", "set", regression, "--state", "invalid", "--note", "noisy node",
               "--link", "https://example.com/issues/1", "--by", "bob", "--json")
    assert done.code == 0 and json.loads(done.stdout)["state"] == "invalid", done
    shown = json.loads(cli("report", "alerts", "show", regression[:6], "--json").stdout)
    assert [(e["state"], e["by"], e["note"]) for e in shown["log"]] == [("invalid", "bob", "noisy node")]
    text = cli("report", "alerts", "list", "--state", "invalid")
    assert regression in text.stdout and "fast" not in text.stdout
    assert "precision 0% (1 invalid of 1 triaged, 1 untriaged)" in text.stderr


@pytest.mark.parametrize("argv, fragment", [
    (["set", "abc", "--state", "invalid"], "not an alert id: 'abc'"),
    (["set", "0000000000", "--state", "invalid"], "no alert '0000000000'"),
    (["set", "{id}", "--state", "invalid", "--link", "javascript:alert(1)"], "--link: not a commit hash or an http(s) URL"),
    (["set", "{id}", "--state", "invalid", "--by", ""], "--by: say who decides"),
    (["set", "{id}", "--state", "invalid", "--note", "x" * 2001], "--note: at most 2000 characters"),
    (["show", "--db-url", "sqlite:///missing.db", "0123456"], "database file not found"),
    (["set", "--summary", "nosuchrun", "--state", "invalid"], "no alert summary 'nosuchrun'"),
    (["summaries", "--limit", "-1"], "--limit: must be 0 or more"),
])
def test_report_alerts_bad_input_is_one_line(workdir, cli, argv, fragment):
    write_perf_csv(workdir / "perf.csv", stepped("slow", 30, 15))
    assert cli("database", "update-table", "--csv-file-path", "perf.csv").code == 0
    alert = json.loads(cli("report", "alerts", "list", "--json").stdout)["alerts"][0]["alert_id"]
    result = cli("report", "alerts", *[a.replace("{id}", alert) for a in argv])
    assert result.code == 2 and fragment in one_error_line(result.stderr), result


def one_bad_run(models: int, runs: int = 30, at: int = 20, improved: int = 0) -> list[dict]:
    """``models`` results whose run ``at`` is 10 % slower (the last ``improved`` of them 10 % faster),
    each row carrying the commit it ran: commit c<k> for run k."""
    rows = []
    for m in range(models):
        step = 0.10 if m >= models - improved else -0.10
        for row in stepped(f"model{m:02d}", runs, at, seed=m + 1, step=step):
            row["git_commit"] = f"c{int(row['run_id'][3:]):07d}"
            rows.append(row)
    return rows


def test_alerts_are_summarised_by_the_run_that_introduced_them_and_triaged_at_once(workdir, cli):
    write_perf_csv(workdir / "perf.csv", one_bad_run(5, improved=1) + stepped("other", 30, 10, seed=40, step=-0.2))
    assert cli("database", "update-table", "--csv-file-path", "perf.csv").code == 0
    listed = cli("report", "alerts", "summaries", "--json")
    assert listed.code == 0, listed
    summaries = json.loads(listed.stdout)["summaries"]
    assert [(s["summary_id"], s["alerts"], s["regressions"], s["improvements"]) for s in summaries] == \
        [("run020", 5, 4, 1), ("run010", 1, 1, 0)]  # both untriaged: the newest first
    first = summaries[0]
    assert [a["kind"] for a in first["items"]] == ["regression"] * 4 + ["improvement"]  # the worst first
    assert first["commits"] == [{"from": "c0000019", "to": "c0000020", "alerts": 5, "range": "c0000019..c0000020"}]
    text = cli("report", "alerts", "summaries")
    assert "summary run020" in text.stdout and "4 regression(s), 1 improvement(s), 5 untriaged" in text.stdout
    assert "commits c0000019..c0000020" in text.stdout
    assert re.search(r"samples/s  \u22129\.\d %, worse", text.stdout) and re.search(r" \+10\.\d %, better", text.stdout)
    # the whole summary with one command
    done = cli("report", "alerts", "set", "--summary", "run020", "--state", "invalid", "--by", "bob", "--json")
    assert done.code == 0, done
    outcome = json.loads(done.stdout)
    assert outcome["summary"] == "run020" and len(outcome["changed"]) == 5 and outcome["unchanged"] == []
    assert "5 alerts are now invalid, by bob" in done.stderr
    states = {a["after_run"]: a["state"] for a in json.loads(cli("report", "alerts", "list", "--json").stdout)["alerts"]
              if a["after_run"] == "run020"}
    assert set(states.values()) == {"invalid"}
    assert [s["summary_id"] for s in json.loads(cli("report", "alerts", "summaries", "--state", "untriaged",
                                                    "--json").stdout)["summaries"]] == ["run010"]
    # chosen alerts of a summary; again: nothing new written
    two = [a["alert_id"] for a in first["items"][:2]]
    assert cli("report", "alerts", "set", *two, "--summary", "run020", "--state", "expected", "--by", "bob").code == 0
    again = cli("report", "alerts", "set", *two, "--summary", "run020", "--state", "expected", "--by", "carol")
    assert again.code == 0 and "2 alerts say so already" in again.stderr and "now" not in again.stderr, again
    log = json.loads(cli("report", "alerts", "show", two[0], "--json").stdout)["log"]
    assert [(e["state"], e["by"]) for e in log] == [("invalid", "bob"), ("expected", "bob")]


def test_a_bulk_set_names_what_is_not_in_its_database_and_changes_nothing(workdir, cli):
    write_perf_csv(workdir / "a.csv", one_bad_run(3))
    write_perf_csv(workdir / "b.csv", stepped("elsewhere", 30, 12, seed=9))
    assert cli("database", "update-table", "--csv-file-path", "a.csv", "--db-url", "sqlite:///a.db").code == 0
    assert cli("database", "update-table", "--csv-file-path", "b.csv", "--db-url", "sqlite:///b.db").code == 0
    ours = [a["alert_id"] for a in json.loads(cli("report", "alerts", "list", "--db-url", "sqlite:///a.db",
                                                  "--json").stdout)["alerts"]]
    [theirs] = [a["alert_id"] for a in json.loads(cli("report", "alerts", "list", "--db-url", "sqlite:///b.db",
                                                      "--json").stdout)["alerts"]]
    mixed = cli("report", "alerts", "set", *ours, theirs, "--state", "fixed", "--by", "x", "--db-url", "sqlite:///a.db")
    line = one_error_line(mixed.stderr)
    assert mixed.code == 2 and "1 of 4 alerts are not in sqlite:///a.db table dlm_table" in line and theirs in line
    assert all(a["state"] == "untriaged" for a in json.loads(cli("report", "alerts", "list", "--db-url",
                                                                  "sqlite:///a.db", "--json").stdout)["alerts"])
    outside = cli("report", "alerts", "set", ours[0], "--summary", "run012", "--state", "fixed", "--by", "x",
                  "--db-url", "sqlite:///a.db")
    assert outside.code == 2 and "no alert summary 'run012'" in one_error_line(outside.stderr)


def test_report_alerts_set_checks_the_id_before_who_and_falls_back_to_the_account(workdir, cli):
    import pwd

    write_perf_csv(workdir / "perf.csv", stepped("slow", 30, 15))
    assert cli("database", "update-table", "--csv-file-path", "perf.csv").code == 0
    nobody = {"USER": "", "USERNAME": ""}
    bad = cli("report", "alerts", "set", "0000000000", "--state", "invalid", environ=nobody)
    assert bad.code == 2 and "no alert '0000000000'" in one_error_line(bad.stderr), bad
    [alert] = json.loads(cli("report", "alerts", "list", "--json").stdout)["alerts"]
    done = cli("report", "alerts", "set", alert["alert_id"], "--state", "acknowledged", "--json", environ=nobody)
    assert done.code == 0 and json.loads(done.stdout)["updated_by"] == pwd.getpwuid(os.getuid()).pw_name, done
    nothing = cli("report", "alerts", "set", "--state", "invalid")
    assert nothing.code == 2 and "name the alerts" in one_error_line(nothing.stderr)


@given(st.text(max_size=20) | st.sampled_from(["invalid", "FIXED", " expected "]), st.text(max_size=40),
       st.lists(st.text(max_size=40) | st.sampled_from(["0123abcd", "https://x.example/i/1", "http://h/p"]), max_size=12),
       st.text(max_size=120))
def test_a_triage_is_checked_or_refused_in_one_line(state, note, links, by):
    """What a person types into the triage form or `report alerts set` (user input: Hypothesis)."""
    from madengine.database.alerts import STATES, triage

    try:
        decision = triage(state, note, links, by, prefix="--")
    except InputError as exc:
        assert exc.path in ("--state", "--note", "--link", "--by") and "\n" not in str(exc)
        return
    assert decision.state in STATES and decision.by and len(decision.links) <= 10
    assert all(link.startswith(("http://", "https://")) or link.isalnum() for link in decision.links)


def test_the_stored_verdict_of_a_noisy_latest_run_says_how_many_more_runs(workdir, cli):
    """At 2 % noise one run cannot exclude a 3 % change: the import stores 'not yet known (N more runs)'."""
    from madengine.stats.history import state_words

    rng = random.Random(8)
    rows = [dict(model="noisy", metric="latency_ms", performance=round(100 * rng.lognormvariate(0, 0.02), 3),
                 run_id=f"run{k:03d}", started_at=f"2026-01-01T00:{k:02d}:00Z") for k in range(40)]
    write_perf_csv(workdir / "perf.csv", rows)
    assert cli("database", "update-table", "--csv-file-path", "perf.csv").code == 0
    [state] = db_rows(workdir / "madengine.db", "dlm_table_series", "identity_key")
    verdict = json.loads(state["verdict"])
    assert verdict["verdict"] == "inconclusive" and verdict["n_history"] == 39 and verdict["run_id"] == "run039"
    assert verdict["more_runs"] >= 1 and state_words(verdict) == f"not yet known ({verdict['more_runs']} more runs)"


@given(st.text(max_size=24) | st.from_regex(r"\s?[0-9a-fA-F]{4,18}\s?", fullmatch=True))
def test_an_alert_id_as_typed_is_checked_or_refused_in_one_line(text):
    """What `report alerts set/show` and the triage posts take as an alert id (user input: Hypothesis)."""
    from madengine.database.api import checked_alert_id

    try:
        wanted = checked_alert_id(text)
    except InputError as exc:
        assert exc.path == "alert" and "\n" not in str(exc) and "not an alert id" in str(exc)
        return
    assert 6 <= len(wanted) <= 16 and set(wanted) <= set("0123456789abcdef") and wanted == text.strip().lower()


@given(st.dictionaries(st.sampled_from(["alerts", "alert", "summary", "state", "by"]),
                       st.text(max_size=20) | st.lists(st.text(max_size=18), max_size=4) | st.integers() | st.none()))
def test_a_bulk_triage_body_names_its_alerts_or_is_refused_in_one_line(fields):
    """The JSON body of the dashboard's bulk triage (user input: Hypothesis)."""
    from madengine.server.triage import bulk_target

    try:
        ids, summary = bulk_target(fields)
    except InputError as exc:
        assert exc.path == "body" and "\n" not in str(exc)
        return
    assert all(isinstance(i, str) and i.strip() for i in ids) and (summary is None or (isinstance(summary, str)
                                                                                      and summary))


# --- compare against the history -----------------------------------------------------------------

def test_compare_judges_single_runs_against_their_history(workdir, cli):
    rows = stepped("gpt", 40, 37, step=0.10) + stepped("bert", 40, 999, seed=5)
    for row in rows[:40]:
        row["metric"] = "latency_ms"
    write_perf_csv(workdir / "perf.csv", rows)
    assert cli("database", "update-table", "--csv-file-path", "perf.csv").code == 0
    result = cli("report", "compare", "--old-run", "run036", "--new-run", "run037", "--json")
    assert result.code == 0, result
    by_model = {m["model"]: m for m in json.loads(result.stdout)["models"]}
    assert by_model["gpt"]["verdict"] == "slower"
    assert by_model["gpt"]["method"] == "prediction interval: latest run vs 37 runs"
    assert by_model["gpt"]["false_alarm_rate"] == 0.008
    assert by_model["bert"]["verdict"] != "slower" and by_model["bert"]["method"].startswith("prediction interval")
    assert cli("report", "compare", "--old-run", "run036", "--new-run", "run037", "--fail-on-regression").code == 1
    # after the change, two runs of the new level are no history yet: no verdict from one figure a side
    later = {m["model"]: m for m in json.loads(cli("report", "compare", "--old-run", "run038", "--new-run", "run039",
                                                   "--json").stdout)["models"]}
    assert (later["gpt"]["verdict"], later["gpt"]["method"]) == ("inconclusive", "too few figures")
    # two perf.csv files have no history: the U test decides, and says it cannot with one figure a side
    write_perf_csv(workdir / "old.csv", rows[36:37])
    write_perf_csv(workdir / "new.csv", rows[37:38])
    files = json.loads(cli("report", "compare", "old.csv", "new.csv", "--json").stdout)["models"][0]
    assert (files["verdict"], files["method"]) == ("inconclusive", "too few figures")
