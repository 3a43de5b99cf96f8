"""`madengine database` on the embedded SQLite store (no server needed: always runs)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import pytest

from madengine.core.errors import InputError
from madengine.database import fetch_run, list_runs, resolve_mongo_url, resolve_sql_url, update_table
from madengine.database.urls import mask_url, parse_url
from madengine.results import PERF_COLUMNS
from madengine.results.columns import ALL_COLUMNS
from test_database_helpers import history, one_error_line, relative, write_perf_csv


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("MADENGINE_DB_URL", "TUNA_DB_HOSTNAME", "MONGO_HOST"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def db_rows(path, table="dlm_table"):
    connection = sqlite3.connect(path)
    connection.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in connection.execute(f"SELECT * FROM {table} ORDER BY id")]
    finally:
        connection.close()


def test_create_table_is_idempotent_and_holds_every_perf_column(workdir, cli):
    first = cli("database", "create-table", "--json")
    assert first.code == 0, first
    assert json.loads(first.stdout)["created"] is True
    again = cli("database", "create-table", "--json")
    assert again.code == 0, again
    assert json.loads(again.stdout) == {"url": "sqlite:///madengine.db", "table": "dlm_table", "created": False,
                                        "added_columns": []}
    columns = [r[1] for r in sqlite3.connect(workdir / "madengine.db").execute("PRAGMA table_info(dlm_table)")]
    assert columns[:3] == ["id", "row_key", "created_date"]
    assert columns[3:] == [*ALL_COLUMNS, "extra_columns", "identity_key"]


def test_create_table_adds_columns_missing_from_an_older_table(workdir, cli):
    connection = sqlite3.connect(workdir / "old.db")
    connection.execute("CREATE TABLE dlm_table (id INTEGER PRIMARY KEY AUTOINCREMENT, row_key TEXT NOT NULL UNIQUE, "
                       "created_date TEXT, model TEXT, performance TEXT)")
    connection.commit()
    connection.close()
    result = cli("database", "create-table", "--db-url", "sqlite:///old.db", "--json")
    assert result.code == 0, result
    added = json.loads(result.stdout)["added_columns"]
    assert "run_id" in added and "model" not in added
    result = cli("database", "create-table", "--db-url", "sqlite:///old.db", "--json")
    assert json.loads(result.stdout)["added_columns"] == []


def test_foreign_table_is_refused_not_altered(workdir, cli):
    connection = sqlite3.connect(workdir / "v1.db")
    connection.execute("CREATE TABLE dlm_table (id INT PRIMARY KEY, model VARCHAR(128))")
    connection.commit()
    connection.close()
    result = cli("database", "create-table", "--db-url", "sqlite:///v1.db")
    assert result.code == 2
    assert "no row_key column" in one_error_line(result.stderr)
    assert cli("database", "create-table", "--db-url", "sqlite:///v1.db", "--table", "results").code == 0


def test_update_table_imports_every_column_and_reimport_adds_nothing(workdir, cli):
    write_perf_csv(workdir / "perf.csv", [
        dict(model="resnet", performance=100.0, run_id="r1", context={"gpu": "mi300"}, extra={"batch": "64"}),
        dict(model="bert", status="FAILURE", reason="exit 1", run_id="r1"),
        dict(model="<script>alert(1)</script>", performance=5.0, run_id="r1"),
        dict(model="x'); DROP TABLE dlm_table;--", performance=1.0, run_id="r1"),
    ])
    result = cli("database", "update-table", "--csv-file-path", "perf.csv", "--json")
    assert result.code == 0, result
    counts = json.loads(result.stdout)
    assert (counts["rows"], counts["inserted"], counts["already_stored"], counts["table_created"]) == (4, 4, 0, True)
    assert "4 inserted, 0 already stored" in result.stderr

    again = cli("database", "update-table", "--csv-file-path", "perf.csv", "--json")
    assert again.code == 0, again
    assert (json.loads(again.stdout)["inserted"], json.loads(again.stdout)["already_stored"]) == (0, 4)

    stored = db_rows(workdir / "madengine.db")
    assert len(stored) == 4
    assert [r["model"] for r in stored] == ["resnet", "bert", "<script>alert(1)</script>", "x'); DROP TABLE dlm_table;--"]
    assert all(r["created_date"] for r in stored)
    assert json.loads(stored[0]["context"]) == {"gpu": "mi300"}
    assert json.loads(stored[0]["extra_columns"]) == {"batch": "64"}
    assert stored[1]["reason"] == "exit 1"

    rows = fetch_run(None, "r1")
    assert [r["model"] for r in rows] == [r["model"] for r in stored]
    assert list(rows[0])[:len(ALL_COLUMNS)] == list(ALL_COLUMNS)
    assert rows[0]["batch"] == "64" and rows[0]["performance"] == "100.0"
    assert fetch_run(None, "no-such-run") == []


def test_the_unique_key_of_a_new_table_is_its_own_index_and_an_older_tables_inline_one_stays_alone(workdir):
    """A new table's row_key is unique through the index <table>_key (an import into the empty table
    builds it after its rows, as the other indexes); a table an earlier release made declares it UNIQUE
    itself and gets no second index. Both refuse a key twice, and a re-import adds nothing to either."""
    write_perf_csv(workdir / "perf.csv", history("m", [1, 2, 3]) + history("m", [1], run_prefix="twin"))
    old = sqlite3.connect(workdir / "old.db")
    old.execute("CREATE TABLE dlm_table (id INTEGER PRIMARY KEY AUTOINCREMENT, row_key TEXT NOT NULL UNIQUE, "
                "created_date TEXT NOT NULL, model TEXT)")
    old.commit()
    old.close()
    for name in ("new.db", "old.db"):
        assert update_table(workdir / "perf.csv", f"sqlite:///{name}").inserted == 4
        assert update_table(workdir / "perf.csv", f"sqlite:///{name}").inserted == 0
    indexes = {name: [(row[1], row[2], row[3]) for row in sqlite3.connect(workdir / name).execute(
        "PRAGMA index_list(dlm_table)")] for name in ("new.db", "old.db")}
    assert ("dlm_table_key", 1, "c") in indexes["new.db"]
    assert [(unique, origin) for _, unique, origin in indexes["new.db"] if unique] == [(1, "c")]
    assert [(unique, origin) for _, unique, origin in indexes["old.db"] if unique] == [(1, "u")]
    for name in ("new.db", "old.db"):
        connection = sqlite3.connect(workdir / name)
        key = connection.execute("SELECT row_key FROM dlm_table LIMIT 1").fetchone()[0]
        with pytest.raises(sqlite3.IntegrityError):
            connection.execute("INSERT INTO dlm_table (row_key, created_date) VALUES (?, 'x')", (key,))


def test_appended_rows_are_imported_later_without_duplicates(workdir, cli):
    perf = workdir / "perf.csv"
    write_perf_csv(perf, history("m", [10, 20]))
    assert cli("database", "update-table", "--csv-file-path", str(perf)).code == 0
    write_perf_csv(perf, [dict(model="m", performance=30.0, run_id="run3")])
    result = cli("database", "update-table", "--csv-file-path", str(perf), "--json")
    assert json.loads(result.stdout)["inserted"] == 1
    assert [r["performance"] for r in db_rows(workdir / "madengine.db")] == ["10.0", "20.0", "30.0"]


def test_identical_rows_of_one_file_are_both_kept(workdir, cli):
    perf = workdir / "perf.csv"
    perf.write_text("model,performance,status\nm,1,SUCCESS\nm,1,SUCCESS\n")
    assert json.loads(cli("database", "update-table", "--csv-file-path", "perf.csv", "--json").stdout)["inserted"] == 2
    assert json.loads(cli("database", "update-table", "--csv-file-path", "perf.csv", "--json").stdout)["inserted"] == 0


def test_relative_change_uses_mean_of_last_five_success_rows_of_the_same_identity(workdir, cli):
    rows = history("m", [10, 20, 30, 40, 50, 60])
    rows.insert(3, dict(model="m", status="FAILURE", run_id="failed"))  # not part of any baseline
    rows.append(dict(model="m", performance=1000.0, gpu_architecture="gfx90a", run_id="other-arch"))
    rows.append(dict(model="m", performance=2000.0, executor="local", run_id="other-executor"))
    rows.append(dict(model="m", performance=3000.0, tag_configs="size=64", run_id="other-configs"))
    rows.append(dict(model="m", performance=70.0, run_id="run7"))
    write_perf_csv(workdir / "perf.csv", rows)
    assert cli("database", "update-table", "--csv-file-path", "perf.csv").code == 0

    by_run = {r["run_id"]: relative(r) for r in db_rows(workdir / "madengine.db")}
    assert by_run["run1"] == {}  # nothing to compare with yet
    assert by_run["run2"] == {"pct_change": 100.0, "baseline_avg": 10.0, "sample_count": 1}
    assert by_run["failed"] == {}
    assert by_run["other-arch"] == {} and by_run["other-executor"] == {} and by_run["other-configs"] == {}
    assert by_run["run6"] == {"pct_change": 100.0, "baseline_avg": 30.0, "sample_count": 5}
    # 70 against the mean of 20..60 (the five latest SUCCESS rows of that identity)
    assert by_run["run7"] == {"pct_change": 75.0, "baseline_avg": 40.0, "sample_count": 5}


def test_relative_change_baseline_starts_at_the_last_change_point(workdir, cli):
    """The baseline logic of `report regressions`: after a step, only the figures after it count."""
    before, after = [100.0, 101.0, 99.0, 100.5, 99.5, 100.0, 100.2, 99.8], [120.0, 121.0, 119.0, 120.5]
    write_perf_csv(workdir / "perf.csv", history("m", [*before, *after, 120.0]))
    assert cli("database", "update-table", "--csv-file-path", "perf.csv").code == 0
    last = relative(db_rows(workdir / "madengine.db")[-1])
    # a plain last-5 mean would mix 100 and 120 (116.1); the step at run 9 leaves 4 figures of ~120
    assert last == {"pct_change": pytest.approx(-0.1040, abs=1e-3), "baseline_avg": 120.125, "sample_count": 4}


def test_base_image_is_not_part_of_the_identity(workdir, cli):
    rows = history("m", [10, 10, 10]) + [dict(model="m", performance=20.0, base_docker="other:image", run_id="x")]
    write_perf_csv(workdir / "perf.csv", rows)
    assert cli("database", "update-table", "--csv-file-path", "perf.csv").code == 0
    assert relative(db_rows(workdir / "madengine.db")[-1])["pct_change"] == 100.0


def test_relative_change_is_the_same_whether_imported_at_once_or_in_parts(workdir):
    values = [12.5, 13.0, 11.0, 14.25, 12.0, 15.0, 9.5]
    write_perf_csv(workdir / "all.csv", history("m", values))
    write_perf_csv(workdir / "part1.csv", history("m", values)[:3])
    update_table(workdir / "all.csv", "sqlite:///once.db")
    update_table(workdir / "part1.csv", "sqlite:///parts.db")
    update_table(workdir / "all.csv", "sqlite:///parts.db")
    once = [r["relative_change"] for r in db_rows(workdir / "once.db")]
    parts = [r["relative_change"] for r in db_rows(workdir / "parts.db")]
    assert once == parts and len(once) == 7 and once[-1]


def test_model_json_fills_empty_cells_only(workdir, cli):
    write_perf_csv(workdir / "perf.csv", [dict(model="dummy", performance=1.0, run_id="r"),
                                          dict(model="dummy", performance=2.0, args="--own", run_id="r2")])
    (workdir / "models.json").write_text(json.dumps([
        {"name": "dummy", "tags": ["a", "b"], "args": "--batch 8", "n_gpus": "2", "training_precision": "fp16",
         "scripts": "run.sh"}]))
    result = cli("database", "update-table", "--csv-file-path", "perf.csv", "--model-json-path", "models.json",
                 "--json")
    assert result.code == 0, result
    assert json.loads(result.stdout)["enriched"] == 2
    first, second = db_rows(workdir / "madengine.db")
    assert (first["tags"], first["args"], first["n_gpus"], first["training_precision"]) == ("a,b", "--batch 8", "2", "fp16")
    assert second["args"] == "--own"
    # the content key is over perf.csv as read: importing again without models.json adds nothing
    result = cli("database", "update-table", "--csv-file-path", "perf.csv", "--json")
    assert json.loads(result.stdout)["inserted"] == 0


def test_list_runs(workdir, cli):
    write_perf_csv(workdir / "perf.csv", [dict(model="a", performance=1.0, run_id="r1"),
                                          dict(model="b", status="FAILURE", run_id="r1"),
                                          dict(model="a", performance=2.0, run_id="r2"),
                                          dict(model="c", status="SKIPPED", run_id="r2"),
                                          dict(model="legacy", performance=3.0)])
    assert cli("database", "update-table", "--csv-file-path", "perf.csv").code == 0
    result = cli("database", "list-runs", "--json")
    assert result.code == 0, result
    runs = json.loads(result.stdout)
    assert [(r["run_id"], r["rows"], r["success"], r["failure"], r["skipped"], r["models"]) for r in runs] == [
        ("r1", 2, 1, 1, 0, 2), ("r2", 2, 1, 0, 1, 2)]
    text = cli("database", "list-runs")
    assert text.code == 0 and "r1" in text.stdout and "r2" in text.stdout and "2 run(s)" in text.stderr
    assert [r.run_id for r in list_runs("sqlite:///madengine.db")] == ["r1", "r2"]


def test_db_url_from_environment_and_custom_table(workdir, cli):
    write_perf_csv(workdir / "perf.csv", history("m", [1, 2]))
    (workdir / "sub").mkdir()
    environ = {"MADENGINE_DB_URL": f"sqlite:///{workdir}/sub/results.db"}
    result = cli("database", "update-table", "--csv-file-path", "perf.csv", "--table", "nightly", environ=environ)
    assert result.code == 0, result
    assert not (workdir / "madengine.db").exists()
    assert len(db_rows(workdir / "sub" / "results.db", "nightly")) == 2
    assert fetch_run(None, "run2", environ=environ, table="nightly")[0]["performance"] == "2.0"


# --- failures: one line, exit 2, nothing lost ----------------------------------------------------

@pytest.mark.parametrize("content, expected", [
    (None, "file not found"),
    ("", "empty file"),
    ("name,perf\nm,1\n", "no 'model' column"),
    ("model,performance\nm,1,extra,cells\n", "line 2 has 4 cells"),
    ("model,performance\n,1\n", "empty 'model' cell"),
    ("model,model\nm,m\n", "duplicate columns"),
])
def test_bad_perf_csv_is_one_line_exit_2_and_creates_no_database(workdir, cli, content, expected):
    if content is not None:
        (workdir / "perf.csv").write_text(content)
    result = cli("database", "update-table", "--csv-file-path", "perf.csv")
    assert result.code == 2, result
    assert expected in one_error_line(result.stderr)
    assert not (workdir / "madengine.db").exists()


@pytest.mark.parametrize("content, expected", [
    (None, "file not found"),
    ("[{", "malformed JSON"),
    ('{"name": "m"}', "JSON array"),
    ('[{"tags": []}]', "non-empty 'name'"),
])
def test_bad_models_json_is_one_line_exit_2(workdir, cli, content, expected):
    write_perf_csv(workdir / "perf.csv", history("m", [1]))
    if content is not None:
        (workdir / "models.json").write_text(content)
    result = cli("database", "update-table", "--csv-file-path", "perf.csv", "--model-json-path", "models.json")
    assert result.code == 2, result
    assert expected in one_error_line(result.stderr)


@pytest.mark.parametrize("args, expected", [
    (["--db-url", "postgres://u:pw@h/db"], "unsupported database URL"),
    (["--db-url", "sqlite://relative.db"], "malformed SQLite URL"),
    (["--db-url", "mysql://u:pw@h:notaport/db"], "invalid port"),
    (["--db-url", "mysql://u:pw@h/bad-name"], "invalid database name"),
    (["--db-url", "sqlite:///x.db?timeout=abc"], "timeout must be"),
    (["--table", "x; DROP TABLE y"], "invalid table name"),
    (["--db-url", "sqlite:///missing/dir/x.db"], "folder of the database file does not exist"),
])
def test_bad_database_options_are_one_line_exit_2(workdir, cli, args, expected):
    write_perf_csv(workdir / "perf.csv", history("m", [1]))
    result = cli("database", "update-table", "--csv-file-path", "perf.csv", *args)
    assert result.code == 2, result
    assert expected in one_error_line(result.stderr)


def test_reading_a_database_that_does_not_exist_creates_nothing(workdir, cli):
    result = cli("database", "list-runs")
    assert result.code == 2 and "database file not found" in one_error_line(result.stderr)
    assert not (workdir / "madengine.db").exists()
    sqlite3.connect(workdir / "madengine.db").close()
    result = cli("database", "list-runs")
    assert result.code == 2 and "no results table" in one_error_line(result.stderr)
    with pytest.raises(InputError, match="no results table"):
        fetch_run("sqlite:///madengine.db", "r1")


def test_a_file_that_is_not_a_database_is_exit_2(workdir, cli):
    (workdir / "madengine.db").write_text("this is not sqlite " * 100)
    write_perf_csv(workdir / "perf.csv", history("m", [1]))
    result = cli("database", "update-table", "--csv-file-path", "perf.csv")
    assert result.code == 2
    assert "not a usable SQLite database" in one_error_line(result.stderr)


def test_locked_database_fails_cleanly_then_a_later_import_catches_up(workdir, cli):
    write_perf_csv(workdir / "perf.csv", history("m", [1, 2, 3]))
    assert cli("database", "create-table").code == 0
    holder = sqlite3.connect(workdir / "madengine.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another process holds the database: it cannot be used now
    try:
        result = cli("database", "update-table", "--csv-file-path", "perf.csv", "--db-url",
                     "sqlite:///madengine.db?timeout=0.2")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert result.code == 2, result
    line = one_error_line(result.stderr)
    assert "locked" in line and "update-table' again" in line
    assert db_rows(workdir / "madengine.db") == []
    assert len((workdir / "perf.csv").read_text().splitlines()) == 4  # perf.csv untouched

    caught_up = cli("database", "update-table", "--csv-file-path", "perf.csv", "--json")
    assert json.loads(caught_up.stdout)["inserted"] == 3
    assert json.loads(cli("database", "update-table", "--csv-file-path", "perf.csv", "--json").stdout)["inserted"] == 0


def test_database_without_subcommand_prints_help_and_exits_2(cli):
    result = cli("database")
    assert result.code == 2 and "update-table" in result.stderr
    assert cli("database", "upload-mongodb", "--type", "blob", "--file-path", "x", "--name", "n").code == 2


# --- URLs, environment variables, secrets ------------------------------------------------------

def test_sql_url_order_and_original_environment_variables():
    assert resolve_sql_url(None, {}).path.name == "madengine.db"
    assert str(resolve_sql_url("sqlite:////abs/r.db", {}).path) == "/abs/r.db"
    assert str(resolve_sql_url("sqlite:///rel/r.db", {}).path) == "rel/r.db"
    tuna = {"TUNA_DB_HOSTNAME": "db.example", "TUNA_DB_PORT": "3307", "TUNA_DB_USER_NAME": "tuna",
            "TUNA_DB_USER_PASSWORD": "p@ss:w/rd", "TUNA_DB_NAME": "perfdb"}
    url = resolve_sql_url(None, tuna)
    assert (url.scheme, url.host, url.port, url.user, url.password, url.database) == (
        "mysql", "db.example", 3307, "tuna", "p@ss:w/rd", "perfdb")
    assert "p@ss" not in url.shown and "******" in url.shown
    assert resolve_sql_url(None, {**tuna, "MADENGINE_DB_URL": "sqlite:///env.db"}).scheme == "sqlite"
    assert resolve_sql_url("sqlite:///flag.db", {**tuna, "MADENGINE_DB_URL": "x"}).path.name == "flag.db"
    assert resolve_sql_url(None, {"TUNA_DB_USER_NAME": "only-user"}).scheme == "sqlite"  # no host: not MySQL
    assert resolve_sql_url(None, {"TUNA_DB_HOSTNAME": "h"}).database == "dlm_db"


def test_mongo_url_from_original_variables_escapes_credentials():
    url = resolve_mongo_url(None, {"MONGO_HOST": "mongo.example", "MONGO_PORT": "27018", "MONGO_USER": "u@x",
                                   "MONGO_PASSWORD": "s3cr:t@pw"})
    assert url.text == "mongodb://u%40x:s3cr%3At%40pw@mongo.example:27018/?authSource=admin"
    assert (url.user, url.password) == ("u@x", "s3cr:t@pw")
    assert "s3cr" not in url.shown
    assert resolve_mongo_url(None, {}).text == "mongodb://localhost:27017/"
    assert resolve_mongo_url(None, {"MADENGINE_DB_URL": "mongodb://m:1/db"}).database == "db"
    assert resolve_mongo_url(None, {"MADENGINE_DB_URL": "sqlite:///x.db"}).host == "localhost"
    with pytest.raises(InputError, match="needs a mongodb:// URL"):
        resolve_mongo_url("sqlite:///x.db", {})


def test_mask_url():
    assert mask_url("mysql://user:hunter22@h:3306/db") == "mysql://user:******@h:3306/db"
    assert mask_url("mongodb://h1:1,h2:2/db") == "mongodb://h1:1,h2:2/db"
    assert parse_url("mongodb://u:pw12@h1:1,h2:2/db").shown == "mongodb://u:******@h1:1,h2:2/db"


def test_password_never_printed_even_in_errors(workdir, cli):
    write_perf_csv(workdir / "perf.csv", history("m", [1]))
    result = cli("database", "update-table", "--csv-file-path", "perf.csv", "--db-url",
                 "mysql://someone:Very-Secret-42@127.0.0.1:1/db?timeout=1")
    assert result.code == 2
    assert "Very-Secret-42" not in result.stderr + result.stdout
    assert "someone:******@" in one_error_line(result.stderr)


def test_cli_parser_does_not_import_database_drivers():
    code = ("import sys; from madengine.cli import build_parser; build_parser(); "
            "print(sorted(m for m in ('pymysql', 'pymongo', 'sqlite3', 'madengine.database') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_perf_columns_are_not_redefined():
    from madengine.database import sql

    assert sql.STORED_COLUMNS[:len(PERF_COLUMNS)] == PERF_COLUMNS
