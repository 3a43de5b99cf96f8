"""``madengine run``: select models, check inputs, choose executor and scheduler, record results.

Every record is appended to perf.csv as soon as it exists, so an interruption or a crash later
never loses earlier rows.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterable, Iterator

from madengine.catalog import model_root
from madengine.context import Context, build_context
from madengine.context.dockerfiles import HeaderKeys
from madengine.core.errors import InputError, MadEngineError
from madengine.core.events import FINISH, RESULT, START, Progress, Reporter
from madengine.core.host import Host
from madengine.core.ids import machine_name, new_run_id
from madengine.database.live import LiveRecorder, recorder_url
from madengine.execution import Executor, ModelRunner
from madengine.execution.plan import check_ports
from madengine.pipeline.clean import reap
from madengine.pipeline.executors import choose_executor
from madengine.pipeline.extensions import check_inputs, run_extensions
from madengine.pipeline.requests import RunRequest
from madengine.pipeline.selection import Selection, select
from madengine.results import PerfRecord, Provenance, RecordFactory, RunSummary, append_records
from madengine.results.history import earlier_durations
from madengine.results.perfcsv import check_writable, keep_unrecorded
from madengine.tracing import names
from madengine.tracing.command import finish_tracer, start_tracer, tracer_checkpoint


def run(request: RunRequest, host: Host, reporter: Reporter | None = None) -> RunSummary:
    """Run the models ``request`` selects; every result lands in perf.csv."""
    reporter = reporter or Reporter()
    options = request.run
    if request.transport.manifest_file and options.executor == "local":
        raise InputError("a manifest run runs the manifest's images, which needs Docker", path="--executor",
                         hint="use --executor docker (or auto)")
    selection = select(options.tags, request.transport.manifest_file,
                       Path(options.root) if options.root else model_root(host.environ))
    if any(m.extra.get("serving") is not None for m in selection.models):
        from madengine.serving.models_json import check_executor

        check_executor(selection.models, selection.catalog.root, options.executor)  # before a Slurm job or a pod
    if options.executor == "slurm":
        if not request.slurm.dry_run:
            reap(None, host.environ, reporter)
        return _run_on_slurm(request, host, reporter, selection)
    check_writable(Path(options.output), Path(options.runs_dir))
    db_url = recorder_url(options.db_url, host.environ)
    recorder = LiveRecorder(db_url, host.environ) if db_url is not None else None
    if options.executor == "k8s":
        from madengine.pipeline.kubernetes import run_on_k8s

        reap(None, host.environ, reporter)
        return run_on_k8s(request, host, reporter, selection, _record, recorder)
    run_id = new_run_id()
    run_dir = Path(options.runs_dir) / run_id
    if request.parallel.workers > 1:
        from madengine.distributed.parallel import LockedReporter

        reporter = LockedReporter(reporter)
    tracer = start_tracer(options, host.environ, reporter.message, run_id)
    summary = RunSummary(run_id=run_id, executor=options.executor, perf_csv=Path(options.output), run_dir=run_dir)
    try:
        with tracer.span(names.SPAN_RUN, {names.ATTR_RUN_ID: run_id}) as run_span:
            _run(request, host, reporter, selection, tracer, summary, recorder)
            run_span.set_attribute(names.ATTR_EXECUTOR, summary.executor)
    finally:
        summary.trace = finish_tracer(tracer, options, run_dir, host.environ, reporter.message)
    return summary


def _run(request: RunRequest, host: Host, reporter: Reporter, selection: Selection, tracer: Any,
         summary: RunSummary, recorder: LiveRecorder | None = None) -> None:
    options = request.run
    with tracer.span(names.SPAN_CONTEXT_DETECTION):
        context = build_context(context_file=options.context_file, context_string=options.context_string,
                                catalog_keys=HeaderKeys.of(selection.catalog, selection.models))
    for warning in context.warnings():
        reporter.message(f"madengine: warning: {warning}")
    check_inputs(selection.models, options, context, selection.catalog.root, host.environ)
    executor = choose_executor(options.executor, selection, request.build, request.transport, context=context,
                               run_dir=summary.run_dir, host=host, reporter=reporter)
    summary.executor = executor.name
    try:
        check_ports(selection.models, context, executor.name, host.environ)
    except InputError:
        _close(executor, summary, reporter)
        raise
    # what runs whose madengine process is gone left (a SIGKILL): removed now, and said
    cleaned = reap(getattr(executor, "client", None), host.environ, reporter)
    if cleaned.leftovers:
        summary.details["leftovers"] = [leftover.to_json() for leftover in cleaned.leftovers]
    records = RecordFactory(Provenance.of(run_id=summary.run_id, executor=executor.name,
                                          command_line=host.command_line, environ=host.environ,
                                          context=_provenance_context(context), machine_name=machine_name(),
                                          trace_id=tracer.trace_id), host.now)
    runner = ModelRunner(options=options, context=context, root=selection.catalog.root, executor=executor,
                         records=records, reporter=reporter, host=host, run_id=summary.run_id,
                         extensions=run_extensions(selection.models, options, context, selection.catalog.root,
                                                   executor.name, reporter, host.environ, tracer),
                         tracer=tracer)
    runner.total = len(selection.models)
    runner.positions = {m.name: i for i, m in enumerate(selection.models, start=1)}
    runner.estimates = earlier_durations(Path(options.output), [m.name for m in selection.models])
    reporter.message(f"madengine: run {summary.run_id}: {len(selection.models)} model(s), {executor.name} "
                     f"executor, {context.gpu_vendor} host ({context.gpu_architecture}); results → {options.output}")
    reporter.progress(Progress(START, total=runner.total, estimate=sum(runner.estimates.values()) or None))
    started = time.monotonic()
    try:
        try:
            for record in _schedule(runner, selection, request.parallel.workers):
                with tracer.span(names.SPAN_RECORDING):
                    _record(summary, record, reporter, recorder)
                tracer_checkpoint(tracer, options, summary.run_dir, host.environ, reporter.message)
        except KeyboardInterrupt as exc:  # between models: the one in flight already has its row
            runner.note_stop(exc)
        _record_not_run(summary, runner, selection, reporter, recorder)
    finally:
        _close(executor, summary, reporter)
        reporter.progress(Progress(FINISH, total=runner.total, seconds=time.monotonic() - started))
    if runner.stopped is not None and runner.stopped.interrupted:
        summary.interrupted, summary.signal = runner.stopped.reason, runner.stopped.signal


def _record_not_run(summary: RunSummary, runner: ModelRunner, selection: Selection, reporter: Reporter,
                    recorder: LiveRecorder | None = None) -> None:
    """After a stop, every selected model that never started gets its row: nothing is a silent gap."""
    if runner.stopped is None:
        return
    for model in selection.models:
        if model.name not in runner.started:
            record = runner.records.failure(model, runner.stopped.not_run())
            _record(summary, record, reporter, recorder)
            reporter.progress(Progress(RESULT, model=model.name, index=runner.positions.get(model.name, 0),
                                       total=runner.total, status=record.status, detail=record.reason))


def _close(executor: Executor, summary: RunSummary, reporter: Reporter) -> None:
    left = executor.close()
    if left:
        summary.details["containers_left"] = left
        them = "it" if len(left) == 1 else "them"
        reporter.message(f"madengine: warning: the Docker engine did not answer in time to remove {', '.join(left)}; "
                         f"'madengine clean' removes {them} once it answers again (or: docker rm -f {' '.join(left)})")
    release_images(executor)


def release_images(executor: Any) -> None:
    """Once the run's containers are gone, the images rebuilds replaced while a container held
    them are removed (an image source that builds has a ``close``; manifest images have none)."""
    close = getattr(getattr(executor, "images", None), "close", None)
    if close is not None:
        close()


def _provenance_context(context: Context) -> dict:
    summary = context.summary()
    summary.setdefault("gpu_vendor", context.gpu_vendor)
    return summary


def _schedule(runner: ModelRunner, selection: Selection, workers: int) -> Iterable[PerfRecord]:
    """Records in the order they finish: one model after another, or up to ``workers`` at once."""
    if workers > 1:
        from madengine.distributed.parallel import run_parallel

        return run_parallel(runner, selection.models, workers)
    return _sequential(runner, selection)


def _sequential(runner: ModelRunner, selection: Selection) -> Iterator[PerfRecord]:
    for model in selection.models:
        yield from runner.run_model(model)
        if runner.stopped:
            return


def _record(summary: RunSummary, record: PerfRecord, reporter: Reporter, recorder: LiveRecorder | None = None) -> None:
    """Append the row to perf.csv now; if it cannot be written there (a full disk, a read-only or
    immutable file, a folder in its place), keep it as JSON in the run folder and say where and how
    to add it later, and the run fails. Then (``--db-url``) into the results database; a database
    that is down is one warning, never the run's result."""
    summary.records.append(record)
    try:
        append_records(summary.perf_csv, [record])
    except (OSError, MadEngineError) as exc:
        why = exc.message if isinstance(exc, MadEngineError) else exc.strerror or str(exc)
        _keep(summary, record, reporter, why)
        return
    if recorder is not None:
        warning = recorder.record(record.to_row(), str(summary.perf_csv))
        if warning:
            reporter.message(warning)


def _keep(summary: RunSummary, record: PerfRecord, reporter: Reporter, why: str) -> None:
    """A row perf.csv did not take: in ``unrecorded/``, or (nowhere to keep it) on stderr whole."""
    kept = keep_unrecorded(summary.run_dir, record)
    summary.unrecorded.append(str(kept) if kept else "")
    where = f"kept in {kept}" if kept else \
        f"it could not be kept anywhere; the row: {json.dumps(record.to_row(), separators=(',', ':'))}"
    reporter.message(f"madengine: error: the row of {record.model} could not be written to {summary.perf_csv} "
                     f"({why}); {where}")


def _run_on_slurm(request: RunRequest, host: Host, reporter: Reporter, selection: Selection) -> RunSummary:
    """Each task is a ``slurm_task`` span of this run's trace, and its own trace (written on its
    node) merges into the job folder's trace.json."""
    from madengine.distributed.slurm import SlurmRun, run_on_slurm

    tracer = start_tracer(request.run, host.environ, reporter.message, "slurm")
    summary = None
    try:
        with tracer.span(names.SPAN_RUN, {names.ATTR_EXECUTOR: "slurm"}):
            summary = run_on_slurm(SlurmRun(run=request.run, build=request.build, transport=request.transport,
                                            slurm=request.slurm, catalog=selection.catalog, models=selection.models,
                                            command_line=host.command_line, tracer=tracer), reporter, host)
    finally:
        if summary is not None and not request.slurm.dry_run:
            summary.trace = finish_tracer(tracer, request.run, summary.run_dir, host.environ, reporter.message)
    return summary
