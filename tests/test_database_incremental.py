"""`database update-table` of a perf.csv that only grew: only the appended rows are read (SQLite here,
MariaDB in tests/test_database_mysql.py).

An import remembers what it read of the file (`<table>_files`: device/inode, size, SHA-256); the next
import of the same file reads only what was appended since. A file rewritten, truncated or edited in
place is read whole, with one line saying why; a second header line mid-file is exit 2.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import random
import sqlite3

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from madengine.database import rows as rowlib
from madengine.database import update_table
from madengine.database.live import LiveRecorder
from madengine.database.urls import parse_url
from madengine.results.columns import ALL_COLUMNS
from madengine.results.perfcsv import append_rows
import test_database_helpers as helpers
from test_database_helpers import history, one_error_line, write_perf_csv

WHOLE = "reading the whole file"


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    return helpers.clean_database_env(monkeypatch, tmp_path)


@pytest.fixture
def parsed(monkeypatch):
    """How many CSV rows the importer's readers handed out (header lines included), in this process:
    lines split in C and rows read by the csv module."""
    counted = [0]
    real, real_split = rowlib.csv_rows, rowlib._c_split_line or rowlib._split_line

    def split(line, limit):
        cells = real_split(line, limit)
        counted[0] += cells is not None
        return cells

    class Counting:
        def __init__(self, handle):
            self.reader = real(handle)

        def __iter__(self):
            return self

        def __next__(self):
            cells = next(self.reader)
            counted[0] += 1
            return cells

        @property
        def line_num(self):
            return self.reader.line_num

    monkeypatch.setattr(rowlib, "csv_rows", Counting)
    monkeypatch.setattr(rowlib, "_c_split_line", split)
    return counted


def run_rows(run: int, series: int) -> list[dict[str, str]]:
    """One nightly run: a row per series, the cells a run fills."""
    rng = random.Random(run)
    return [{"model": f"model_{s:03d}", "n_gpus": "1", "tags": "nightly", "gpu_architecture": "gfx942",
             "machine_name": "node1", "metric": "samples_per_second", "status": "SUCCESS",
             "performance": f"{(100 + s) * rng.lognormvariate(0, 0.02):.3f}", "run_id": f"run{run:04d}",
             "started_at": f"2026-01-01T00:00:00+00:00#{run:04d}", "executor": "docker", "gpu_vendor": "AMD",
             "context": json.dumps({"gpu_vendor": "AMD", "run": run})} for s in range(series)]


def write_runs(path, runs: range, series: int) -> None:
    """Runs written at once, as madengine writes them (the header, then one line per row)."""
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(ALL_COLUMNS)
        for run in runs:
            writer.writerows([row.get(name, "") for name in ALL_COLUMNS] for row in run_rows(run, series))


def every_table(path) -> dict[str, list[tuple]]:
    """Every table but the file marks (what each import read of its file differs by design)."""
    return helpers.every_table(path, leave_out=("dlm_table_files",))


def forget_files(db) -> None:
    """The next import of every file reads it whole, as before file marks existed."""
    connection = sqlite3.connect(db)
    connection.execute("DELETE FROM dlm_table_files")
    connection.commit()
    connection.close()


# --- appending -----------------------------------------------------------------------------------

def test_appending_a_run_to_a_large_perf_csv_reads_only_that_run(workdir, parsed):
    series, runs = 100, 120  # 12,000 rows
    write_runs(workdir / "perf.csv", range(runs), series)
    first = update_table(workdir / "perf.csv", "sqlite:///m.db")
    assert (first.inserted, first.unread) == (series * runs, 0)
    append_rows(workdir / "perf.csv", run_rows(runs, series))  # the next run, by madengine's writer
    parsed[0] = 0
    appended = update_table(workdir / "perf.csv", "sqlite:///m.db")
    # the header line, then the appended rows, once checked and once imported: no earlier row again
    assert parsed[0] == 1 + 2 * series
    assert (appended.rows, appended.unread, appended.inserted, appended.series) == \
        (series * (runs + 1), series * runs, series, series)
    assert appended.read_whole_because == ""
    # the same as reading the whole grown file again (what every import did before)
    write_runs(workdir / "first.csv", range(runs), series)
    update_table(workdir / "first.csv", "sqlite:///whole.db")
    os.replace(workdir / "first.csv", workdir / "grown.csv")
    append_rows(workdir / "grown.csv", run_rows(runs, series))
    forget_files(workdir / "whole.db")
    parsed[0] = 0
    update_table(workdir / "grown.csv", "sqlite:///whole.db")
    assert parsed[0] > 2 * series * runs
    assert every_table(workdir / "m.db") == every_table(workdir / "whole.db")
    parsed[0] = 0
    again = update_table(workdir / "perf.csv", "sqlite:///m.db")
    assert (again.inserted, again.unread, parsed[0]) == (0, series * (runs + 1), 1)


def test_a_perf_csv_is_read_in_large_pieces(workdir, monkeypatch):
    """Each piece read from the file is a call (and a system call): the text layer's default 8 KB
    made 120,000 of them for a gigabyte."""
    write_runs(workdir / "perf.csv", range(60), 100)  # 6,000 rows
    size = (workdir / "perf.csv").stat().st_size
    assert size > 8 * rowlib._TEXT_CHUNK
    reads = [0]
    real = rowlib._Span.readinto

    def counted(self, buffer):
        reads[0] += 1
        return real(self, buffer)

    monkeypatch.setattr(rowlib._Span, "readinto", counted)
    source = rowlib.PerfCsv(workdir / "perf.csv")
    assert sum(len(batch) for batch in source.batches()) == 6000
    assert reads[0] <= size // rowlib._TEXT_CHUNK + 2
    with open(workdir / "perf.csv", "rb") as handle:
        assert source.checksum == hashlib.sha256(handle.read()).hexdigest()


@given(rows=st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(1, 4), st.sampled_from(["r1", "r2", ""])),
                     min_size=1, max_size=30),
       cuts=st.lists(st.integers(0, 30), max_size=3))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_file_imported_as_it_grows_stores_what_reading_it_whole_each_time_stores(tmp_path_factory, rows, cuts):
    """Rows with identical twins (also across the parts), appended in parts with an import after each:
    the stored rows, keys, series and alerts are those of importing the whole file after each part."""
    folder = tmp_path_factory.mktemp("grow")
    specs = [dict(model=model, performance=float(value), run_id=run) for model, value, run in rows]
    bounds = sorted({min(c, len(specs)) for c in cuts if c} | {len(specs)})
    start = 0
    for end in bounds:
        if end > start:
            write_perf_csv(folder / "perf.csv", specs[start:end])
            write_perf_csv(folder / "copy.csv", specs[start:end])
            start = end
        update_table(folder / "perf.csv", f"sqlite:///{folder / 'grown.db'}")
        update_table(folder / "copy.csv", f"sqlite:///{folder / 'whole.db'}")
        forget_files(folder / "whole.db")
    assert every_table(folder / "grown.db") == every_table(folder / "whole.db")


def test_rows_recorded_live_then_imported_are_not_read_twice(workdir, parsed):
    write_perf_csv(workdir / "perf.csv", history("m", [1, 2, 3]))
    assert update_table(workdir / "perf.csv", "sqlite:///m.db").inserted == 3
    recorder = LiveRecorder(parse_url("sqlite:///m.db"), {})
    for row in history("m", [4, 5], run_prefix="live"):  # what `run --db-url` does: perf.csv, then the database
        write_perf_csv(workdir / "perf.csv", [row])
        with open(workdir / "perf.csv", newline="", encoding="utf-8") as handle:
            cells = list(csv.DictReader(handle))[-1]
        assert recorder.record(cells, "perf.csv") is None
    assert recorder.recorded == 2
    parsed[0] = 0
    result = update_table(workdir / "perf.csv", "sqlite:///m.db")
    assert (result.inserted, result.unread, result.read_whole_because, parsed[0]) == (0, 3, "", 1 + 4)


# --- read whole, and why -------------------------------------------------------------------------

def whole_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if WHOLE in line]


def test_a_file_rewritten_truncated_or_edited_is_read_whole_with_one_line_why(workdir, cli):
    write_perf_csv(workdir / "perf.csv", history("m", [1, 2, 3, 4]))
    assert cli("database", "update-table", "--csv-file-path", "perf.csv").code == 0

    def update() -> tuple[dict, list[str]]:
        result = cli("database", "update-table", "--csv-file-path", "perf.csv", "--json")
        assert result.code == 0, result
        return json.loads(result.stdout), whole_lines(result.stderr)

    text = (workdir / "perf.csv").read_text()
    (workdir / "new.csv").write_text(text)
    os.replace(workdir / "new.csv", workdir / "perf.csv")  # rewritten: another inode, same bytes
    result, why = update()
    assert (result["unread"], result["inserted"]) == (0, 0)
    assert why == ["madengine: perf.csv: reading the whole file: it is another file than the one imported before "
                   "(rewritten or replaced)"]
    assert result["read_whole_because"] in why[0]

    with open(workdir / "perf.csv", "r+", encoding="utf-8") as handle:  # edited in place, same size
        handle.seek(text.index("3.0"))
        handle.write("9.0")
    result, why = update()
    assert (result["unread"], result["inserted"]) == (0, 1)
    assert why == [f"madengine: perf.csv: reading the whole file: its first {len(text):,} bytes changed since they "
                   "were imported (edited in place)"]

    lines = (workdir / "perf.csv").read_text().splitlines(keepends=True)
    with open(workdir / "perf.csv", "w", encoding="utf-8") as handle:  # truncated in place
        handle.write("".join(lines[:3]))
    result, why = update()
    assert (result["rows"], result["unread"], result["inserted"]) == (2, 0, 0)
    assert len(why) == 1 and "it is shorter than the" in why[0]

    result, why = update()  # nothing changed since: nothing read, nothing said
    assert (result["rows"], result["unread"], why) == (2, 2, [])


def test_a_row_repeating_one_imported_before_reads_the_file_whole(workdir, cli):
    row = dict(model="m", performance=5.0, run_id="same")
    write_perf_csv(workdir / "perf.csv", [row, *history("m", [1, 2])])
    assert cli("database", "update-table", "--csv-file-path", "perf.csv").code == 0
    write_perf_csv(workdir / "perf.csv", [row])  # an identical row: its occurrence number counts the first
    result = cli("database", "update-table", "--csv-file-path", "perf.csv", "--json")
    assert result.code == 0, result
    assert json.loads(result.stdout)["inserted"] == 1 and json.loads(result.stdout)["unread"] == 0
    assert len(whole_lines(result.stderr)) == 1 and "repeats one imported before" in result.stderr
    write_perf_csv(workdir / "whole.csv", [row, *history("m", [1, 2]), row])
    update_table(workdir / "whole.csv", "sqlite:///whole.db")
    assert every_table(workdir / "madengine.db") == every_table(workdir / "whole.db")


def test_a_table_emptied_since_reads_the_file_whole(workdir, cli):
    write_perf_csv(workdir / "perf.csv", history("m", [1, 2, 3]))
    assert cli("database", "update-table", "--csv-file-path", "perf.csv").code == 0
    connection = sqlite3.connect(workdir / "madengine.db")
    connection.execute("DELETE FROM dlm_table")
    connection.commit()
    connection.close()
    result = cli("database", "update-table", "--csv-file-path", "perf.csv", "--json")
    assert result.code == 0 and json.loads(result.stdout)["inserted"] == 3, result
    assert whole_lines(result.stderr) == ["madengine: perf.csv: reading the whole file: the table no longer holds "
                                          "the rows of its latest import"]


# --- bad input -----------------------------------------------------------------------------------

@pytest.mark.parametrize("appended", [False, True])
def test_a_header_changed_mid_file_is_exit_2_naming_its_line(workdir, cli, appended):
    write_perf_csv(workdir / "perf.csv", history("m", [1, 2]))
    if appended:
        assert cli("database", "update-table", "--csv-file-path", "perf.csv").code == 0
    before = sqlite3.connect(workdir / "madengine.db").execute("SELECT COUNT(*) FROM dlm_table").fetchone() \
        if appended else None
    with open(workdir / "perf.csv", "a", encoding="utf-8") as handle:  # another perf.csv joined to it
        handle.write(",".join([*ALL_COLUMNS[:20], "size"]) + "\n" + "m2," * 20 + "64\n")
    result = cli("database", "update-table", "--csv-file-path", "perf.csv")
    assert result.code == 2, result
    assert one_error_line(result.stderr) == ("madengine: error: perf.csv: line 4 is a second header line: the columns "
                                             "changed mid-file (split the file at that line and import each part)")
    if appended:
        assert sqlite3.connect(workdir / "madengine.db").execute("SELECT COUNT(*) FROM dlm_table").fetchone() == before
    else:
        assert not (workdir / "madengine.db").exists()


def test_a_model_named_like_a_column_is_a_row_not_a_header(workdir):
    write_perf_csv(workdir / "perf.csv", history("model", [1, 2]) + history("status", [3]))
    assert update_table(workdir / "perf.csv", "sqlite:///m.db").inserted == 3


def test_a_bad_line_of_a_big_file_rolls_the_import_back(workdir, monkeypatch):
    """A big file is checked as it is read: its bad line ends the import,
    nothing of it is written, and the error names the file and line as the check of a small one does."""
    from madengine.core.errors import InputError
    from madengine.database import importer

    monkeypatch.setattr(importer, "CHECK_WHOLE_BELOW", 1)  # every file is big
    monkeypatch.setattr(rowlib, "BATCH_ROWS", 2)
    write_perf_csv(workdir / "perf.csv", history("m", [1, 2, 3, 4, 5]))
    with open(workdir / "perf.csv", "a", encoding="utf-8") as handle:
        handle.write(",".join(["", "1"] + [""] * (len(ALL_COLUMNS) - 2)) + "\n")  # an empty model cell, line 7
    with pytest.raises(InputError, match="perf.csv: line 7: empty 'model' cell"):
        update_table(workdir / "perf.csv", "sqlite:///m.db")
    tables = helpers.every_table(workdir / "m.db")  # the tables may have been made: nothing is in them
    assert tables["dlm_table"] == [] and not tables.get("dlm_table_files")
