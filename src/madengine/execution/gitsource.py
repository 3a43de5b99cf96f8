"""Cloning a model's ``url`` into its work folder on the host side (GitPython)."""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Mapping
from urllib.parse import urlparse

from madengine.catalog.schema import Model
from madengine.core.errors import ExecutionError
from madengine.core.redact import redact


def repo_dir_name(url: str) -> str:
    """Folder name of a clone: the last path segment without ``.git`` (safe characters only)."""
    path = urlparse(url).path if "://" in url else url.split(":", 1)[-1]
    name = posixpath.basename(path.rstrip("/"))
    if name.endswith(".git"):
        name = name[:-4]
    name = re.sub(r"[^A-Za-z0-9._-]", "_", name)
    return name if name and name not in (".", "..") else "repo"


def clone(model: Model, workdir: Path, log_path: Path, root: Path | None = None,
          environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """Clone ``model.url`` into ``workdir/<repo>``; returns (folder name, HEAD commit)."""
    try:
        import git
    except ImportError:
        raise ExecutionError("GitPython is not installed", hint="pip install GitPython") from None
    from madengine.data.credentials import git_environment

    name = repo_dir_name(model.url)
    target = workdir / name
    env, url, cleanup = git_environment(model, root, environ)
    try:
        repo = git.Repo.clone_from(url, target, env=env, multi_options=["--recurse-submodules"])
        commit = repo.head.commit.hexsha
    except git.GitCommandError as exc:
        detail = redact(_git_error(exc.stderr or str(exc)))
        raise ExecutionError(f"git clone of {redact(model.url)} failed: {detail}") from None
    finally:
        cleanup()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"=== madengine: cloned {redact(model.url)} at {commit}\n")
    return name, commit


_GIT_NOISE = ("stderr:", "Cloning into", "Please make sure you have", "and the repository exists")


def _git_error(stderr: str) -> str:
    """git's own message from GitPython's quoted stderr, without the progress and advice lines
    (for SSH the cause, e.g. 'Host key verification failed.', precedes git's 'fatal:' line)."""
    lines = [line.strip() for line in stderr.strip().rstrip("'").splitlines()]
    lines = [line for line in lines if line and not line.startswith(_GIT_NOISE)]
    return " ".join(lines[-2:])
