"""`madengine report serve`: the API and pages over real SQLite and a real MariaDB, served by the real
uvicorn over real sockets; read-only, the token, path traversal, escaping, bad input, the CLI."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import IN_CI, REPO, run_process
from dashboard_helpers import (BAD_MODELS, BAD_RUN, RUNS, STEP_AT, XSS, LiveServer, run_id, write_bad_night,
                               write_history, write_run_files)
from madengine.core.errors import InputError
from madengine.database import update_table
from madengine.database.urls import parse_url
from madengine.results import PerfRecord, append_records
from madengine.server.config import ServerConfig
from madengine.server.filters import Filters, parse
from test_database_mysql import _connect, database, server  # noqa: F401 - fixtures of the real MariaDB

EXAMPLES = 500 if IN_CI else 200
q = urllib.parse.quote


@pytest.fixture(params=["sqlite", pytest.param("mariadb", marks=pytest.mark.mysql)])
def results_url(request, tmp_path, monkeypatch) -> str:
    """A results database holding tests/dashboard_helpers' history, imported by update-table."""
    monkeypatch.chdir(tmp_path)
    for name in ("MADENGINE_DB_URL", "TUNA_DB_HOSTNAME", "MADENGINE_DASHBOARD_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'results.db'}"
    else:
        url = request.getfixturevalue("database")[1]
    update_table(write_history(tmp_path / "perf.csv"), url)
    write_run_files(tmp_path / "madengine_runs")
    return url


@pytest.fixture
def live(results_url, tmp_path):
    serving = LiveServer(ServerConfig(url=parse_url(results_url), runs_dir=tmp_path / "madengine_runs", port=0))
    yield serving
    serving.stop()


def test_overview_latest_per_identity_failures_first(live):
    data = live.json("/api/overview")
    assert data["empty"] is False and data["totals"] == {"rows": 4 * RUNS, "identities": 4, "runs": RUNS,
                                                         "latest_run": run_id(RUNS)}
    assert data["counts"] == {"SUCCESS": 3, "FAILURE": 1, "SKIPPED": 0}
    items = data["results"]["items"]
    assert items[0]["model"] == "resnet" and items[0]["latest"]["status"] == "FAILURE"  # failures first
    assert items[0]["latest"]["reason"] == f"model script exited with code {RUNS}: out of memory"
    assert [f["model"] for f in data["failures"]] == ["resnet"]
    bert = next(i for i in items if i["model"] == "bert")
    assert bert["tag_configs"] == "bs=64" and bert["label"] == "bert [bs=64] · docker · AMD gfx942 · 1 GPU"
    assert bert["latest"]["run_id"] == run_id(RUNS) and bert["rows"] == RUNS and bert["success"] == RUNS
    assert bert["latest"]["relative_change"]["sample_count"] == 5
    # quiet (0.5 % noise): the latest run's own interval excludes a 3 % change
    assert (bert["vs_baseline"]["state"], bert["vs_baseline"]["more_runs"]) == ("unchanged", None)
    # filters narrow the list, and the state is in the URL
    assert [i["model"] for i in live.json("/api/overview?status=SUCCESS&model=GP")["results"]["items"]] == ["gpt2"]
    assert [i["model"] for i in live.json("/api/identities?tag=bs=64")["items"]] == ["bert"]
    assert live.json("/api/identities?tag=nightly")["total"] == 3
    assert live.json("/api/identities?gpu_architecture=gfx90a")["total"] == 0
    assert live.json("/api/overview?until=2026-01-31")["results"]["total"] == 0


def test_series_one_point_per_run_and_the_changes_report_regressions_finds(live, results_url, cli):
    overview = live.json("/api/overview")
    gpt2 = next(i for i in overview["results"]["items"] if i["model"] == "gpt2")
    series = live.json("/api/series?identity=" + q(gpt2["identity_key"]))
    assert [p["run_id"] for p in series["points"]] == [run_id(k) for k in range(1, RUNS + 1)]
    assert all(p["n"] == 5 and p["min"] <= p["value"] <= p["max"] for p in series["points"])
    cli_changes = json.loads(cli("report", "regressions", "--db-url", results_url, "--json").stdout)["changes"]
    assert [c["after"]["run_id"] for c in series["changes"]] == [run_id(STEP_AT)]
    assert [{k: v for k, v in c.items() if k not in ("in_view", "alert")} for c in series["changes"]] == cli_changes
    assert series["changes"][0]["alert"]["state"] == "untriaged"  # the import made it an alert
    # the machine and time filters narrow the points, not the changes
    odd = live.json("/api/series?machine=node1&identity=" + q(gpt2["identity_key"]))
    assert [p["run_id"] for p in odd["points"]] == [run_id(k) for k in range(1, RUNS + 1, 2)]
    window = live.json(f"/api/series?since=2026-02-03&until=2026-02-05&identity={q(gpt2['identity_key'])}")
    assert [p["run_id"] for p in window["points"]] == [run_id(3), run_id(4), run_id(5)]
    assert window["changes"][0]["in_view"] is False
    # the background pass finds the same change for the overview and /api/changes
    deadline = time.monotonic() + 120
    while not (changes := live.json("/api/changes"))["complete"]:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert [(c["model"], c["kind"]) for c in changes["items"]] == [("gpt2", "regression")]
    trend = live.json("/api/trend?model=gpt2")
    assert trend["matching"] == 1 and len(trend["series"][0]["points"]) == RUNS


def test_figures_written_as_whole_numbers(live, results_url, tmp_path):
    """perf.csv figures like `42` come back as numbers that keep their text (results.parsing.Figure)."""
    rows = [PerfRecord(model="whole", status="SUCCESS", performance=f"{40 + k}", metric="fps", run_id=f"w{k}",
                       started_at=f"2026-03-0{k}T10:00:00Z") for k in range(1, 8)]
    update_table(append_records(tmp_path / "whole.csv", rows), results_url)
    series = live.json("/api/trend?model=whole")["series"][0]
    assert [p["value"] for p in series["points"]] == [40 + k for k in range(1, 8)]
    assert live.get("/trend?model=whole")[0] == 200


def test_a_trend_of_several_results_links_to_the_runs_of_each(live, results_url, tmp_path):
    """A model of several configs on one trend page: a chart each, and a link to each one's own page,
    which lists its runs (a page of 10 configs x 500 runs is not ten tables of 500 rows)."""
    rows = [PerfRecord(model="multi", status="SUCCESS", performance=f"{10 + k}", metric="fps", run_id=f"m{k}",
                       tag_configs=config, started_at=f"2026-04-0{k}T10:00:00Z")
            for k in range(1, 6) for config in ("bs=1", "bs=2")]
    update_table(append_records(tmp_path / "multi.csv", rows), results_url)
    trend = live.json("/api/trend?model=multi")
    assert [len(s["points"]) for s in trend["series"]] == [5, 5]
    status, _, page = live.get("/trend?model=multi")
    assert status == 200 and page.count(b'class="trend-chart"') == 2
    assert page.count(b"run(s) of this result, listed") == 2 and b'<details class="runs-of-trend">' not in page
    one = urllib.parse.quote(trend["series"][0]["identity"]["identity_key"])
    status, _, page = live.get(f"/trend?identity={one}")
    assert status == 200 and page.count(b'<details class="runs-of-trend">') == 1


def test_runs_run_detail_and_compare_match_the_cli(live, results_url, cli):
    runs = live.json("/api/runs")
    listed = json.loads(cli("database", "list-runs", "--db-url", results_url, "--json").stdout)
    assert [r["run_id"] for r in runs["items"]] == [r["run_id"] for r in listed][::-1]  # newest first
    assert runs["items"][0]["failure"] == 1 and runs["items"][0]["rows"] == 4
    detail = live.json(f"/api/run?run={run_id(RUNS)}")
    assert detail["counts"] == {"SUCCESS": 3, "FAILURE": 1, "SKIPPED": 0}
    assert detail["rows"][0]["row"]["status"] == "FAILURE" and "out of memory" in detail["rows"][0]["row"]["reason"]
    assert detail["rows"][0]["links"] == [{"path": f"madengine_runs/{run_id(RUNS)}/resnet/run.log",
                                           "url": f"/files/{run_id(RUNS)}/resnet/run.log"}]
    assert detail["trace"] == f"/files/{run_id(RUNS)}/trace.json"
    assert live.json(f"/api/run?run={run_id(1)}")["trace"] is None  # no file: no link
    old, new = run_id(STEP_AT - 1), run_id(STEP_AT)
    compared = live.json(f"/api/compare?old={old}&new={new}")
    expected = json.loads(cli("report", "compare", "--old-run", old, "--new-run", new, "--db-url", results_url,
                              "--json").stdout)
    by_identity = {m["identity_key"]: m for m in expected["models"]}
    assert {m["identity_key"]: m for m in compared["models"]} == by_identity  # the CLI's verdicts, figures, reasons
    assert compared["models"][0]["verdict"] == "slower"  # what got worse first
    assert compared["counts"] == expected["counts"] and compared["counts"]["slower"] == 1
    assert {m["model"]: m["verdict"] for m in compared["models"]}["gpt2"] == "slower"
    default = live.json("/api/compare")  # the two newest runs
    assert (default["old"], default["new"]) == (run_id(RUNS - 1), run_id(RUNS))


def test_files_only_from_the_runs_folder(live, tmp_path):
    status, headers, body = live.get(f"/files/{run_id(RUNS)}/resnet/run.log")
    assert status == 200 and b"out of memory" in body
    assert headers["content-type"].startswith("text/plain") and "sandbox" in headers["content-security-policy"]
    (tmp_path / "secret.txt").write_text("secret")
    outside = tmp_path.parent / f"{tmp_path.name}-outside.txt"
    outside.write_text("secret")
    (tmp_path / "madengine_runs" / "link").symlink_to(tmp_path / "secret.txt")
    (tmp_path / "madengine_runs" / "dirlink").symlink_to(tmp_path, target_is_directory=True)
    (tmp_path / "madengine_runs" / "page.html").write_text("<script>alert(1)</script>")
    for path in ("/files/../secret.txt", "/files/%2e%2e/secret.txt", "/files/%2E%2E%2Fsecret.txt",
                 "/files/..%2Fsecret.txt", f"/files/{q(str(tmp_path / 'secret.txt'))}", "/files//etc/passwd",
                 "/files/%2Fetc%2Fpasswd", "/files/link", "/files/dirlink/secret.txt", f"/files/../{outside.name}",
                 "/files/", f"/files/{run_id(RUNS)}", "/files/..%5Csecret.txt", "/files/x%00.log",
                 "/static/../server/app.py", "/static/%2e%2e%2fapp.py"):
        status, _, body = live.get(path)
        assert status == 404 and b"secret" not in body, (path, status, body)
    status, headers, body = live.get("/files/page.html")
    assert status == 200 and headers["content-type"] == "application/octet-stream"
    assert headers["content-disposition"].startswith("attachment")


def test_every_name_is_escaped_in_every_page(live):
    identity = next(i for i in live.json("/api/overview")["results"]["items"] if i["model"] == XSS)["identity_key"]
    for path in ("/", "/trend?model=" + q(XSS), "/trend?identity=" + q(identity), f"/run?run={run_id(RUNS)}",
                 f"/compare?old={run_id(1)}&new={run_id(2)}", "/changes", "/runs", "/?model=" + q(XSS)):
        status, headers, body = live.get(path)
        text = body.decode()
        assert status == 200, (path, text[:300])
        assert XSS not in text, path
        assert path in ("/changes", "/runs") or "&lt;script&gt;alert(1)&lt;/script&gt;" in text, path  # (no model names)
        assert "script-src 'self'" in headers["content-security-policy"]
    status, _, body = live.get("/run?run=" + q(XSS))  # an unknown run named like a tag: 404, escaped
    assert status == 404 and XSS not in body.decode() and "&lt;script&gt;" in body.decode()


def test_bad_input_is_400_and_unknown_things_404(live):
    for path in ("/api/overview?status=BROKEN", "/api/overview?since=yesterday", "/api/overview?page=0",
                 "/api/series?identity=%5B1%5D", "/api/series", "/api/compare?threshold=-1", "/api/run",
                 "/api/overview?since=2026-02-05&until=2026-02-01", "/api/overview?model=" + "x" * 300):
        status, headers, body = live.get(path)
        assert status == 400 and headers["content-type"] == "application/json", path
        assert "\n" not in json.loads(body)["error"], path
    assert live.get("/api/run?run=nope")[0] == 404
    assert live.get("/api/series?identity=" + q(json.dumps(["x"] * 8)))[0] == 404
    assert live.get("/api/compare?old=nope&new=" + run_id(1))[0] == 400
    status, _, body = live.get("/?status=BROKEN")
    assert status == 400 and b"status: must be one of SUCCESS, FAILURE, SKIPPED" in body


def test_a_token_protects_every_request(results_url, tmp_path):
    serving = LiveServer(ServerConfig(url=parse_url(results_url), runs_dir=tmp_path, port=0, token="s3cret-T"))
    try:
        for path in ("/", "/api/overview", "/api/events", "/files/x", "/static/dashboard.js", "/?token=wrong"):
            status, headers, body = serving.get(path)
            assert status == 401 and headers["www-authenticate"] == "Bearer", path
            assert b"s3cret" not in body
        assert serving.get("/api/overview", {"Authorization": "Bearer wrong"})[0] == 401
        status, _, body = serving.get("/api/overview", {"Authorization": "Bearer s3cret-T"})
        assert status == 200 and json.loads(body)["counts"]["FAILURE"] == 1
        status, headers, _ = serving.get("/runs?token=s3cret-T&page=1")
        assert status == 303 and headers["location"] == "/runs?page=1"
        cookie = headers["set-cookie"].split(";")[0]
        assert "s3cret" not in cookie and "HttpOnly" in headers["set-cookie"]
        assert serving.get("/runs?page=1", {"Cookie": cookie})[0] == 200
        assert serving.get("/runs", {"Cookie": "madengine_dashboard=forged"})[0] == 401
    finally:
        serving.stop()


def test_only_loopback_host_names_when_bound_to_loopback(live):
    assert live.get("/api/version", {"Host": "attacker.example:8050"})[0] == 421
    assert live.get("/api/version", {"Host": "localhost:8050"})[0] == 200


def test_empty_or_missing_database_shows_how_to_fill_it(tmp_path):
    db = tmp_path / "none.db"
    serving = LiveServer(ServerConfig(url=parse_url(f"sqlite:///{db}"), runs_dir=tmp_path, port=0))
    try:
        data = serving.json("/api/overview")
        assert data["empty"] is True and data["database"]["exists"] is False
        assert any("--db-url" in command for command in data["how_to_fill"])
        status, _, body = serving.get("/")
        assert status == 200 and b"No results yet" in body and b"update-table" in body
        for path in ("/runs", "/changes", "/trend", "/compare", "/api/runs", "/api/changes", "/api/trend"):
            assert serving.get(path)[0] == 200, path
        assert not db.exists()  # reading never creates the database
        update_table(write_history(tmp_path / "perf.csv", runs=2), f"sqlite:///{db}")
        assert serving.json("/api/overview")["totals"]["runs"] == 2  # it appears without a restart
    finally:
        serving.stop()


def _digest(path: Path) -> tuple[str, int]:
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns


def test_the_server_never_writes_the_database(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "results.db"
    update_table(write_history(tmp_path / "perf.csv"), f"sqlite:///{db}")
    before = _digest(db)
    files_before = sorted(p.name for p in tmp_path.iterdir())
    serving = LiveServer(ServerConfig(url=parse_url(f"sqlite:///{db}"), runs_dir=tmp_path, port=0))
    try:
        for path in ("/", "/api/overview", "/trend?model=gpt2", "/runs", f"/run?run={run_id(3)}", "/compare",
                     "/changes", "/api/changes", "/api/identities", "/api/version"):
            assert serving.get(path)[0] == 200, path
        # the connection itself refuses writes (SQLite mode=ro)
        reader = serving.server.config.app.app.state.dashboard.reader
        with pytest.raises(Exception, match="readonly|read-only"):
            reader._store()._execute("DELETE FROM {t}")
    finally:
        serving.stop()
    assert _digest(db) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == files_before  # no journal, no lock file left


@pytest.mark.mysql
def test_mariadb_session_is_read_only(server, database):  # noqa: F811
    name, url = database
    update_table(write_history(Path.cwd() / "perf.csv", runs=2), url)
    from madengine.database.dashboard import Reader

    reader = Reader(parse_url(url))
    assert len(reader.identities()) == 4
    with pytest.raises(Exception, match="READ ONLY|read-only|1792"):
        reader._store()._execute("DELETE FROM {t}")
    reader.close()
    connection = _connect(server, name)
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM dlm_table")
        assert cursor.fetchone()[0] == 8
    connection.close()


# --- the command -------------------------------------------------------------------------------

def _serve_process(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "madengine", "report", "serve", *args], stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(REPO / "src"), **(env or {})})


def test_serve_command_warns_on_every_network_and_stops_on_sigterm(tmp_path):
    db = tmp_path / "results.db"
    update_table(write_history(tmp_path / "perf.csv", runs=2), f"sqlite:///{db}")
    process = _serve_process("--db-url", f"sqlite:///{db}", "--host", "0.0.0.0", "--port", "0",
                             env={"MADENGINE_DASHBOARD_TOKEN": "tok-123"})
    try:
        warning = process.stderr.readline()
        started = process.stderr.readline()
        assert "warning: --host 0.0.0.0 serves the results to every network" in warning
        assert "dashboard of sqlite:///" in started and "tok-123" not in warning + started
        port = int(started.split("0.0.0.0:")[1].split("/")[0])
        import urllib.error
        import urllib.request

        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/version", timeout=10)
        assert refused.value.code == 401  # the token from the environment
        request = urllib.request.Request(f"http://127.0.0.1:{port}/api/version",
                                         headers={"Authorization": "Bearer tok-123"})
        assert json.loads(urllib.request.urlopen(request, timeout=10).read())["exists"] is True
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 143
        process.stderr.close()


def test_serve_command_bad_input_is_one_line(tmp_path):
    busy = __import__("socket").socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        taken = run_process("report", "serve", "--db-url", f"sqlite:///{tmp_path / 'x.db'}", "--port",
                            str(busy.getsockname()[1]), timeout=60)
    finally:
        busy.close()
    assert taken.returncode == 2 and taken.stderr.strip().count("\n") == 0, taken.stderr
    assert "--port: port" in taken.stderr and "is in use" in taken.stderr
    mongo = run_process("report", "serve", "--db-url", "mongodb://localhost:1/x", timeout=60)
    assert mongo.returncode == 2 and "SQL results databases" in mongo.stderr
    port = run_process("report", "serve", "--port", "70000", timeout=60)
    assert port.returncode == 2 and "not a port number" in port.stderr


# --- the URL's filters -------------------------------------------------------------------------

@settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None)
@given(st.dictionaries(st.sampled_from(["model", "tag", "status", "gpu_architecture", "executor", "machine", "since",
                                        "until", "identity", "kind", "run", "old", "new", "threshold", "across",
                                        "state", "sort", "order", "page", "per_page", "other"]),
                       st.one_of(st.text(max_size=30), st.sampled_from(["FAILURE", "success", "2026-02-03", "3.5%",
                                                                        "2026-02-03T10:00", "1", "0", "nan", "1e9",
                                                                        "invalid", "Untriaged", "vs_baseline", "desc",
                                                                        "ASC"]))))
def test_filters_parse_or_refuse_and_round_trip(params):
    try:
        filters = parse(params)
    except InputError as exc:
        assert exc.path in params and "\n" not in str(exc)
        return
    again = parse(dict(urllib.parse.parse_qsl(filters.query(), keep_blank_values=True)))
    assert again == filters
    assert filters.page >= 1 and 1 <= filters.per_page <= 500 and 0 <= filters.threshold <= 1000


def test_filters_examples():
    assert parse({"since": "2026-02-03", "until": "2026-02-03"}).time_window() == ("2026-02-03T00:00:00",
                                                                                     "2026-02-03T23:59:59")
    assert parse({"status": "failure"}).status == "FAILURE" and parse({"threshold": "2.5%"}).threshold == 2.5
    assert Filters(model="bert", page=2).query() == "model=bert&page=2"
    for bad in ({"since": "2026-13-01"}, {"page": "-1"}, {"identity": '["a"]'}, {"threshold": "inf"},
                {"model": "a\nb"}):
        with pytest.raises(InputError):
            parse(bad)


# --- alerts and triage -----------------------------------------------------------------------------

def _gpt2_alert(serving, headers=None) -> dict:
    alerts = serving.json("/api/alerts", headers)["items"]
    assert [(a["model"], a["kind"], a["state"]) for a in alerts] == [("gpt2", "regression", "untriaged")]
    return alerts[0]


def test_alerts_are_set_with_the_token_only(results_url, tmp_path):
    config = ServerConfig(url=parse_url(results_url), runs_dir=tmp_path, port=0)
    reading = LiveServer(config)
    try:
        alert = _gpt2_alert(reading)
        status, _, body = reading.post(f"/api/alerts/{alert['alert_id']}", b'{"state": "invalid", "by": "x"}')
        assert status == 403 and "reads only" in json.loads(body)["error"]
    finally:
        reading.stop()
    token = "triage-T0ken"
    serving = LiveServer(ServerConfig(url=parse_url(results_url), runs_dir=tmp_path, port=0, token=token))
    bearer = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    try:
        path = f"/api/alerts/{alert['alert_id']}"
        assert serving.post(path, b'{"state": "invalid", "by": "x"}')[0] == 401
        cases = [(b'{"state": "bogus", "by": "x"}', 400, "state: unknown state"),
                 (b'{"state": "invalid"}', 400, "by: say who decides"),
                 (b'{"state": "invalid", "by": "x", "links": ["ftp://x"]}', 400, "link: not a commit hash"),
                 (b'[1]', 400, "expected a JSON object"), (b'{not json', 400, "not valid JSON")]
        for body, status, fragment in cases:
            got = serving.post(path, body, bearer)
            assert got[0] == status and fragment in json.loads(got[2])["error"], (body, got)
        assert serving.post("/api/alerts/00000000", b'{"state": "fixed", "by": "x"}', bearer)[0] == 404
        assert serving.post(path, b"x" * 20_000, bearer)[0] == 400  # a triage is a few lines
        foreign = {**bearer, "Origin": "http://evil.example"}
        assert serving.post(path, b'{"state": "invalid", "by": "x"}', foreign)[0] == 403
        before = serving.json("/api/version", bearer)
        status, _, body = serving.post(path, json.dumps({"state": "invalid", "note": "noise", "by": "carol",
                                                         "links": ["https://example.com/i/7"]}).encode(), bearer)
        assert status == 200 and json.loads(body)["state"] == "invalid", body
        deadline = time.monotonic() + 30  # open pages learn it from the events stream (its version has the triage)
        while serving.json("/api/version", bearer)["triage"] <= before["triage"]:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        stored = serving.json("/api/alerts?state=invalid", bearer)["items"][0]
        assert (stored["note"], stored["updated_by"], stored["links"]) == ("noise", "carol", ["https://example.com/i/7"])
        overview = serving.json("/api/overview", bearer)
        assert overview["triage"]["total"] == 0
        assert overview["precision"]["overall"] == {"alerts": 1, "triaged": 1, "invalid": 1, "untriaged": 0,
                                                    "precision": 0.0, "invalid_share": 1.0}
        # a page's form: urlencoded, with the session cookie, back to the page it came from
        _, headers, _ = serving.get(f"/?token={token}")
        cookie = headers["set-cookie"].split(";")[0]
        form = urllib.parse.urlencode({"state": "acknowledged", "note": "", "link": "", "by": "dan",
                                       "back": "/?model=gpt"}).encode()
        status, headers, _ = serving.post(f"/alerts/{alert['alert_id']}", form, {
            "Cookie": cookie, "Origin": "null", "Content-Type": "application/x-www-form-urlencoded"})
        assert status == 303 and headers["location"] == f"/?model=gpt#alert-{alert['alert_id']}"
        form = urllib.parse.urlencode({"state": "fixed", "by": "dan", "back": "https://evil.example/"}).encode()
        status, headers, _ = serving.post(f"/alerts/{alert['alert_id']}", form, {"Cookie": cookie})
        assert status == 303 and headers["location"] == f"/changes#alert-{alert['alert_id']}"  # only its own pages
    finally:
        serving.stop()
    log = subprocess.run([sys.executable, "-m", "madengine", "report", "alerts", "show", alert["alert_id"], "--db-url",
                          results_url, "--json"], capture_output=True, text=True, env={**os.environ,
                                                                                      "PYTHONPATH": str(REPO / "src")})
    assert [e["state"] for e in json.loads(log.stdout)["log"]] == ["invalid", "acknowledged", "fixed"], log.stderr


def test_the_overview_sorts_and_groups_failures(live, results_url, tmp_path):
    by_performance = live.json("/api/overview?sort=performance&order=desc")["results"]["items"]
    figures = [float(i["latest"]["performance"]) for i in by_performance if i["latest"]["performance"]]
    assert figures == sorted(figures, reverse=True) and len(figures) == 3
    assert [i["model"] for i in live.json("/api/overview?sort=result")["results"]["items"]][0] == XSS
    assert live.get("/api/overview?sort=nonsense")[0] == 400
    overview = live.json("/api/overview")
    assert [i["model"] for i in overview["broken"]["items"]] == ["resnet"]  # never passed: not a new failure
    assert overview["new_failures"] == [] and overview["flaky"]["total"] == 0
    # bert fails in the next run: failing now, passing before, never before: a new failure
    update_table(append_records(tmp_path / "next.csv", [PerfRecord(
        model="bert", status="FAILURE", reason="segfault", run_id="run13", started_at="2026-02-13T10:00:00Z",
        metric="samples_per_second",
        gpu_architecture="gfx942", gpu_vendor="AMD", executor="docker", n_gpus="1", tag_configs="bs=64")]), results_url)
    overview = live.json("/api/overview")
    assert [(i["model"], i["profile"]["kind"], i["profile"]["streak"]) for i in overview["new_failures"]] == \
        [("bert", "new", 1)]
    assert "segfault" in live.get("/")[2].decode()


def test_serve_imports_perf_csv_files_first(tmp_path):
    """--perf-csv: update-table's streamed import, then the dashboard over the result; bad input first."""
    db = tmp_path / "served.db"
    write_history(tmp_path / "perf.csv", runs=10)
    process = _serve_process("--db-url", f"sqlite:///{db}", "--port", "0", "--perf-csv", str(tmp_path / "perf.csv"))
    try:
        imported = process.stderr.readline()
        started = process.stderr.readline()
        assert "perf.csv: 40 row(s), 40 imported, 0 already stored, 1 new alert(s)" in imported, imported
        port = int(started.split("127.0.0.1:")[1].split("/")[0])
        import urllib.request

        overview = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/overview", timeout=10).read())
        assert overview["totals"]["rows"] == 40 and overview["triage"]["total"] == 1
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 143
        process.stderr.close()
    (tmp_path / "bad.csv").write_text("model,performance\n,1\n")
    bad = run_process("report", "serve", "--db-url", f"sqlite:///{tmp_path / 'other.db'}", "--perf-csv",
                      str(tmp_path / "bad.csv"), timeout=60)
    assert bad.returncode == 2 and "bad.csv: line 2: empty 'model' cell" in bad.stderr, bad.stderr
    assert bad.stderr.strip().count("\n") == 0 and not (tmp_path / "other.db").exists()


def test_series_cache_prepares_every_tail_run_and_gives_way_to_requests():
    """Every run a series state keeps gets its reference ahead of the requests (the same one a request
    would make), a run older than the tail none; while a request is answered, nothing is made."""
    from madengine.database.series import TAIL, advance
    from madengine.results.identity import ResultIdentity
    from madengine.server.history import SeriesCache

    def rows(seed: int, n: int) -> list[dict]:
        return [{"id": k + 1, "status": "SUCCESS", "performance": str(100 + (k * seed) % 7), "perf_samples": "",
                 "run_id": f"run{k:04d}", "started_at": f"2026-01-01T00:{k // 60 % 60:02d}:{k % 60:02d}Z",
                 "relative_change": ""} for k in range(n)]

    keys = [ResultIdentity(model=m, metric="samples/s").key() for m in ("m1", "m2")]
    states = {key: advance(None, key, rows(seed, TAIL + 30), None).state for seed, key in zip((3, 5), keys)}
    cache = SeriesCache(lambda keys: {k: states[k] for k in keys})
    cache.refresh({k: {"covered": s.covered} for k, s in states.items()})
    asked = []
    cache.prepare(stop=lambda: len(asked) > 3, busy=lambda: asked.append(1) or True)
    assert cache._references == {}  # a request was being answered all along: nothing made
    cache.prepare()
    for key, state in states.items():
        assert list(cache._references[key]) == [p.run for p in state.tail]
        assert all(ref == SeriesCache._reference(state, run) for run, ref in cache._references[key].items())
    tail_run, older = states[keys[0]].tail[-1].run, "run0005"
    assert set(cache.references_at(tail_run, {k: k for k in states})) == set(states)
    assert cache.references_at(older, {k: k for k in states}) == {}


def test_a_summary_of_twenty_alerts_is_triaged_at_once_with_the_token(results_url, tmp_path):
    """Perfherder-style summaries: the alerts of one run together, the worst first, the commit range;
    one post sets all of them (or the chosen ones), a second one writes nothing."""
    update_table(write_bad_night(tmp_path / "night.csv"), results_url)
    token = "summary-T0ken"
    serving = LiveServer(ServerConfig(url=parse_url(results_url), runs_dir=tmp_path, port=0, token=token))
    bearer = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    try:
        data = serving.json("/api/summaries", bearer)
        first = data["items"][0]
        assert (first["summary_id"], first["alerts"], first["regressions"], first["untriaged"]) == \
            (BAD_RUN, BAD_MODELS, BAD_MODELS, BAD_MODELS)
        assert first["commits"][0]["range"] == "commit-06..commit-07" and first["commits"][0]["alerts"] == BAD_MODELS
        weights = [a["weight"] for a in first["items"]]
        assert weights == sorted(weights, reverse=True)  # the worst first
        words = {a["metric"]: a["change_words"] for a in first["items"]}
        assert words["samples_per_second"].startswith("\u2212") and words["samples_per_second"].endswith(", worse")
        assert words["latency_ms"].startswith("+") and words["latency_ms"].endswith(", worse")
        assert [s["summary_id"] for s in data["items"]][1:] == [run_id(STEP_AT)]  # gpt2's step: a summary of its own
        page = serving.get("/summaries", bearer)[2].decode()
        assert f'id="summary-{BAD_RUN}"' in page and page.count('name="alert" value=') == BAD_MODELS + 1
        # bad input: a summary that does not exist, an id this database does not have, no token
        status, _, body = serving.post("/api/alerts", b'{"summary": "night-99", "state": "invalid", "by": "x"}', bearer)
        assert status == 404 and "no alert summary 'night-99'" in json.loads(body)["error"]
        foreign = json.dumps({"alerts": [first["items"][0]["alert_id"], "abcdef0123456789"], "state": "invalid",
                              "by": "x"}).encode()
        status, _, body = serving.post("/api/alerts", foreign, bearer)
        assert status == 404 and "abcdef0123456789" in json.loads(body)["error"]
        assert serving.post("/api/alerts", b'{"summary": "night-07", "state": "invalid", "by": "x"}')[0] == 401
        assert serving.json("/api/summaries?state=untriaged", bearer)["items"][0]["untriaged"] == BAD_MODELS
        # the whole summary in one post, then the same again: nothing new
        one = json.dumps({"summary": BAD_RUN, "state": "invalid", "note": "a noisy node", "by": "erin"}).encode()
        status, _, body = serving.post("/api/alerts", one, bearer)
        assert status == 200 and len(json.loads(body)["changed"]) == BAD_MODELS, body
        status, _, body = serving.post("/api/alerts", one, bearer)
        assert status == 200 and json.loads(body)["changed"] == [] and len(json.loads(body)["unchanged"]) == BAD_MODELS
        # a page's form: the checked alerts of the summary, back to the summary
        _, headers, _ = serving.get(f"/summaries?token={token}")
        cookie = headers["set-cookie"].split(";")[0]
        chosen = [a["alert_id"] for a in first["items"][:2]]
        form = urllib.parse.urlencode([("summary", BAD_RUN), ("alert", chosen[0]), ("alert", chosen[1]),
                                       ("state", "acknowledged"), ("by", "dan"), ("back", "/summaries")]).encode()
        status, headers, _ = serving.post("/alerts", form, {"Cookie": cookie, "Origin": "null",
                                                             "Content-Type": "application/x-www-form-urlencoded"})
        assert status == 303 and headers["location"] == f"/summaries#summary-{BAD_RUN}"
        deadline = time.monotonic() + 30
        while True:
            [night] = [s for s in serving.json("/api/summaries", bearer)["items"] if s["summary_id"] == BAD_RUN]
            states = {a["alert_id"]: a["state"] for a in night["items"]}
            if [states[c] for c in chosen] == ["acknowledged"] * 2:
                break
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert sorted(states.values()) == ["acknowledged"] * 2 + ["invalid"] * (BAD_MODELS - 2)
    finally:
        serving.stop()


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_a_charts_dots_escape_text_as_the_templates_do(text):
    """The trend chart escapes its run ids and tooltips itself (one fragment for thousands of dots):
    every text comes out as markupsafe, the templates' escaping, writes it."""
    from markupsafe import escape

    from madengine.server.charts import _escaped

    assert _escaped(text) == str(escape(text))
