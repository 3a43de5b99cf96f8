"""`madengine database` with MongoDB.

No MongoDB server can be installed on these machines, so the driver talks over a real socket to a
wire-protocol test server (mockupdb) that answers the commands pymongo sends (hello, update,
find, createIndexes, listCollections, saslStart) from an in-memory dict; the tests check the
write commands the driver sent. Against a real ``mongod`` the last tests run when ``MONGO_URI``
is set (they skip otherwise, in CI too).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
from urllib.parse import urlsplit, urlunsplit

import pytest

from madengine.database import fetch_run, list_runs
from test_database_helpers import history, one_error_line, relative, write_perf_csv

import mockupdb  # noqa: E402  (installed by the test extras; CI must have it)

HANDSHAKE = ("ismaster", "isMaster", "hello")


_COMPARISONS = {"$gt": lambda a, b: a is not None and a > b, "$gte": lambda a, b: a is not None and a >= b,
                "$lt": lambda a, b: a is not None and a < b, "$lte": lambda a, b: a is not None and a <= b,
                "$in": lambda a, b: a in b, "$nin": lambda a, b: a not in b}


def _matches(document: dict, query: dict) -> bool:
    for key, wanted in query.items():
        value = document.get(key)
        if isinstance(wanted, dict) and set(wanted) <= set(_COMPARISONS):
            if not all(_COMPARISONS[op](value, operand) for op, operand in wanted.items()):
                return False
        elif value != wanted:
            return False
    return True


class FakeMongo:
    """mockupdb answering the driver from an in-memory store; records every command."""

    def __init__(self, refuse_auth: bool = False) -> None:
        self.refuse_auth = refuse_auth
        self.commands: list[tuple[str, dict]] = []
        self.collections: dict[tuple[str, str], dict] = {}
        self.server = mockupdb.MockupDB(auto_ismaster={"maxWireVersion": 21, "minWireVersion": 0})
        self.server.autoresponds(self._handle)
        self.port = self.server.run()
        self.uri = f"mongodb://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.stop()

    def reset(self) -> None:
        self.refuse_auth = False
        self.commands.clear()
        self.collections.clear()

    def sent(self, name: str) -> list[dict]:
        return [doc for command, doc in self.commands if command == name]

    def _collection(self, request, name_key: str) -> dict:
        return self.collections.setdefault((request.doc["$db"], request.doc[name_key]), {})

    def _handle(self, request):
        name = request.command_name
        if name in HANDSHAKE:
            return None  # the auto_ismaster responder answers
        self.commands.append((name, dict(request.doc)))
        handler = getattr(self, f"_on_{name}", None)
        if handler is None:
            return request.ok()
        return handler(request)

    def _on_saslStart(self, request):
        return request.command_err(code=18, errmsg="Authentication failed.") if self.refuse_auth else request.ok()

    def _on_listCollections(self, request):
        wanted = (request.doc.get("filter") or {}).get("name")
        names = [c for (db, c) in self.collections if db == request.doc["$db"] and c == wanted]
        return request.ok(cursor={"id": 0, "ns": f"{request.doc['$db']}.$cmd.listCollections",
                                  "firstBatch": [{"name": n, "type": "collection"} for n in names]})

    def _on_createIndexes(self, request):
        self._collection(request, "createIndexes")
        return request.ok(numIndexesBefore=1, numIndexesAfter=2)

    def _on_find(self, request):
        documents = [d for d in self._collection(request, "find").values()
                     if _matches(d, request.doc.get("filter") or {})]
        for key, direction in reversed(list((request.doc.get("sort") or {}).items())):
            documents.sort(key=lambda d: (d.get(key) is not None, d.get(key)), reverse=direction < 0)
        if request.doc.get("limit"):
            documents = documents[:request.doc["limit"]]
        return request.ok(cursor={"id": 0, "ns": f"{request.doc['$db']}.{request.doc['find']}",
                                  "firstBatch": documents})

    def _on_update(self, request):
        store = self._collection(request, "update")
        matched = modified = 0
        upserted = []
        for index, update in enumerate(request.doc["updates"]):
            key = update["q"]["_id"]
            change = update["u"]
            if key in store:
                matched += 1
                before = dict(store[key])
                store[key].update(change.get("$set", {}))
                modified += store[key] != before
            elif update.get("upsert"):
                store[key] = {"_id": key, **change.get("$setOnInsert", {}), **change.get("$set", {})}
                upserted.append({"index": index, "_id": key})
        # a server leaves 'upserted' out when nothing was (update_one reads its first entry when present)
        return request.ok(n=matched + len(upserted), nModified=modified, **({"upserted": upserted} if upserted else {}))


@pytest.fixture(scope="module")
def mongo_server():
    fake = FakeMongo()
    yield fake
    fake.stop()  # takes a second: one server for the module, emptied for each test


@pytest.fixture
def mongo(mongo_server):
    mongo_server.reset()
    return mongo_server


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("MADENGINE_DB_URL", "MONGO_HOST", "MONGO_PORT", "MONGO_USER", "MONGO_PASSWORD", "TUNA_DB_HOSTNAME"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def _closed_port() -> int:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    return port


# --- upload-mongodb --type run -------------------------------------------------------------------

def test_upload_runs_sends_insert_only_upserts_keyed_by_run_id(workdir, cli, mongo):
    write_perf_csv(workdir / "perf.csv", [
        dict(model="resnet", performance=101.5, run_id="r1", context={"gpu": "mi300"}),
        dict(model="bert", status="FAILURE", reason="exit 1", run_id="r1"),
        dict(model="resnet", performance=99.0, run_id="r2"),
    ])
    result = cli("database", "upload-mongodb", "--type", "run", "--file-path", "perf.csv", "--name", "nightly",
                 "--db-url", mongo.uri, "--json")
    assert result.code == 0, result
    counts = json.loads(result.stdout)
    assert (counts["documents"], counts["inserted"], counts["database"], counts["collection"]) == (
        3, 3, "madengine", "runs")

    (update,) = mongo.sent("update")
    assert (update["update"], update["$db"], update["ordered"]) == ("runs", "madengine", False)
    ids = [u["q"]["_id"] for u in update["updates"]]
    assert [i.rsplit(":", 1)[0] for i in ids] == ["run:nightly:r1", "run:nightly:r1", "run:nightly:r2"]
    assert len(set(ids)) == 3
    for u in update["updates"]:
        assert u["upsert"] is True and list(u["u"]) == ["$setOnInsert"]  # never overwrites a stored document
    first = update["updates"][0]["u"]["$setOnInsert"]
    assert (first["model"], first["performance"], first["context"], first["name"], first["type"]) == (
        "resnet", 101.5, {"gpu": "mi300"}, "nightly", "run")
    assert first["source"] == "perf.csv" and first["uploaded_at"] and first["created_date"]

    again = cli("database", "upload-mongodb", "--type", "run", "--file-path", "perf.csv", "--name", "nightly",
                "--db-url", mongo.uri, "--json")
    assert (json.loads(again.stdout)["inserted"], json.loads(again.stdout)["unchanged"]) == (0, 3)
    assert [u["q"]["_id"] for u in mongo.sent("update")[1]["updates"]] == ids

    stored_before = {k: dict(v) for k, v in mongo.collections[("madengine", "runs")].items()}
    write_perf_csv(workdir / "perf.csv", [dict(model="resnet", performance=99.0, run_id="r3")])
    later = cli("database", "upload-mongodb", "--type", "run", "--file-path", "perf.csv", "--name", "nightly",
                "--db-url", mongo.uri, "--json")
    assert json.loads(later.stdout)["inserted"] == 1
    stored = mongo.collections[("madengine", "runs")]
    assert len(stored) == 4 and all(stored[k] == v for k, v in stored_before.items())


def test_upload_uses_original_mongo_variables(workdir, cli, mongo):
    write_perf_csv(workdir / "perf.csv", history("m", [1]))
    environ = {"MONGO_HOST": "127.0.0.1", "MONGO_PORT": str(mongo.port)}
    result = cli("database", "upload-mongodb", "--type", "run", "--file-path", "perf.csv", "--name", "m",
                 "--database", "perf", "--collection", "results", environ=environ)
    assert result.code == 0, result
    assert "1 inserted" in result.stderr
    (update,) = mongo.sent("update")
    assert (update["$db"], update["update"]) == ("perf", "results")


# --- upload-mongodb --type job -------------------------------------------------------------------

def test_upload_jobs_from_a_folder_upserts_one_document_per_run_id(workdir, cli, mongo):
    folder = workdir / "results"
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps({
        "run_id": "20260101-000000-abcdef", "executor": "docker", "counts": {"SUCCESS": 1},
        "results": [{"model": "m", "status": "SUCCESS", "performance": 3.5}]}))
    write_perf_csv(folder / "perf.csv", history("m", [1, 2]))
    (folder / "notes.txt").write_text("ignored")
    result = cli("database", "upload-mongodb", "--type", "job", "--file-path", str(folder), "--name", "ci-job",
                 "--db-url", mongo.uri + "/jobsdb", "--json")
    assert result.code == 0, result
    counts = json.loads(result.stdout)
    assert (counts["documents"], counts["inserted"], counts["database"], counts["collection"]) == (3, 3, "jobsdb", "jobs")
    assert [os.path.basename(f) for f in counts["files"]] == ["perf.csv", "summary.json"]

    (update,) = mongo.sent("update")
    assert [u["q"]["_id"] for u in update["updates"]] == [
        "job:ci-job:run1", "job:ci-job:run2", "job:ci-job:20260101-000000-abcdef"]
    for u in update["updates"]:
        assert u["upsert"] is True and set(u["u"]) == {"$set", "$setOnInsert"}
    csv_job = update["updates"][0]["u"]["$set"]
    assert csv_job["counts"]["SUCCESS"] == 1 and csv_job["rows"][0]["performance"] == 1.0
    json_job = update["updates"][2]["u"]["$set"]
    assert json_job["executor"] == "docker" and json_job["results"][0]["performance"] == 3.5

    again = cli("database", "upload-mongodb", "--type", "job", "--file-path", str(folder), "--name", "ci-job",
                "--db-url", mongo.uri + "/jobsdb", "--json")
    assert json.loads(again.stdout)["inserted"] == 0  # the same jobs again: refreshed in place, no new document
    assert len(mongo.collections[("jobsdb", "jobs")]) == 3


# --- the results store on MongoDB ----------------------------------------------------------------

def _stepped(n: int, at: int) -> list[dict]:
    return [dict(model="m", performance=100.0 * (1.1 if k >= at else 1.0) + (k % 3) * 0.2, run_id=f"run{k:03d}",
                 started_at=f"2026-01-01T00:{k:02d}:00Z") for k in range(n)]


def test_mongodb_keeps_series_states_and_alerts_like_sql(workdir, cli, mongo):
    """The same importer as SQLite and MySQL: a step is an alert when update-table returns, the triage
    is stored with who and when, and survives a re-import."""
    url = mongo.uri + "/results"
    write_perf_csv(workdir / "perf.csv", _stepped(30, 20))
    result = cli("database", "update-table", "--csv-file-path", "perf.csv", "--db-url", url, "--json")
    assert result.code == 0, result
    assert json.loads(result.stdout)["series"] == 1 and json.loads(result.stdout)["new_alerts"] == 1
    [state] = mongo.collections[("results", "dlm_table_series")].values()
    assert state["state"]["n_points"] == 30 and state["state"]["changes"] == [20] and state["statuses"] == "S" * 30
    [alert] = mongo.collections[("results", "dlm_table_alerts")].values()
    assert (alert["kind"], alert["after_run"], alert["state"]) == ("improvement", "run020", "untriaged")
    # relative_change of the rows after the step: against the runs after it only (corrected in the series pass)
    assert relative(fetch_run(url, "run023")[0])["baseline_avg"] == pytest.approx(110.2, abs=0.2)
    marked = cli("report", "alerts", "set", alert["_id"], "--state", "expected", "--by", "erin", "--db-url", url)
    assert marked.code == 0, marked
    write_perf_csv(workdir / "more.csv", _stepped(32, 20)[30:])
    assert cli("database", "update-table", "--csv-file-path", "more.csv", "--db-url", url).code == 0
    assert cli("database", "update-table", "--csv-file-path", "perf.csv", "--db-url", url).code == 0
    [kept] = mongo.collections[("results", "dlm_table_alerts")].values()
    assert (kept["_id"], kept["state"], kept["updated_by"]) == (alert["_id"], "expected", "erin")
    assert next(iter(mongo.collections[("results", "dlm_table_series")].values()))["state"]["n_points"] == 32
    listed = json.loads(cli("report", "alerts", "list", "--db-url", url, "--json").stdout)["alerts"]
    assert [a["state"] for a in listed] == ["expected"]
    # its summary; a triage of it that says what it says already writes nothing
    summaries = json.loads(cli("report", "alerts", "summaries", "--db-url", url, "--json").stdout)["summaries"]
    assert [(s["summary_id"], s["alerts"], s["improvements"], s["states"]["expected"]) for s in summaries] == \
        [("run020", 1, 1, 1)]
    again = cli("report", "alerts", "set", "--summary", "run020", "--state", "expected", "--by", "erin", "--db-url", url)
    assert again.code == 0 and "expected already" in again.stderr, again
    log = [d for (db, c), docs in mongo.collections.items() if c == "dlm_table_alert_log" for d in docs.values()]
    assert [(d["state"], d["by_name"]) for d in log] == [("expected", "erin")]


def test_update_table_on_mongodb_is_idempotent_with_relative_change(workdir, cli, mongo):
    write_perf_csv(workdir / "perf.csv", history("m", [10, 20, 30, 40, 50, 60, 70]))
    url = mongo.uri + "/results"
    result = cli("database", "update-table", "--csv-file-path", "perf.csv", "--db-url", url, "--json")
    assert result.code == 0, result
    assert json.loads(result.stdout)["inserted"] == 7
    assert {d["name"] for d in mongo.sent("createIndexes")[0]["indexes"]} == {"dlm_table_group"}
    for u in mongo.sent("update")[0]["updates"]:
        assert u["upsert"] is True and list(u["u"]) == ["$setOnInsert"] and len(u["q"]["_id"]) == 64

    again = cli("database", "update-table", "--csv-file-path", "perf.csv", "--db-url", url, "--json")
    assert (json.loads(again.stdout)["inserted"], json.loads(again.stdout)["unread"]) == (0, 7)  # nothing read again
    assert len(mongo.collections[("results", "dlm_table")]) == 7
    [mark] = mongo.collections[("results", "dlm_table_files")].values()
    assert (mark["rows"], mark["size"]) == (7, (workdir / "perf.csv").stat().st_size)

    (row,) = fetch_run(url, "run7")
    assert relative(row) == {"pct_change": 75.0, "baseline_avg": 40.0, "sample_count": 5}
    assert [(r.run_id, r.rows, r.success) for r in list_runs(url)] == [(f"run{i}", 1, 1) for i in range(1, 8)]
    listed = cli("database", "list-runs", "--db-url", url, "--json")
    assert listed.code == 0 and len(json.loads(listed.stdout)) == 7


# --- failures ---------------------------------------------------------------------------------

def test_mongodb_down_is_one_line_exit_2(workdir, cli):
    write_perf_csv(workdir / "perf.csv", history("m", [1]))
    url = f"mongodb://127.0.0.1:{_closed_port()}"
    environ = {"MONGO_TIMEOUT_MS": "300"}
    for argv in (["upload-mongodb", "--type", "run", "--file-path", "perf.csv", "--name", "m"],
                 ["update-table", "--csv-file-path", "perf.csv"]):
        result = cli("database", *argv, "--db-url", url, environ=environ)
        assert result.code == 2, result
        assert "cannot reach the MongoDB server" in one_error_line(result.stderr)


def test_mongodb_wrong_password_is_a_credential_error(workdir, cli, mongo):
    fake = mongo
    fake.refuse_auth = True
    write_perf_csv(workdir / "perf.csv", history("m", [1]))
    url = f"mongodb://tester:Wrong-Pass-99@127.0.0.1:{fake.port}/?authSource=admin"
    result = cli("database", "upload-mongodb", "--type", "run", "--file-path", "perf.csv", "--name", "m",
                 "--db-url", url)
    assert result.code == 2, result
    line = one_error_line(result.stderr)
    assert "refused the credentials" in line and "Wrong-Pass-99" not in result.stderr
    assert "tester:******@" in line
    assert fake.sent("saslStart") and not fake.sent("update")


@pytest.mark.parametrize("setup, path, expected", [
    (None, "missing.csv", "file or folder not found"),
    ("folder", "empty", "no .csv or .json file"),
    ("notes.txt", "notes.txt", "not a .csv or .json file"),
    ("bad.json", "bad.json", "malformed JSON"),
    ("scalar.json", "scalar.json", "JSON object or a non-empty array"),
    ("bad.csv", "bad.csv", "line 2 has 3 cells"),
    ("empty.csv", "empty.csv", "empty file"),
])
def test_bad_upload_inputs_fail_before_connecting(workdir, cli, mongo, setup, path, expected):
    contents = {"notes.txt": "x", "bad.json": "{", "scalar.json": "42", "bad.csv": "model,a\nm,1,2\n", "empty.csv": ""}
    if setup == "folder":
        (workdir / "empty").mkdir()
    elif setup:
        (workdir / setup).write_text(contents[setup])
    result = cli("database", "upload-mongodb", "--type", "run", "--file-path", path, "--name", "m", "--db-url", mongo.uri)
    assert result.code == 2, result
    assert expected in one_error_line(result.stderr)
    assert not mongo.sent("update")


def test_empty_name_is_refused(workdir, cli, mongo):
    write_perf_csv(workdir / "perf.csv", history("m", [1]))
    result = cli("database", "upload-mongodb", "--type", "job", "--file-path", "perf.csv", "--name", " ",
                 "--db-url", mongo.uri)
    assert result.code == 2 and "--name: must not be empty" in one_error_line(result.stderr)


# --- a real mongod (only with MONGO_URI) -------------------------------------------------------

@pytest.fixture
def real_mongo():
    uri = os.environ.get("MONGO_URI")
    if not uri:
        pytest.skip("MONGO_URI is not set: no MongoDB server can be installed here or in CI (mockupdb tests cover the protocol)")
    import pymongo

    name = f"madengine_test_{secrets.token_hex(4)}"
    client = pymongo.MongoClient(uri, serverSelectionTimeoutMS=5000)
    yield uri, name, client[name]
    client.drop_database(name)
    client.close()


def test_real_mongod_upload_and_results_store(workdir, cli, real_mongo):
    uri, name, database = real_mongo
    write_perf_csv(workdir / "perf.csv", history("m", [10, 20, 30, 40, 50, 60, 70]))
    for _ in range(2):
        result = cli("database", "upload-mongodb", "--type", "run", "--file-path", "perf.csv", "--name", "m",
                     "--db-url", uri, "--database", name)
        assert result.code == 0, result
    assert database["runs"].count_documents({}) == 7

    parts = urlsplit(uri)
    url = urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, ""))  # keeps authSource and such
    for expected in (7, 0):
        result = cli("database", "update-table", "--csv-file-path", "perf.csv", "--db-url", url, "--json")
        assert result.code == 0 and json.loads(result.stdout)["inserted"] == expected, result
    assert relative(fetch_run(url, "run7")[0]) == {"pct_change": 75.0, "baseline_avg": 40.0, "sample_count": 5}
    assert [r.run_id for r in list_runs(url)] == [f"run{i}" for i in range(1, 8)]
