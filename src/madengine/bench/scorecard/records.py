"""A scorecard cell as one perf.csv row: the cell name (backend, and precision when not f32) in the
result identity, the precision the runtime reports in ``training_precision`` (perf.csv's one
precision column) and the versions that computed it in ``framework_versions``, the check's verdict,
the CPU model and flags, and the harness's statistics as extra columns (:data:`SCORECARD_COLUMNS`,
in that order)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from madengine.bench.backends import split_cell
from madengine.bench.columns import environment_columns, latency_columns, set_column, set_reported, significant
from madengine.bench.harness.engine import metric_value
from madengine.bench.harness.inputs import shapes_text
from madengine.results import PerfRecord

if TYPE_CHECKING:
    from madengine.bench.scorecard.card import Cell, ModelCard, ScorecardRequest, ScorecardSummary


def cell_record(card: "ModelCard", cell: "Cell", request: "ScorecardRequest", summary: "ScorecardSummary",
                duration: float) -> PerfRecord:
    from madengine.core.version import __version__
    from madengine.bench.backends import get_backend
    from madengine.bench.runner import gpu_architecture
    from madengine.bench.scorecard.cells import INCONCLUSIVE, RECORD_STATUS, TIMED
    from madengine.core.clock import utc_now
    from madengine.core.ids import machine_name

    vendor = get_backend(split_cell(cell.backend)[0]).device_vendor
    record = PerfRecord(
        model=card.entry.name, status=RECORD_STATUS[cell.status],
        reason="" if cell.status in TIMED else f"{cell.status}: {cell.reason}",
        n_gpus="0" if vendor == "CPU" else "1", args=_args_text(card, cell, request), tags=card.entry.set,
        machine_name=machine_name(), gpu_architecture=gpu_architecture(vendor),
        pipeline=request.environ.get("pipeline", ""), build_number=request.environ.get("BUILD_NUMBER", "0"),
        run_id=summary.run_id, trace_id=summary.trace_id, executor="docker" if summary.image else "scorecard",
        docker_image=summary.image,
        started_at=utc_now(), gpu_vendor=vendor, madengine_version=__version__, command_line=request.command_line,
        test_duration=duration, context={"backend": cell.backend, "reference": card.reference,
                                         "metric": request.metric, "threads": request.threads or "auto"})
    stats = cell.answer.get("stats")
    if cell.status in TIMED and stats:
        value, record.metric = metric_value(stats, request.metric)
        record.performance = significant(value)
    if cell.status == INCONCLUSIVE:
        record.add_warnings([f"output check INCONCLUSIVE: {cell.reason}"])
    set_column(record, "backend", cell.backend)
    set_reported(record, cell.precision, _environment(cell))
    record.extra.update(_columns(card, cell, request))
    return record


def _columns(card: "ModelCard", cell: "Cell", request: "ScorecardRequest") -> dict[str, Any]:
    answer, check = cell.answer, cell.check
    tolerance = cell.tolerance or card.tolerance
    where = environment_columns(_environment(cell))
    columns: dict[str, Any] = {
        "backend_version": answer.get("version", ""), "scorecard_status": cell.status,
        "reference_backend": card.reference,
        "latency_ratio": significant(cell.ratio) if cell.ratio else "",
        "check_output": check.output if check else "",
        "max_abs_error": significant(check.max_abs_error) if check and check.to_json()["max_abs_error"] is not None
        else "",
        "max_rel_error": significant(check.max_rel_error) if check and check.to_json()["max_rel_error"] is not None
        else "",
        "atol": tolerance.atol, "rtol": tolerance.rtol, "operator": cell.operator or "",
        "model_sha256": card.sha256, "cpu_model": where["cpu_model"], "cpu_flags": where["cpu_flags"],
        "threads": request.threads or "auto",
        "batch_size": card.batch_size, "input_shapes": shapes_text(card.shapes), "warmup": request.warmup,
    }
    stats = answer.get("stats")
    if stats:
        columns.update(latency_columns(stats))
    columns["prepare_ms"] = significant(answer.get("prepare_ms", ""))
    columns["first_inference_ms"] = significant(answer.get("first_inference_ms", ""))
    return columns


def _environment(cell: "Cell") -> dict[str, Any]:
    """Where the cell ran (its answer says; empty when its container never answered), or, for a cell
    that never reached a backend, where it would have run (this host, this process)."""
    from madengine.bench.backends import get_backend
    from madengine.bench.backends.cell import environment

    if "environment" in cell.answer:
        return cell.answer["environment"]
    return environment(get_backend(split_cell(cell.backend)[0]))


def _args_text(card: "ModelCard", cell: "Cell", request: "ScorecardRequest") -> str:
    """The settings that define the measured workload, as one perf.csv ``args`` cell."""
    parts = [f"--backend {cell.backend}"]
    parts += [f"--shape {name}={','.join(str(d) for d in dims)}" for name, dims in card.shapes.items()]
    parts.append(f"--warmup {request.warmup}")
    parts.append(f"--iterations {request.iterations}" if request.iterations is not None
                 else f"--min-time {request.min_time if request.min_time is not None else 1.0:g}")
    if request.threads is not None:
        parts.append(f"--threads {request.threads}")
    tolerance = cell.tolerance or card.tolerance
    parts.append(f"--seed {request.seed} --atol {tolerance.atol:g} --rtol {tolerance.rtol:g}")
    return " ".join(parts)
