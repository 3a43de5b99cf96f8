"""``madengine run --executor slurm``: the selected models as Slurm jobs, results back in perf.csv.

One job array carries every model that runs on one node (task i = model i); a model that
declares several nodes gets its own job whose nodes all run it with the rendezvous environment
(``MASTER_ADDR``, ``MASTER_PORT``, ``NNODES``, ``NODE_RANK``). Every task runs ``madengine run``
for its model on its node (docker or local executor) and writes its rows into its own folder of
the shared job folder; the submitting command polls ``squeue``/``scontrol`` until the jobs end,
then merges the rows (see :mod:`madengine.distributed.slurm_jobs`). Scripts are rendered from the
jinja2 templates in ``templates/``; values from the user are shell-quoted, and ``#SBATCH`` values
are checked to be single words.

Settings come from the context's ``slurm`` section, overridden by the command-line flags.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Collection, Mapping

from madengine.core.version import __version__
from madengine.catalog import Catalog, Model, select_models
from madengine.context.context import Context, user_values
from madengine.context.dockerfiles import HeaderKeys
from madengine.core.clock import utc_now
from madengine.core.errors import ConfigError, ContextError, InputError
from madengine.core.host import Host
from madengine.tracing import NULL_TRACER, names
from madengine.core.redact import redact
from madengine.distributed.manifest import model_entry
from madengine.distributed.slurm_commands import SlurmCommands, SubmissionRejected
from madengine.distributed.slurm_jobs import (JOB_FILE, JobCollector, LogFollower, SlurmJob, SlurmTask,
                                              collect_job, ensure_not_collected, find_job, load_job,
                                              wait_for_job)
from madengine.core.events import Reporter
from madengine.core.flagtable import argv, flag_values
from madengine.distributed.options import TRANSPORT_FLAGS, SlurmOptions, TransportOptions
from madengine.execution.options import IMAGE_FLAGS, NO_HTML, RUN_OPTION_FLAGS, BuildOptions, RunOptions
from madengine.execution.plan import distributed_spec
from madengine.core.ids import new_run_id
from madengine.results import RunSummary

TEMPLATES = Path(__file__).resolve().parent / "templates"
DEFAULT_RESULTS_DIR = "slurm_results"
CANCEL_GRACE = 60.0
_WORD = re.compile(r"^[^\s'\"\\`$;&|<>]+$")
_TIME = re.compile(r"^(UNLIMITED|INFINITE|\d+(-\d+)?(:\d{1,2}){0,2})$", re.IGNORECASE)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: settings that become ``#SBATCH --<name>=<value>`` lines
_DIRECTIVES = {"partition": "partition", "time": "time", "gpus_per_node": "gpus-per-node",
               "cpus_per_task": "cpus-per-task", "mem": "mem", "account": "account", "qos": "qos",
               "reservation": "reservation", "constraint": "constraint", "exclude": "exclude",
               "nodelist": "nodelist"}
_INTS = ("nodes", "gpus_per_node", "cpus_per_task", "master_port", "array_limit")
_STRINGS = ("partition", "time", "mem", "account", "qos", "reservation", "constraint", "exclude", "nodelist",
            "job_name", "results_dir", "executor", "network_interface")
_OTHER = ("madengine_command", "poll_interval", "env", "modules", "slurm_args")


@dataclasses.dataclass
class SlurmSettings:
    partition: str | None = None
    nodes: int | None = None  # per model; None → each model's own (``nnodes``), else 1
    gpus_per_node: int | None = None
    cpus_per_task: int | None = None
    mem: str | None = None
    time: str | None = None
    account: str | None = None
    qos: str | None = None
    reservation: str | None = None
    constraint: str | None = None
    exclude: str | None = None
    nodelist: str | None = None
    job_name: str = "madengine"
    results_dir: str = DEFAULT_RESULTS_DIR
    executor: str = "auto"  # what each task runs its model with: auto | docker | local
    #: NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME of every task (as the reference's key); else each
    #: node of a multi-node job finds the interface that routes to its rendezvous
    network_interface: str | None = None
    madengine_command: list[str] = dataclasses.field(default_factory=lambda: [sys.executable, "-m", "madengine"])
    poll_interval: float = 10.0
    master_port: int = 29500
    array_limit: int | None = None  # at most this many array tasks at once (``--array=...%N``)
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    modules: list[str] = dataclasses.field(default_factory=list)
    slurm_args: list[str] = dataclasses.field(default_factory=list)

    def directives(self) -> list[str]:
        out = []
        for key, option in _DIRECTIVES.items():
            value = getattr(self, key)
            if value is not None and value != "":
                out.append(f"--{option}={value}")
        return out


def _bad(field: str, message: str, hint: str | None = None) -> ContextError:
    return ContextError(message, path="slurm", field=field, hint=hint)


def slurm_settings(values: Mapping[str, Any]) -> SlurmSettings:
    """Check and convert the ``slurm`` settings (context section merged with the flags)."""
    known = set(_INTS) | set(_STRINGS) | set(_OTHER)
    unknown = sorted(set(values) - known)
    if unknown:
        raise _bad(unknown[0], "unknown Slurm setting", hint="known: " + ", ".join(sorted(known)))
    settings = SlurmSettings()
    for key, value in values.items():
        if value is None:
            continue
        if key in _INTS:
            try:
                number = int(value)
            except (TypeError, ValueError):
                raise _bad(key, f"must be a whole number, got {value!r}") from None
            if number < (0 if key == "gpus_per_node" else 1):
                raise _bad(key, f"must be {'0' if key == 'gpus_per_node' else '1'} or more, got {number}")
            setattr(settings, key, number)
        elif key in _STRINGS:
            text = str(value).strip()
            if not _WORD.match(text):
                raise _bad(key, f"{text!r} must be one word without quotes or shell characters")
            setattr(settings, key, text)
        elif key == "poll_interval":
            try:
                settings.poll_interval = max(0.1, float(value))
            except (TypeError, ValueError):
                raise _bad(key, f"must be a number of seconds, got {value!r}") from None
        elif key in ("madengine_command", "slurm_args"):
            setattr(settings, key, _argv(key, value))
        elif key == "env":
            if not isinstance(value, Mapping) or not all(_ENV_NAME.match(str(k)) for k in value):
                raise _bad(key, "must map variable names to values")
            settings.env = {str(k): str(v) for k, v in value.items()}
        elif key == "modules":
            if not isinstance(value, list):
                raise _bad(key, "must be a list of module names")
            settings.modules = [str(m) for m in value]
    if settings.time is not None and not _TIME.match(settings.time):
        raise _bad("time", f"'{settings.time}' is not a Slurm time limit", hint="e.g. 30, 01:00:00 or 1-00:00:00")
    if settings.executor not in ("auto", "docker", "local"):
        raise _bad("executor", f"'{settings.executor}' cannot run a task", hint="use auto, docker or local")
    if not settings.madengine_command:
        raise _bad("madengine_command", "is empty")
    return settings


def _argv(key: str, value: Any) -> list[str]:
    if isinstance(value, list):
        return [str(v) for v in value]
    try:
        return shlex.split(str(value))
    except ValueError as exc:
        raise _bad(key, f"cannot be split into arguments ({exc})") from None


@dataclasses.dataclass(frozen=True)
class SlurmRun:
    """Everything a Slurm submission needs: the option groups and the models the pipeline chose."""

    run: RunOptions
    build: BuildOptions
    transport: TransportOptions
    slurm: SlurmOptions
    catalog: Catalog
    models: list[Model]
    command_line: str = ""
    #: the submitting run's tracer: each task continues its trace under a ``slurm_task`` span
    tracer: Any = NULL_TRACER


def user_context(options: RunOptions, catalog_keys: Collection[str] = ()) -> dict[str, Any]:
    """The context the user gave (file, then string), without host detection: the login node's
    hardware says nothing about the compute nodes, which detect their own."""
    return user_values(options.context_file, options.context_string, catalog_keys)


# -- planning ----------------------------------------------------------------------------------
def model_nodes(model: Model, settings: SlurmSettings, context: Context | None = None) -> int:
    """The nodes of ``model``'s job: ``--nodes`` (``slurm.nodes``), else its ``distributed`` block
    under the context's (``nnodes``), else its ``nnodes`` field, else 1."""
    if settings.nodes is not None:
        return settings.nodes
    spec = distributed_spec(model, context or Context({}))
    if spec is not None:
        return spec.nnodes
    declared = model.extra.get("nnodes")
    try:
        return max(1, int(declared)) if declared is not None else 1
    except (TypeError, ValueError):
        raise ConfigError(f"nnodes of model '{model.name}' is not a number: {declared!r}", path=model.source) from None


def _node_task(task: SlurmTask, model: Model, settings: SlurmSettings, context: Context) -> None:
    """What each node of a multi-node task needs beyond the run: the rendezvous port (the model's
    ``master_port``, else ``slurm.master_port``), and ``--nodes`` as the job's ``nnodes`` when
    the model's block says otherwise."""
    spec = distributed_spec(model, context)
    task.master_port = (spec.master_port if spec is not None else None) or settings.master_port
    if spec is not None and spec.nnodes != task.nodes:
        task.node_context = json.dumps({"distributed": {"nnodes": task.nodes}})


def task_tag(model: Model) -> str:
    return model.tagged_name


def _check_tags_select_one(catalog: Catalog, models: list[Model]) -> None:
    """Each task selects its model by name; a name that is also another model's tag would run both."""
    for model in models:
        names = [m.name for m in select_models(catalog, [model.name])]
        if names != [model.name]:
            raise ConfigError(f"model name '{model.name}' is also a tag of {', '.join(n for n in names if n != model.name)}",
                              path=model.source, hint="a Slurm task selects its model by name; rename the tag")


@dataclasses.dataclass
class Script:
    path: Path
    text: str
    tasks: list[SlurmTask]
    kind: str  # array | multinode
    log_pattern: str
    helper: tuple[Path, str] | None = None  # the per-node script of a multi-node job


@dataclasses.dataclass
class SlurmPlan:
    settings: SlurmSettings
    job: SlurmJob
    scripts: list[Script]
    context: dict[str, Any]
    #: the ``slurm_task`` span of each task index (ended when its rows are merged)
    task_spans: dict[int, Any] = dataclasses.field(default_factory=dict)


#: the flags a task's ``madengine run`` is given: the run's own, the images', where its images come from
TASK_FLAGS = (*RUN_OPTION_FLAGS, NO_HTML, *IMAGE_FLAGS, *TRANSPORT_FLAGS)


def task_command(request: SlurmRun, settings: SlurmSettings, job_dir: Path, context_file: Path | None) -> list[str]:
    """``madengine run`` as each task runs it: the run's options written back by their flag tables,
    with the task's own executor, runs folder, context file and live output (the templates add
    ``--tags``, ``--output`` and ``--trace``)."""
    run = dataclasses.replace(request.run, executor=settings.executor, live_output=True, runs_dir=job_dir / "runs",
                              context_file=str(context_file) if context_file is not None else None,
                              context_string=None, trace_file=None)
    transport = request.transport
    if transport.manifest_file:
        transport = dataclasses.replace(transport, manifest_file=str(Path(transport.manifest_file).resolve()))
    values = {**flag_values(RUN_OPTION_FLAGS, run), **flag_values(IMAGE_FLAGS, request.build),
              **flag_values(TRANSPORT_FLAGS, transport), NO_HTML.dest: True}
    return [*settings.madengine_command, "run", *argv(TASK_FLAGS, values)]


def _templates() -> Any:
    import jinja2

    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
                                     keep_trailing_newline=True, autoescape=False)
    environment.filters["q"] = shlex.quote
    return environment


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def plan_slurm_run(request: SlurmRun, run_id: str | None = None) -> SlurmPlan:
    """Everything a submission writes, rendered but not yet written (``--dry-run`` prints it)."""
    options, catalog, models = request.run, request.catalog, request.models
    context = user_context(options, HeaderKeys.of(catalog, models))
    section = context.get("slurm", {})
    settings = slurm_settings({**section, **request.slurm.overrides()})
    if request.transport.manifest_file and settings.executor == "local":
        raise _bad("executor", "tasks of a manifest run run its images, which needs docker", hint="use docker or auto")
    _check_tags_select_one(catalog, models)
    run_id = run_id or new_run_id()
    job_dir = (Path(settings.results_dir) / run_id).resolve()
    if not _WORD.match(str(job_dir)):
        raise InputError(f"the Slurm results folder {job_dir} must be a path without spaces or quotes",
                         path="slurm.results_dir")
    context_file = job_dir / "context.json" if context else None
    command = shlex.join(task_command(request, settings, job_dir, context_file))
    node_context = Context(context)
    tasks = [SlurmTask(index=i, model=m.name, tag=task_tag(m), model_entry=model_entry(m),
                       result_dir=str(job_dir / "tasks" / f"{i:03d}-{_safe(m.name)}"),
                       nodes=model_nodes(m, settings, node_context))
             for i, m in enumerate(models)]
    for task, model in zip(tasks, models):
        if task.nodes > 1:
            _node_task(task, model, settings, node_context)
    spans = {}
    for task in tasks:
        spans[task.index] = request.tracer.start_span(names.SPAN_SLURM_TASK, {
            names.ATTR_MODEL: task.model, names.ATTR_SLURM_TASK_ID: task.index})
        task.traceparent = request.tracer.traceparent(spans[task.index]) if request.tracer.enabled else ""
    job = SlurmJob(run_id=run_id, job_dir=job_dir, output=str(Path(options.output).resolve()),
                   command_line=request.command_line, context=context, tasks=tasks)
    common = {"version": __version__, "run_id": run_id, "job_name": settings.job_name,
              "trace": request.tracer.enabled,
              "directives": settings.directives(), "workdir": str(Path.cwd()), "model_dir": str(catalog.root),
              "env": sorted(settings.env.items()), "modules": settings.modules, "command": command,
              "clean_command": shlex.join([*settings.madengine_command, "clean", "--quiet"]),
              "network_interface": settings.network_interface}
    templates = _templates()
    scripts: list[Script] = []
    single = [t for t in tasks if t.nodes == 1]
    if single:
        for position, task in enumerate(single):
            task.array_index = position
        array = f"0-{len(single) - 1}" + (f"%{settings.array_limit}" if settings.array_limit else "")
        log_pattern = str(job_dir / "logs" / f"{_safe(settings.job_name)}_%A_%a.out")
        text = templates.get_template("array.sbatch.j2").render(array=array, log_pattern=log_pattern, tasks=single,
                                                                 **common)
        scripts.append(Script(job_dir / "array.sbatch", text, single, "array", log_pattern))
    for task in (t for t in tasks if t.nodes > 1):
        stem = f"{task.index:03d}-{_safe(task.model)}"
        rank_script = job_dir / f"{stem}.node.sh"
        log_pattern = str(job_dir / "logs" / f"{stem}_%j.out")
        values = dict(common, task=task, nodes=task.nodes, log_pattern=log_pattern, rank_script=str(rank_script),
                      nproc_per_node=settings.gpus_per_node or 0)
        text = templates.get_template("multinode.sbatch.j2").render(**values)
        helper = templates.get_template("node-rank.sh.j2").render(**values)
        scripts.append(Script(job_dir / f"{stem}.sbatch", text, [task], "multinode", log_pattern,
                              helper=(rank_script, helper)))
    return SlurmPlan(settings=settings, job=job, scripts=scripts, context=context, task_spans=spans)


# -- submitting --------------------------------------------------------------------------------
def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    os.chmod(path, mode)


def _check_partition(settings: SlurmSettings, commands: SlurmCommands) -> None:
    if not settings.partition:
        return
    if commands.partition_known(settings.partition) is False:
        known = commands.partitions()
        raise InputError(f"Slurm has no partition '{settings.partition}'", path="--partition",
                         hint=("partitions: " + ", ".join(known)) if known else "see 'sinfo'")


def submit(plan: SlurmPlan, commands: SlurmCommands, reporter: Reporter) -> SlurmJob:
    """Write the job folder and submit every script; a refused submission marks its tasks."""
    job = plan.job
    (job.job_dir / "logs").mkdir(parents=True, exist_ok=True)
    if plan.context:
        _write(job.job_dir / "context.json", json.dumps(plan.context, indent=2) + "\n", 0o600)
    job.submitted_at = utc_now()
    for script in plan.scripts:
        _write(script.path, script.text, 0o755)
        if script.helper is not None:
            _write(script.helper[0], script.helper[1], 0o755)
    job.save()
    for script in plan.scripts:
        try:
            job_id = commands.submit(str(script.path), plan.settings.slurm_args, cwd=str(Path.cwd()))
        except SubmissionRejected as exc:
            reporter.message(f"madengine: sbatch refused {script.path.name}: {exc}")
            for task in script.tasks:
                task.rejected = str(exc)
            continue
        for task in script.tasks:
            task.job_id = job_id
            task.log = script.log_pattern.replace("%A", job_id).replace("%j", job_id).replace(
                "%a", str(task.array_index))
        reporter.message(f"madengine: submitted Slurm job {job_id} ({script.kind}, {len(script.tasks)} model(s): "
                         + ", ".join(t.model for t in script.tasks) + ")")
    job.save()
    return job


def _summary(job: SlurmJob, output: Path, records: list | None = None) -> RunSummary:
    return RunSummary(run_id=job.run_id, executor="slurm", perf_csv=output, run_dir=job.job_dir,
                      records=list(records or []),
                      details={"slurm": {"job_ids": job.job_ids, "job_dir": str(job.job_dir)}})


def _emit(reporter: Reporter, text: str) -> None:
    """Data for stdout (the job id of --no-wait, the script of --dry-run)."""
    reporter.data(text)


def dry_run_text(plan: SlurmPlan) -> str:
    parts = []
    for script in plan.scripts:
        command = shlex.join(["sbatch", "--parsable", *plan.settings.slurm_args, str(script.path)])
        parts.append(f"# ---- {script.path} (submitted with: {command})\n{script.text}")
        if script.helper is not None:
            parts.append(f"# ---- {script.helper[0]} (run on every node by srun)\n{script.helper[1]}")
    return "\n".join(parts).rstrip("\n")


def wait_and_collect(job: SlurmJob, commands: SlurmCommands, reporter: Reporter, host: Host, *, output: Path,
                     poll_interval: float, live_output: bool, force: bool = False) -> RunSummary:
    """Wait for the job's tasks to end (Ctrl-C cancels them), then merge their rows."""
    follower = LogFollower(job, reporter.output) if live_output else None
    interrupted = False
    try:
        wait_for_job(job, commands, reporter, poll_interval, follower)
    except KeyboardInterrupt:
        interrupted = True
        reporter.message(f"madengine: interrupted: cancelling Slurm job(s) {', '.join(job.job_ids)}")
        commands.cancel(job.job_ids)
        deadline = time.monotonic() + CANCEL_GRACE
        while commands.queue(job.job_ids) and time.monotonic() < deadline:
            time.sleep(min(poll_interval, 1.0))
    collected = collect_job(job, commands, host, output, force=force)
    summary = _summary(job, output, collected.records)
    summary.interrupted = "interrupted" if interrupted else ""
    return summary


def run_on_slurm(request: SlurmRun, reporter: Reporter, host: Host) -> RunSummary:
    """Submit the selected models to Slurm; unless ``--no-wait``, wait and merge their rows."""
    plan = plan_slurm_run(request)
    output = Path(request.run.output)
    if request.slurm.dry_run:
        _emit(reporter, redact(dry_run_text(plan)))
        return _summary(plan.job, output)
    commands = SlurmCommands()
    _check_partition(plan.settings, commands)
    job = submit(plan, commands, reporter)
    if not job.job_ids:
        reporter.message("madengine: nothing was submitted")
    if request.slurm.no_wait:
        refused = [t for t in job.tasks if t.rejected]
        records = JobCollector(job, output, host).collect(commands, refused) if refused else []
        job.save()
        if job.job_ids:
            _emit(reporter, " ".join(job.job_ids))
            reporter.message(f"madengine: not waiting; merge the results later with: madengine report collect "
                             f"--job {job.job_ids[0]} --results-dir {plan.settings.results_dir}")
        return _summary(job, output, records)
    summary = wait_and_collect(job, commands, reporter, host, output=output,
                               poll_interval=plan.settings.poll_interval, live_output=request.run.live_output)
    for task in job.tasks:  # the tasks' own traces join the run's; their spans end with the merge
        for path in task.trace_files():
            request.tracer.attach_child_trace(path)
        plan.task_spans[task.index].end()
    return summary


def collect_by_job_id(job_id: str, host: Host, *, results_dir: str | Path = DEFAULT_RESULTS_DIR,
                      output: str | Path | None = None, reporter: Reporter | None = None, live_output: bool = False,
                      force: bool = False, poll_interval: float | None = None) -> RunSummary:
    """``madengine report collect --job ID``: wait for a ``--no-wait`` run's job, then merge its rows."""
    reporter = reporter or Reporter()
    job = find_job(str(job_id), Path(results_dir))
    target = Path(output) if output else Path(job.output)
    ensure_not_collected(job, force)
    settings = slurm_settings(job.context.get("slurm", {}))
    summary = wait_and_collect(job, SlurmCommands(), reporter, host, output=target,
                               poll_interval=poll_interval or settings.poll_interval, live_output=live_output,
                               force=force)
    merge_task_traces(job, reporter)
    return summary


def merge_task_traces(job: SlurmJob, reporter: Reporter) -> None:
    """The tasks' trace.json files into the job folder's (written when the run was submitted)."""
    from madengine.core.errors import MadEngineError
    from madengine.tracing import TRACE_FILE, merge_trace_files

    target = job.job_dir / TRACE_FILE
    children = [path for task in job.tasks for path in task.trace_files()]
    if not target.is_file() or not children:
        return
    try:
        merge_trace_files(target, children)
    except (MadEngineError, OSError) as exc:  # the rows are merged; a trace problem only loses the trace
        reporter.message(f"madengine: warning: the tasks' traces were not merged into {target}: {exc}")


__all__ = ["SlurmSettings", "SlurmPlan", "SlurmRun", "plan_slurm_run", "submit", "run_on_slurm",
           "collect_by_job_id", "wait_and_collect", "dry_run_text", "slurm_settings", "load_job", "JOB_FILE"]
