"""The scorecard's data: what was asked (:class:`ScorecardRequest`), one model on one backend at one
precision (:class:`Cell`), one model's row (:class:`ModelCard`), the whole run (:class:`ScorecardSummary`),
and the extra perf.csv columns of a cell's row. Shared by the runner and the records it writes."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from madengine.bench.backends import BACKEND_IDS, split_cell
from madengine.bench.correctness import Tolerance, Verdict
from madengine.bench.harness import precision as numerics
from madengine.bench.harness.engine import DEFAULT_WARMUP
from madengine.bench.harness.inputs import shapes_text
from madengine.bench.recording import Recording
from madengine.bench.runner import trace_file_text
from madengine.bench.scorecard.cells import RECORD_STATUS, STATUSES
from madengine.bench.suite import ModelEntry
from madengine.results import PerfRecord, Status

DEFAULT_REFERENCE = "onnxruntime-cpu-opt-disabled"
#: the latency ratio's denominator
BASELINE = "onnxruntime-cpu-opt-disabled"

#: extra perf.csv columns of a scorecard row, in this order
SCORECARD_COLUMNS = (
    "backend", "backend_version", "scorecard_status", "reference_backend", "latency_ratio",
    "check_output", "max_abs_error", "max_rel_error", "atol", "rtol", "operator", "model_sha256", "cpu_model",
    "cpu_flags", "threads",
    "batch_size", "input_shapes", "warmup", "latency_n", "latency_mean_ms", "latency_stddev_ms", "latency_cv",
    "latency_min_ms", "latency_p50_ms", "latency_p90_ms", "latency_p95_ms", "latency_p99_ms", "latency_max_ms",
    "median_samples_per_second", "inferences_per_second", "samples_per_second", "prepare_ms", "first_inference_ms",
)


@dataclasses.dataclass
class ScorecardRequest(Recording):
    """Everything ``madengine scorecard`` was asked (the CLI's flags, already typed)."""

    suite: str
    backends: list[str] | None = None  # None: each model's own list, else the default backends
    warmup: int = DEFAULT_WARMUP
    iterations: int | None = None
    min_time: float | None = None
    threads: int | None = None
    seed: int = 0
    metric: str = "throughput"
    atol: float | None = None  # for models that set no tolerance of their own
    rtol: float | None = None
    image: str | None = None
    #: the precisions of cells that name none (``--precision``); the reference always runs at f32
    precisions: list[str] = dataclasses.field(default_factory=lambda: [numerics.DEFAULT])


@dataclasses.dataclass
class Cell:
    """One model on one backend at one precision; ``backend`` is the cell's name (``openvino-cpu``,
    ``openvino-cpu:bf16``: :func:`madengine.bench.backends.cell_name`)."""

    backend: str
    status: str
    reason: str = ""
    operator: str | None = None
    is_reference: bool = False
    answer: dict[str, Any] = dataclasses.field(default_factory=dict)  # run_cell's JSON
    check: Verdict | None = None
    ratio: float | None = None
    record: PerfRecord | None = None
    tolerance: Tolerance | None = None  # what the check used (its precision's, see tolerance_for)

    @property
    def p50_ms(self) -> float | None:
        stats = self.answer.get("stats")
        return float(stats["p50_ms"]) if stats else None

    @property
    def precision(self) -> str:
        """What the runtime reports it computed in ("" for a cell that did not run)."""
        return str(self.answer.get("precision") or "")

    @property
    def requested_precision(self) -> str:
        return split_cell(self.backend)[1] or numerics.DEFAULT

    def to_json(self) -> dict[str, Any]:
        answer = self.answer
        return {"backend": self.backend, "status": self.status, "reason": self.reason, "operator": self.operator,
                "reference": self.is_reference, "precision": self.precision,
                "precision_requested": self.requested_precision, "p50_ms": self.p50_ms, "ratio": self.ratio,
                "prepare_ms": answer.get("prepare_ms"), "first_inference_ms": answer.get("first_inference_ms"),
                "version": answer.get("version", ""), "environment": answer.get("environment", {}),
                "stats": answer.get("stats"), "warnings": answer.get("warnings", []),
                "details": answer.get("details", {}), "atol": self.tolerance.atol if self.tolerance else None,
                "rtol": self.tolerance.rtol if self.tolerance else None,
                "check": self.check.to_json() if self.check else None}


@dataclasses.dataclass
class ModelCard:
    """One model's row of the scorecard."""

    entry: ModelEntry
    backends: list[str]
    reference: str
    tolerance: Tolerance
    sha256: str = ""
    shapes: dict[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)
    batch_size: int = 1
    problem: str = ""  # why nothing of this model ran (sha256 mismatch, fetch failure)
    cells: list[Cell] = dataclasses.field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        entry = self.entry
        return {"model": entry.name, "path": str(entry.path), "url": entry.url, "sha256": self.sha256,
                "reference": self.reference, "atol": self.tolerance.atol, "rtol": self.tolerance.rtol,
                "input_shapes": shapes_text(self.shapes), "batch_size": self.batch_size, "problem": self.problem,
                "backends": self.backends, "cells": [cell.to_json() for cell in self.cells]}


@dataclasses.dataclass
class ScorecardSummary:
    run_id: str
    perf_csv: Path
    run_dir: Path
    image: str = ""
    models: list[ModelCard] = dataclasses.field(default_factory=list)
    trace_id: str = ""  #: the trace of the command ("" with --no-trace)
    trace: Any = None  #: how the trace was written (``tracing.FlushResult``)

    @property
    def cells(self) -> list[tuple[ModelCard, Cell]]:
        return [(card, cell) for card in self.models for cell in card.cells]

    @property
    def failed(self) -> list[tuple[ModelCard, Cell]]:
        return [(card, cell) for card, cell in self.cells if RECORD_STATUS[cell.status] == Status.FAILURE]

    @property
    def backends(self) -> list[str]:
        """Every cell name of the run, in a stable order (the grid's columns): by backend, each at
        f32 first, then its other precisions."""
        seen = {cell.backend for _, cell in self.cells}
        order = {name: (BACKEND_IDS.index(split_cell(name)[0]),
                        numerics.PRECISIONS.index(split_cell(name)[1] or numerics.DEFAULT)) for name in seen}
        return sorted(seen, key=lambda name: order[name])

    def counts(self) -> dict[str, int]:
        return {status: sum(1 for _, c in self.cells if c.status == status) for status in STATUSES}

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "perf_csv": str(self.perf_csv), "run_dir": str(self.run_dir),
                "image": self.image, "backends": self.backends, "counts": self.counts(),
                "trace_id": self.trace_id, "trace": trace_file_text(self.trace),
                "models": [card.to_json() for card in self.models]}
