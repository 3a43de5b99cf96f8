"""One model's run, start to finish, on any executor: the status rules live here.

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

import dataclasses
import json
import os
import platform
import shutil
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from madengine import __version__
from madengine.catalog import Model
from madengine.context import Context
from madengine.context.detect import nvidia_short_arch
from madengine.core.errors import EngineUnavailable, MadEngineError, interruption
from madengine.core.events import Reporter
from madengine.core.host import Host
from madengine.core.ids import machine_name
from madengine.core.redact import redact
from madengine.core.spec import RunSpec, Step
from madengine.execution.executor import Executor, ImageInfo, Target
from madengine.execution.options import RunOptions
from madengine.execution.plan import copy_tree, model_env, resolve_gpus, script_step
from madengine.execution.streams import LineSink, StepResult, open_log
from madengine.results import PerfRecord, RecordFactory, Status
from madengine.results.parsing import as_number, parse_multiple_results, parse_performance

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
        return values


class ModelRunner:
    """Runs models one at a time on one executor; thread-safe for ``--parallel`` slots (each
    call of :meth:`run_model` keeps its state in locals)."""

    def __init__(self, *, options: RunOptions, context: Context, root: Path, executor: Executor,
                 records: RecordFactory, reporter: Reporter, host: Host, run_id: str,
                 extensions: Sequence[Extension] = ()) -> None:
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

    def note_stop(self, exc: BaseException) -> str:
        """Record the first stop of the run; the reason for the row of the model in flight."""
        stop = Stop.of(exc)
        if self.stopped is None:
            self.stopped = stop
        return stop.reason

    def failure(self, model: Model, reason: str, **values: Any) -> PerfRecord:
        return self.records.failure(model, reason, **values)

    # -- per model ---------------------------------------------------------------------------
    def skip_reason(self, model: Model) -> str | None:
        if self.options.disable_skip_gpu_arch or not model.skip_archs:
            return None
        arch = self.context.gpu_architecture
        names = {arch.lower(), nvidia_short_arch(arch).lower()} if arch else set()
        for skip in model.skip_archs:
            if skip.lower() in names:
                return f"skip_gpu_arch: model is not supported on {arch}"
        return None

    def run_model(self, model: Model, slot: Slot | None = None) -> Iterator[PerfRecord]:
        self.started.add(model.name)
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
            yield from self._run_target(model, target, gpu_ids, slot.cpus if slot else [])

    def _run_target(self, model: Model, target: Target, gpu_ids: list[int], cpus: list[int]) -> Iterator[PerfRecord]:
        facts = RunFacts(docker_file=target.docker_file, docker_image=target.key if target.docker_file else "",
                         n_gpus=str(len(gpu_ids)))
        artifacts_dir = self.run_dir / target.key
        if target.failure:
            yield self.failure(model, target.failure, **facts.values())
            return
        try:
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
        artifacts_dir = self.run_dir / target.key
        try:
            step, script_dir = script_step(model, self.root, model.run_args) if model.scripts else (None, None)
        except MadEngineError as exc:
            yield self.failure(model, str(exc), **facts.values())
            return
        spec = RunSpec(key=target.key, model=model, workdir=artifacts_dir / "work", log_path=artifacts_dir / "run.log",
                       artifacts_dir=artifacts_dir,
                       env=model_env(model, self.context, gpu_ids, self.run_id, self.executor.name, self.host.environ),
                       steps=[step] if step else [], timeout=self.options.timeout_for(model.timeout), gpu_ids=gpu_ids,
                       cpus=cpus, docker_file=target.docker_file,
                       image=facts.image.run_as if facts.image is not None else "")
        started = False
        try:
            self.reporter.message(f"madengine: running {model.name} ({target.key}) with the {self.executor.name} "
                                  "executor")
            self._prepare_workdir(spec, script_dir)
            for extend in self.extensions:
                extend(spec)
            facts.absorb(spec)
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

    def _prepare_workdir(self, spec: RunSpec, script_dir: Path | None) -> None:
        spec.workdir.mkdir(parents=True, exist_ok=True)
        if spec.model.url:
            from madengine.execution.gitsource import clone

            spec.model_cwd, spec.git_commit = clone(spec.model, spec.workdir, spec.log_path)
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
        self._collect(spec, facts)
        if isinstance(outcome, str):
            yield self.failure(spec.model, outcome, **facts.values())
            return
        yield from self._evaluate(spec, outcome, facts)

    def _run_steps(self, spec: RunSpec, facts: RunFacts) -> "StepResult | str":
        """The model step's result, or the reason the steps could not complete."""
        model_result: StepResult | None = None
        with open_log(spec.log_path) as log:
            for step in spec.steps:
                sink = LineSink(log, self._live(spec.key), keep=step.is_model)
                log.write(f"=== madengine step: {step.name}: {' '.join(redact(a) for a in step.argv)}\n")
                log.flush()
                result = self.executor.run_step(spec, step, spec.timeout if step.is_model else None, sink)
                log.write(f"=== madengine step {step.name} ended: exit code {result.exit_code} "
                          f"after {result.duration:.2f} s\n")
                log.flush()
                if step.is_model:
                    model_result = result
                    facts.test_duration = result.duration
                if result.interrupted is not None:
                    return f"{self.note_stop(result.interrupted)} during {step.name}"
                if result.timed_out:
                    return f"timeout: {step.name} ran longer than {spec.timeout} s; container/process killed"
                if result.error:
                    return f"{step.name}: {result.error}"
                if result.exit_code != 0 and not step.is_model:
                    return f"{step.name} failed with exit code {result.exit_code}"
        if model_result is None:
            return "no model step to run"
        return model_result

    def _evaluate(self, spec: RunSpec, result: StepResult, facts: RunFacts) -> Iterator[PerfRecord]:
        model = spec.model
        if result.exit_code != 0:
            cause = f"{result.cause} (exit code {result.exit_code})" if result.cause else \
                f"model script exited with code {result.exit_code}"
            yield self.failure(model, cause, **facts.values())
            return
        if model.multiple_results:
            yield from self._multiple(spec, facts)
            return
        perf = parse_performance(result.output)
        if perf is None:
            yield self.failure(model, "no performance figure: the script printed no 'performance: <number> <metric>' "
                                      "line", **facts.values())
            return
        yield self.records.for_model(model, Status.SUCCESS, performance=perf.value, metric=perf.metric,
                                     **facts.values())

    def _multiple(self, spec: RunSpec, facts: RunFacts) -> Iterator[PerfRecord]:
        model = spec.model
        path = spec.workdir / spec.model_cwd / model.multiple_results
        if not path.is_file():
            path = spec.workdir / model.multiple_results
        try:
            rows = parse_multiple_results(path)
        except MadEngineError as exc:
            yield self.failure(model, f"multiple_results: {exc}", **facts.values())
            return
        if not rows:
            yield self.failure(model, f"multiple_results: {model.multiple_results} has no rows", **facts.values())
            return
        shutil.copy2(path, spec.artifacts_dir / Path(model.multiple_results).name)
        for row in rows:
            number = as_number(row.get("performance", ""))
            values = facts.values()
            values["extra"].update({k: v for k, v in row.items() if k not in ("model", "performance", "metric",
                                                                               "status")})
            record = self.records.for_model(model, Status.SUCCESS, metric=row.get("metric", ""), **values)
            record.model = f"{model.name}_{row.get('model', '')}"
            if number is None:
                record.status, record.reason = Status.FAILURE, "multiple_results row has no performance number"
            else:
                record.performance = number
            yield record

    def _collect(self, spec: RunSpec, facts: RunFacts) -> None:
        """Copy files the steps wrote (``spec.collect`` patterns) into the artifacts folder, then
        run the finalizers; their values go into the row (``extra`` for non-standard names)."""
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
        for finalize in spec.finalizers:
            try:
                facts.add(finalize(spec) or {})
            except MadEngineError as exc:
                facts.extra["finalize_error"] = str(exc)


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
