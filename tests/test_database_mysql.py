"""`madengine database` against a REAL MariaDB server (started by scripts/ci.d/20-mariadb.sh).

Each test works in its own database ``madengine_test_<random>`` (created by the command under
test, dropped afterwards). Under CI=true a missing server fails the tests instead of skipping.
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3

import pytest

from conftest import require_service
from socket_proxy import SocketProxy
from madengine.database import fetch_run, update_table
from madengine.database.urls import parse_url
from test_database_helpers import history, one_error_line, relative, write_perf_csv

pytestmark = pytest.mark.mysql

MYSQL_URL = os.environ.get("MADENGINE_TEST_MYSQL_URL",
                           "mysql://madengine_test:madengine-test-pw@127.0.0.1:3306/madengine_test")


def _connect(url, database=None):
    import pymysql

    return pymysql.connect(host=url.host, port=url.port, user=url.user, password=url.password,
                           database=database, connect_timeout=3, autocommit=True)


def _answers(url) -> bool:
    try:
        _connect(url).close()
        return True
    except Exception:
        return False


@pytest.fixture(scope="module")
def server():
    url = parse_url(MYSQL_URL)
    require_service("MariaDB server", _answers(url), f"run scripts/ci.d/20-mariadb.sh (or set MADENGINE_TEST_MYSQL_URL); "
                                                    f"tried {url.shown}")
    return url


@pytest.fixture
def database(server, tmp_path, monkeypatch):
    """A fresh database name on the server (created by madengine itself) and its URL."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MADENGINE_DB_URL", raising=False)
    name = f"madengine_test_{secrets.token_hex(4)}"
    yield name, f"mysql://{server.user}:{server.password}@{server.host}:{server.port}/{name}"
    connection = _connect(server)
    with connection.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
    connection.close()


def _rows(server, name, table="dlm_table", order="id"):
    import pymysql

    connection = _connect(server, name)
    with connection.cursor(pymysql.cursors.DictCursor) as cursor:
        cursor.execute(f"SELECT * FROM `{table}` ORDER BY {order}")
        rows = cursor.fetchall()
    connection.close()
    return rows


def load_release_table(server, name: str, sqlite_path, create_sql) -> None:
    """A MariaDB database ``name`` holding the ``dlm_table`` of a release: its MySQL CREATE TABLE
    (``create_sql``, a file) filled with the rows of the SQLite database at ``sqlite_path``."""
    connection = _connect(server)
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    connection.close()
    release = sqlite3.connect(sqlite_path)
    names = [r[1] for r in release.execute("PRAGMA table_info(dlm_table)")]
    connection = _connect(server, name)
    with connection.cursor() as cursor:
        cursor.execute(create_sql.read_text())
        cursor.executemany(f"INSERT INTO dlm_table ({', '.join(f'`{n}`' for n in names)}) "
                           f"VALUES ({', '.join('%s' for _ in names)})",
                           release.execute("SELECT * FROM dlm_table ORDER BY id").fetchall())
    connection.close()
    release.close()


def test_create_table_creates_database_and_table_idempotently(server, database, cli):
    name, url = database
    first = cli("database", "create-table", "--db-url", url, "--json")
    assert first.code == 0, first
    assert json.loads(first.stdout)["created"] is True
    assert server.password not in first.stdout + first.stderr
    again = cli("database", "create-table", "--db-url", url, "--json")
    assert again.code == 0 and json.loads(again.stdout)["created"] is False
    connection = _connect(server, name)
    with connection.cursor() as cursor:
        cursor.execute("SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
                       "AND table_name = 'dlm_table' ORDER BY ordinal_position", (name,))
        columns = [r[0] for r in cursor.fetchall()]
        cursor.execute("SHOW INDEX FROM dlm_table WHERE Column_name = 'row_key'")
        unique = cursor.fetchone()
    connection.close()
    assert columns[:3] == ["id", "row_key", "created_date"] and "run_id" in columns
    assert columns[-2:] == ["extra_columns", "identity_key"]
    assert unique is not None and unique[1] == 0  # Non_unique = 0


def test_update_table_reimport_fetch_run_and_list_runs(server, database, cli, tmp_path):
    name, url = database
    rows = history("m", [10, 20, 30, 40, 50, 60, 70])
    rows.insert(2, dict(model="x'); DROP TABLE dlm_table;--", status="FAILURE", reason="a 'quoted' reason", run_id="run2"))
    rows.append(dict(model="<script>alert(1)</script>", performance=1.5, run_id="run7", extra={"note": "ünïcode"}))
    write_perf_csv(tmp_path / "perf.csv", rows)

    result = cli("database", "update-table", "--csv-file-path", "perf.csv", "--db-url", url, "--json")
    assert result.code == 0, result
    assert (json.loads(result.stdout)["inserted"], json.loads(result.stdout)["already_stored"]) == (9, 0)
    again = cli("database", "update-table", "--csv-file-path", "perf.csv", "--db-url", url, "--json")
    assert again.code == 0 and (json.loads(again.stdout)["inserted"], json.loads(again.stdout)["already_stored"]) == (0, 9)

    stored = _rows(server, name)
    assert len(stored) == 9 and all(r["created_date"] for r in stored)
    assert stored[2]["model"] == "x'); DROP TABLE dlm_table;--" and stored[2]["reason"] == "a 'quoted' reason"
    by_run = {r["run_id"]: relative(r) for r in stored if r["model"] == "m"}
    assert by_run["run7"] == {"pct_change": 75.0, "baseline_avg": 40.0, "sample_count": 5}

    # the same file into SQLite gives the same relative_change values: one algorithm, two stores
    update_table(tmp_path / "perf.csv", "sqlite:///same.db")
    lite = sqlite3.connect(tmp_path / "same.db").execute("SELECT relative_change FROM dlm_table ORDER BY id").fetchall()
    assert [r[0] for r in lite] == [r["relative_change"] for r in stored]

    run7 = fetch_run(url, "run7")
    assert [r["model"] for r in run7] == ["m", "<script>alert(1)</script>"] and run7[1]["note"] == "ünïcode"
    listed = cli("database", "list-runs", "--db-url", url, "--json")
    assert listed.code == 0, listed
    assert [(r["run_id"], r["rows"]) for r in json.loads(listed.stdout)][:3] == [("run1", 1), ("run2", 2), ("run3", 1)]


def test_original_tuna_variables_select_mysql(server, database, cli, tmp_path):
    name, _ = database
    write_perf_csv(tmp_path / "perf.csv", history("m", [1, 2]))
    environ = {"TUNA_DB_HOSTNAME": server.host, "TUNA_DB_PORT": str(server.port), "TUNA_DB_USER_NAME": server.user,
               "TUNA_DB_USER_PASSWORD": server.password, "TUNA_DB_NAME": name}
    result = cli("database", "update-table", "--csv-file-path", "perf.csv", environ=environ)
    assert result.code == 0, result
    assert f"/{name}" in result.stderr and server.password not in result.stderr
    assert len(_rows(server, name)) == 2
    assert not (tmp_path / "madengine.db").exists()


def test_wrong_password_is_a_credential_error(server, database, cli, tmp_path):
    name, _ = database
    write_perf_csv(tmp_path / "perf.csv", history("m", [1]))
    wrong = f"mysql://{server.user}:Not-The-Password-7@{server.host}:{server.port}/{name}"
    result = cli("database", "update-table", "--csv-file-path", "perf.csv", "--db-url", wrong)
    assert result.code == 2, result
    line = one_error_line(result.stderr)
    assert "refused the credentials" in line and "Not-The-Password-7" not in result.stderr
    assert f"{server.user}:******@" in line


def test_reading_a_database_that_does_not_exist_is_exit_2(server, database, cli):
    _, url = database
    result = cli("database", "list-runs", "--db-url", url)
    assert result.code == 2 and "does not exist" in one_error_line(result.stderr)
    with pytest.raises(Exception, match="does not exist"):
        fetch_run(url, "run1")


def test_database_down_then_up_loses_nothing(server, database, cli, tmp_path):
    name, _ = database
    write_perf_csv(tmp_path / "perf.csv", history("m", [1, 2, 3]))
    proxy = SocketProxy((server.host, server.port))
    url = f"mysql://{server.user}:{server.password}@127.0.0.1:{proxy.port}/{name}?timeout=2"

    down = cli("database", "update-table", "--csv-file-path", "perf.csv", "--db-url", url)
    assert down.code == 2, down
    line = one_error_line(down.stderr)
    assert "cannot reach the MySQL server" in line and "update-table' again" in line
    assert server.password not in down.stderr

    proxy.start()
    try:
        up = cli("database", "update-table", "--csv-file-path", "perf.csv", "--db-url", url, "--json")
        assert up.code == 0, up
        assert json.loads(up.stdout)["inserted"] == 3
        rerun = cli("database", "update-table", "--csv-file-path", "perf.csv", "--db-url", url, "--json")
        assert json.loads(rerun.stdout)["inserted"] == 0
    finally:
        proxy.stop()
    assert len(_rows(server, name)) == 3


def test_series_states_and_alerts_on_mariadb_match_sqlite(server, database, cli, tmp_path):
    """The importer of every store: on MariaDB the same alerts, verdicts and relative_change as SQLite;
    the triage is stored with who and when and survives re-imports and appends."""
    name, url = database
    rows = [dict(model="m", performance=100.0 * (1.1 if k >= 20 else 1.0) + (k % 3) * 0.2, run_id=f"run{k:03d}",
                 started_at=f"2026-01-01T00:{k:02d}:00Z", git_commit=f"abc{k:04d}") for k in range(32)]
    write_perf_csv(tmp_path / "perf.csv", rows[:30])
    write_perf_csv(tmp_path / "more.csv", rows[30:])
    first = cli("database", "update-table", "--csv-file-path", str(tmp_path / "perf.csv"), "--db-url", url, "--json")
    assert first.code == 0 and json.loads(first.stdout)["new_alerts"] == 1, first
    lite = f"sqlite:///{tmp_path / 'same.db'}"
    assert cli("database", "update-table", "--csv-file-path", str(tmp_path / "perf.csv"), "--db-url", lite).code == 0
    alerts = json.loads(cli("report", "alerts", "list", "--db-url", url, "--json").stdout)["alerts"]
    same = json.loads(cli("report", "alerts", "list", "--db-url", lite, "--json").stdout)["alerts"]
    keep = ("alert_id", "kind", "position", "after_run", "size_percent", "confidence", "latest")
    assert [{k: a[k] for k in keep} for a in alerts] == [{k: a[k] for k in keep} for a in same]
    assert cli("report", "alerts", "set", alerts[0]["alert_id"], "--state", "fixed", "--by", "frank",
               "--link", "https://example.com/pr/1", "--db-url", url).code == 0
    assert cli("database", "update-table", "--csv-file-path", str(tmp_path / "more.csv"), "--db-url", url).code == 0
    assert cli("database", "update-table", "--csv-file-path", str(tmp_path / "perf.csv"), "--db-url", url).code == 0
    [stored] = _rows(server, name, "dlm_table_alerts", "alert_id")
    assert (stored["state"], stored["updated_by"], json.loads(stored["links"])) == \
        ("fixed", "frank", ["https://example.com/pr/1"])
    assert [r["state"] for r in _rows(server, name, "dlm_table_alert_log")] == ["fixed"]
    # the alert's summary, and a triage of it that says what it says already: no new log entry
    [summary] = json.loads(cli("report", "alerts", "summaries", "--db-url", url, "--json").stdout)["summaries"]
    assert (summary["summary_id"], summary["improvements"], summary["commits"][0]["range"]) == \
        ("run020", 1, "abc0019..abc0020")
    again = cli("report", "alerts", "set", "--summary", "run020", "--state", "fixed", "--by", "gina",
                "--link", "https://example.com/pr/1", "--db-url", url)
    assert again.code == 0 and "fixed already" in again.stderr, again
    assert [r["state"] for r in _rows(server, name, "dlm_table_alert_log")] == ["fixed"]
    assert [r["relative_change"] for r in _rows(server, name)][:30] == \
        [r[0] for r in sqlite3.connect(tmp_path / "same.db").execute("SELECT relative_change FROM dlm_table ORDER BY id")]


def test_a_big_import_on_mariadb_checked_as_it_is_read_matches_sqlite(server, database, tmp_path, monkeypatch):
    """A perf.csv checked as it is read (the path of a big import, forced here) in batches writes on
    MariaDB what the import of the same file writes on SQLite."""
    from madengine.database import importer, rows as rowlib

    name, url = database
    rows = [dict(model=model, performance=100.0 * (1.1 if k >= at else 1.0) + (k % 3) * 0.2, run_id=f"run{k:03d}",
                 started_at=f"2026-01-01T00:{k:02d}:00Z") for model, at in (("m", 20), ("n", 99)) for k in range(32)]
    write_perf_csv(tmp_path / "perf.csv", rows)
    lite = f"sqlite:///{tmp_path / 'same.db'}"
    assert update_table(tmp_path / "perf.csv", lite).inserted == len(rows)
    monkeypatch.setattr(rowlib, "BATCH_ROWS", 9)
    monkeypatch.setattr(importer, "CHECK_WHOLE_BELOW", 1)
    result = update_table(tmp_path / "perf.csv", url)
    assert (result.inserted, result.series, result.new_alerts) == (len(rows), 2, 1)
    same = sqlite3.connect(tmp_path / "same.db")
    assert [(r["row_key"], r["relative_change"]) for r in _rows(server, name)] == \
        same.execute("SELECT row_key, relative_change FROM dlm_table ORDER BY id").fetchall()
    assert [(a["alert_id"], a["after_run"]) for a in _rows(server, name, "dlm_table_alerts", "alert_id")] == \
        same.execute("SELECT alert_id, after_run FROM dlm_table_alerts ORDER BY alert_id").fetchall()


def test_an_appended_perf_csv_is_read_from_where_its_import_ended_on_mariadb(server, database, cli, tmp_path):
    """The file marks live beside the MariaDB table: an append reads only the new rows (with the same
    rows, keys and relative_change as SQLite), an edit in place makes the next import read it whole."""
    name, url = database
    rows = [dict(model=model, performance=100.0 + k % 5, run_id=f"run{k:03d}") for k in range(12) for model in "ab"]
    write_perf_csv(tmp_path / "perf.csv", rows[:20])
    lite = f"sqlite:///{tmp_path / 'same.db'}"
    for target in (url, lite):
        assert update_table(tmp_path / "perf.csv", target).inserted == 20
    write_perf_csv(tmp_path / "perf.csv", rows[20:])
    for target in (url, lite):
        result = update_table(tmp_path / "perf.csv", target)
        assert (result.rows, result.unread, result.inserted, result.read_whole_because) == (24, 20, 4, "")
    same = sqlite3.connect(tmp_path / "same.db")
    assert [(r["row_key"], r["relative_change"]) for r in _rows(server, name)] == \
        same.execute("SELECT row_key, relative_change FROM dlm_table ORDER BY id").fetchall()
    [mark] = _rows(server, name, "dlm_table_files", "file_hash")
    assert (mark["path"], mark["rows"], mark["size"]) == (str(tmp_path / "perf.csv"), 24, (tmp_path / "perf.csv").stat().st_size)
    text = (tmp_path / "perf.csv").read_text()
    with open(tmp_path / "perf.csv", "r+", encoding="utf-8") as handle:  # edited in place
        handle.seek(text.index("101.0"))
        handle.write("109.0")
    edited = cli("database", "update-table", "--csv-file-path", str(tmp_path / "perf.csv"), "--db-url", url, "--json")
    assert edited.code == 0, edited
    assert (json.loads(edited.stdout)["unread"], json.loads(edited.stdout)["inserted"]) == (0, 1)
    assert "reading the whole file: its first" in edited.stderr and server.password not in edited.stderr
