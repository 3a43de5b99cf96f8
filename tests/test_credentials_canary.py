"""A canary secret planted in a model credential (echoed by the model in its container), in a data
provider credential (S3 secret key) and as the git HTTPS password, and a canary user name planted as
the credential's, the S3 access key id and the git HTTPS user, are found in none of: the run's files
(run.log, build.log, perf.csv, perf.html, the email report, artifacts), the CLI's stdout/stderr, the
image's ``docker history --no-trunc`` and ``docker inspect``."""

from __future__ import annotations

import hashlib
import json
import secrets
import subprocess
from pathlib import Path

import pytest

from conftest import run_process
from madengine.results import read_rows
from test_data_servers import GitHttpServer, install_datatests, make_bare_repo, s3_server  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.docker]

IMAGE = "ci-datatests_canary_dummy"


def test_canary_secret_appears_nowhere(model_repo, docker_client, docker_cleanup, s3_server, tmp_path,
                                       monkeypatch):
    docker_cleanup.append("ci-datatests")
    canary = "CANARY-" + secrets.token_hex(12)
    user = "canaryuser_" + secrets.token_hex(8)
    for name in ("DT_CANARY", "MAD_AWS_S3", "PUBLIC_GITHUB_ROCM_KEY"):
        monkeypatch.delenv(name, raising=False)
    bare = make_bare_repo(tmp_path / "git", {"cloned.txt": "canary clone\n"})
    git_server = GitHttpServer(bare.parent, user, canary)
    try:
        folder = install_datatests(model_repo)
        models = json.loads((folder / "models.json").read_text())
        models.append({"name": "canary", "dockerfile": "../../docker/dummy", "scripts": "echo_cred.sh",
                       "url": git_server.url(), "cred": "DT_CANARY", "data": "dt_aws", "tags": ["dt_canary"]})
        (folder / "models.json").write_text(json.dumps(models))
        s3_server.put_tree("dt-canary", {"d/x.txt": b"x\n"})
        (model_repo / "credential.json").write_text(json.dumps({
            "DT_CANARY": {"username": user, "password": canary},
            "MAD_AWS_S3": {"USERNAME": user, "PASSWORD": canary, "AWS_ENDPOINT_URL_S3": s3_server.endpoint},
        }))
        (model_repo / "data.json").write_text(json.dumps({"dt_aws": {"aws": {"path": "s3://dt-canary/d"}}}))
        process = run_process("run", "--tags", "dt_canary", "--executor", "docker", "--live-output", "--json",
                              "--keep-model-dir", cwd=model_repo)
    finally:
        git_server.stop()
    assert process.returncode == 0, process.stderr[-3000:]
    row = read_rows(model_repo / "perf.csv")[-1]
    assert row["status"] == "SUCCESS" and row["data_provider_type"] == "aws"
    log = Path(row["artifacts"].split(",")[0]).read_text()
    assert "cred secret: ******" in log and "clone content: canary clone" in log  # it arrived, masked
    assert "cred user: ******" in log and f"cred user sha256: {_digest(user)}" in log

    for planted in (canary, user):
        assert planted not in process.stdout and planted not in process.stderr
    email = run_process("report", "to-email", "--dir", str(model_repo), "-o", str(model_repo / "email.html"),
                        cwd=model_repo)  # the email report of another part of madengine, when present
    assert canary not in email.stdout + email.stderr and user not in email.stdout + email.stderr
    leaks = [str(p) for p in model_repo.rglob("*") if p.is_file() and p.name != "credential.json"
             and (canary.encode() in p.read_bytes() or user.encode() in p.read_bytes())]
    assert leaks == []
    searched = {p.name for p in model_repo.rglob("*") if p.is_file()}
    assert {"perf.csv", "run.log", "build.log"} <= searched
    if _has_html_reports():
        assert "perf.html" in searched and "email.html" in searched
    for command in (["docker", "history", "--no-trunc", IMAGE], ["docker", "inspect", IMAGE]):
        output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        assert output and canary not in output and user not in output, command


def _digest(text: str) -> str:
    """What echo_cred.sh prints for a user name: the first 16 hex digits of its SHA-256."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def test_credential_user_name_reaches_no_output(model_repo, monkeypatch):
    """Without Docker: a model's credential user name, echoed by the model (run.log, --live-output),
    from credential.json and from an environment override, is masked like its password."""
    user, other = "canaryuser_" + secrets.token_hex(8), "canaryuser_env_" + secrets.token_hex(8)
    folder = install_datatests(model_repo)
    models = json.loads((folder / "models.json").read_text())
    models.append({"name": "users", "scripts": "echo_cred.sh", "cred": "DT_CANARY", "tags": ["dt_users"]})
    (folder / "models.json").write_text(json.dumps(models))
    (model_repo / "credential.json").write_text(json.dumps({"DT_CANARY": {"username": user, "password": "pw-1234"}}))
    for name in ("DT_CANARY", "MAD_AWS_S3", "MAD_MINIO", "PUBLIC_GITHUB_ROCM_KEY"):
        monkeypatch.delenv(name, raising=False)
    for planted, environ in ((user, {}), (other, {"DT_CANARY": json.dumps({"username": other, "password": "pw-5"})})):
        process = run_process("run", "--tags", "dt_users", "--executor", "local", "--live-output", "--json",
                              cwd=model_repo, env=environ)
        assert process.returncode == 0, process.stderr[-3000:]
        log = Path(read_rows(model_repo / "perf.csv")[-1]["artifacts"].split(",")[0]).read_text()
        assert "cred user: ******" in log and f"cred user sha256: {_digest(planted)}" in log  # arrived, masked
        assert planted not in process.stdout + process.stderr and "cred user: ******" in process.stderr
        leaks = [str(p) for p in model_repo.rglob("*")
                 if p.is_file() and p.name != "credential.json" and planted.encode() in p.read_bytes()]
        assert leaks == []


def _has_html_reports() -> bool:
    try:
        import madengine.reports.html  # noqa: F401  (written by another part of madengine)
    except ImportError:
        return False
    return True


# -- passwords inside URLs: data provider endpoints and model urls (no Docker needed) ------------------
def _leaks(folder: Path, canary: str) -> list[str]:
    return [str(p) for p in folder.rglob("*")
            if p.is_file() and p.name not in ("data.json", "models.json") and canary.encode() in p.read_bytes()]


@pytest.mark.parametrize("executor", ["local"])
def test_endpoint_password_reaches_no_output(tmp_path, monkeypatch, executor):
    """A MinIO endpoint ``http://user:<canary>@host`` that cannot be reached: boto quotes the URL in its
    error, which became the FAILURE reason (perf.csv, perf.html), run.log, stderr and --json."""
    from test_data_servers import free_port

    canary = "EPCANARY" + secrets.token_hex(8)
    port = free_port()  # nothing listens there: boto's error quotes the endpoint URL
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "run.sh").write_text("echo 'performance: 1 x'\n")
    (tmp_path / "models.json").write_text(json.dumps([{"name": "ep", "scripts": "s/run.sh", "data": "dep"}]))
    (tmp_path / "data.json").write_text(json.dumps({"dep": {"minio": {
        "path": "s3://bucket/prefix", "endpoint": f"http://minio-user:{canary}@127.0.0.1:{port}",
        "secret_key": canary + "-other"}}}))
    monkeypatch.chdir(tmp_path)
    for name in ("MODEL_DIR", "MAD_AWS_S3"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MAD_MINIO", json.dumps({"USERNAME": "minio-key", "PASSWORD": "minio-secret-1"}))
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    process = run_process("run", "--tags", "ep", "--executor", executor, "--live-output", "--json", cwd=tmp_path)
    assert process.returncode == 1, process.stderr[-3000:]
    row = read_rows(tmp_path / "perf.csv")[-1]
    assert row["status"] == "FAILURE" and "data not available" in row["reason"], row
    assert "http://******:******@127.0.0.1" in row["reason"], row  # the endpoint is named, its user and password not
    for planted in (canary, "minio-user"):
        assert planted not in process.stdout and planted not in process.stderr
    assert json.loads(process.stdout)["results"][0]["status"] == "FAILURE"
    assert (tmp_path / "perf.html").is_file() and _leaks(tmp_path, canary) == []


def test_model_url_password_is_masked_in_every_output(tmp_path, monkeypatch):
    canary = "URLCANARY" + secrets.token_hex(8)
    (tmp_path / "models.json").write_text(json.dumps([
        {"name": "u", "scripts": "s/run.sh", "url": f"https://bob:{canary}@git.example.invalid/r.git",
         "registry_url": f"https://reg-user:{canary}x@registry.example.invalid/v2"}]))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MODEL_DIR", raising=False)
    for argv in (("discover", "--json"), ("discover", "--json", "--pretty"), ("discover",),
                 ("discover", "--tags", f"nope:{canary}")):
        process = run_process(*argv, cwd=tmp_path)
        assert canary not in process.stdout and canary not in process.stderr, argv
    shown = json.loads(run_process("discover", "--json", cwd=tmp_path).stdout)[0]
    assert shown["url"] == "https://bob:******@git.example.invalid/r.git"  # too short to mask as a word
    assert shown["registry_url"] == "https://******:******@registry.example.invalid/v2"  # a user name of a credential
