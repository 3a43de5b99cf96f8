"""Credentials: credential.json and environment overrides, model ``cred`` variables, and git clones
with credentials over HTTP (git http-backend behind basic auth) and SSH (a real sshd).

Runs use the local executor; the container path is covered by test_credentials_canary.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from madengine.catalog import Model
from madengine.core.redact import redact
from madengine.data.credentials import credential_env, git_environment, is_ssh_url, load_credentials
from madengine.results import read_rows
from test_data_servers import GitHttpServer, install_datatests, make_bare_repo, sshd_server  # noqa: F401

pytestmark = pytest.mark.slow


@pytest.fixture
def repo(model_repo, monkeypatch):
    install_datatests(model_repo)
    for name in ("DT_CANARY", "PUBLIC_GITHUB_ROCM_KEY", "MAD_AWS_S3", "NAS_NODES"):
        monkeypatch.delenv(name, raising=False)
    return model_repo


def write_json(path: Path, data) -> None:
    path.write_text(json.dumps(data, indent=1))


def add_model(repo: Path, **entry) -> None:
    path = repo / "scripts" / "datatests" / "models.json"
    models = json.loads(path.read_text())
    models.append({"dockerfile": "../../docker/dummy", "scripts": "echo_cred.sh", **entry})
    write_json(path, models)


def run_local(cli, repo: Path, *argv: str):
    result = cli("run", "--executor", "local", *argv)
    rows = read_rows(repo / "perf.csv") if (repo / "perf.csv").is_file() else []
    return result, rows


def last_line(result) -> str:
    return result.stderr.strip().splitlines()[-1]


def model_log(row: dict) -> str:
    return Path(row["artifacts"].split(",")[0]).read_text()


# -- credential.json and the environment ------------------------------------------------------------
@pytest.mark.parametrize("content, message", [
    ('{"DT_CANARY": {"username": "u",', "credential.json: malformed JSON at line 1"),
    ('["DT_CANARY"]', "credential.json: must hold a JSON object keyed by credential name, got a list"),
    ('{"DT_CANARY": "s3cr3t-value"}', "credential.json: DT_CANARY: must be a JSON object, got a string"),
    ('{"DT_CANARY": {"username": "u", "password": 1234567}}',
     "credential.json: DT_CANARY.password: must be a string, got a number"),
    ('{"OTHER": {"username": "u", "password": "p4ssword"}}',
     "credential.json: credential 'DT_CANARY' of model 'datatests/cred' is not defined"),
])
def test_bad_credential_file_is_a_one_line_error(repo, cli, content, message):
    (repo / "credential.json").write_text(content)
    result, rows = run_local(cli, repo, "--tags", "dt_cred")
    assert result.code == 2, result
    assert rows == []  # nothing ran
    assert last_line(result).startswith(f"madengine: error: {message}")
    assert "Traceback" not in result.stderr and "s3cr3t-value" not in result.stderr


@pytest.mark.parametrize("variable, value, data_json, message", [
    ("MAD_AWS_S3", '["k", "s"]', {"dt_aws": {"aws": {"path": "s3://b/p"}}},
     "credential.json: MAD_AWS_S3: must be a JSON object, got a list"),
    ("NAS_NODES", [{"HOST": "h", "PORT": "ssh", "USERNAME": "u"}], {"dt_nas": {"nas": {"path": "/x"}}},
     "credential.json: NAS_NODES[0].PORT: must be a port number"),
])
def test_bad_provider_credentials_in_the_file_are_one_line_errors(repo, cli, variable, value, data_json, message):
    write_json(repo / "data.json", data_json)
    (repo / "credential.json").write_text(json.dumps({variable: json.loads(value) if isinstance(value, str) else value}))
    tag = next(iter(data_json))
    result, _rows = run_local(cli, repo, "--tags", tag)
    assert result.code == 2, result
    assert last_line(result).startswith(f"madengine: error: {message}")


def test_environment_variable_overrides_the_file_and_bad_json_there_is_named(repo, cli, monkeypatch):
    write_json(repo / "credential.json", {"DT_CANARY": {"username": "fileuser", "password": "file-password-1"}})
    monkeypatch.setenv("DT_CANARY", json.dumps({"username": "envuser", "password": "env-password-2"}))
    result, rows = run_local(cli, repo, "--tags", "dt_cred")
    assert result.code == 0, result
    log = model_log(rows[-1])
    envuser = hashlib.sha256(b"envuser").hexdigest()[:16]  # the user name is masked: its digest says which
    assert "cred user: ******" in log and f"cred user sha256: {envuser}" in log and "cred secret: ******" in log
    assert "env-password-2" not in log and "file-password-1" not in log

    monkeypatch.setenv("DT_CANARY", "{'username': 'python-dict'}")
    result, _rows = run_local(cli, repo, "--tags", "dt_cred")
    assert result.code == 2
    assert last_line(result).startswith("madengine: error: environment variable DT_CANARY: malformed JSON")


def test_cred_entry_becomes_upper_cased_environment_variables():
    env = credential_env("AMD_GITHUB", {"username": "u", "password": "p", "token": "t", "port": 22, "flag": True})
    assert env == {"AMD_GITHUB_USERNAME": "u", "AMD_GITHUB_PASSWORD": "p", "AMD_GITHUB_TOKEN": "t",
                   "AMD_GITHUB_PORT": "22"}


def test_loading_credentials_registers_secrets_and_user_names_not_places(tmp_path):
    path = tmp_path / "credential.json"
    write_json(path, {"A": {"username": "some-user", "password": "pw-123456"},
                      "B": {"user": "other-user", "password": "pw-654321"},
                      "C": {"username": "root", "password": "pw-777777"},
                      "NAS_NODES": [{"HOST": "nas.example", "USERNAME": "nasuser", "PASSWORD": "nas-pass-1"}],
                      "MAD_MINIO": {"USERNAME": "mkey", "PASSWORD": "minio-pass", "MINIO_ENDPOINT": "http://m:9000"}})
    load_credentials(path, environ={})
    assert redact("some-user other-user nasuser mkey pw-123456 nas-pass-1 minio-pass nas.example http://m:9000") == \
        "****** ****** ****** ****** ****** ****** ****** nas.example http://m:9000"
    # a name every system has tells nothing, and masking it would mask ordinary text
    assert redact("cd /root && git status") == "cd /root && git status"


def test_a_user_name_from_an_environment_override_is_masked(tmp_path):
    environ = {"DT_CANARY": json.dumps({"username": "env-only-user", "password": "env-pass-4321"})}
    load_credentials(tmp_path / "absent.json", environ=environ).model_entry("DT_CANARY", "m")
    assert redact("login env-only-user with env-pass-4321") == "login ****** with ******"


def test_github_key_supplies_https_credentials_through_askpass(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MODEL_DIR", raising=False)
    monkeypatch.setenv("PUBLIC_GITHUB_ROCM_KEY", "ghp_bare-token-value")
    model = Model(name="m", url="https://github.com/ROCm/example.git")
    env, url, cleanup = git_environment(model)
    try:
        assert url == model.url  # never rewritten with credentials
        assert env["MADENGINE_GIT_PASSWORD"] == "ghp_bare-token-value"
        script = Path(env["GIT_ASKPASS"])
        assert stat.S_IMODE(script.parent.stat().st_mode) == 0o700
        assert "ghp_bare-token-value" not in script.read_text()
        answer = subprocess.run([str(script), "Password for 'https://x@github.com': "], env={**os.environ, **env},
                                capture_output=True, text=True).stdout
        assert answer == "ghp_bare-token-value\n"
        assert redact("token ghp_bare-token-value") == "token ******"
    finally:
        cleanup()
    assert not script.exists()
    other = Model(name="o", url="https://gitlab.example.com/x.git")
    assert git_environment(other)[0] == {"GIT_TERMINAL_PROMPT": "0"}  # the GitHub key is for github.com only


def test_ssh_url_detection():
    assert is_ssh_url("git@github.com:ROCm/x.git") and is_ssh_url("ssh://git@host:2222/x.git")
    assert not is_ssh_url("https://github.com/ROCm/x.git") and not is_ssh_url("/srv/git/x.git")
    assert not is_ssh_url("file:///srv/git/x.git")


# -- git over HTTP with basic auth ---------------------------------------------------------------------
@pytest.fixture
def git_http(tmp_path):
    bare = make_bare_repo(tmp_path / "git", {"cloned.txt": "from the http remote\n"})
    server = GitHttpServer(bare.parent, "gituser", "http-pass-9876")
    yield server
    server.stop()


def leftover_askpass_dirs() -> set[str]:
    import tempfile

    return {p.name for p in Path(tempfile.gettempdir()).glob("madengine-git-*")}


def test_https_clone_with_cred_and_wrong_password_fails_clearly(repo, cli, git_http):
    before = leftover_askpass_dirs()
    add_model(repo, name="cloned_http", url=git_http.url(), cred="DT_CANARY", tags=["dt_http"])
    write_json(repo / "credential.json", {"DT_CANARY": {"username": "gituser", "password": "http-pass-9876"}})
    result, rows = run_local(cli, repo, "--tags", "dt_http")
    assert result.code == 0, result
    row = rows[-1]
    assert row["status"] == "SUCCESS" and len(row["git_commit"]) == 40
    log = model_log(row)
    assert "clone content: from the http remote" in log and "http-pass-9876" not in log

    write_json(repo / "credential.json", {"DT_CANARY": {"username": "gituser", "password": "wrong-pass-5555"}})
    result, rows = run_local(cli, repo, "--tags", "dt_http")
    assert result.code == 1
    reason = rows[-1]["reason"]
    assert reason.startswith(f"git clone of {git_http.url()} failed: ") and "Authentication failed" in reason
    assert "wrong-pass-5555" not in reason + result.stderr + (repo / "perf.csv").read_text()
    assert git_http.failed_logins >= 1
    assert leftover_askpass_dirs() <= before  # the askpass folder is removed after each clone


def test_clone_that_needs_auth_without_cred_fails_instead_of_prompting(repo, cli, git_http):
    add_model(repo, name="anonymous", url=git_http.url(), tags=["dt_anon"])
    result, rows = run_local(cli, repo, "--tags", "dt_anon")
    assert result.code == 1
    assert "git clone of" in rows[-1]["reason"]


# -- git over SSH ---------------------------------------------------------------------------------------
@pytest.mark.sshd
def test_ssh_clone_uses_the_key_and_checks_the_host_key(repo, cli, sshd_server, tmp_path):
    bare = make_bare_repo(tmp_path / "git", {"cloned.txt": "from the ssh remote\n"})
    url = f"ssh://{sshd_server.user}@127.0.0.1:{sshd_server.port}{bare}"
    add_model(repo, name="cloned_ssh", url=url, cred="DT_CANARY", tags=["dt_ssh"])
    entry = {"username": sshd_server.user, "password": "unused-pass-1", "ssh_key_file": str(sshd_server.client_key),
             "known_hosts_file": str(sshd_server.known_hosts)}
    write_json(repo / "credential.json", {"DT_CANARY": entry})
    result, rows = run_local(cli, repo, "--tags", "dt_ssh")
    assert result.code == 0, result
    assert "clone content: from the ssh remote" in model_log(rows[-1])

    stranger = tmp_path / "stranger_known_hosts"
    stranger.write_text("")
    write_json(repo / "credential.json", {"DT_CANARY": {**entry, "known_hosts_file": str(stranger)}})
    result, rows = run_local(cli, repo, "--tags", "dt_ssh")
    assert result.code == 1
    assert "Host key verification failed" in rows[-1]["reason"]

    other_key = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other_key)], check=True)
    write_json(repo / "credential.json", {"DT_CANARY": {**entry, "ssh_key_file": str(other_key)}})
    result, rows = run_local(cli, repo, "--tags", "dt_ssh")
    assert result.code == 1
    assert "Permission denied" in rows[-1]["reason"]

    other_key.chmod(0o644)
    result, _rows = run_local(cli, repo, "--tags", "dt_ssh")
    assert result.code == 2
    assert last_line(result).startswith("madengine: error: credential.json: DT_CANARY: ssh_key_file: key file")
    assert "chmod 600" in last_line(result)


def test_password_inline_in_the_url_goes_through_askpass_not_argv(repo, cli, git_http):
    url = git_http.url().replace("http://", "http://gituser:http-pass-9876@")
    add_model(repo, name="inline", url=url, tags=["dt_inline"], scripts="../dummy/run.sh")
    result, rows = run_local(cli, repo, "--tags", "dt_inline", "--keep-model-dir")
    assert result.code == 0, result
    row = rows[-1]
    assert "http://******:******@127.0.0.1" in model_log(row)  # the URL as logged, its user masked too
    config = next((repo / "madengine_runs").rglob("models/.git/config")).read_text()
    assert "http-pass-9876" not in config and f"gituser@127.0.0.1:{git_http.port}" in config


def test_user_names_beside_a_password_are_masked_wherever_they_come_from(tmp_path):
    """A registry login and a URL with a password in it (a model's, a data provider's): the
    account name is masked like the password (not the common names every system has). A database
    URL's user stays readable: the database commands name it when the server refuses it."""
    from madengine.core.redact import clear_secrets, register_url_secrets
    from madengine.distributed.transport import registry_auth

    clear_secrets()
    registry_auth({"MADENGINE_REGISTRY_USER": "reg-dave", "MADENGINE_REGISTRY_PASSWORD": "pw-7654"})
    register_url_secrets("see https://url-erin:pw-8765@git.example/r.git and https://public-user@host/")
    register_url_secrets("https://root:pw-9876@git.example/r.git")
    assert redact("reg-dave url-erin public-user root") == "****** ****** public-user root"
    clear_secrets()
