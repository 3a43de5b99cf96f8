"""The results database under the dashboard: summary tables kept current by every writer, the in-place
migration of a database made by the current release (tests/fixtures/release_db_identity), and
`madengine run --db-url` recording rows as they land, with a real MariaDB that goes down."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from conftest import FIXTURES
from dashboard_helpers import history_records, write_history
from madengine.database import create_table, update_table
from madengine.database import summary
from madengine.database.api import open_store
from madengine.database.dashboard import Reader
from madengine.database.live import LiveRecorder
from madengine.database.urls import parse_url
from madengine.results import EXTRA_COLUMNS, PerfRecord, append_records, read_rows
from socket_proxy import SocketProxy
from test_database_mysql import _rows, database, load_release_table, server  # noqa: F401 - real MariaDB fixtures

RELEASE = FIXTURES / "release_db_identity"
PREVIOUS = FIXTURES / "release_db"
#: the columns perf.csv gained after that release: a migration adds them, empty in the old rows
SINCE_RELEASE = list(EXTRA_COLUMNS[EXTRA_COLUMNS.index("warmup_runs") + 1:])


def _as_released(rows: list[tuple], width: int) -> list[tuple]:
    """Rows of the migrated SQLite table as they were: the added columns (at the end) empty, and cut."""
    assert all(value is None for row in rows for value in row[width:])
    return [row[:width] for row in rows]


def _sqlite_from_dump(path: Path, dump: Path) -> Path:
    connection = sqlite3.connect(path)
    connection.executescript(dump.read_text())
    connection.close()
    return path


def _all_rows_sqlite(path: Path) -> list[tuple]:
    connection = sqlite3.connect(path)
    rows = connection.execute("SELECT * FROM dlm_table ORDER BY id").fetchall()
    connection.close()
    return rows


def _summaries_match_the_rows(url: str) -> None:
    """The stored summary entries are exactly what a GROUP BY over the rows gives."""
    with open_store(parse_url(url), "dlm_table", {}, create=False) as store:
        assert summary.present(store)
        assert sorted(summary.stored_identities(store)) == sorted(summary.computed_identities(store))
        assert sorted(summary.stored_runs(store)) == sorted(summary.computed_runs(store))
        assert summary.state(store).current


def _view(reader: Reader) -> tuple[list, list]:
    return ([(e.key, e.first_id, e.latest_id, e.rows, e.success, e.failure, e.skipped) for e in reader.identities()],
            [r.to_json() for r in reader.runs()])


def test_sqlite_database_of_the_current_release_is_migrated_in_place(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    db = _sqlite_from_dump(tmp_path / "release.db", RELEASE / "sqlite_dump.sql")
    url = f"sqlite:///{db}"
    before_rows = _all_rows_sqlite(db)
    reader = Reader(parse_url(url))
    before = _view(reader)  # the dashboard reads it as it is (GROUP BY over the rows), changing nothing
    assert len(before[0]) == 3 and [r["run_id"] for r in before[1]] == [f"run{k}" for k in range(1, 8)]
    assert _all_rows_sqlite(db) == before_rows
    with open_store(parse_url(url), "dlm_table", {}, create=False) as store:
        assert not summary.present(store)
    # the first create-table (or update-table, or run --db-url) migrates it
    created = cli("database", "create-table", "--db-url", url, "--json")
    assert created.code == 0 and json.loads(created.stdout)["added_columns"] == SINCE_RELEASE, created
    assert _as_released(_all_rows_sqlite(db), len(before_rows[0])) == before_rows  # nothing rewritten or lost
    _summaries_match_the_rows(url)
    assert _view(reader) == before  # the same answers, now from the summary tables
    again = cli("database", "update-table", "--csv-file-path", str(RELEASE / "perf.csv"), "--db-url", url, "--json")
    assert again.code == 0 and json.loads(again.stdout)["inserted"] == 0, again  # content keys unchanged
    # later rows keep the summaries current
    append_records(tmp_path / "later.csv", [PerfRecord(model="bert", metric="samples_per_second", performance=108.0,
                                                       status="SUCCESS", run_id="run8", started_at="2026-02-08T10:00:00Z",
                                                       tag_configs="bs=64", executor="docker", gpu_vendor="AMD",
                                                       gpu_architecture="gfx942", n_gpus="1", machine_name="node1",
                                                       base_docker="rocm/pytorch:latest")])
    assert cli("database", "update-table", "--csv-file-path", "later.csv", "--db-url", url).code == 0
    _summaries_match_the_rows(url)
    bert = next(e for e in reader.identities() if e.identity.model == "bert")
    assert (bert.rows, bert.latest_id) == (8, len(before_rows) + 1)
    reader.close()


@pytest.mark.mysql
def test_mariadb_database_of_the_current_release_is_migrated_in_place(server, database, cli, tmp_path):  # noqa: F811
    name, url = database
    load_release_table(server, name, _sqlite_from_dump(tmp_path / "release.db", RELEASE / "sqlite_dump.sql"),
                       RELEASE / "mysql_create.sql")
    before_rows = _rows(server, name)
    reader = Reader(parse_url(url))
    before = _view(reader)
    assert len(before[0]) == 3 and len(before[1]) == 7
    result = cli("database", "update-table", "--csv-file-path", str(RELEASE / "perf.csv"), "--db-url", url, "--json")
    assert result.code == 0 and json.loads(result.stdout)["inserted"] == 0, result
    after = _rows(server, name)
    assert all(row[column] is None for row in after for column in SINCE_RELEASE)
    assert [{k: v for k, v in row.items() if k not in SINCE_RELEASE} for row in after] == before_rows
    _summaries_match_the_rows(url)
    assert _view(reader) == before
    reader.close()


def test_a_table_without_identity_keys_is_read_as_it_is(tmp_path):
    """The release before result identities: the dashboard groups its rows in Python."""
    db = _sqlite_from_dump(tmp_path / "previous.db", PREVIOUS / "sqlite_dump.sql")
    before = _all_rows_sqlite(db)
    reader = Reader(parse_url(f"sqlite:///{db}"))
    entries = reader.identities()
    assert {e.identity.model for e in entries} >= {"bert", "gpt2"}
    bert = next(e for e in entries if e.identity.model == "bert" and e.success)
    assert len(reader.identity_rows(bert.key)) == bert.rows
    assert reader.runs()[0].run_id == "run1"
    reader.close()
    assert _all_rows_sqlite(db) == before


def test_every_writer_keeps_the_summaries_current_and_create_table_repairs_them(tmp_path):
    url = f"sqlite:///{tmp_path / 'results.db'}"
    update_table(write_history(tmp_path / "perf.csv", runs=3), url)
    _summaries_match_the_rows(url)
    recorder = LiveRecorder(parse_url(url), {})
    for record in history_records(runs=5)[-8:]:  # runs 4 and 5, one row at a time
        assert recorder.record(record.to_row(), "perf.csv") is None
    _summaries_match_the_rows(url)
    # a writer of the current release (no summaries) adds a row: readers fall back, create-table repairs
    connection = sqlite3.connect(tmp_path / "results.db")
    connection.execute("INSERT INTO dlm_table (row_key, created_date, model, status, run_id, identity_key) "
                       "VALUES ('k', '2026-01-01 00:00:00', 'old', 'SUCCESS', 'run9', '[\"old\",\"\",\"\",\"\",\"\",\"\",\"\",\"\"]')")
    connection.commit()
    connection.close()
    reader = Reader(parse_url(url))
    assert any(e.identity.model == "old" for e in reader.identities())  # correct while the summaries lag
    assert reader.runs()[-1].run_id == "run9"
    create_table(url)
    _summaries_match_the_rows(url)
    reader.close()


# --- madengine run --db-url --------------------------------------------------------------------

def test_run_records_each_row_into_the_database_as_it_lands(model_repo, cli, monkeypatch):
    monkeypatch.delenv("MADENGINE_DB_URL", raising=False)
    url = f"sqlite:///{model_repo / 'live.db'}"
    result = cli("run", "--tags", "dummy,dummy_py", "--executor", "local", "--db-url", url)
    assert result.code == 0, result
    rows = read_rows(model_repo / "perf.csv")
    stored = Reader(parse_url(url)).run_rows(rows[0]["run_id"])
    assert [r["model"] for r in stored] == ["dummy", "dummy_py"]
    assert [{k: v for k, v in r.items() if k in rows[0]} for r in stored] == rows  # every cell, as perf.csv has it
    # the same rows again from perf.csv: nothing twice (the same content keys)
    again = cli("database", "update-table", "--csv-file-path", "perf.csv", "--db-url", url, "--json")
    assert json.loads(again.stdout)["inserted"] == 0, again
    _summaries_match_the_rows(url)
    # MADENGINE_DB_URL does the same; relative_change against the earlier run
    second = cli("run", "--tags", "dummy", "--executor", "local", environ={"MADENGINE_DB_URL": url})
    assert second.code == 0, second
    latest = Reader(parse_url(url)).run_rows(read_rows(model_repo / "perf.csv")[-1]["run_id"])
    assert json.loads(latest[0]["relative_change"])["pct_change"] == 0.0


def test_bad_database_url_stops_the_run_before_it_starts(model_repo, cli):
    bad = cli("run", "--tags", "dummy", "--executor", "local", "--db-url", "postgres://x")
    assert bad.code == 2 and "--db-url" in bad.stderr and not (model_repo / "perf.csv").exists(), bad
    slurm = cli("run", "--tags", "dummy", "--executor", "slurm", "--db-url", "sqlite:///x.db")
    assert slurm.code == 2 and "--db-url" in slurm.stderr, slurm


@pytest.mark.mysql
def test_a_database_that_is_down_never_fails_the_run(server, database, cli, model_repo, monkeypatch):  # noqa: F811
    name, _ = database
    monkeypatch.chdir(model_repo)
    proxy = SocketProxy((server.host, server.port))  # a port where the database is down
    url = f"mysql://{server.user}:{server.password}@127.0.0.1:{proxy.port}/{name}?timeout=2"
    result = cli("run", "--tags", "dummy,dummy_py,dummy_dir", "--executor", "local", "--db-url", url)
    assert result.code == 0, result
    warnings = [line for line in result.stderr.splitlines() if "results database" in line]
    assert len(warnings) == 1, result.stderr  # one warning for the whole run
    assert "cannot reach the MySQL server" in warnings[0] and "update-table --csv-file-path perf.csv" in warnings[0]
    assert server.password not in result.stderr + result.stdout
    assert [r["model"] for r in read_rows(model_repo / "perf.csv")] == ["dummy", "dummy_py", "dummy_dir"]
    proxy.start()  # it comes back: update-table imports what the run could not record
    try:
        later = cli("database", "update-table", "--csv-file-path", "perf.csv", "--db-url", url, "--json")
        assert later.code == 0 and json.loads(later.stdout)["inserted"] == 3, later
        # a run while it is up records each row; its rows are there before update-table
        up = cli("run", "--tags", "dummy", "--executor", "local", "--db-url", url)
        assert up.code == 0 and "results database" not in up.stderr, up
        assert len(_rows(server, name)) == 4
        _summaries_match_the_rows(url)
    finally:
        proxy.stop()
