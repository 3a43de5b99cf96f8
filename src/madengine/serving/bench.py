"""``madengine serve-bench``: the load points of a :class:`ServingPlan` against an endpoint, one
perf.csv row each, appended as each point ends.

The run folder (``madengine_runs/<run id>/``) gets one ``requests_<load point>.jsonl`` per point
(every request: times, tokens, error) and trace.json: a ``madengine.serve_bench`` span, the
readiness wait, a ``serving.load_point`` span per point and a ``serving.request`` span per request.
Rows are made by the :class:`~madengine.results.RecordFactory` (executor ``serve-bench``) with the
columns of :mod:`.columns`; a sweep adds one row whose figure is the highest rate that met the SLO.
"""

from __future__ import annotations

import asyncio
import dataclasses
import platform
import threading
import time
from pathlib import Path
from typing import Any

from madengine.bench.recording import Recording
from madengine.core.clock import utc_now
from madengine.core.events import Reporter
from madengine.results import PerfRecord, Provenance, RecordFactory, Status, append_records
from madengine.results.identity import tag_configs_text
from madengine.results.spans import describe_span
from madengine.serving.columns import METRIC, point_columns, rounded, tag_pairs, workload_pairs
from madengine.serving.plan import (PointResult, ServingPlan, SweepResult, check_plan, output_len_of, require_client,
                                    run_plan)
from madengine.tracing import names
from madengine.tracing.command import finish_tracer, start_tracer, tracer_checkpoint

EXECUTOR = "serve-bench"
SWEEP_METRIC = "slo_rate_req_per_s"


@dataclasses.dataclass(kw_only=True)
class ServeBenchRequest(Recording):
    plan: ServingPlan


@dataclasses.dataclass
class ServeBenchSummary:
    run_id: str
    perf_csv: Path
    run_dir: Path
    records: list[PerfRecord] = dataclasses.field(default_factory=list)
    results: list[PointResult] = dataclasses.field(default_factory=list)
    sweep: SweepResult | None = None
    trace_id: str = ""
    trace: Any = None

    @property
    def failed(self) -> list[PerfRecord]:
        return [r for r in self.records if r.status == Status.FAILURE]

    def to_json(self) -> dict[str, Any]:
        trace = getattr(self.trace, "path", None)
        return {"run_id": self.run_id, "perf_csv": str(self.perf_csv), "run_dir": str(self.run_dir),
                "trace_id": self.trace_id, "trace": str(trace) if trace else None,
                "sweep": None if self.sweep is None else {"best_rate": self.sweep.best_rate,
                                                          "tried": [list(t) for t in self.sweep.tried]},
                "rows": [{"model": r.model, "tag_configs": r.tag_configs, "backend": r.backend, "status": r.status,
                          "reason": r.reason, "performance": r.performance, "metric": r.metric,
                          "columns": dict(r.extra)} for r in self.records]}


def run_serve_bench(request: ServeBenchRequest, reporter: Reporter | None = None,
                    stopped: threading.Event | None = None) -> ServeBenchSummary:
    """Check the plan (exit 2 before any request), then measure every load point into perf.csv."""
    from madengine.core.ids import new_run_id
    from madengine.results.perfcsv import check_writable

    reporter = reporter or Reporter()
    plan = request.plan
    require_client("madengine serve-bench")
    prompts = check_plan(plan)
    check_writable(Path(request.output or "perf.csv"), Path(request.runs_dir))
    run_id = new_run_id()
    summary = ServeBenchSummary(run_id, Path(request.output or "perf.csv"), Path(request.runs_dir) / run_id)
    tracer = start_tracer(request, request.environ, reporter.message, run_id)
    summary.trace_id = tracer.trace_id
    factory = RecordFactory(_provenance(request, run_id, tracer.trace_id), utc_now)
    reporter.message(f"madengine: serve-bench {run_id}: {plan.row_name} at {plan.url}; rows → {summary.perf_csv}")
    started = time.monotonic()

    def record(result: PointResult) -> None:
        row = point_record(factory, plan, result, time.monotonic() - started)
        _append(row, request, summary, tracer, reporter)
        summary.results.append(result)

    try:
        with tracer.span(names.SPAN_SERVE_BENCH, {names.ATTR_RUN_ID: run_id, names.ATTR_EXECUTOR: EXECUTOR}):
            summary.sweep = asyncio.run(run_plan(plan, prompts, summary.run_dir, tracer=tracer, on_result=record,
                                                 message=reporter.message, stopped=stopped))
            if summary.sweep is not None:
                _append(sweep_record(factory, plan, summary.sweep), request, summary, tracer, reporter)
    finally:
        summary.trace = finish_tracer(tracer, request, summary.run_dir, request.environ, reporter.message)
    return summary


def _append(row: PerfRecord, request: ServeBenchRequest, summary: ServeBenchSummary, tracer: Any,
            reporter: Reporter) -> None:
    with tracer.span(names.SPAN_MODEL, {names.ATTR_MODEL: row.model, names.ATTR_TAG_CONFIGS: row.tag_configs,
                                        names.ATTR_BACKEND: row.backend}) as span:
        describe_span(span, row)
        with tracer.span(names.SPAN_RECORDING):
            append_records(summary.perf_csv, [row])
    summary.records.append(row)
    tracer_checkpoint(tracer, request, summary.run_dir, request.environ, reporter.message)
    reporter.message(f"madengine: {row.model} [{row.tag_configs}]: {row.status}"
                     + (f" {row.performance} {row.metric}" if row.ok else f" ({row.reason})"))


def _provenance(request: ServeBenchRequest, run_id: str, trace_id: str) -> Provenance:
    from madengine.core.ids import machine_name

    context = {"server": request.plan.server, "api": request.plan.api, "client": "madengine serve-bench"}
    provenance = Provenance.of(run_id=run_id, executor=EXECUTOR, command_line=request.command_line,
                               environ=request.environ, context=context, machine_name=machine_name(),
                               trace_id=trace_id)
    # the client's machine: the server's hardware is the endpoint's, which a URL does not tell
    return dataclasses.replace(provenance, gpu_vendor="CPU", gpu_architecture=platform.machine())


def plan_columns(plan: ServingPlan) -> dict[str, Any]:
    """The benchmark's settings as columns (the same for every load point of a plan)."""
    output_len = output_len_of(plan)
    return {"server": plan.server, "served_model": plan.model, "endpoint": plan.url, "api": plan.api,
            "input_len": "" if plan.dataset else plan.input_len, "output_len": "" if output_len is None else output_len,
            "prompts": str(plan.dataset) if plan.dataset else "synthetic", "seed": plan.seed,
            "ignore_eos": "true" if plan.ignore_eos else "false", "max_error_rate": plan.max_error_rate}


def workload_of(plan: ServingPlan) -> dict[str, Any]:
    """The plan's workload as :func:`~madengine.serving.columns.workload_pairs` takes it."""
    return {"input_len": plan.input_len, "output_len": output_len_of(plan), "dataset": plan.dataset_label,
            "api": plan.api}


def point_values(plan: ServingPlan, result: PointResult) -> dict[str, Any]:
    """A load point's row as (column → value): status, reason, performance, metric, tag_configs and
    the extra columns. What serve-bench records and a ``serving`` model writes to its results CSV."""
    columns = plan_columns(plan)
    columns.update(point_columns(result.figures, point=result.point, requests=plan.requests, slo_text=plan.slo.text,
                                 slo_met=result.slo_met))
    if result.sweep:
        columns["sweep"] = "slo"
    if result.requests_file is not None:
        columns["requests_file"] = str(result.requests_file)
    pairs = tag_pairs(result.point, **workload_of(plan))
    succeeded = result.figures is not None and result.figures.completed > 0
    return {"status": Status.FAILURE if result.reason else Status.SUCCESS, "reason": result.reason,
            "performance": columns.get(METRIC) if succeeded else None, "metric": METRIC,
            "tag_configs": tag_configs_text(pairs), "extra": columns}


def point_record(factory: RecordFactory, plan: ServingPlan, result: PointResult, duration: float) -> PerfRecord:
    values = point_values(plan, result)
    artifacts = [str(result.requests_file)] if result.requests_file else []
    return factory.new(plan.row_name, values.pop("status"), backend=plan.server, test_duration=duration,
                       args=_args(plan), artifacts=artifacts, n_gpus="0", **values)


def sweep_values(plan: ServingPlan, sweep: SweepResult) -> dict[str, Any]:
    """The sweep's own row: its figure is the highest rate that met the SLO."""
    assert plan.sweep is not None
    pairs = [("sweep", "slo"), *[(k, v) for k, v in (item.split("=") for item in plan.slo.text.split(","))],
             ("attainment", f"{plan.sweep.attainment:g}")]
    pairs += workload_pairs(**workload_of(plan))
    columns = plan_columns(plan) | {"slo": plan.slo.text, "sweep": "slo",
                                    "sweep_rates": ",".join(f"{rate:g}:{'met' if ok else 'missed'}"
                                                            for rate, ok in sweep.tried)}
    best = sweep.best_rate
    return {"status": Status.SUCCESS if best is not None else Status.FAILURE,
            "reason": "" if best is not None else f"no rate met the SLO {plan.slo.text} (from {plan.sweep.start:g} req/s)",
            "performance": rounded(best) if best is not None else None, "metric": SWEEP_METRIC,
            "tag_configs": tag_configs_text(pairs), "extra": columns}


def sweep_record(factory: RecordFactory, plan: ServingPlan, sweep: SweepResult) -> PerfRecord:
    values = sweep_values(plan, sweep)
    return factory.new(plan.row_name, values.pop("status"), backend=plan.server, args=_args(plan), n_gpus="0",
                       **values)


def _args(plan: ServingPlan) -> str:
    """The settings that define the workload, as one ``args`` cell."""
    parts = [f"--api {plan.api}", f"--requests {plan.requests}"]
    parts.append(f"--dataset {plan.dataset}" if plan.dataset else f"--input-len {plan.input_len}")
    if plan.output_len is not None or not plan.dataset:
        parts.append(f"--output-len {output_len_of(plan)}")
    if plan.ignore_eos:
        parts.append("--ignore-eos")
    if plan.slo:
        parts.append(f"--slo {plan.slo.text}")
    parts.append(f"--seed {plan.seed}")
    return " ".join(parts)
