"""``scripts/install.sh`` on a fresh clone leaves the host's Python alone, and ``madengine`` works in
a new shell through the link it makes; ``pip install -e .`` into a user's own environment resolves
from the package's ranges.

The system interpreter is the one this test's interpreter was made from (``sys.base_prefix``), as
``python3`` is for install.sh on a fresh host. The link goes into a folder of the test's
(``MADENGINE_BIN_DIR``): the host's own ``/usr/local/bin/madengine`` is never pointed at a clone that
the test then deletes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, docker_engine_available, require_service
from madengine.results import read_rows

pytestmark = pytest.mark.slow


def system_python() -> Path:
    """The interpreter this test's virtual environment was made from."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return Path(sys.base_prefix) / "bin" / version


def host_path() -> str:
    """PATH as a fresh shell has it: the system interpreter's folder first, no virtual environment."""
    venvs = {str(Path(sys.prefix) / "bin")}
    kept = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p not in venvs]
    return os.pathsep.join([str(system_python().parent), *kept])


def freeze(python: Path) -> list[str]:
    """``pip freeze --all`` of ``python``; its distributions read directly where it has no pip (Debian's
    python3 without python3-pip), as .ci/run does."""
    done = subprocess.run([str(python), "-m", "pip", "freeze", "--all"], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        done = subprocess.run([str(python), "-c", "import importlib.metadata as m\nfor d in m.distributions(): "
                               "print(d.metadata['Name'] + '==' + d.version)"], capture_output=True, text=True,
                              timeout=120)
    assert done.returncode == 0, done.stderr
    return sorted(done.stdout.splitlines())


def clone(tmp_path: Path) -> Path:
    target = tmp_path / "clone"
    done = subprocess.run(["git", "clone", "-q", str(REPO), str(target)], capture_output=True, text=True, timeout=300)
    require_service("git clone of this checkout", done.returncode == 0, done.stderr.strip()[-300:])
    return target


def test_install_on_a_fresh_clone_leaves_the_system_python_alone(tmp_path):
    python = system_python()
    require_service("the system interpreter", python.is_file(), f"{python} not found")
    checkout, bin_dir = clone(tmp_path), tmp_path / "bin"
    before = freeze(python)
    env = {**os.environ, "PATH": host_path(), "MADENGINE_BIN_DIR": str(bin_dir)}
    for name in ("VIRTUAL_ENV", "PYTHONPATH", "MADENGINE_VENV", "MADENGINE_PYTHON", "MADENGINE_UNLOCKED"):
        env.pop(name, None)
    done = subprocess.run(["bash", "scripts/install.sh"], cwd=checkout, env=env, capture_output=True, text=True,
                          timeout=3000)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"linked as {bin_dir}/madengine" in done.stderr
    assert freeze(python) == before  # nothing installed, upgraded or removed in the system interpreter
    assert os.readlink(bin_dir / "madengine") == str(checkout / ".venv" / "bin" / "madengine")
    # a new shell: nothing activated, only the link's folder added to a plain PATH. Not a login shell:
    # Debian's /etc/profile resets root's PATH to one with /usr/local/bin, where the link of this
    # machine's own install may answer instead of the clone's
    shell = subprocess.run(["env", "-i", f"HOME={tmp_path}", f"PATH={bin_dir}:/usr/bin:/bin", f"MODEL_DIR={checkout}",
                            "bash", "-c", "cd / && command -v madengine && madengine --version && "
                            "madengine discover --tags examples"],
                           capture_output=True, text=True, timeout=300)
    assert shell.returncode == 0, shell.stderr
    found, version = shell.stdout.splitlines()[:2]
    assert found == str(bin_dir / "madengine")  # the clone's link, nothing else on PATH
    assert version.startswith("madengine 2.") and "numpy_matmul" in shell.stdout
    # the README's first command, in that clone, through the link (its images are this checkout's: found
    # built by their inputs' hash, or built)
    require_service("Docker engine", docker_engine_available(), "run scripts/docker-up.sh")
    run = subprocess.run([str(bin_dir / "madengine"), "run", "--tags", "examples"], cwd=checkout,
                         capture_output=True, text=True, timeout=1800,
                         env={"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path),
                              **{k: v for k, v in os.environ.items() if k.startswith("DOCKER_")}})
    assert run.returncode == 0, run.stderr[-3000:]
    assert {row["status"] for row in read_rows(checkout / "perf.csv")} == {"SUCCESS"}


def test_pip_install_editable_into_a_users_own_environment(tmp_path):
    checkout = clone(tmp_path)
    venv = tmp_path / "mine"
    made = subprocess.run([str(system_python()), "-m", "venv", str(venv)], capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-e", str(checkout)],
                          capture_output=True, text=True, timeout=1200, env={**os.environ, "PATH": host_path()})
    require_service("pip's index (the package's ranges resolve there)", done.returncode == 0,
                    done.stderr.strip()[-400:])
    shown = subprocess.run([str(venv / "bin" / "madengine"), "discover", "--tags", "pyt"], cwd=checkout,
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0 and "pyt_resnet50_train" in shown.stdout, shown.stderr
