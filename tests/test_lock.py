"""The lock (requirements/py311-linux-x86_64.txt) is what a fresh machine installs, and it still
satisfies every range in pyproject.toml. scripts/test-latest.sh sets MADENGINE_UNLOCKED=1: it
installs the newest releases on purpose, so the first check does not apply there."""

from __future__ import annotations

import os
import platform
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "requirements" / "py311-linux-x86_64.txt"
LOCKED_PLATFORM = sys.version_info[:2] == (3, 11) and platform.system() == "Linux" and platform.machine() == "x86_64"


def locked_versions() -> dict[str, str]:
    pins = re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", LOCK.read_text(), re.MULTILINE)
    return {canonicalize_name(name): version for name, version in pins}


def test_every_lock_entry_is_pinned_with_a_hash():
    entries = re.split(r"\n(?=[A-Za-z0-9])", LOCK.read_text().split("\n", 4)[-1].lstrip("# \n"))
    entries = [entry for entry in entries if entry.strip() and not entry.startswith("#")]
    assert len(entries) == len(locked_versions()) > 50
    for entry in entries:
        assert "==" in entry.splitlines()[0] and "--hash=sha256:" in entry, entry.splitlines()[0]


def _requirements(extras: set[str], project: dict) -> list[Requirement]:
    """pyproject.toml's dependencies and those of the named extras, self-references expanded."""
    wanted, seen, found = list(extras), set(), list(map(Requirement, project["dependencies"]))
    while wanted:
        extra = wanted.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for text in project["optional-dependencies"][extra]:
            requirement = Requirement(text)
            if canonicalize_name(requirement.name) == "madengine":
                wanted.extend(requirement.extras)
            else:
                found.append(requirement)
    return found


def test_the_lock_satisfies_every_range_of_the_package():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    locked = locked_versions()
    for requirement in _requirements({"all", "test"}, project):
        name = canonicalize_name(requirement.name)
        assert name in locked, f"{name} is in pyproject.toml but not in the lock: run scripts/lock.sh"
        assert requirement.specifier.contains(Version(locked[name]), prereleases=True), (
            f"the lock's {name}=={locked[name]} does not satisfy pyproject.toml's {requirement}: run scripts/lock.sh")


@pytest.mark.skipif(os.environ.get("MADENGINE_UNLOCKED") == "1",
                    reason="scripts/test-latest.sh installs the newest releases on purpose "
                           "(CI installs the lock: never set there)")
@pytest.mark.skipif(not LOCKED_PLATFORM,
                    reason="the lock covers CPython 3.11 on Linux x86-64 only (the platform CI runs on)")
def test_installed_versions_are_the_locked_ones():
    """What `pip freeze` would show, for the locked set: scripts/install.sh installed exactly the lock."""
    different = {}
    for name, version in locked_versions().items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            installed = None
        if installed is None or Version(installed) != Version(version):
            different[name] = (version, installed)
    assert not different, f"installed versions differ from the lock (locked, installed): {different}"
