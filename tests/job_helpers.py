"""What the distributed tests share: a mark every rank of a test's jobs carries in its environment
(through the context's ``docker_env_vars``), the check that no process carrying it is left, and a
wait for a condition."""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from pathlib import Path

from conftest import FIXTURES, REPO

MARK_VAR = "MADENGINE_TEST_MARK"


def new_mark() -> str:
    return f"tr-{uuid.uuid4().hex[:12]}"


def marked_context(mark: str, **more) -> dict:
    return {"docker_env_vars": {MARK_VAR: mark}, **more}


def marked_processes(mark: str) -> list[int]:
    """Processes (containers' too, when their engine runs here) whose environment carries ``mark``."""
    needle = f"{MARK_VAR}={mark}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/environ", "rb") as handle:
                    if needle in handle.read():
                        found.append(int(entry))
            except OSError:
                pass
    return found


def assert_no_marked_process(mark: str, wait: float = 10.0) -> None:
    deadline = time.monotonic() + wait  # a process may be exiting, a container being removed
    while marked_processes(mark) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = {pid: _command(pid) for pid in marked_processes(mark)}
    assert not left, f"processes left running: {json.dumps(left)}"


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "?"


def make_torch_repo(repo: Path) -> Path:
    """tests/fixtures/torchrun at ``repo``; under docker its models run in the repository's own torch
    image (docker/pyt, built from the wheels of scripts/pyt-wheels.sh, as the bundled pyt_* models are)."""
    shutil.copytree(FIXTURES / "torchrun", repo)
    (repo / "docker").mkdir()
    shutil.copy2(REPO / "docker" / "pyt.Dockerfile", repo / "docker" / "pyt.Dockerfile")
    models = json.loads((repo / "models.json").read_text())
    for model in models:
        model["dockercontext"] = str(REPO / "wheels" / "pyt")
    (repo / "models.json").write_text(json.dumps(models))
    return repo


def wait_for(condition, timeout: float = 120) -> None:
    """Until ``condition()`` holds; fails the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.2)
