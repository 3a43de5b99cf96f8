"""Choosing a model's Dockerfiles for a context.

Candidates are the files ``<dockerfile>.*`` (sorted). A ``# CONTEXT {...}`` line in a candidate's
first lines lists key/values; the candidate is dropped when a key it names is present in the
context (or among its ``extra`` values) with a different value (exact comparison). A candidate
without a header matches every context. No candidate left is an error naming the model: never a
silent success.

The keys the headers of a catalog's Dockerfiles name are context keys of that catalog
(:class:`HeaderKeys`): ``{'variant': 'b'}`` is a valid context where a header selects on
``variant``. A header that is not a dict literal with string keys is bad input naming the
Dockerfile and its line.
"""

from __future__ import annotations

import ast
import dataclasses
import glob
import json
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

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


#: the longest header line read (a Dockerfile is a user file: a line without end must not fill memory)
_LINE_LIMIT = 1 << 16
_HEADER_HINT = "write a dict literal, e.g. # CONTEXT {'gpu_vendor': 'AMD'}"
_NOT_A_LITERAL = object()


def read_context_header(path: Path) -> dict[str, Any]:
    """The ``# CONTEXT`` header of a Dockerfile ({} without one); :class:`ConfigError` naming the
    file and line when it is not a dict literal with string keys (parsed as JSON, then with
    ``ast.literal_eval``: never ``eval``)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = [handle.readline(_LINE_LIMIT) for _ in range(HEADER_LINES)]
    except OSError as exc:
        raise ConfigError(f"cannot read ({exc.strerror})", path=str(path)) from None
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if stripped.startswith(_MARK):
            return _header_value(stripped[len(_MARK):].strip(), path, number)
    return {}


def _header_value(text: str, path: Path, line: int) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        try:
            value = ast.literal_eval(text)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            value = _NOT_A_LITERAL
    if value is _NOT_A_LITERAL or not isinstance(value, dict):
        raise ConfigError(f"'# CONTEXT' header is not a dict literal: {text!r}", path=str(path),
                          field=f"line {line}", hint=_HEADER_HINT)
    if not all(isinstance(key, str) for key in value):
        raise ConfigError(f"'# CONTEXT' header keys must be strings: {text!r}", path=str(path), field=f"line {line}",
                          hint=_HEADER_HINT)
    return value


def matches(header: Mapping[str, Any], context: Mapping[str, Any]) -> bool:
    """Whether no key of ``header`` is in the context with another value; the context's free-form
    ``extra`` values count as keys too (a top-level key wins)."""
    extra = context.get(PASS_THROUGH)
    values = {**extra, **context} if isinstance(extra, Mapping) else context
    return all(key not in values or values[key] == value for key, value in header.items())


def _paths(root: Path, dockerfile: str) -> list[Path]:
    return sorted(Path(p) for p in glob.glob(glob.escape(str(Path(root) / dockerfile)) + ".*") if Path(p).is_file())


def candidates(root: Path, dockerfile: str) -> list[Dockerfile]:
    return [Dockerfile(p, read_context_header(p)) for p in _paths(root, dockerfile)]


class HeaderKeys:
    """The context keys a catalog's Dockerfile headers name: a key one of them selects on is a
    valid context key of that catalog.

    The Dockerfiles of the selected models are read at once (a malformed header among them is bad
    input before anything runs); the rest of the catalog's only when a key is looked up that no
    selected one names (an unknown key is rare, a 10,000-model catalog is not), skipping headers
    that do not parse: a broken Dockerfile of a model not run does not fail this run.
    """

    def __init__(self, root: Path, selected: Iterable[str] = (), catalog: Iterable[str] = ()) -> None:
        self.root = Path(root)
        self._selected = {key for dockerfile in _distinct(selected) for d in candidates(self.root, dockerfile)
                          for key in d.header}
        self._catalog = list(catalog)
        self._all: frozenset[str] | None = None

    @classmethod
    def of(cls, catalog: Any, selected: Iterable[Any]) -> "HeaderKeys":
        """The keys of ``catalog`` (its ``root`` and ``models``) for a run of the ``selected`` models."""
        return cls(catalog.root, (model.dockerfile for model in selected),
                   (model.dockerfile for model in catalog.models))

    def __contains__(self, key: object) -> bool:
        return key in self._selected or key in self.all()

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self.all()))

    def __len__(self) -> int:
        return len(self.all())

    def all(self) -> frozenset[str]:
        if self._all is None:
            keys = set(self._selected)
            for dockerfile in _distinct(self._catalog):
                for path in _paths(self.root, dockerfile):
                    try:
                        keys.update(read_context_header(path))
                    except ConfigError:
                        continue
            self._all = frozenset(keys)
        return self._all


def _distinct(dockerfiles: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(d for d in dockerfiles if d))


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
