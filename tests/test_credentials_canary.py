"""A canary secret planted in a model credential (echoed by the model in its container), in a data
provider credential (S3 secret key) and as the git HTTPS password is found in none of: the run's
files (run.log, build.log, perf.csv, perf.html, the email report, artifacts), the CLI's stdout/stderr, the image's
``docker history --no-trunc`` and ``docker inspect``."""

from __future__ import annotations

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
    for name in ("DT_CANARY", "MAD_AWS_S3", "PUBLIC_GITHUB_ROCM_KEY"):
        monkeypatch.delenv(name, raising=False)
    bare = make_bare_repo(tmp_path / "git", {"cloned.txt": "canary clone\n"})
    git_server = GitHttpServer(bare.parent, "canary-user", canary)
    try:
        folder = install_datatests(model_repo)
        models = json.loads((folder / "models.json").read_text())
        models.append({"name": "canary", "dockerfile": "../../docker/dummy", "scripts": "echo_cred.sh",
                       "url": git_server.url(), "cred": "DT_CANARY", "data": "dt_aws", "tags": ["dt_canary"]})
        (folder / "models.json").write_text(json.dumps(models))
        s3_server.put_tree("dt-canary", {"d/x.txt": b"x\n"})
        (model_repo / "credential.json").write_text(json.dumps({
            "DT_CANARY": {"username": "canary-user", "password": canary},
            "MAD_AWS_S3": {"USERNAME": "AKIDCANARY", "PASSWORD": canary, "AWS_ENDPOINT_URL_S3": s3_server.endpoint},
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

    assert canary not in process.stdout and canary not in process.stderr
    email = run_process("report", "to-email", "--dir", str(model_repo), "-o", str(model_repo / "email.html"),
                        cwd=model_repo)  # the email report of another part of madengine, when present
    assert canary not in email.stdout + email.stderr
    leaks = [str(p) for p in model_repo.rglob("*")
             if p.is_file() and p.name != "credential.json" and canary.encode() in p.read_bytes()]
    assert leaks == []
    searched = {p.name for p in model_repo.rglob("*") if p.is_file()}
    assert {"perf.csv", "run.log", "build.log"} <= searched
    if _has_html_reports():
        assert "perf.html" in searched and "email.html" in searched
    for command in (["docker", "history", "--no-trunc", IMAGE], ["docker", "inspect", IMAGE]):
        output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        assert output and canary not in output, command


def _has_html_reports() -> bool:
    try:
        import madengine.reports.html  # noqa: F401  (written by another part of madengine)
    except ImportError:
        return False
    return True
