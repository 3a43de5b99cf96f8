"""madengine report regressions (perf.csv, SQLite, a real MariaDB) and the in-place migration of results
databases made by the release before result identities (tests/fixtures/release_db)."""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path

import pytest

from conftest import FIXTURES, run_process
from madengine.database import fetch_run, update_table
from madengine.results import PerfRecord, append_records
from test_database_helpers import relative
from test_database_mysql import _connect, _rows, database, load_release_table, server  # noqa: F401 - fixtures of the real MariaDB

RELEASE_DB = FIXTURES / "release_db"
ENV = dict(executor="docker", gpu_vendor="AMD", gpu_architecture="gfx942", n_gpus="1")


def history_rows(model: str, metric: str, values: list[float], **fields) -> list[PerfRecord]:
    return [PerfRecord(model=model, metric=metric, performance=v, status="SUCCESS", run_id=f"run{i:03d}",
                       started_at=f"2026-02-01T10:{i // 60:02d}:{i % 60:02d}Z", **{**ENV, **fields})
            for i, v in enumerate(values)]


def stepped(rng: random.Random, n: int, at: int, base: float, factor: float, cv: float = 0.01) -> list[float]:
    return [base * rng.lognormvariate(0, cv) * (factor if i >= at else 1.0) for i in range(n)]


@pytest.fixture
def perf(tmp_path, monkeypatch) -> Path:
    """gpt2 latency regresses at run 20, bert throughput improves at run 25, resnet is steady, a
    tag-config variant of bert is its own identity, and a short history is too short to judge."""
    monkeypatch.chdir(tmp_path)
    for name in ("MADENGINE_DB_URL", "TUNA_DB_HOSTNAME"):
        monkeypatch.delenv(name, raising=False)
    rng = random.Random(21)
    path = tmp_path / "perf.csv"
    append_records(path, history_rows("gpt2", "latency_ms", stepped(rng, 40, 20, 20.0, 1.08))
                   + history_rows("bert", "samples_per_second", stepped(rng, 40, 25, 100.0, 1.10))
                   + history_rows("bert", "samples_per_second", stepped(rng, 40, 40, 300.0, 1.0), tag_configs="bs=64")
                   + history_rows("resnet", "samples_per_second", stepped(rng, 40, 40, 50.0, 1.0))
                   + history_rows("short", "ms", [1.0, 2.0, 3.0])
                   + [PerfRecord(model="gpt2", status="FAILURE", run_id="run999", reason="crashed")])
    return path


def changes(data: dict) -> dict[tuple[str, str], dict]:
    return {(c["model"], c["tag_configs"]): c for c in data["changes"]}


def test_changes_in_a_perf_csv(cli, perf):
    out = cli("report", "regressions", str(perf), "--json")
    assert out.code == 0, out
    data = json.loads(out.stdout)
    assert (data["series"], data["too_short"]) == (4, 1)
    found = changes(data)
    assert set(found) == {("gpt2", ""), ("bert", "")}
    gpt2, bert = found[("gpt2", "")], found[("bert", "")]
    assert (gpt2["kind"], gpt2["index"], gpt2["latest"]) == ("regression", 20, True)
    assert gpt2["size_percent"] == pytest.approx(8.0, abs=1.5) and gpt2["confidence"] > 0.999
    assert gpt2["before"]["run_id"] == "run019" and gpt2["after"]["run_id"] == "run020"
    assert gpt2["before"]["started_at"] == "2026-02-01T10:00:19Z" and gpt2["before"]["runs"] == 20
    assert gpt2["trace_diff"] == "madengine report trace-diff run019 run020 gpt2"
    assert (bert["kind"], bert["index"]) == ("improvement", 25)
    assert data["counts"] == {"regression": 1, "improvement": 1, "change": 0}


def test_table_hint_and_fail_on_regression(cli, perf):
    out = cli("report", "regressions", str(perf))
    assert out.code == 0, out
    header, _, *lines = out.stdout.splitlines()
    assert header.split()[:4] == ["result", "metric", "change", "size"]
    assert any(line.startswith("gpt2 · docker · AMD gfx942 · 1 GPU") and "regression" in line for line in lines)
    assert "where to look next: madengine report trace-diff run019 run020 gpt2" in out.stderr
    assert cli("report", "regressions", str(perf), "--fail-on-regression").code == 1
    # only the improving model: nothing to fail on
    assert cli("report", "regressions", str(perf), "--model", "bert", "--fail-on-regression").code == 0


def test_a_regression_that_was_fixed_later_does_not_fail_ci(cli, tmp_path):
    rng = random.Random(4)
    values = stepped(rng, 20, 10, 20.0, 1.2) + stepped(rng, 10, 0, 20.0, 1.0)  # up at 10, back at 20
    append_records(tmp_path / "perf.csv", history_rows("m", "latency_ms", values))
    out = cli("report", "regressions", str(tmp_path / "perf.csv"), "--fail-on-regression", "--json")
    kinds = [(c["kind"], c["latest"]) for c in json.loads(out.stdout)["changes"]]
    assert kinds == [("regression", False), ("improvement", True)] and out.code == 0


def test_history_from_sqlite_matches_the_csv(cli, perf):
    assert cli("database", "update-table", "--csv-file-path", str(perf)).code == 0
    from_db = cli("report", "regressions", "--json")  # the default database: ./madengine.db
    from_csv = cli("report", "regressions", str(perf), "--json")
    assert from_db.code == 0, from_db
    db, csv_ = json.loads(from_db.stdout), json.loads(from_csv.stdout)
    assert db["source"] == "sqlite:///madengine.db"
    assert db["changes"] == csv_["changes"] and db["series"] == csv_["series"]
    assert cli("report", "regressions", "--db-url", "sqlite:///madengine.db", "--fail-on-regression").code == 1


def test_bad_inputs_are_one_line_errors(cli, perf, tmp_path):
    cases = [(("--db-url", "sqlite:///missing.db"), "database file not found"),
             ((str(tmp_path / "none.csv"),), "none.csv: file not found"),
             ((str(perf), "--db-url", "sqlite:///x.db"), "give a perf.csv or --db-url/--table, not both")]
    for argv, expected in cases:
        out = cli("report", "regressions", *argv)
        assert out.code == 2 and expected in out.stderr, (argv, out)
        assert len(out.stderr.strip().splitlines()) == 1


def test_a_real_process(perf):
    done = run_process("report", "regressions", str(perf), "--fail-on-regression", "--json", cwd=perf.parent)
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["counts"]["regression"] == 1 and "trace-diff run019 run020 gpt2" in done.stderr


# --- migration of a database made by the previous release -----------------------------------------

def _release_sqlite(path: Path) -> Path:
    connection = sqlite3.connect(path)
    connection.executescript((RELEASE_DB / "sqlite_dump.sql").read_text())
    connection.close()
    return path


def _later_rows(path: Path) -> Path:
    """Two more runs of the release's models, written by this madengine (with the new columns)."""
    append_records(path, [PerfRecord(model="bert", metric="samples_per_second", performance=121.0, status="SUCCESS",
                                     run_id=f"run{k}", started_at=f"2026-01-0{k}T10:00:00Z", machine_name="node1",
                                     base_docker="rocm/pytorch:latest", **ENV) for k in (8, 9)])
    return path


def test_sqlite_database_of_the_previous_release_is_migrated_in_place(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    db = _release_sqlite(tmp_path / "release.db")
    url = f"sqlite:///{db}"
    before = [r[0] for r in sqlite3.connect(db).execute("SELECT row_key FROM dlm_table ORDER BY id")]
    # reading needs no migration
    assert cli("database", "list-runs", "--db-url", url).code == 0
    read = cli("report", "regressions", "--db-url", url, "--json")
    assert read.code == 0 and json.loads(read.stdout)["series"] == 2, read
    assert "identity_key" not in [r[1] for r in sqlite3.connect(db).execute("PRAGMA table_info(dlm_table)")]
    # the release's own perf.csv imports nothing new: its content keys are unchanged
    again = cli("database", "update-table", "--csv-file-path", str(RELEASE_DB / "perf.csv"), "--db-url", url, "--json")
    assert again.code == 0 and json.loads(again.stdout)["inserted"] == 0, again
    assert json.loads(cli("database", "create-table", "--db-url", url, "--json").stdout)["added_columns"] == []
    connection = sqlite3.connect(db)
    connection.row_factory = sqlite3.Row
    rows = [dict(r) for r in connection.execute("SELECT * FROM dlm_table ORDER BY id")]
    indexes = [r[1] for r in connection.execute("PRAGMA index_list(dlm_table)")]
    connection.close()
    assert [r["row_key"] for r in rows] == before  # nothing rewritten or lost
    assert all(r["identity_key"] for r in rows) and "dlm_table_identity" in indexes
    bert = next(r for r in rows if r["model"] == "bert" and r["status"] == "SUCCESS")
    assert json.loads(bert["identity_key"]) == ["bert", "samples_per_second", "", "docker", "AMD", "gfx942", "1", ""]
    # new rows find their baseline among the migrated ones (the latest segment: 120, 121)
    result = cli("database", "update-table", "--csv-file-path", str(_later_rows(tmp_path / "new.csv")),
                 "--db-url", url, "--json")
    assert result.code == 0 and json.loads(result.stdout)["inserted"] == 2, result
    # the step from ~100 to ~120 is a change point of the series with the new runs: only 120, 121 count
    assert relative(fetch_run(url, "run8")[0]) == {"pct_change": pytest.approx(0.4149, abs=1e-3),
                                                   "baseline_avg": 120.5, "sample_count": 2}
    assert [r["model"] for r in fetch_run(url, "run1")] == ["bert", "gpt2"]


@pytest.mark.mysql
def test_mariadb_database_of_the_previous_release_is_migrated_in_place(server, database, cli, tmp_path):  # noqa: F811
    name, url = database
    load_release_table(server, name, _release_sqlite(tmp_path / "release.db"), RELEASE_DB / "mysql_create.sql")
    read = cli("report", "regressions", "--db-url", url, "--json")
    assert read.code == 0 and json.loads(read.stdout)["series"] == 2, read
    result = cli("database", "update-table", "--csv-file-path", str(_later_rows(tmp_path / "new.csv")),
                 "--db-url", url, "--json")
    assert result.code == 0 and json.loads(result.stdout)["inserted"] == 2, result
    stored = _rows(server, name)
    assert len(stored) == 15 and all(r["identity_key"] for r in stored)
    assert relative(next(r for r in stored if r["run_id"] == "run8"))["sample_count"] == 2  # as in SQLite
    connection = _connect(server, name)
    with connection.cursor() as cursor:
        cursor.execute("SHOW INDEX FROM dlm_table WHERE Key_name = 'dlm_table_identity'")
        assert cursor.fetchall()
    connection.close()
    again = cli("database", "update-table", "--csv-file-path", str(RELEASE_DB / "perf.csv"), "--db-url", url, "--json")
    assert json.loads(again.stdout)["inserted"] == 0


@pytest.mark.mysql
def test_regressions_from_mariadb(server, database, cli, perf):  # noqa: F811
    name, url = database
    assert cli("database", "update-table", "--csv-file-path", str(perf), "--db-url", url).code == 0
    from_db = cli("report", "regressions", "--db-url", url, "--json", "--fail-on-regression")
    assert from_db.code == 1, from_db
    from_csv = json.loads(cli("report", "regressions", str(perf), "--json").stdout)
    assert json.loads(from_db.stdout)["changes"] == from_csv["changes"]
    assert server.password not in from_db.stdout + from_db.stderr
    only = json.loads(cli("report", "regressions", "--db-url", url, "--model", "resnet", "--json").stdout)
    assert (only["series"], only["changes"]) == (1, [])


def test_update_table_of_rows_with_extreme_figures(tmp_path):
    """relative_change never holds Infinity or NaN, whatever the figures."""
    values = [5e-324, 0.0, -1.0, 1e308, 1.7e308, -1.7e308, 1.7e308, 5e-324]
    append_records(tmp_path / "perf.csv", history_rows("m", "x", values))
    update_table(tmp_path / "perf.csv", f"sqlite:///{tmp_path / 'x.db'}")
    for row in sqlite3.connect(tmp_path / "x.db").execute("SELECT relative_change FROM dlm_table"):
        if row[0]:
            json.loads(row[0], parse_constant=lambda name: pytest.fail(f"{name} in relative_change"))
