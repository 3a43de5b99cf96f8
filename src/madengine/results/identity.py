"""What makes two results comparable: the one definition of a result's identity.

A result's identity is ``(model, metric, tag_configs, executor, gpu_vendor, gpu_architecture,
n_gpus, backend)``. Two results with the same identity measure the same thing in the same kind of
environment; anything else is apples and oranges. Reports, charts, ``report compare``,
``report regressions``, the database's ``relative_change`` (its ``identity_key`` column), the
dashboard and the scorecard group by it, never by model name alone. See docs/statistics.md.

* ``tag_configs``: the canonical text of the tag configs a model was selected with
  (``numpy_matmul:size=64:fast`` → ``fast:size=64``), see :func:`tag_configs_text`.
* ``backend``: empty for ``run`` rows; ``onnxruntime-<provider>`` for bench rows, the backend id for
  scorecard rows, ``torch-eager`` for PyTorch eager.
* The environment part (executor, GPU vendor and architecture, n_gpus, backend) may be compared
  across only on request (``report compare --across-environments``), with a warning naming
  :meth:`ResultIdentity.environment_differences`.

Rows written before these columns existed have them empty, which is one identity like any other.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Iterable, Mapping

FIELDS = ("model", "metric", "tag_configs", "executor", "gpu_vendor", "gpu_architecture", "n_gpus", "backend")
ENVIRONMENT_FIELDS = ("executor", "gpu_vendor", "gpu_architecture", "n_gpus", "backend")


def tag_configs_text(pairs: Iterable[tuple[str, str]] | Mapping[str, str]) -> str:
    """The canonical ``tag_configs`` cell: ``k=v`` (bare ``k`` for a flag, i.e. an empty value)
    sorted by key and joined by ``:``; empty when there are none."""
    items = pairs.items() if isinstance(pairs, Mapping) else pairs
    cleaned = sorted((str(key).strip(), "" if value is None else str(value).strip()) for key, value in items)
    return ":".join(f"{key}={value}" if value != "" else key for key, value in cleaned if key)


@dataclasses.dataclass(frozen=True, eq=False)
class ResultIdentity:
    model: str = ""
    metric: str = ""
    tag_configs: str = ""
    executor: str = ""
    gpu_vendor: str = ""
    gpu_architecture: str = ""
    n_gpus: str = ""
    backend: str = ""

    # Equality, order and hash are those of the tuple of the fields (what order=True generates), with
    # the tuple and its hash made once: comparing two runs of thousands of results hashes, looks up
    # and sorts identities tens of thousands of times.
    def __post_init__(self) -> None:
        values = (self.model, self.metric, self.tag_configs, self.executor, self.gpu_vendor,  # FIELDS, in order
                  self.gpu_architecture, self.n_gpus, self.backend)
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_hash", hash(values))

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined]

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values == other._values  # type: ignore[attr-defined]

    def __lt__(self, other: "ResultIdentity") -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values < other._values  # type: ignore[attr-defined]

    def __le__(self, other: "ResultIdentity") -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values <= other._values  # type: ignore[attr-defined]

    def __gt__(self, other: "ResultIdentity") -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values > other._values  # type: ignore[attr-defined]

    def __ge__(self, other: "ResultIdentity") -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values >= other._values  # type: ignore[attr-defined]

    @classmethod
    def from_row(cls, row: Mapping[str, object]) -> "ResultIdentity":
        """The identity of a perf.csv or database row (missing columns count as empty)."""
        return cls(*["" if value is None else str(value).strip() for value in map(row.get, FIELDS)])

    def key(self) -> str:
        """Stable text for grouping and the database's ``identity_key`` column (a JSON array)."""
        return json.dumps([getattr(self, name) for name in FIELDS], ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_key(cls, key: str) -> "ResultIdentity":
        values = json.loads(key)
        return cls(*(str(v) for v in values))

    def comparable_key(self) -> tuple[str, str, str]:
        """What must match even across environments: model, metric and tag configs."""
        return (self.model, self.metric, self.tag_configs)

    def label(self) -> str:
        """For people: ``numpy_matmul [size=64] · docker · CPU x86_64 · 1 GPU``."""
        parts = [self.model + (f" [{self.tag_configs}]" if self.tag_configs else "")]
        if self.executor:
            parts.append(self.executor)
        hardware = " ".join(p for p in (self.gpu_vendor, self.gpu_architecture) if p)
        if hardware:
            parts.append(hardware)
        if self.n_gpus:
            parts.append(f"{self.n_gpus} GPU" if self.n_gpus == "1" else f"{self.n_gpus} GPUs")
        if self.backend:
            parts.append(self.backend)
        return " · ".join(parts)

    def environment(self) -> tuple[str, ...]:
        return tuple(getattr(self, name) for name in ENVIRONMENT_FIELDS)

    def environment_differences(self, other: "ResultIdentity") -> list[str]:
        """Names of the environment fields (not model, metric, tag_configs) that differ."""
        return [name for name in ENVIRONMENT_FIELDS if getattr(self, name) != getattr(other, name)]

    def describe_differences(self, other: "ResultIdentity") -> str:
        """``executor: docker → local, n_gpus: 1 → 8`` (self is the old side)."""
        return ", ".join(f"{name}: {getattr(self, name) or '(none)'} → {getattr(other, name) or '(none)'}"
                         for name in self.environment_differences(other))
