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


@dataclasses.dataclass(frozen=True, order=True)
class ResultIdentity:
    model: str = ""
    metric: str = ""
    tag_configs: str = ""
    executor: str = ""
    gpu_vendor: str = ""
    gpu_architecture: str = ""
    n_gpus: str = ""
    backend: str = ""

    @classmethod
    def from_row(cls, row: Mapping[str, object]) -> "ResultIdentity":
        """The identity of a perf.csv or database row (missing columns count as empty)."""
        values = {}
        for name in FIELDS:
            value = row.get(name)
            values[name] = "" if value is None else str(value).strip()
        return cls(**values)

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
