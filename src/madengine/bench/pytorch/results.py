"""Typed results of ``madengine bench SCRIPT.py`` and of the Python API (no torch import).

:class:`ModelInfo` is what the analysis found about one model (one architecture called with one
input signature); :class:`BuildInfo` its ONNX build; :class:`BackendResult` one backend's
benchmark; :class:`ModelResult` all of it for one model; :class:`ScriptResult` one script;
:class:`ScriptBenchSummary` one command. Every class has ``to_json()``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from madengine.results import PerfRecord, Status


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """One argument of an observed call: a tensor (dtype and shape) or another value (``value``)."""

    name: str
    dtype: str = ""
    shape: tuple[int, ...] = ()
    value: str = ""  # for non-tensor arguments: their signature text

    @property
    def is_tensor(self) -> bool:
        return bool(self.dtype)

    def text(self) -> str:
        if self.is_tensor:
            return f"{self.name}: {self.dtype}[{', '.join(str(d) for d in self.shape)}]"
        return f"{self.name} = {self.value}"

    def to_json(self) -> dict[str, Any]:
        if self.is_tensor:
            return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}
        return {"name": self.name, "value": self.value}


@dataclasses.dataclass
class ModelInfo:
    """One model found by the analysis: an ``nn.Module`` called with one input signature."""

    hash: str
    name: str  # the variable it was called through, or its path under its parent model
    model_class: str
    built_at: str  # file:line where it was constructed ("" when not seen)
    depth: int  # 0 = called by the script; 1 = called inside a depth-0 model; ...
    parent: str  # the enclosing model's hash ("" at depth 0)
    parameters: int
    parameter_bytes: int
    calls: int = 0
    call_time_s: float = 0.0
    inputs: tuple[TensorInfo, ...] = ()
    error: str = ""  # why its calls failed (none succeeded)

    @property
    def ok(self) -> bool:
        return not self.error

    def to_json(self) -> dict[str, Any]:
        return {"hash": self.hash, "name": self.name, "class": self.model_class, "built_at": self.built_at,
                "depth": self.depth, "parent": self.parent, "parameters": self.parameters,
                "parameter_bytes": self.parameter_bytes, "calls": self.calls,
                "call_time_s": round(self.call_time_s, 6), "inputs": [i.to_json() for i in self.inputs],
                "error": self.error}


@dataclasses.dataclass
class BuildInfo:
    """A model's ONNX build in the cache.

    ``status``: ``hit`` (a valid cached build was used), ``built`` (none existed), ``rebuilt`` (the
    cached one was stale: ``reasons``), ``stale`` (stale but used: ``--rebuild never``), ``failed``
    (export or optimisation failed: ``error``).
    """

    name: str
    folder: Path
    status: str
    onnx_path: Path | None = None
    reasons: tuple[str, ...] = ()
    error: str = ""
    timings: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status != "failed" and self.onnx_path is not None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "folder": str(self.folder), "status": self.status,
                "onnx": str(self.onnx_path) if self.onnx_path else None, "reasons": list(self.reasons),
                "error": self.error, "timings": self.timings}


@dataclasses.dataclass
class BackendResult:
    """One backend's benchmark of one model: its perf.csv record, statistics and correctness."""

    backend: str
    record: PerfRecord
    stats: dict[str, Any] | None = None
    correctness: dict[str, Any] | None = None  # vs torch-eager (ORT rows only)

    @property
    def status(self) -> str:
        return self.record.status

    @property
    def ok(self) -> bool:
        return self.record.status == Status.SUCCESS

    @property
    def performance(self) -> Any:
        return self.record.performance

    @property
    def reason(self) -> str:
        return self.record.reason

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "model": self.record.model, "status": self.record.status,
                "reason": self.record.reason, "performance": self.record.performance, "metric": self.record.metric,
                "stats": self.stats, "correctness": self.correctness}


@dataclasses.dataclass
class ModelResult:
    """Everything done with one model: what the analysis found, its build, each backend's result."""

    info: ModelInfo
    perf_model: str  # the perf.csv ``model``: <script stem or name>::<hash>
    build: BuildInfo | None = None
    results: list[BackendResult] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.info.ok and (self.build is None or self.build.ok) and all(r.ok for r in self.results)

    def result(self, backend: str) -> BackendResult | None:
        return next((r for r in self.results if r.backend == backend), None)

    def to_json(self) -> dict[str, Any]:
        return {"model": self.perf_model, **self.info.to_json(), "build": self.build.to_json() if self.build else None,
                "results": [r.to_json() for r in self.results]}


@dataclasses.dataclass
class ScriptResult:
    """One script: its labels, every model the analysis found, and what was done with the selected ones."""

    path: Path
    labels: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    found: list[ModelInfo] = dataclasses.field(default_factory=list)
    models: list[ModelResult] = dataclasses.field(default_factory=list)
    error: str = ""  # the script's own exception, if it raised
    run_time_s: float = 0.0
    failures: list[PerfRecord] = dataclasses.field(default_factory=list)  # script-level FAILURE rows

    @property
    def ok(self) -> bool:
        return not self.error and not self.failures and all(m.ok for m in self.models)

    def to_json(self) -> dict[str, Any]:
        return {"script": str(self.path), "labels": {k: list(v) for k, v in self.labels.items()},
                "error": self.error, "run_time_s": round(self.run_time_s, 6),
                "models": tree_json(self.found),
                "results": [m.to_json() for m in self.models]}


def tree_json(models: list[ModelInfo]) -> list[dict[str, Any]]:
    """The models as a tree: depth-0 models with their sub-models under ``children``."""
    nodes = {m.hash: {**m.to_json(), "children": []} for m in models}
    roots = []
    for model in models:
        parent = nodes.get(model.parent) if model.parent else None
        (parent["children"] if parent is not None else roots).append(nodes[model.hash])
    return roots


@dataclasses.dataclass
class ScriptBenchSummary:
    """One ``madengine bench SCRIPT.py ...`` command (or API call)."""

    run_id: str
    perf_csv: Path | None
    run_dir: Path
    cache_dir: Path
    scripts: list[ScriptResult] = dataclasses.field(default_factory=list)

    @property
    def records(self) -> list[PerfRecord]:
        rows = []
        for script in self.scripts:
            rows += script.failures
            for model in script.models:
                rows += [r.record for r in model.results]
        return rows

    @property
    def ok(self) -> bool:
        return all(s.ok for s in self.scripts)

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "perf_csv": str(self.perf_csv) if self.perf_csv else None,
                "run_dir": str(self.run_dir), "cache_dir": str(self.cache_dir),
                "scripts": [s.to_json() for s in self.scripts]}
