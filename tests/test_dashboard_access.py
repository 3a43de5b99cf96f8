"""`madengine report serve` is safe by default (issue 25): a token or an explicit --no-auth beyond
loopback, the Host check on every address, signed sessions that expire, 400 for every malformed
parameter, 414 for an oversized URL, and no 5xx for any query (Hypothesis against the real server).

Everything goes over real sockets to the real uvicorn: the application in a thread (LiveServer), or
the command itself as a process.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from conftest import IN_CI, REPO, run_process
from dashboard_helpers import LiveServer, run_id, write_history, write_run_files
from madengine.database import update_table
from madengine.database.urls import parse_url
from madengine.results.identity import FIELDS as IDENTITY_FIELDS
from madengine.server.config import ServerConfig

EXAMPLES = 500 if IN_CI else 150
API = ("/api/overview", "/api/identities", "/api/series", "/api/trend", "/api/runs", "/api/run", "/api/compare",
       "/api/changes")


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> tuple[str, Path]:
    """A results database (SQLite) of four runs, and its runs folder."""
    folder = tmp_path_factory.mktemp("access")
    url = f"sqlite:///{folder / 'results.db'}"
    update_table(write_history(folder / "perf.csv", runs=4), url)
    write_run_files(folder / "madengine_runs", 4)
    return url, folder / "madengine_runs"


@pytest.fixture(scope="module")
def db_url(history) -> str:
    return history[0]


@pytest.fixture(scope="module")
def live(history):
    serving = LiveServer(ServerConfig(url=parse_url(history[0]), runs_dir=history[1], port=0))
    yield serving
    serving.stop()


def raw_get(port: int, target: str, host: str | None = "127.0.0.1", address: str = "127.0.0.1",
            headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """A GET over a real socket with exactly this target and Host header (None: no Host header)."""
    connection = http.client.HTTPConnection(address, port, timeout=60)
    try:
        connection.putrequest("GET", target, skip_host=True, skip_accept_encoding=True)
        if host is not None:
            connection.putheader("Host", host)
        for name, value in (headers or {}).items():
            connection.putheader(name, value)
        connection.endheaders()
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def _serve(*args: str, env: dict | None = None) -> subprocess.Popen:
    environ = {k: v for k, v in os.environ.items() if k != "MADENGINE_DASHBOARD_TOKEN"}
    return subprocess.Popen([sys.executable, "-m", "madengine", "report", "serve", "--port", "0", *args],
                            stderr=subprocess.PIPE, text=True,
                            env={**environ, "PYTHONPATH": str(REPO / "src"), **(env or {})})


def _started(process: subprocess.Popen) -> tuple[list[str], int]:
    """The lines the command printed up to its address, and the port."""
    lines = []
    while True:
        line = process.stderr.readline()
        assert line, f"the dashboard ended: {lines}"
        lines.append(line.strip())
        if " at http://" in line:
            return lines, int(line.split(" at http://")[1].split("/")[0].rsplit(":", 1)[1])


def _stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 143
    process.stderr.close()


# --- a token, or --no-auth said on purpose -----------------------------------------------------

def test_an_address_others_can_reach_needs_a_token_or_no_auth(db_url):
    environ = {k: v for k, v in os.environ.items() if k != "MADENGINE_DASHBOARD_TOKEN"}
    refused = run_process("report", "serve", "--db-url", db_url, "--host", "0.0.0.0", "--port", "0",
                          env=environ, timeout=30)
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip().count("\n") == 0 and "--host: 0.0.0.0 can be reached from other machines" \
        in refused.stderr and "--token" in refused.stderr and "--no-auth" in refused.stderr
    both = run_process("report", "serve", "--db-url", db_url, "--host", "0.0.0.0", "--port", "0", "--no-auth",
                       "--token", "t0k-9", timeout=30)
    assert both.returncode == 2 and both.stderr.count("\n") == 1 and "--no-auth: a token is set (--token)" \
        in both.stderr and "t0k-9" not in both.stderr
    bad_name = run_process("report", "serve", "--db-url", db_url, "--allowed-host", "http://dash:80", timeout=30)
    assert bad_name.returncode == 2 and "--allowed-host" in bad_name.stderr and "no scheme, port" in bad_name.stderr


def test_no_auth_says_anyone_can_read_and_the_host_check_stays_on(db_url):
    process = _serve("--db-url", db_url, "--host", "0.0.0.0", "--no-auth", "--allowed-host", "Dash.Example")
    try:
        lines, port = _started(process)
        assert "anyone on the network can read the results" in lines[0] and "warning" in lines[0], lines
        assert raw_get(port, "/api/version", "attacker.example")[0] == 421  # DNS rebinding: refused
        assert raw_get(port, "/api/version", f"attacker.example:{port}")[0] == 421
        for host in ("127.0.0.1", f"localhost:{port}", "dash.example", socket.gethostname()):
            assert raw_get(port, "/api/version", host)[0] == 200, host
        # an address written as digits is allowed when it is the one the connection arrived at
        assert raw_get(port, "/api/version", "127.0.0.2", address="127.0.0.2")[0] == 200
        assert raw_get(port, "/api/version", "127.0.0.3", address="127.0.0.2")[0] == 421
        status, _, body = raw_get(port, "/api/version", "attacker.example")
        assert b"--allowed-host" in body
    finally:
        _stop(process)


def test_host_check_on_loopback_refuses_other_and_malformed_names(live):
    port = live.port
    for host in ("attacker.example", "localhost.attacker.example", "[::1", "[::1]x", "localhost:x",
                 "localhost:99999999", "", "a b", "127.0.0.1.nip.io", "\u00e9xample"):
        status, headers, body = raw_get(port, "/api/overview", host)
        assert status == 421, (host, status, body[:200])
        assert json.loads(body)["error"].startswith("421: ") and headers["x-frame-options"] == "DENY"
    assert raw_get(port, "/", None)[0] == 400  # HTTP/1.1 without a Host header: the HTTP parser refuses it
    for host in ("localhost", "LOCALHOST:8050", "localhost.", "[::1]:1", "127.0.0.1:80"):
        assert raw_get(port, "/api/version", host)[0] == 200, host


# --- sessions ----------------------------------------------------------------------------------

def _session(port: int, token: str) -> str:
    status, headers, _ = raw_get(port, f"/runs?token={token}")
    assert status == 303 and headers["location"] == "/runs"
    assert "Max-Age=" in headers["set-cookie"] and "HttpOnly" in headers["set-cookie"]
    return headers["set-cookie"].split(";")[0]


def test_sessions_are_signed_random_and_not_a_hash_of_the_token(db_url, tmp_path):
    token = "s3cret-T"
    serving = LiveServer(ServerConfig(url=parse_url(db_url), runs_dir=tmp_path, port=0, token=token))
    try:
        first, second = _session(serving.port, token), _session(serving.port, token)
        assert first != second and token not in first
        status, headers, _ = raw_get(serving.port, f"//evil.example/x?token={token}&page=2")
        assert status == 303 and headers["location"] == "/evil.example/x?page=2"  # a path here, not another site
        for cookie in (first, second):
            assert raw_get(serving.port, "/api/version", headers={"Cookie": cookie})[0] == 200
        fixed = hashlib.sha256(f"madengine-dashboard:{token}".encode()).hexdigest()  # the cookie before issue 25
        session, expiry, mac = first.split("=", 1)[1].split(".")
        for forged in (fixed, f"{session}.{int(expiry) + 3600}.{mac}", f"x{session}.{expiry}.{mac}", "a.b.c", ""):
            status = raw_get(serving.port, "/api/version", headers={"Cookie": f"madengine_dashboard={forged}"})[0]
            assert status == 401, forged
    finally:
        serving.stop()


def test_a_session_expires(db_url, tmp_path):
    serving = LiveServer(ServerConfig(url=parse_url(db_url), runs_dir=tmp_path, port=0, token="tok", session_s=1))
    try:
        cookie = _session(serving.port, "tok")
        expiry = int(cookie.split(".")[1])
        while time.time() < expiry + 0.2:
            time.sleep(0.1)
        assert raw_get(serving.port, "/api/version", headers={"Cookie": cookie})[0] == 401
        assert raw_get(serving.port, "/api/version", headers={"Authorization": "Bearer tok"})[0] == 200
    finally:
        serving.stop()


def test_a_restart_ends_every_session(db_url):
    token = {"MADENGINE_DASHBOARD_TOKEN": "tok-restart"}
    process = _serve("--db-url", db_url, env=token)
    try:
        port = _started(process)[1]
        cookie = _session(port, "tok-restart")
        assert raw_get(port, "/api/version", headers={"Cookie": cookie})[0] == 200
    finally:
        _stop(process)
    process = _serve("--db-url", db_url, env=token)
    try:
        port = _started(process)[1]
        assert raw_get(port, "/api/version", headers={"Cookie": cookie})[0] == 401
        assert raw_get(port, "/api/version", headers={"Cookie": _session(port, "tok-restart")})[0] == 200
    finally:
        _stop(process)


# --- parameters and the request line -----------------------------------------------------------

@pytest.mark.parametrize("query, name", [
    ("identity=" + "%5B" * 1000, "identity"),
    ("identity=" + "%5B" * 3000 + "%5D" * 3000, "identity"),
    ("since=2026-02-30", "since"),
    ("until=2026-02-29T10:00", "until"),
    ("since=2026-02-03T24:00", "since"),
    ("since=%D9%A2%D9%A0%D9%A2%D9%A6-02-03", "since"),  # Arabic-Indic digits
    ("page=%C2%B2", "page"),
    ("threshold=1e999", "threshold"),
])
def test_every_malformed_parameter_is_400_naming_it(live, query, name):
    for path in (*API, "/", "/trend", "/runs", "/run", "/compare", "/changes"):
        status, _, body = raw_get(live.port, f"{path}?{query}")
        assert status == 400, (path, query, status, body[:300])
        if path.startswith("/api/"):
            error = json.loads(body)["error"]
            assert error.startswith(f"{name}: ") and "\n" not in error, (path, error)
        else:
            assert f"{name}: ".encode() in body, path


def test_an_oversized_url_is_414_over_a_real_socket(live):
    with socket.create_connection(("127.0.0.1", live.port), timeout=60) as sock:
        sock.sendall(b"GET /api/overview?model=" + b"x" * 200_000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(65536)
            assert chunk, answer
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 414 "), answer[:200]
    status, _, body = raw_get(live.port, "/?tag=" + "y" * 200_000)
    assert status == 414 and body.startswith(b"414: the URL is longer than")
    # long, but under the limit: the parameter is judged (400 naming it), the connection stays usable
    status, _, body = raw_get(live.port, "/api/overview?model=" + "x" * 20_000)
    assert status == 400 and json.loads(body)["error"].startswith("model: at most 200 characters")


# --- no query gives a 5xx ----------------------------------------------------------------------

PARAMETERS = ("model", "tag", "status", "gpu_architecture", "executor", "machine", "since", "until", "identity",
              "kind", "run", "old", "new", "threshold", "across", "verdict", "page", "per_page", "token", "other")
IDENTITY = json.dumps(["gpt2", "latency_ms", "", "docker", "AMD", "gfx942", "1", ""])
SPECIAL = ["", "[" * 1000, "]", "[]", IDENTITY, IDENTITY.replace("gpt2", "none"), json.dumps(["x"] * len(IDENTITY_FIELDS)),
           "2026-02-30", "2026-02-03", "2026-02-03T10:00", "2026-02-03 10:00:59", "0000-01-01", "9999-12-31T23:59:59",
           run_id(1), run_id(4), run_id(2), "FAILURE", "success", "regression", "slower", "nan", "inf", "-1", "0",
           "1", "500", "501", "1e999", "3.5%", "999999999", "１", "²", "\x00", "%", "%zz", "a" * 201, "\u202e",
           "<script>", "../../etc/passwd", "{}", "null", '"x"']


def _queries() -> st.SearchStrategy[str]:
    """Query strings: known and unknown names with odd values, repeated names, and raw, badly encoded text."""
    value = st.one_of(st.sampled_from(SPECIAL), st.text(max_size=40), st.text(alphabet="[]{}\",:0123456789-T ",
                                                                               max_size=60))
    pairs = st.lists(st.tuples(st.sampled_from(PARAMETERS), value), max_size=6)
    encoded = pairs.map(lambda items: urllib.parse.urlencode(items))
    raw = st.lists(st.one_of(st.sampled_from(["&", "=", "%", "%ff", "%00", "%5B", "+", ";", "identity=", "since=",
                                              "page=", "run=", "old=", "new="]),
                             st.binary(max_size=8).map(lambda b: urllib.parse.quote_from_bytes(b))), max_size=12)
    return st.one_of(encoded, raw.map("".join))


def _endpoints() -> list[str]:
    """Every route of the application without a path parameter, but the endless event stream; and the
    two folders of files. (Creating the application opens no database.)"""
    from madengine.server.app import create_app

    app = create_app(ServerConfig(url=parse_url("sqlite:///never-opened.db"))).app
    paths = sorted({route.path for route in app.routes if "{" not in route.path and route.path != "/api/events"})
    return paths + ["/files/", "/static/"]


ENDPOINTS = _endpoints()


@pytest.fixture(scope="module")
def servers(live, tmp_path_factory):
    """The dashboard over the history, over a table without rows, and over no database at all."""
    from madengine.database import create_table

    folder = tmp_path_factory.mktemp("empty")
    create_table(f"sqlite:///{folder / 'empty.db'}")
    others = {name: LiveServer(ServerConfig(url=parse_url(f"sqlite:///{folder / file}"), runs_dir=folder, port=0))
              for name, file in (("no rows", "empty.db"), ("missing", "missing.db"))}
    yield {"history": live, **others}
    for serving in others.values():
        serving.stop()


def test_the_fuzzed_endpoints_are_every_route():
    assert {"/", "/api/overview", "/api/compare", "/run", "/changes", "/files/"} <= set(ENDPOINTS)


@settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(database=st.sampled_from(["history", "no rows", "missing"]), path=st.sampled_from(ENDPOINTS),
       name=st.text(max_size=30), fragment=st.booleans(), query=_queries())
@example(database="history", path="/changes", name="", fragment=False, query="model=no-such-model")
@example(database="no rows", path="/runs", name="", fragment=False, query="")
def test_no_query_to_any_endpoint_gives_a_5xx(servers, database, path, name, fragment, query):
    serving = servers[database]
    if path in ("/files/", "/static/"):
        path += urllib.parse.quote(name, safe="/%")
    headers = {"X-Dashboard-Fragment": "1"} if fragment else {}
    status, _, body = raw_get(serving.port, f"{path}?{query}", headers=headers)
    assert status < 500, (path, query, status, body[:500])
    if status == 400 and path.startswith("/api/"):
        error = json.loads(body)["error"]
        assert "\n" not in error and error.split(":")[0] in PARAMETERS, (path, query, error)


# --- the parsers behind them -------------------------------------------------------------------

@settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None)
@given(st.one_of(st.text(max_size=40), st.from_regex(r"\A\[?[0-9a-fA-F:.]{0,20}\]?(:[0-9]{0,6})?\Z"),
                 st.from_regex(r"\A[a-zA-Z0-9._-]{1,20}(:[0-9x]{0,6})?\Z")))
def test_host_names_parse_or_refuse(text):
    from madengine.core.errors import InputError
    from madengine.server.config import host_of_header, normalize_host

    name = host_of_header(text)  # never raises: '' is refused with 421
    assert name == "" or normalize_host(name) == name
    try:
        normalized = normalize_host(text)
    except InputError as exc:
        assert exc.path == "--allowed-host" and "\n" not in str(exc)
    else:
        assert host_of_header(normalized if ":" not in normalized else f"[{normalized}]:8050") == normalized


@settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None)
@given(st.integers(min_value=0, max_value=200), st.characters(codec="ascii"))
def test_a_session_changed_anywhere_is_refused(position, char):
    from madengine.server.access import Sessions

    sessions = Sessions(60)
    cookie = sessions.issue()
    assert sessions.valid(cookie) and not Sessions(60).valid(cookie)  # another process, another secret
    changed = cookie[:position] + char + cookie[position + 1:]
    assert sessions.valid(changed) == (changed == cookie)
