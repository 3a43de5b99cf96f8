"""``madengine build`` → build manifest → ``madengine run --manifest-file``, against the real Docker
engine; images travel as ``docker save`` archives and through a real registry (Debian's
``docker-registry`` with htpasswd login, started on 127.0.0.1 for the session).

The test image is tiny (bash, sleep and their libraries on ``scratch``) so that saving and
pushing it take a fraction of a second.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import require_service, run_process
from madengine.core.redact import clear_secrets, register_secret
from madengine.results import read_rows

pytestmark = [pytest.mark.docker, pytest.mark.slow]

PREFIX = "ci-mdist"
IMAGE = "ci-mdist_ok_tiny"
TOOLS = ("/bin/bash", "/bin/sleep", "/bin/cat")
MODELS = [
    {"name": "mdist_ok", "dockerfile": "docker/tiny", "scripts": "scripts/mdist/run.sh", "args": "--value 4.5",
     "n_gpus": "0", "tags": ["mdist"]},
    {"name": "mdist_bad", "dockerfile": "docker/broken", "scripts": "scripts/mdist/run.sh", "n_gpus": "0",
     "tags": ["mdist"]},
]


def _copy_with_libraries(binary: str, rootfs: Path) -> None:
    libraries = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    paths = [binary] + [part for line in libraries.splitlines() for part in line.split() if part.startswith("/")]
    for path in paths:
        target = rootfs / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(os.path.realpath(path), target)


@pytest.fixture(scope="session")
def tiny_rootfs(tmp_path_factory) -> Path:
    rootfs = tmp_path_factory.mktemp("tiny") / "rootfs"
    for tool in TOOLS:
        _copy_with_libraries(tool, rootfs)
    return rootfs


@pytest.fixture
def build_repo(tmp_path, monkeypatch, tiny_rootfs, docker_client, docker_cleanup):
    docker_cleanup.append(PREFIX)
    repo = tmp_path / "repo"
    (repo / "scripts" / "mdist").mkdir(parents=True)
    shutil.copytree(tiny_rootfs, repo / "docker" / "rootfs", symlinks=True)
    # a label unique to this test makes an image id no other test (or base image) shares
    (repo / "docker" / "tiny.Dockerfile").write_text(
        f"FROM scratch\nCOPY rootfs/ /\nARG NOTE=none\nLABEL madengine.test={tmp_path.name} note=$NOTE\n")
    (repo / "docker" / "broken.Dockerfile").write_text("FROM scratch\nCOPY does-not-exist /\n")
    (repo / "scripts" / "mdist" / "run.sh").write_text(
        '#!/bin/bash\necho "tiny model $MAD_MODEL_NAME"\necho "performance: $2 items/s"\n')
    (repo / "models.json").write_text(json.dumps(MODELS))
    monkeypatch.chdir(repo)
    monkeypatch.delenv("MODEL_DIR", raising=False)
    yield repo
    for image in docker_client.images.list(filters={"label": f"madengine.test={tmp_path.name}"}):
        try:
            docker_client.images.remove(image.id, force=True)
        except Exception:
            pass


def _manifest(repo: Path, name: str = "build_manifest.json") -> dict:
    return json.loads((repo / name).read_text())


def _remove(docker_client, image_id: str) -> None:
    docker_client.images.remove(image_id, force=True)
    assert not any(i.id == image_id for i in docker_client.images.list(all=True))


def test_build_writes_manifest_and_run_uses_its_images(build_repo, cli, docker_client):
    register_secret("s3cr3t-build-value")
    try:
        built = cli("build", "--tags", "mdist", "-c", json.dumps({"docker_build_arg": {"NOTE": "s3cr3t-build-value"}}))
    finally:
        clear_secrets()
    assert built.code == 1, built  # mdist_bad's build failed
    text = (build_repo / "build_manifest.json").read_text()
    manifest = json.loads(text)
    assert "s3cr3t-build-value" not in text
    (image,) = manifest["images"]
    assert image["model"] == "mdist_ok" and image["image"] == IMAGE and image["image_id"].startswith("sha256:")
    assert image["dockerfile"] == "docker/tiny.Dockerfile" and image["build_args"]["NOTE"] == "******"
    assert image["model_entry"]["args"] == "--value 4.5" and image["built_at"]
    assert manifest["madengine_version"] and manifest["context"]["gpu_vendor"] == "CPU"
    assert [(f["model"], f["image"]) for f in manifest["failed"]] == [("mdist_bad", "ci-mdist_bad_broken")]
    assert "does-not-exist" in manifest["failed"][0]["reason"]
    assert docker_client.images.get(IMAGE).id == image["image_id"]

    result = cli("run", "--manifest-file", "build_manifest.json", "--json")
    assert result.code == 1, result
    assert "building" not in result.stderr  # nothing rebuilt
    rows = {r["model"]: r for r in read_rows(build_repo / "perf.csv")}
    assert rows["mdist_ok"]["status"] == "SUCCESS" and rows["mdist_ok"]["performance"] == "4.5"
    assert rows["mdist_ok"]["image_id"] == image["image_id"] and rows["mdist_ok"]["docker_image"] == IMAGE
    assert rows["mdist_bad"]["status"] == "FAILURE" and rows["mdist_bad"]["reason"].startswith("not built: ")
    assert (build_repo / "build_manifest.json").read_text() == text  # a run never rewrites the manifest


def test_run_only_the_tags_of_the_manifest_and_a_missing_image_is_a_failure_row(build_repo, cli, docker_client):
    assert cli("build", "--tags", "mdist_ok").code == 0
    image_id = _manifest(build_repo)["images"][0]["image_id"]
    _remove(docker_client, image_id)
    result = cli("run", "--manifest-file", "build_manifest.json", "--tags", "mdist_ok")
    assert result.code == 1, result
    (row,) = read_rows(build_repo / "perf.csv")
    assert row["status"] == "FAILURE" and f"image {IMAGE} is missing" in row["reason"]
    assert "give --registry or --image-archive" in row["reason"]


def test_image_archive_carries_the_exact_image(build_repo, cli, docker_client, tmp_path):
    shared = tmp_path / "shared"
    assert cli("build", "--tags", "mdist_ok", "--image-archive", str(shared)).code == 0
    image = _manifest(build_repo)["images"][0]
    assert (shared / image["archive"]).is_file()
    _remove(docker_client, image["image_id"])
    result = cli("run", "--manifest-file", "build_manifest.json", "--image-archive", str(shared))
    assert result.code == 0, result
    (row,) = read_rows(build_repo / "perf.csv")
    assert row["status"] == "SUCCESS" and row["image_id"] == image["image_id"]


def test_manifest_errors_are_bad_input(build_repo, cli):
    missing = cli("run", "--manifest-file", "nope.json")
    assert missing.code == 2 and "build manifest not found" in missing.stderr
    (build_repo / "bad.json").write_text("{\"format\": \"something-else\"}")
    wrong = cli("run", "--manifest-file", "bad.json")
    assert wrong.code == 2 and "not a madengine build manifest" in wrong.stderr
    (build_repo / "ok.json").write_text(json.dumps({"format": "madengine-build-manifest", "format_version": 1,
                                                    "images": [], "failed": []}))
    local = cli("run", "--manifest-file", "ok.json", "--executor", "local")
    assert local.code == 2 and "needs Docker" in local.stderr
    assert cli("build").code == 2


# -- registry ----------------------------------------------------------------------------------
REGISTRY_USER, REGISTRY_PASSWORD = "madtest", "registry-pw-4711"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _htpasswd(user: str, password: str) -> str:
    import bcrypt  # installed with paramiko (test extra)

    return f"{user}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=6)).decode()}\n"


@pytest.fixture(scope="session")
def registry(tmp_path_factory):
    """Debian's docker-registry on 127.0.0.1 with htpasswd login; yields 'host:port'."""
    binary = shutil.which("docker-registry")
    require_service("docker-registry", binary is not None, "apt-get install docker-registry (scripts/ci.d/40-slurm.sh)")
    root = tmp_path_factory.mktemp("registry")
    port = _free_port()
    (root / "htpasswd").write_text(_htpasswd(REGISTRY_USER, REGISTRY_PASSWORD))
    (root / "config.yml").write_text(f"""version: 0.1
log:
  level: error
storage:
  filesystem:
    rootdirectory: {root}/data
http:
  addr: 127.0.0.1:{port}
  secret: madengine-test
auth:
  htpasswd:
    realm: madengine-test
    path: {root}/htpasswd
""")
    with open(root / "registry.log", "ab") as log:
        proc = subprocess.Popen([binary, "serve", str(root / "config.yml")], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1)
        except urllib.error.HTTPError as exc:
            if exc.code == 401:
                break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"docker-registry did not start: {(root / 'registry.log').read_text()[-1000:]}")
        time.sleep(0.1)
    yield f"127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=10)


def test_registry_push_and_pull_by_digest_with_login(build_repo, cli, docker_client, registry):
    creds = {"MADENGINE_REGISTRY_USER": REGISTRY_USER, "MADENGINE_REGISTRY_PASSWORD": REGISTRY_PASSWORD}
    target = f"{registry}/team"
    os.environ.update(creds)
    try:
        built = cli("build", "--tags", "mdist_ok", "--registry", target)
        assert built.code == 0, built
        text = (build_repo / "build_manifest.json").read_text()
        image = json.loads(text)["images"][0]
        assert image["registry_image"].startswith(f"{target}/{IMAGE}@sha256:"), image
        assert REGISTRY_PASSWORD not in text + built.stderr + built.stdout
        assert not [t for i in docker_client.images.list() for t in i.tags if t.startswith(registry)]  # no leftover tag
        _remove(docker_client, image["image_id"])
        result = cli("run", "--manifest-file", "build_manifest.json")
        assert result.code == 0, result
        (row,) = read_rows(build_repo / "perf.csv")
        assert row["status"] == "SUCCESS" and row["image_id"] == image["image_id"]
    finally:
        for name in creds:
            os.environ.pop(name, None)


def test_registry_login_is_checked_before_building(build_repo, registry):
    # the password arrives on stdin, never on a command line
    result = run_process("build", "--tags", "mdist_ok", "--registry", registry, "--password-stdin", cwd=build_repo,
                         env={"MADENGINE_REGISTRY_USER": REGISTRY_USER}, input="wrong-password\n", timeout=120)
    assert result.returncode == 2, result.stderr
    assert "refused the login" in result.stderr and "wrong-password" not in result.stderr
    assert not (build_repo / "build_manifest.json").exists()
