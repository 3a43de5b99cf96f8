"""One model's run, start to finish, on any executor: the status rules live here (what the model
step's output and exit make of its rows are :mod:`madengine.results.verdict`'s, shared with
Kubernetes).

* SUCCESS only when every step exited 0 and a performance figure was parsed (or, with
  ``multiple_results``, per CSV row with a number);
* FAILURE otherwise, with a short ``reason`` (exit code, timeout, no figure, build failed, image
  missing, data not available, pre/post-script failed, interrupted);
* SKIPPED for ``skip_gpu_arch`` and ``--skip-model-run``.

The runner yields records; the caller (the pipeline) appends each to perf.csv as it comes, so an
interruption or a crash later never loses earlier rows. Data providers, credentials, the ONNX
harness and tools shape a run through *extensions* (callables on the :class:`RunSpec`) that the
pipeline passes in, so execution imports none of them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import platform
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from madengine.core.version import __version__
from madengine.catalog import Model
from madengine.context import Context
from madengine.context.detect import nvidia_short_arch
from madengine.core.errors import CatalogError, EngineUnavailable, MadEngineError, interruption
from madengine.core.events import MODEL, PHASE, RESULT, STEP, Progress, Reporter
from madengine.core.host import Host
from madengine.core.ids import machine_name
from madengine.core.redact import redact
from madengine.core.spec import WORK_FOLDER, RunSpec, Step
from madengine.execution.executor import Executor, ImageInfo, Target
from madengine.execution.options import RunOptions
from madengine.execution.engine import EngineError
from madengine.execution.ranks import (RANKS_FOLDER, collect_rank_logs, job_failure, job_shape, one_node_columns,
                                      still_running)
from madengine.execution.plan import copy_tree, model_env, plan_launch, resolve_gpus, script_step
from madengine.execution.provenance import Probe, load_notes, rounded_load
from madengine.execution.streams import LineSink, StepResult, open_log
from madengine.launch import rank_log_subdir
from madengine.results import PerfRecord, RecordFactory, Status
from madengine.results.record import WARNING_SEPARATOR
from madengine.results.identity import tag_configs_text
from madengine.results.spans import describe_span
from madengine.results.samples import SAMPLES_FILE, write_samples_file
from madengine.tracing import NULL_SPAN, NULL_TRACER, names
from madengine.results.verdict import exit_reason, model_records, read_table, step_reason

ENV_DETAILS_SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "sys_env_details.sh"

#: shapes a run before it starts: data providers, credentials, the ONNX harness, tools
Extension = Callable[[RunSpec], None]
_FIELDS = frozenset(PerfRecord.__dataclass_fields__) - {"extra"}


@dataclasses.dataclass(frozen=True)
class Stop:
    """Why a run stopped before its end: a Ctrl-C or signal, or a Docker engine that went away."""

    reason: str  # 'interrupted', 'interrupted by SIGTERM', 'docker engine unavailable: ...'
    signal: int = 0  # the signal's number (the exit status is 128 + it); 0 for Ctrl-C or the engine
    interrupted: bool = True

    @classmethod
    def of(cls, exc: BaseException) -> "Stop":
        if isinstance(exc, EngineUnavailable):
            return cls(exc.message, interrupted=False)
        return cls(interruption(exc), getattr(exc, "signum", 0))

    def not_run(self) -> str:
        """The reason of a selected model that never started."""
        return f"not run: {self.reason}" if self.interrupted else f"{self.reason} (not run)"


@dataclasses.dataclass
class Repeats:
    """What the model step's runs produced: the kept ones (after the warm-up) in run order."""

    warmup: int = 0
    kept: list[StepResult] = dataclasses.field(default_factory=list)
    #: the ``multiple_results`` rows of each kept run
    tables: list[list[dict[str, str]]] = dataclasses.field(default_factory=list)
    ran: bool = False


@dataclasses.dataclass
class Slot:
    """What a ``--parallel`` scheduler granted one model: its GPUs and CPUs."""

    gpus: list[int] = dataclasses.field(default_factory=list)
    cpus: list[int] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class RunFacts:
    """What one target's run has established so far; every row it yields carries these."""

    docker_file: str = ""
    docker_image: str = ""
    n_gpus: str = ""
    artifacts: list[str] = dataclasses.field(default_factory=list)
    image: ImageInfo | None = None
    test_duration: float | None = None
    git_commit: str = ""
    #: standard columns set by providers, tools and finalizers (dataname, ...)
    columns: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: other columns (tool summaries, harness statistics), appended at the end of perf.csv
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: the model's trace span: the tools' time series become its counter tracks
    span: Any = NULL_SPAN
    #: the software and thread settings of the run (execution.provenance), and the host's load
    probe: Probe = dataclasses.field(default_factory=Probe)
    load_start: float | None = None
    load_end: float | None = None

    def absorb(self, spec: RunSpec) -> None:
        """Row values providers and tools set on the spec (kept even when the run fails later)."""
        for key, value in spec.row_values.items():
            if key in _FIELDS and value not in (None, ""):
                self.columns.setdefault(key, value)
        self.git_commit = spec.git_commit or self.git_commit

    def add(self, produced: dict[str, Any]) -> None:
        for key, value in produced.items():
            if key in _FIELDS:
                self.columns[key] = value
            else:
                self.extra[key] = value

    def values(self) -> dict[str, Any]:
        values: dict[str, Any] = dict(self.columns)
        values.update(docker_file=self.docker_file, docker_image=self.docker_image, n_gpus=self.n_gpus,
                      artifacts=list(self.artifacts), git_commit=self.git_commit, extra=dict(self.extra))
        if self.test_duration is not None:
            values["test_duration"] = self.test_duration
        if self.image is not None:
            values.update(base_docker=self.image.base_docker, docker_sha=self.image.docker_sha,
                          image_id=self.image.image_id, build_duration=self.image.duration)
        values.update(framework_versions=dict(self.probe.frameworks), thread_settings=dict(self.probe.threads),
                      host_load_start=rounded_load(self.load_start), host_load_end=rounded_load(self.load_end),
                      warnings=WARNING_SEPARATOR.join(load_notes(self.load_start, self.load_end)))
        return values


def arch_skip_reason(model: Model, arch: str) -> str | None:
    """Why ``model`` is skipped on GPU architecture ``arch`` (its ``skip_gpu_arch``), or None."""
    names = {arch.lower(), nvidia_short_arch(arch).lower()} if arch else set()
    for skip in model.skip_archs:
        if skip.lower() in names:
            return f"skip_gpu_arch: model is not supported on {arch}"
    return None


class ModelRunner:
    """Runs models one at a time on one executor; thread-safe for ``--parallel`` slots (each
    call of :meth:`run_model` keeps its state in locals)."""

    def __init__(self, *, options: RunOptions, context: Context, root: Path, executor: Executor,
                 records: RecordFactory, reporter: Reporter, host: Host, run_id: str,
                 extensions: Sequence[Extension] = (), tracer: Any = NULL_TRACER) -> None:
        self.options = options
        self.context = context
        self.root = root
        self.executor = executor
        self.records = records
        self.reporter = reporter
        self.host = host
        self.run_id = run_id
        self.run_dir = Path(options.runs_dir) / run_id
        self.extensions = list(extensions)
        #: why the run stopped early (None while it goes on): Ctrl-C, a signal, the engine gone
        self.stopped: Stop | None = None
        #: names of the models whose run began (the others get a "not run" row after a stop)
        self.started: set[str] = set()
        self.tracer = tracer
        #: position (1-based) of each model in the command's selection, and how many there are
        self.positions: dict[str, int] = {}
        self.total = 0
        #: seconds each model took last time (for the ETA), by model name
        self.estimates: dict[str, float] = {}

    def note_stop(self, exc: BaseException) -> str:
        """Record the first stop of the run; the reason for the row of the model in flight."""
        stop = Stop.of(exc)
        if self.stopped is None:
            self.stopped = stop
        return stop.reason

    def failure(self, model: Model, reason: str, **values: Any) -> PerfRecord:
        """A FAILURE row; its artifacts are the files that exist (a run that failed before its
        model started has no run.log to point at)."""
        if values.get("artifacts"):
            values["artifacts"] = [path for path in values["artifacts"] if os.path.exists(path)]
        return self.records.failure(model, reason, **values)

    # -- per model ---------------------------------------------------------------------------
    def skip_reason(self, model: Model) -> str | None:
        if self.options.disable_skip_gpu_arch:
            return None
        return arch_skip_reason(model, self.context.gpu_architecture)

    def run_model(self, model: Model, slot: Slot | None = None) -> Iterator[PerfRecord]:
        """The records of one model, in a ``model`` span, with progress events around them."""
        self.started.add(model.name)
        started = time.monotonic()
        self.reporter.progress(Progress(MODEL, model=_label(model), index=self.positions.get(model.name, 0),
                                        total=self.total, estimate=self.estimates.get(model.name)))
        attributes = {names.ATTR_MODEL: model.name, names.ATTR_TAG_CONFIGS: tag_configs_text(model.tag_configs),
                      names.ATTR_EXECUTOR: self.executor.name}
        with self.tracer.span(names.SPAN_MODEL, attributes) as span:
            for record in self._model_records(model, slot, span):
                describe_span(span, record)
                for warning in record.warning_list():
                    self.reporter.message(f"madengine: warning: {record.model}: {warning}")
                self.reporter.progress(Progress(
                    RESULT, model=_label(model), index=self.positions.get(model.name, 0), total=self.total,
                    status=record.status, seconds=time.monotonic() - started, log=_log_of(record),
                    detail=f"{record.performance} {record.metric}" if record.ok else record.reason))
                yield record

    def _model_records(self, model: Model, slot: Slot | None, span: Any) -> Iterator[PerfRecord]:
        reason = self.skip_reason(model)
        if reason:
            yield self.records.for_model(model, Status.SKIPPED, reason=reason)
            return
        try:
            gpu_ids = slot.gpus if slot and slot.gpus else resolve_gpus(model, self.context)
            targets = self.executor.targets(model)
        except MadEngineError as exc:
            yield self.failure(model, str(exc))
            return
        for target in targets:
            if self.stopped:
                return
            yield from self._run_target(model, target, gpu_ids, slot.cpus if slot else [], span)

    @contextlib.contextmanager
    def _phase(self, model: Model, name: str, attributes: dict[str, Any] | None = None,
               label: str = "") -> Iterator[Any]:
        """One phase of a model's run: a span of the trace and a progress event (none for the image
        and container phases of the local executor, which has neither)."""
        if self.executor.name != "local" or name not in (names.SPAN_IMAGE_BUILD, names.SPAN_CONTAINER_START):
            self.reporter.progress(Progress(PHASE, model=_label(model), index=self.positions.get(model.name, 0),
                                            total=self.total, phase=label or PHASE_LABELS.get(name, name)))
        with self.tracer.span(name, attributes) as span:
            yield span

    def _run_target(self, model: Model, target: Target, gpu_ids: list[int], cpus: list[int],
                    span: Any) -> Iterator[PerfRecord]:
        facts = RunFacts(docker_file=target.docker_file, docker_image=target.key if target.docker_file else "",
                         n_gpus=str(len(gpu_ids)), span=span)
        artifacts_dir = self.run_dir / target.key
        if target.failure:
            yield self.failure(model, target.failure, **facts.values())
            return
        try:
            with self._phase(model, names.SPAN_IMAGE_BUILD, {names.ATTR_IMAGE: target.key}, target.obtaining):
                facts.image = self.executor.obtain_image(target)
        except (KeyboardInterrupt, EngineUnavailable) as exc:
            yield self.failure(model, f"{self.note_stop(exc)} during the image build", **facts.values())
            return
        except MadEngineError as exc:
            facts.artifacts = [str(artifacts_dir / "build.log")]
            yield self.failure(model, str(exc), **facts.values())
            return
        facts.artifacts = [str(artifacts_dir / "run.log")] + \
            ([str(artifacts_dir / "build.log")] if facts.image is not None else [])
        if self.options.skip_model_run:
            yield self.records.for_model(model, Status.SKIPPED, reason="--skip-model-run", **facts.values())
            return
        yield from self._run_spec(model, target, facts, gpu_ids, cpus)

    def _run_spec(self, model: Model, target: Target, facts: RunFacts, gpu_ids: list[int],
                  cpus: list[int]) -> Iterator[PerfRecord]:
        try:
            spec, script_dir = self._new_spec(model, target, facts, gpu_ids, cpus)
        except MadEngineError as exc:
            yield self.failure(model, str(exc), **facts.values())
            return
        started = False
        try:
            self._prepare_workdir(spec, script_dir)
            for extend in self.extensions:
                extend(spec)
            facts.absorb(spec)
            warmup, repeat = self.repetitions(model)
            # --keep-alive keeps a running container to look into, so it never runs one-shot
            spec.one_shot = len(spec.steps) == 1 and spec.steps[0].is_model and warmup + repeat == 1 \
                and not self.options.keep_alive
            facts.probe = self._probe(spec)  # before the model starts: the probe never competes with it
            facts.load_start = self.host.load()
            with self._phase(model, names.SPAN_CONTAINER_START, {names.ATTR_IMAGE: spec.image}):
                self.executor.start(spec)
            started = True
            yield from self._execute(spec, facts)
        except (KeyboardInterrupt, EngineUnavailable) as exc:
            facts.absorb(spec)
            yield self.failure(model, self.note_stop(exc), **facts.values())
        except MadEngineError as exc:
            facts.absorb(spec)
            yield self.failure(model, str(exc), **facts.values())
        finally:
            if started:
                self.executor.stop(spec, self.options.keep_alive)
            if not (self.options.keep_model_dir or self.options.keep_alive):
                shutil.rmtree(spec.workdir, ignore_errors=True)

    def _new_spec(self, model: Model, target: Target, facts: RunFacts, gpu_ids: list[int],
                  cpus: list[int]) -> tuple[RunSpec, Path | None]:
        """The run of ``target`` and the folder of its script; a distributed job's launch on this
        node goes into its environment (``MAD_MULTI_NODE_RUNNER``, ``MASTER_ADDR``, ...) and files."""
        artifacts_dir = self.run_dir / target.key
        # a model with a url may find its script in the clone: looked for once cloned
        step, script_dir = script_step(model, self.root, model.run_args) \
            if model.scripts and not model.url else (None, None)
        spec = RunSpec(key=target.key, model=model, workdir=artifacts_dir / WORK_FOLDER,
                       log_path=artifacts_dir / "run.log",
                       artifacts_dir=artifacts_dir, env={}, steps=[step] if step else [],
                       timeout=self.options.timeout_for(model.timeout), gpu_ids=gpu_ids, cpus=cpus,
                       docker_file=target.docker_file, keep_alive=self.options.keep_alive,
                       image=facts.image.run_as if facts.image is not None else "",
                       results_table=model.multiple_results)
        spec.launch = plan_launch(model, self.context, gpu_ids, self.executor.workspace(spec), self.host.environ)
        spec.env = model_env(model, self.context, gpu_ids, self.run_id, self.executor.name, self.host.environ,
                             spec.launch)
        if spec.launch is not None:
            spec.files.update(spec.launch.files)
            facts.add(job_shape(spec.launch).columns())
            # launchers are Python programs that print their ranks' lines: unbuffered, the node's log is
            # live (--live-output, a hang) and nothing is lost when a launcher must be killed
            spec.env.setdefault("PYTHONUNBUFFERED", "1")
        return spec, script_dir

    def _probe(self, spec: RunSpec) -> Probe:
        """The run's software and thread settings; a probe that fails leaves them empty (said in
        the log), never the run."""
        try:
            probe = self.executor.probe(spec)
        except (MadEngineError, EngineError, OSError) as exc:
            _append_log(spec.log_path, f"=== madengine: the software probe failed: {exc}\n")
            return Probe()
        _append_log(spec.log_path, f"=== madengine: software {json.dumps(probe.frameworks, sort_keys=True)}; "
                                   f"threads {json.dumps(probe.threads, sort_keys=True)} "
                                   f"({'cached' if probe.cached else f'probed in {probe.seconds:.2f} s'})\n")
        return probe

    def _prepare_workdir(self, spec: RunSpec, script_dir: Path | None) -> None:
        spec.workdir.mkdir(parents=True, exist_ok=True)
        for relative, text in spec.files.items():
            path = spec.workdir / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        if spec.launch is not None and spec.launch.rank_log_dir:
            (spec.workdir / rank_log_subdir(spec.launch.node_rank)).mkdir(parents=True, exist_ok=True)
        if spec.model.url:
            from madengine.execution.gitsource import clone

            spec.model_cwd, spec.git_commit = clone(spec.model, spec.workdir, spec.log_path, self.root,
                                                    self.host.environ)
            if spec.model.scripts:
                model_step, script_dir = script_step(spec.model, self.root, spec.model.run_args,
                                                     clone=spec.workdir / spec.model_cwd)
                spec.steps.insert(0, model_step)
        if script_dir is not None:
            copy_tree(script_dir, spec.workdir / spec.model_cwd)
        for step in spec.steps:
            step.cwd = spec.model_cwd
        if self.options.generate_sys_env_details:
            shutil.copy2(ENV_DETAILS_SCRIPT, spec.workdir / ENV_DETAILS_SCRIPT.name)
            spec.steps.insert(0, Step("sys-env-details", ["bash", ENV_DETAILS_SCRIPT.name, "sys_env_details.txt"]))
            spec.collect.append("sys_env_details.txt")
            _write_host_details(spec.artifacts_dir / "host_env_details.txt", self.context)

    def _live(self, key: str) -> Callable[[str], None] | None:
        if not self.options.live_output:
            return None
        return lambda line: self.reporter.output(key, line)

    # -- steps and their results ---------------------------------------------------------------
    def _execute(self, spec: RunSpec, facts: RunFacts) -> Iterator[PerfRecord]:
        """Run the steps, then collect artifacts and finalize before any row is written."""
        outcome = self._run_steps(spec, facts)
        facts.load_end = self.host.load()
        with self._phase(spec.model, names.SPAN_PARSING):
            self._collect(spec, facts)
            records = [self.failure(spec.model, outcome, **facts.values())] if isinstance(outcome, str) \
                else self._evaluate(spec, outcome, facts)
            if spec.launch is not None:
                for record in records:
                    for key, value in one_node_columns(spec.launch, record).items():
                        setattr(record, key, value)
            if isinstance(outcome, Repeats) and len(outcome.kept) > 1:
                write_samples_file(spec.artifacts_dir / SAMPLES_FILE, [r.to_row() for r in records])
        yield from records

    def repetitions(self, model: Model) -> tuple[int, int]:
        """(warm-up runs, kept runs) of the model step: ``--warmup-runs``, then ``--repeat`` or the
        model's ``repeat`` field, else one run."""
        return self.options.warmup_runs, self.options.repeat or model_repeat(model) or 1

    def _run_steps(self, spec: RunSpec, facts: RunFacts) -> "Repeats | str":
        """Every step in order, the model step ``warm-up + repeat`` times in the same container or
        work folder; the kept repeats, or the reason the steps could not complete."""
        warmup, repeat = self.repetitions(spec.model)
        repeats = Repeats(warmup=warmup)
        model_failed = ""  # a model that exits non-zero stops repeating, but its post-scripts still run
        with open_log(spec.log_path) as log:
            for step in spec.steps:
                for n in range(warmup + repeat if step.is_model else 1):
                    result = self._run_step(spec, step, log, repeats, n, warmup)
                    if step.is_model:
                        facts.test_duration = (facts.test_duration or 0.0) + result.duration
                    reason = self._step_failure(spec, step, result, n, warmup + repeat)
                    if reason and step.is_model and result.exit_code not in (None, 0) and not result.timed_out \
                            and result.interrupted is None and not result.error:
                        model_failed, repeats.ran = reason, True
                        break
                    if reason:
                        return reason
                    if step.is_model:
                        repeats.ran = True
                        if n >= warmup:
                            repeats.kept.append(result)
                            if spec.results_table:
                                table = self._table(spec, last=n == warmup + repeat - 1)
                                if isinstance(table, str):
                                    return table
                                repeats.tables.append(table)
        if model_failed:
            return model_failed
        if not repeats.ran:
            return "no model step to run"
        return repeats

    def _run_step(self, spec: RunSpec, step: Step, log: Any, repeats: "Repeats", n: int, warmup: int) -> StepResult:
        sink = LineSink(log, self._live(spec.key), keep=step.is_model)
        command = " ".join(redact(a) for a in step.argv)
        label = step.name if not step.is_model or n == 0 and not warmup else \
            f"{step.name} ({'warm-up ' + str(n + 1) if n < warmup else 'repeat ' + str(n - warmup + 1)})"
        log.write(f"=== madengine step: {label}: {command}\n")
        log.flush()
        attributes: dict[str, Any] = {names.ATTR_STEP: step.name}
        if step.is_model:
            phase = names.SPAN_MODEL_STEP
            attributes[names.ATTR_REPEAT] = n + 1
            attributes["madengine.warmup"] = n < warmup
        else:
            phase = names.SPAN_POST_SCRIPTS if repeats.ran else names.SPAN_PRE_SCRIPTS
        with self._phase(spec.model, phase, attributes) as span, contextlib.ExitStack() as beside:
            for around in spec.around_model if step.is_model else ():
                beside.enter_context(around(spec))
            result = self.executor.run_step(spec, step, spec.timeout if step.is_model else None, sink)
            span.set_attribute(names.ATTR_EXIT_CODE, result.exit_code)
        log.write(f"=== madengine step {label} ended: exit code {result.exit_code} after {result.duration:.2f} s\n")
        log.flush()
        self.reporter.progress(Progress(STEP, model=_label(spec.model), phase=label, detail=command,
                                        seconds=result.duration, status=str(result.exit_code)))
        return result

    def _step_failure(self, spec: RunSpec, step: Step, result: StepResult, n: int, runs: int) -> str:
        """Why the run of ``step`` means the model failed ('' when it goes on)."""
        which = f" (run {n + 1} of {runs})" if runs > 1 else ""
        if result.interrupted is not None:
            stop = f"{self.note_stop(result.interrupted)} during {step.name}{which}"
            running = still_running(result.ranks_running, spec.launch) if spec.launch is not None else ""
            return f"{stop}; {running}" if running else stop
        job = job_failure(spec.launch, spec.workdir, result, f"{step.name}{which}", spec.timeout) \
            if spec.launch is not None and step.is_model else ""
        if job:
            return job
        if result.timed_out:
            return f"timeout: {step.name}{which} ran longer than {spec.timeout} s; container/process killed"
        if result.error:
            return f"{step.name}{which}: {result.error}"
        if result.exit_code != 0:
            if step.is_model:
                return exit_reason(result.exit_code, result.output, which=which, cause=result.cause)
            return step_reason(step.name, result.exit_code, result.cause)
        return ""

    def _table(self, spec: RunSpec, last: bool) -> "list[dict[str, str]] | str":
        """The rows of the ``multiple_results`` CSV (``spec.results_table``) one repeat wrote (its copy
        kept as an artifact)."""
        table = spec.results_table
        path = spec.workdir / spec.model_cwd / table
        if not path.is_file():
            path = spec.workdir / table
        rows = read_table(path, table)
        if isinstance(rows, str):
            return rows
        shutil.copy2(path, spec.artifacts_dir / Path(table).name)
        if not last:
            path.unlink()  # the next repeat must write its own
        return rows

    def _evaluate(self, spec: RunSpec, repeats: "Repeats", facts: RunFacts) -> list[PerfRecord]:
        # one node of several: the job's row merges its nodes' (a figure may come from node 0 alone)
        return model_records(self.records, spec.model, [result.output for result in repeats.kept], facts.values(),
                             tables=repeats.tables, warmup=repeats.warmup, results_table=spec.results_table,
                             figure_optional=spec.launch is not None and spec.launch.nnodes > 1)

    def _collect(self, spec: RunSpec, facts: RunFacts) -> None:
        """Copy files the steps wrote (``spec.collect`` patterns) into the artifacts folder, then
        run the finalizers; their values go into the row (``extra`` for non-standard names)."""
        if spec.launch is not None and spec.workdir.is_dir():
            if collect_rank_logs(spec.workdir, spec.artifacts_dir, spec.launch):
                facts.artifacts.append(str(spec.artifacts_dir / RANKS_FOLDER / f"node-{spec.launch.node_rank}"))
        if spec.workdir.is_dir():
            for pattern in spec.collect:
                for path in sorted(spec.workdir.glob(pattern)):
                    if not path.is_file():
                        continue
                    target = spec.artifacts_dir / path.name
                    try:
                        shutil.copy2(path, target)
                    except OSError as exc:
                        facts.extra.setdefault("collect_errors", []).append(f"{path.name}: {exc.strerror}")
                        continue
                    if str(target) not in facts.artifacts:
                        facts.artifacts.append(str(target))
                    self._counter_tracks(target, facts.span)
        for finalize in spec.finalizers:
            try:
                facts.add(finalize(spec) or {})
            except MadEngineError as exc:
                facts.extra["finalize_error"] = str(exc)

    def _counter_tracks(self, path: Path, span: Any) -> None:
        """A collected tool output that is a time series (the CPU monitor's, the GPU samplers')
        becomes counter tracks of the model's span; other files are not read."""
        if self.tracer.enabled and span.recording:
            from madengine.tracing.convert import tool_counter_tracks

            for track in tool_counter_tracks(path):
                self.tracer.add_counter_track(track, parent=span)


#: what a progress line calls each phase of the trace
PHASE_LABELS = {names.SPAN_IMAGE_BUILD: "building", names.SPAN_CONTAINER_START: "starting",
                names.SPAN_PRE_SCRIPTS: "pre-scripts", names.SPAN_MODEL_STEP: "running",
                names.SPAN_POST_SCRIPTS: "post-scripts", names.SPAN_PARSING: "parsing",
                names.SPAN_DATA_PROVISION: "fetching data"}


def model_repeat(model: Model) -> int | None:
    """The model's own ``repeat`` field (checked before the run by :func:`check_repeat`)."""
    value = model.extra.get("repeat")
    return None if value in (None, "") else int(value)


def check_repeat(model: Model) -> None:
    """A ``repeat`` field that is not a whole number of 1 or more is bad input (exit 2)."""
    value = model.extra.get("repeat")
    if value in (None, ""):
        return
    if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, str) and value.isascii()
                                                                   and value.isdigit())) or int(value) < 1:
        raise CatalogError(f"repeat must be a whole number of 1 or more, got {value!r}", path=model.source,
                           field=f"{model.name}.repeat")


def _label(model: Model) -> str:
    """The model as the user selected it: ``numpy_matmul:size=64``."""
    return model.tagged_name


def _log_of(record: PerfRecord) -> str:
    artifacts = record.artifacts if isinstance(record.artifacts, list) else str(record.artifacts).split(",")
    return next((a for a in artifacts if a.endswith("run.log")), next(iter(artifacts), "") if artifacts else "")


def _append_log(path: Path, text: str) -> None:
    with open_log(path) as log:
        log.write(redact(text))


def _write_host_details(path: Path, context: Context) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"madengine {__version__}", f"platform: {platform.platform()}", f"python: {platform.python_version()}",
             f"machine: {platform.machine()}", f"cpus: {os.cpu_count()}", f"hostname: {machine_name()}",
             "context: " + json.dumps(context.summary(), sort_keys=True)]
    try:
        lines.append("os-release:\n" + Path("/etc/os-release").read_text())
    except OSError:
        pass
    path.write_text(redact("\n".join(lines)) + "\n", encoding="utf-8")
