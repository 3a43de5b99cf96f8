"""The run pipeline: selected models → builds → runs → perf rows.

Every result is appended to perf.csv as soon as it exists, so an interruption or a crash later
never loses earlier rows. Status rules:

* SUCCESS only when every step exited 0 and a performance figure was parsed (or, with
  ``multiple_results``, per CSV row with a number);
* FAILURE otherwise, with a short ``reason`` (exit code, timeout, no figure, build failed, image
  missing, data not available, pre/post-script failed, interrupted);
* SKIPPED for ``skip_gpu_arch`` and ``--skip-model-run``.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any, Iterator

from madengine import __version__
from madengine.catalog import Catalog, Model, load_catalog, select_models
from madengine.context import Context, build_context, select_dockerfiles
from madengine.context.detect import nvidia_short_arch
from madengine.core.clock import utc_now
from madengine.core.errors import ExecutionError, MadEngineError
from madengine.core.ids import machine_name, new_run_id
from madengine.core.redact import redact
from madengine.core.events import Reporter
from madengine.execution.options import RunOptions
from madengine.execution.plan import (RunSpec, Step, image_key, local_key, model_env,
                                      resolve_gpus, script_step, copy_tree, tag_config_vars)
from madengine.execution.streams import LineSink, StepResult, open_log
from madengine.results import PerfRecord, Status, append_records, parse_performance
from madengine.results.parsing import as_number, parse_multiple_results

ENV_DETAILS_SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "sys_env_details.sh"


@dataclasses.dataclass
class RunSummary:
    run_id: str
    executor: str
    perf_csv: Path
    run_dir: Path
    records: list[PerfRecord] = dataclasses.field(default_factory=list)
    interrupted: bool = False

    @property
    def failed(self) -> list[PerfRecord]:
        return [r for r in self.records if r.status == Status.FAILURE]

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "executor": self.executor, "perf_csv": str(self.perf_csv),
            "run_dir": str(self.run_dir), "interrupted": self.interrupted,
            "counts": {s: sum(1 for r in self.records if r.status == s) for s in Status.ALL},
            "results": [{"model": r.model, "status": r.status, "performance": r.performance, "metric": r.metric,
                         "reason": r.reason, "docker_image": r.docker_image, "test_duration": r.test_duration}
                        for r in self.records],
        }


def choose_executor(options: RunOptions, reporter: Reporter):
    """The executor the options ask for; ``auto`` is docker when an engine answers, else local."""
    from madengine.core.errors import ServiceError
    from madengine.execution.local import LocalExecutor

    if options.executor == "local":
        return LocalExecutor()
    if options.executor in ("docker", "auto"):
        from madengine.execution.docker import DockerExecutor, connect

        try:
            client = connect()
        except ServiceError:
            if options.executor == "docker":
                raise
            reporter.message("madengine: no Docker engine answers; running models with the local executor")
            return LocalExecutor()
        return DockerExecutor(client, pull=options.pull, no_cache=options.clean_docker_cache)
    raise ExecutionError(f"unknown executor '{options.executor}'", hint="use docker, local or slurm")


class Runner:
    """Runs selected models one after another on one executor; yields records as they finish."""

    def __init__(self, options: RunOptions, context: Context, catalog: Catalog, executor: Any,
                 reporter: Reporter, run_id: str) -> None:
        self.options = options
        self.context = context
        self.catalog = catalog
        self.root = catalog.root
        self.executor = executor
        self.reporter = reporter
        self.run_id = run_id
        self.run_dir = Path(options.runs_dir) / run_id
        self._interrupted = False

    # -- records -----------------------------------------------------------------------------
    def base_record(self, model: Model, **values: Any) -> PerfRecord:
        record = PerfRecord(
            model=model.name, n_gpus=values.pop("n_gpus", model.n_gpus), training_precision=model.training_precision,
            pipeline=_env("pipeline"), args=model.run_args, tags=",".join(model.tags),
            machine_name=machine_name(), gpu_architecture=self.context.gpu_architecture,
            build_number=_env("BUILD_NUMBER", "0"), additional_docker_run_options=model.additional_docker_run_options,
            run_id=self.run_id, executor=self.executor.name, started_at=utc_now(), gpu_vendor=self.context.gpu_vendor,
            context=self.context.summary(), madengine_version=__version__, command_line=self.options.command_line,
        )
        for key, value in values.items():
            setattr(record, key, dict(value) if key == "extra" else value)
        return record

    def failure(self, model: Model, reason: str, **values: Any) -> PerfRecord:
        return self.base_record(model, status=Status.FAILURE, reason=redact(reason), **values)

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

    def run_model(self, model: Model) -> Iterator[PerfRecord]:
        reason = self.skip_reason(model)
        if reason:
            yield self.base_record(model, status=Status.SKIPPED, reason=reason)
            return
        try:
            gpu_ids = resolve_gpus(model, self.context)
        except MadEngineError as exc:
            yield self.failure(model, str(exc))
            return
        if self.executor.name == "docker":
            yield from self._run_docker(model, gpu_ids)
        else:
            key = local_key(model.name)
            yield from self._run_spec(model, key, gpu_ids, image="", docker_file="", build=None)

    def _run_docker(self, model: Model, gpu_ids: list[int]) -> Iterator[PerfRecord]:
        try:
            dockerfiles = select_dockerfiles(self.root, model.name, model.dockerfile, self.context.values)
        except MadEngineError as exc:
            yield self.failure(model, str(exc))
            return
        for dockerfile in dockerfiles:
            if self._interrupted:
                return
            key = image_key(model.name, dockerfile.stem)
            docker_file = _relative(dockerfile.path, self.root)
            build_args = self.build_args(model)
            context_dir = (self.root / model.dockercontext) if model.dockercontext else dockerfile.path.parent
            try:
                build = self.obtain_image(model, key, dockerfile.path, context_dir, build_args)
            except KeyboardInterrupt:
                self._interrupted = True
                yield self.failure(model, "interrupted during the image build", docker_file=docker_file,
                                   docker_image=key)
                return
            except MadEngineError as exc:
                yield self.failure(model, str(exc), docker_file=docker_file, docker_image=key,
                                   artifacts=[str(self.run_dir / key / "build.log")])
                continue
            yield from self._run_spec(model, key, gpu_ids, image=key, docker_file=docker_file, build=build)

    def obtain_image(self, model: Model, key: str, dockerfile: Path, context_dir: Path,
                     build_args: dict[str, str]) -> Any:
        """The image to run for one Dockerfile of a model: built now (a manifest run looks it up)."""
        self.reporter.message(f"madengine: building {key} from {_relative(dockerfile, self.root)}")
        return self.executor.build(key, dockerfile, context_dir, build_args, self.run_dir / key / "build.log",
                                   self._live(key))

    def build_args(self, model: Model) -> dict[str, str]:
        args = dict(self.context.docker_build_arg)
        args.update(tag_config_vars(model))
        return args

    def _live(self, key: str):
        if not self.options.live_output:
            return None
        return lambda line: self.reporter.output(key, line)

    def _run_spec(self, model: Model, key: str, gpu_ids: list[int], *, image: str, docker_file: str,
                  build: Any) -> Iterator[PerfRecord]:
        values: dict[str, Any] = {"docker_file": docker_file, "docker_image": image, "n_gpus": str(len(gpu_ids))}
        if build is not None:
            values.update(base_docker=build.base_docker, docker_sha=build.docker_sha, image_id=build.image_id,
                          build_duration=build.duration)
        artifacts_dir = self.run_dir / key
        log_path = artifacts_dir / "run.log"
        values["artifacts"] = [str(log_path)] + ([str(artifacts_dir / "build.log")] if build is not None else [])
        if self.options.skip_model_run:
            yield self.base_record(model, status=Status.SKIPPED, reason="--skip-model-run", **values)
            return
        timeout = self.options.timeout_for(model.timeout)
        try:
            step, script_dir = script_step(model, self.root, model.run_args) if model.scripts else (None, None)
        except MadEngineError as exc:
            yield self.failure(model, str(exc), **values)
            return
        spec = RunSpec(key=key, model=model, workdir=artifacts_dir / "work", log_path=log_path,
                       artifacts_dir=artifacts_dir, env=model_env(model, self.context, gpu_ids, self.run_id,
                                                                   self.executor.name),
                       steps=[step] if step else [], timeout=timeout, gpu_ids=gpu_ids,
                       runtime_ngpus=len(gpu_ids), docker_file=docker_file, image=image)
        started = False
        try:
            self.reporter.message(f"madengine: running {model.name} ({key}) with the {self.executor.name} executor")
            self._prepare_workdir(spec, script_dir)
            self._apply_extensions(spec)
            values.update({k: v for k, v in spec.row_values.items() if k in PerfRecord.__dataclass_fields__})
            values["git_commit"] = spec.git_commit
            self.executor.start(spec)
            started = True
            yield from self._execute(spec, values)
        except KeyboardInterrupt:
            self._interrupted = True
            yield self.failure(model, "interrupted", **self._with_row_values(spec, values))
        except MadEngineError as exc:
            yield self.failure(model, str(exc), **self._with_row_values(spec, values))
        finally:
            if started:
                self.executor.stop(spec, self.options.keep_alive)
            if not (self.options.keep_model_dir or self.options.keep_alive):
                shutil.rmtree(spec.workdir, ignore_errors=True)

    @staticmethod
    def _with_row_values(spec: RunSpec, values: dict[str, Any]) -> dict[str, Any]:
        """``values`` plus what providers/tools set before a failure (e.g. ``dataname``)."""
        merged = {k: v for k, v in spec.row_values.items() if k in PerfRecord.__dataclass_fields__ and k != "extra"}
        merged.update({k: v for k, v in values.items() if k not in merged or v})
        return merged

    def _prepare_workdir(self, spec: RunSpec, script_dir: Path | None) -> None:
        spec.workdir.mkdir(parents=True, exist_ok=True)
        if spec.model.url:
            from madengine.execution.gitsource import clone

            spec.model_cwd, spec.git_commit = clone(spec.model, spec.workdir, spec.artifacts_dir / "run.log")
        target = spec.workdir / spec.model_cwd
        if script_dir is not None:
            copy_tree(script_dir, target)
        for step in spec.steps:
            step.cwd = spec.model_cwd
        if self.options.generate_sys_env_details:
            shutil.copy2(ENV_DETAILS_SCRIPT, spec.workdir / ENV_DETAILS_SCRIPT.name)
            spec.steps.insert(0, Step("sys-env-details", ["bash", ENV_DETAILS_SCRIPT.name, "sys_env_details.txt"]))
            spec.collect.append("sys_env_details.txt")
            _write_host_details(spec.artifacts_dir / "host_env_details.txt", self.context)

    def _apply_extensions(self, spec: RunSpec) -> None:
        """Data providers and tools add mounts, env vars and steps around the model."""
        if spec.model.data_names:
            from madengine.data import provide_data

            provide_data(spec, self.options, self.context, self.executor.name, self.executor.workspace(spec),
                         self.reporter)
        if spec.model.cred:
            from madengine.data.credentials import apply_model_credentials

            apply_model_credentials(spec)
        if spec.model.onnx:
            from madengine.bench.models_json import onnx_step

            spec.steps.append(onnx_step(spec, self.root, self.executor.name))
        if self.context.get("tools") or self.context.get("pre_scripts") or self.context.get("post_scripts"):
            from madengine.tools import apply_tools

            apply_tools(spec, self.context, self.options, self.root)

    def _execute(self, spec: RunSpec, values: dict[str, Any]) -> Iterator[PerfRecord]:
        """Run the steps, then collect artifacts and finalize before any row is written."""
        outcome = self._run_steps(spec, values)
        self._collect(spec, values)
        if isinstance(outcome, PerfRecord):
            outcome.artifacts = values.get("artifacts", outcome.artifacts)
            for key, value in values.get("extra", {}).items():
                outcome.extra.setdefault(key, value)
            yield outcome
            return
        yield from self._evaluate(spec, outcome, values)

    def _run_steps(self, spec: RunSpec, values: dict[str, Any]) -> "StepResult | PerfRecord":
        """The model step's result, or a FAILURE record when a step could not complete."""
        model = spec.model
        model_result: StepResult | None = None
        with open_log(spec.log_path) as log:
            for step in spec.steps:
                live = self._live(spec.key)
                sink = LineSink(log, live, keep=step.is_model)
                log.write(f"=== madengine step: {step.name}: {' '.join(redact(a) for a in step.argv)}\n")
                log.flush()
                result = self.executor.run_step(spec, step, spec.timeout if step.is_model else None, sink)
                log.write(f"=== madengine step {step.name} ended: exit code {result.exit_code} "
                          f"after {result.duration:.2f} s\n")
                log.flush()
                if step.is_model:
                    model_result = result
                    values["test_duration"] = result.duration
                if result.interrupted:
                    self._interrupted = True
                    return self.failure(model, f"interrupted during {step.name}", **values)
                if result.timed_out:
                    return self.failure(model, f"timeout: {step.name} ran longer than {spec.timeout} s; "
                                               "container/process killed", **values)
                if result.error:
                    return self.failure(model, f"{step.name}: {result.error}", **values)
                if result.exit_code != 0 and not step.is_model:
                    return self.failure(model, f"{step.name} failed with exit code {result.exit_code}", **values)
        if model_result is None:
            return self.failure(model, "no model step to run", **values)
        return model_result

    def _evaluate(self, spec: RunSpec, result: StepResult, values: dict[str, Any]) -> Iterator[PerfRecord]:
        model = spec.model
        if result.exit_code != 0:
            yield self.failure(model, f"model script exited with code {result.exit_code}", **values)
            return
        if model.multiple_results:
            yield from self._multiple(spec, values)
            return
        perf = parse_performance(result.output)
        if perf is None:
            yield self.failure(model, "no performance figure: the script printed no 'performance: <number> <metric>' line",
                               **values)
            return
        yield self.base_record(model, status=Status.SUCCESS, performance=perf.value, metric=perf.metric, **values)

    def _multiple(self, spec: RunSpec, values: dict[str, Any]) -> Iterator[PerfRecord]:
        model = spec.model
        path = spec.workdir / spec.model_cwd / model.multiple_results
        if not path.is_file():
            path = spec.workdir / model.multiple_results
        try:
            rows = parse_multiple_results(path)
        except MadEngineError as exc:
            yield self.failure(model, f"multiple_results: {exc}", **values)
            return
        if not rows:
            yield self.failure(model, f"multiple_results: {model.multiple_results} has no rows", **values)
            return
        shutil.copy2(path, spec.artifacts_dir / Path(model.multiple_results).name)
        for row in rows:
            number = as_number(row.get("performance", ""))
            extra = {k: v for k, v in row.items() if k not in ("model", "performance", "metric", "status")}
            record = self.base_record(model, **values)
            record.model = f"{model.name}_{row.get('model', '')}"
            record.metric = row.get("metric", "")
            record.extra = {**record.extra, **extra}
            if number is None:
                record.status, record.reason = Status.FAILURE, "multiple_results row has no performance number"
            else:
                record.status, record.performance = Status.SUCCESS, number
            yield record

    def _collect(self, spec: RunSpec, values: dict[str, Any]) -> None:
        """Copy files the steps wrote (``spec.collect`` patterns) into the artifacts folder, then
        run the finalizers; their values go into the row (``extra`` for non-standard names)."""
        artifacts = list(values.get("artifacts", []))
        if spec.workdir.is_dir():
            for pattern in spec.collect:
                for path in sorted(spec.workdir.glob(pattern)):
                    if path.is_file():
                        target = spec.artifacts_dir / path.name
                        try:
                            shutil.copy2(path, target)
                        except OSError:
                            continue
                        if str(target) not in artifacts:
                            artifacts.append(str(target))
        values["artifacts"] = artifacts
        fields = PerfRecord.__dataclass_fields__
        for finalize in spec.finalizers:
            try:
                produced = finalize(spec) or {}
            except MadEngineError as exc:
                values.setdefault("extra", {})["finalize_error"] = str(exc)
                continue
            for key, value in produced.items():
                if key in fields and key != "extra":
                    values[key] = value
                else:
                    values.setdefault("extra", {})[key] = value


def _write_host_details(path: Path, context: Context) -> None:
    import os
    import platform

    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"madengine {__version__}", f"platform: {platform.platform()}", f"python: {platform.python_version()}",
             f"machine: {platform.machine()}", f"cpus: {os.cpu_count()}", f"hostname: {machine_name()}",
             "context: " + json.dumps(context.summary(), sort_keys=True)]
    try:
        lines.append("os-release:\n" + Path("/etc/os-release").read_text())
    except OSError:
        pass
    path.write_text(redact("\n".join(lines)) + "\n", encoding="utf-8")


def _env(name: str, default: str = "") -> str:
    import os

    return os.environ.get(name, default)


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def run_models(options: RunOptions, reporter: Reporter | None = None) -> RunSummary:
    """Select, build and run the models ``options`` name; every result lands in perf.csv."""
    reporter = reporter or Reporter()
    context = build_context(context_file=options.context_file, context_string=options.context_string)
    make_runner: Any = Runner
    if options.manifest_file:  # exactly the images of a build manifest, never rebuilt
        from madengine.distributed.manifest import plan_manifest_run

        plan = plan_manifest_run(options)
        options, catalog, models, make_runner = plan.options, plan.catalog, plan.models, plan.make_runner
    else:
        catalog = load_catalog()
        if not options.tags:
            raise ExecutionError("no models selected", hint="give --tags (e.g. --tags all)")
        models = select_models(catalog, options.tags)
    if any(m.data_names or m.cred or m.url for m in models):
        from madengine.data import check_run_inputs

        check_run_inputs(models, options, context)  # bad data.json/credential.json: exit 2 before any run
    if context.get("tools") or context.get("pre_scripts") or context.get("post_scripts"):
        from madengine.tools import validate_tools

        validate_tools(context, options, catalog.root)  # bad tools.json / unknown tool: exit 2 before any build
    executor = choose_executor(options, reporter)
    run_id = new_run_id()
    runner = make_runner(options, context, catalog, executor, reporter, run_id)
    summary = RunSummary(run_id=run_id, executor=executor.name, perf_csv=Path(options.output), run_dir=runner.run_dir)
    reporter.message(f"madengine: run {run_id}: {len(models)} model(s), {executor.name} executor, "
                     f"{context.gpu_vendor} host ({context.gpu_architecture}); results → {options.output}")
    if options.parallel > 1:  # up to N models at once on disjoint GPUs/CPUs
        from madengine.distributed.parallel import run_parallel

        batches: Any = [run_parallel(runner, models, options.parallel)]
    else:
        batches = (runner.run_model(model) for model in models)
    for batch in batches:
        for record in batch:
            append_records(options.output, [record])
            summary.records.append(record)
            reporter.message(f"madengine: {record.model}: {record.status}"
                             + (f" {record.performance} {record.metric}" if record.ok else f" ({record.reason})"))
        if runner._interrupted:
            summary.interrupted = True
            break
    return summary
