"""Choosing a model's Dockerfiles for a context.

Candidates are the files ``<dockerfile>.*`` (sorted). A ``# CONTEXT {...}`` line in a candidate's
first lines lists key/values; the candidate is dropped when a key it names is present in the
context (or among its ``extra`` values) with a different value (exact comparison). A candidate
without a header matches every context. No candidate left is an error naming the model: never a
silent success.
"""

from __future__ import annotations

import ast
import dataclasses
import glob
import json
from pathlib import Path
from typing import Any, Mapping

from madengine.context.keys import PASS_THROUGH
from madengine.core.errors import ConfigError, ExecutionError

HEADER_LINES = 5
_MARK = "# CONTEXT"


@dataclasses.dataclass(frozen=True)
class Dockerfile:
    path: Path
    header: dict[str, Any]

    @property
    def stem(self) -> str:
        """``docker/dummy.ubuntu.amd.Dockerfile`` → ``dummy.ubuntu.amd``."""
        name = self.path.name
        return name[: -len(".Dockerfile")] if name.endswith(".Dockerfile") else name


def read_context_header(path: Path) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = [handle.readline() for _ in range(HEADER_LINES)]
    except OSError as exc:
        raise ConfigError(f"cannot read ({exc.strerror})", path=str(path)) from None
    for line in lines:
        stripped = line.strip()
        if stripped.startswith(_MARK):
            text = stripped[len(_MARK):].strip()
            try:
                value = json.loads(text)
            except json.JSONDecodeError:
                try:
                    value = ast.literal_eval(text)
                except (ValueError, SyntaxError):
                    raise ConfigError(f"malformed '# CONTEXT' header: {text!r}", path=str(path),
                                      hint="write # CONTEXT {'gpu_vendor': 'AMD'}") from None
            if not isinstance(value, dict):
                raise ConfigError("'# CONTEXT' header must be a dict", path=str(path))
            return value
    return {}


def matches(header: Mapping[str, Any], context: Mapping[str, Any]) -> bool:
    """Whether no key of ``header`` is in the context with another value; the context's free-form
    ``extra`` values count as keys too (a top-level key wins)."""
    extra = context.get(PASS_THROUGH)
    values = {**extra, **context} if isinstance(extra, Mapping) else context
    return all(key not in values or values[key] == value for key, value in header.items())


def candidates(root: Path, dockerfile: str) -> list[Dockerfile]:
    paths = sorted(Path(p) for p in glob.glob(glob.escape(str(Path(root) / dockerfile)) + ".*") if Path(p).is_file())
    return [Dockerfile(p, read_context_header(p)) for p in paths]


def select_dockerfiles(root: Path, model_name: str, dockerfile: str, context: Mapping[str, Any]) -> list[Dockerfile]:
    """The model's Dockerfiles that match ``context``; raises :class:`ExecutionError` when none do."""
    if not dockerfile:
        raise ExecutionError(f"model '{model_name}' has no 'dockerfile'", hint="add one or use --executor local")
    found = candidates(root, dockerfile)
    if not found:
        raise ExecutionError(f"no Dockerfile matches '{dockerfile}.*' for model '{model_name}'")
    kept = [d for d in found if matches(d.header, context)]
    if not kept:
        names = ", ".join(d.path.name for d in found)
        raise ExecutionError(f"no Dockerfile of model '{model_name}' matches the context (candidates: {names})",
                             hint="check gpu_vendor/guest_os in --additional-context")
    return kept
