"""Images follow their real inputs (real Docker engine): a tag config reaches the build only through
an ARG the Dockerfile declares, switching configs that do not change the build reuses the image, and
an image a rebuild took the name of is removed unless a container uses it."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from conftest import BASE_IMAGE
from madengine.results import read_rows

pytestmark = pytest.mark.slow


@pytest.fixture
def repo(tmp_path, monkeypatch, docker_client, docker_cleanup):
    """A model repository whose images carry a label of this test only (so counting them is exact
    while other runs use the engine), and whose model names are this test's own."""
    unique = uuid.uuid4().hex[:8]
    root = tmp_path / "repo"
    (root / "docker").mkdir(parents=True)
    (root / "scripts").mkdir()
    label = f"madengine.test=i24-{unique}"
    (root / "docker" / "plain.Dockerfile").write_text(
        f"FROM {BASE_IMAGE}\nLABEL {label}\nRUN echo built > /built\n")
    (root / "docker" / "iters.Dockerfile").write_text(
        f"ARG BASE={BASE_IMAGE}\nFROM ${{BASE}}\nLABEL {label}\nARG OTHER ITERS=1\nRUN echo $ITERS > /iters\n")
    (root / "scripts" / "run.sh").write_text('#!/bin/bash\necho "performance: ${ITERS:-1} it/s"\n')
    models = [{"name": f"plain{unique}", "dockerfile": "docker/plain", "scripts": "scripts/run.sh", "tags": ["p"]},
              {"name": f"iters{unique}", "dockerfile": "docker/iters", "scripts": "scripts/run.sh", "tags": ["i"]}]
    (root / "models.json").write_text(json.dumps(models))
    monkeypatch.chdir(root)
    monkeypatch.delenv("MODEL_DIR", raising=False)
    docker_cleanup.extend([f"ci-plain{unique}", f"ci-iters{unique}"])
    yield root, unique, label
    for image in docker_client.images.list(all=True, filters={"label": label}):
        try:
            docker_client.images.remove(image.id, force=True)
        except Exception:
            pass


def _images(docker_client, label: str) -> list:
    """The top-level images of this test (intermediate layers of the classic builder excluded)."""
    return docker_client.images.list(filters={"label": label})


def _last_build_log(root: Path) -> str:
    row = read_rows(root / "perf.csv")[-1]
    return Path(next(a for a in row["artifacts"].split(",") if a.endswith("build.log"))).read_text()


def test_an_undeclared_tag_config_builds_once_and_leaves_no_untagged_image(repo, cli, docker_client):
    root, unique, label = repo
    model = f"plain{unique}"
    first = cli("run", "--tags", f"{model}:iters=5", "--live-output")
    assert first.code == 0, first
    assert "Step " in first.stderr  # built once
    assert "declares no ARG for, so neither passed nor part of the build inputs: ITERS" in _last_build_log(root)
    second = cli("run", "--tags", model, "--live-output")
    assert second.code == 0, second
    assert "Step " not in second.stderr and "is up to date" in _last_build_log(root)
    third = cli("run", "--tags", f"{model}:iters=7", "--live-output")
    assert third.code == 0 and "Step " not in third.stderr
    rows = read_rows(root / "perf.csv")
    assert [r["performance"] for r in rows] == ["5", "1", "7"]  # the config still reaches the model's env
    assert len({r["image_id"] for r in rows}) == 1
    (image,) = _images(docker_client, label)
    assert image.tags == [f"ci-{model}_plain:latest"]
    assert not docker_client.images.list(filters={"dangling": True, "label": label})


def test_a_declared_arg_rebuilds_and_the_replaced_image_is_removed_unless_a_container_uses_it(
        repo, cli, docker_client):
    root, unique, label = repo
    model = f"iters{unique}"
    assert cli("run", "--tags", f"{model}:iters=5").code == 0
    first = read_rows(root / "perf.csv")[-1]["image_id"]
    assert cli("run", "--tags", f"{model}:iters=6").code == 0
    second = read_rows(root / "perf.csv")[-1]["image_id"]
    assert second != first and "had no other name and was removed" in _last_build_log(root)
    assert [i.id for i in _images(docker_client, label)] == [second]

    holder = docker_client.containers.create(second, ["true"], name=f"i24-holder-{unique}")
    try:
        assert cli("run", "--tags", f"{model}:iters=7").code == 0
        third = read_rows(root / "perf.csv")[-1]["image_id"]
        assert "a container uses it: kept" in _last_build_log(root)
        assert {i.id for i in docker_client.images.list(all=True, filters={"label": label})} >= {second, third}
        assert docker_client.images.get(second).tags == []  # kept for the container, without a name
        # the same inputs again later: found by their hash, nothing rebuilt, nothing removed
        again = cli("run", "--tags", f"{model}:iters=7", "--live-output")
        assert again.code == 0 and "Step " not in again.stderr
        assert read_rows(root / "perf.csv")[-1]["image_id"] == third
    finally:
        holder.remove(force=True)
    assert [r["performance"] for r in read_rows(root / "perf.csv")] == ["5", "6", "7", "7"]


def test_a_context_file_the_dockerignore_excludes_is_not_a_build_input(repo, cli):
    root, unique, _ = repo
    model = f"plain{unique}"
    (root / "docker" / ".dockerignore").write_text("# scratch files\nnotes/\n*.tmp\n")
    assert cli("run", "--tags", model).code == 0
    (root / "docker" / "notes").mkdir()
    (root / "docker" / "notes" / "todo.txt").write_text("not sent to the engine\n")
    (root / "docker" / "scratch.tmp").write_text("neither\n")
    unchanged = cli("run", "--tags", model, "--live-output")
    assert unchanged.code == 0 and "Step " not in unchanged.stderr
    (root / "docker" / "sent.txt").write_text(f"sent {uuid.uuid4()}\n")
    changed = cli("run", "--tags", model, "--live-output")
    assert changed.code == 0 and "Step " in changed.stderr
