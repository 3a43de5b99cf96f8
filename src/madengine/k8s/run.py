"""``madengine run --executor k8s`` and ``madengine k8s render``: the selected models as
Kubernetes jobs, one per model (and image), results back in perf.csv.

Order, so that bad input is exit 2 before anything is built or sent: the context and its ``k8s``
block → the cluster (kubeconfig, context) → what each model needs (its image pullable by the
cluster, its credentials) → the rendered objects (checked: :mod:`madengine.k8s.checks`) → the
GPUs a node can give → images built (catalog runs with ``image_pull_policy: Never`` only) →
submit, watch, collect (:mod:`madengine.k8s.session`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

from madengine.catalog import Catalog, Model
from madengine.context import Context
from madengine.context.dockerfiles import HeaderKeys
from madengine.core.errors import ExecutionError, InputError, interruption
from madengine.core.events import Reporter
from madengine.core.host import Host
from madengine.core.ids import machine_name
from madengine.distributed.options import TransportOptions
from madengine.execution.options import BuildOptions, RunOptions
from madengine.execution.runner import check_repeat
from madengine.k8s.checks import check_plan
from madengine.k8s.plan import (ImageChoice, catalog_images, check_context_applies, check_pullable, credential_env,
                                is_local_only, job_inputs, k8s_context, settings_of)
from madengine.k8s.render import LABEL_RUN, JobPlan, render_job
from madengine.k8s.settings import K8sSettings
from madengine.k8s.yamlio import write_plan
from madengine.results import PerfRecord, Provenance, RecordFactory, RunSummary
from madengine.tracing import NULL_TRACER


@dataclasses.dataclass(frozen=True)
class K8sRun:
    """What a cluster run was asked (the pipeline's selection and option groups)."""

    run: RunOptions
    catalog: Catalog
    models: list[Model]
    build: BuildOptions = BuildOptions()
    transport: TransportOptions = TransportOptions()
    manifest: Any = None
    command_line: str = ""
    dry_run: bool = False
    tracer: Any = NULL_TRACER


@dataclasses.dataclass
class K8sPlan:
    """Every model's rendered job; models that cannot run (a failed build in the manifest, no
    matching Dockerfile) with their FAILURE reason."""

    context: Context
    settings: K8sSettings
    namespace: str
    jobs: list[tuple[Model, ImageChoice, JobPlan]]
    unrunnable: list[tuple[Model, str]]
    #: images only this host has (render warns; a run refuses them)
    warnings: list[str]


def _check_options(options: RunOptions, models: list[Model]) -> None:
    if options.repeat not in (None, 1) or options.warmup_runs:
        raise InputError("--repeat and --warmup-runs do not apply to --executor k8s (a job runs its model once)",
                         path="--repeat" if options.repeat not in (None, 1) else "--warmup-runs")
    for flag, on in (("--keep-alive", options.keep_alive), ("--generate-sys-env-details",
                                                            options.generate_sys_env_details),
                     ("--force-mirror-local", options.force_mirror_local)):
        if on:
            raise InputError(f"{flag} does not apply to --executor k8s", path=flag)
    for model in models:
        check_repeat(model)
        if model.extra.get("repeat") not in (None, "", 1, "1"):
            raise InputError("a model's repeat does not apply to --executor k8s (a job runs its model once)",
                             path=model.source, field=f"{model.name}.repeat")


def _manifest_images(request: K8sRun, model: Model) -> list[ImageChoice]:
    from madengine.distributed import transport

    manifest = request.manifest
    out = [ImageChoice(f.image or f.model, "", f.dockerfile, failure=f"not built: {f.reason}")
           for f in manifest.failures_of(model.name)]
    for entry in manifest.images_of(model.name):
        reference = entry.registry_image or entry.image
        if entry.registry_image and request.transport.registry:
            reference = transport.relocate(reference, transport.check_registry(request.transport.registry))
        out.append(ImageChoice(entry.image, reference, entry.dockerfile, image_id=entry.image_id))
    return out


def _images(request: K8sRun, model: Model, context: Context) -> list[ImageChoice]:
    if request.manifest is not None:
        return _manifest_images(request, model)
    try:
        return catalog_images(model, request.catalog.root, context)
    except ExecutionError as exc:  # no Dockerfile matches: the model's FAILURE row, as on docker
        return [ImageChoice(model.name, "", failure=str(exc))]


def _registry_auth(request: K8sRun, environ: Any) -> tuple[str, str, str] | None:
    """(registry host, user, password) for the pull Secret, when the manifest's registry has credentials."""
    from madengine.distributed import transport

    registry = request.transport.registry or (request.manifest.registry if request.manifest is not None else None)
    auth = transport.registry_auth(environ) if registry else None
    return (transport.registry_host(registry), auth.username, auth.password) if auth is not None else None


def check_non_root(image: ImageChoice, model: Model, settings: K8sSettings,
                   inspect_user: Callable[[str], str | None]) -> None:
    """``run_as_non_root`` with an image that runs as root (when this host can inspect the image,
    and ``run_as_user`` does not choose another user): every pod would be refused its container."""
    if not settings.run_as_non_root or settings.run_as_user is not None:
        return
    user = inspect_user(image.reference)
    if user is not None and user.split(":")[0] in ("", "0", "root"):
        raise InputError(f"image {image.reference} of model '{model.name}' runs as root (its USER is "
                         f"{user or 'unset'}), so the kubelet would refuse to start it", path="context",
                         field="k8s.run_as_non_root",
                         hint="set k8s.run_as_user to a non-zero user id, give the image a USER, or drop "
                              "run_as_non_root")


def plan_k8s_run(request: K8sRun, host: Host, run_id: str, namespace: str | None = None,
                 check_images: bool = True, inspect_user: Callable[[str], str | None] | None = None) -> K8sPlan:
    """Every selected model's objects, rendered and checked; InputError (exit 2) for bad input.
    ``inspect_user``: an image's USER when this host has the image (None when it cannot tell)."""
    options = request.run
    context = k8s_context(options.context_file, options.context_string,
                          HeaderKeys.of(request.catalog, request.models))
    settings = settings_of(context)
    check_context_applies(context)
    _check_options(options, request.models)
    namespace = namespace or settings.namespace or "default"
    secrets = credential_env(request.models, request.catalog.root, host.environ)
    auth = _registry_auth(request, host.environ)
    plan = K8sPlan(context, settings, namespace, [], [], [])
    for model in request.models:
        for image in _images(request, model, context):
            if image.failure:
                plan.unrunnable.append((model, image.failure))
                continue
            if check_images:
                check_pullable(image, model, settings)
            elif is_local_only(image.reference) and settings.image_pull_policy != "Never":
                plan.warnings.append(image.reference)
            inputs, tools = job_inputs(model, image, context=context, settings=settings, root=request.catalog.root,
                                       namespace=namespace, run_id=run_id, timeout=options.timeout_for(model.timeout),
                                       secret_env=secrets.get(model.name), registry_auth=auth,
                                       tools_json=options.tools_json_file_name)
            if inspect_user is not None:
                check_non_root(image, model, settings, inspect_user)
            job = render_job(inputs, settings)
            check_plan(job)
            job.finalizers = tools.finalizers
            plan.jobs.append((model, image, job))
    return plan


def render_to_folder(request: K8sRun, host: Host, folder: Path, reporter: Reporter, run_id: str = "render",
                     include_secrets: bool = False, inspect_user: Callable[[str], str | None] | None = None) \
        -> list[Path]:
    """``madengine k8s render``: every job's objects as YAML files under ``folder`` (Secrets only
    with ``include_secrets``: they hold credentials)."""
    plan = plan_k8s_run(request, host, run_id, check_images=False, inspect_user=inspect_user)
    if plan.warnings:
        reporter.message(f"madengine: warning: {len(plan.warnings)} image(s) are only on this host ("
                         f"{', '.join(plan.warnings[:3])}{', ...' if len(plan.warnings) > 3 else ''}): push them with "
                         "'madengine build --registry' and render from its manifest, or set k8s.image_pull_policy "
                         "Never when every node has them")
    for model, reason in plan.unrunnable:
        reporter.message(f"madengine: warning: {model.name} has no job: {reason}")
    written = []
    for _, _, job in plan.jobs:
        written += write_plan(job, folder, include_secrets=include_secrets)
        if job.secrets and not include_secrets:
            reporter.message(f"madengine: {job.name}: Secret(s) {', '.join(job.secrets)} not written (they hold "
                             "credentials); --include-secrets writes them (mode 0600)")
    return written


# -- a run ---------------------------------------------------------------------------------------
def _records(request: K8sRun, host: Host, run_id: str, context: Context, trace_id: str) -> RecordFactory:
    return RecordFactory(Provenance.of(run_id=run_id, executor="k8s", command_line=request.command_line or
                                       host.command_line, environ=host.environ, context=context.summary(),
                                       machine_name=machine_name(), trace_id=trace_id), host.now)


def _check_gpus(api: Any, plan: K8sPlan) -> None:
    """A pod asking more GPUs than any node can give never starts: exit 2, when the cluster tells."""
    known: dict[str, int | None] = {}
    for model, _, job in plan.jobs:
        if not job.gpu_count:
            continue
        if job.gpu_resource not in known:
            known[job.gpu_resource] = api.gpu_allocatable(job.gpu_resource, plan.settings.node_selector)
        most = known[job.gpu_resource]
        if most is not None and job.gpu_count > most:
            raise InputError(f"model '{model.name}' asks {job.gpu_count} {job.gpu_resource} per pod; the most a node "
                             f"{'selected by k8s.node_selector ' if plan.settings.node_selector else ''}can give is "
                             f"{most}", path="context", field="k8s.gpu_count",
                             hint=f"set k8s.gpu_count (or distributed.nproc_per_node) to {most} or fewer")


@dataclasses.dataclass
class PreparedRun:
    """A run checked and connected, before anything is built or submitted."""

    request: K8sRun
    plan: K8sPlan
    api: Any


def prepare_run(request: K8sRun, host: Host, run_id: str,
                inspect_user: Callable[[str], str | None] | None = None) -> PreparedRun:
    """Every check before a run starts (exit 2): the ``k8s`` block, the cluster, each model's job,
    the GPUs a node can give."""
    from madengine.k8s.client import KubeApi
    from madengine.k8s.kubeconfig import resolve_cluster

    context = k8s_context(request.run.context_file, request.run.context_string,
                          HeaderKeys.of(request.catalog, request.models))
    settings = settings_of(context)
    check_context_applies(context)
    _check_options(request.run, request.models)
    target = resolve_cluster(settings, host.environ)
    plan = plan_k8s_run(request, host, run_id, namespace=target.namespace, inspect_user=inspect_user)
    api = KubeApi(target)
    api.check_access(plan.namespace, f"{LABEL_RUN}={run_id}")
    _check_gpus(api, plan)
    return PreparedRun(request, plan, api)


def run_on_k8s(prepared: PreparedRun, host: Host, reporter: Reporter, summary: RunSummary,
               record: Callable[[PerfRecord], None],
               build_image: Callable[[Model, ImageChoice, Context], str] | None = None, trace_id: str = "") -> None:
    """Run every model of a prepared run as its own job; each row goes to ``record`` as it is made.
    Ctrl-C (or SIGTERM) deletes every job submitted, and every model gets its row."""
    from madengine.k8s.session import K8sSession

    request, plan, api = prepared.request, prepared.plan, prepared.api
    records = _records(request, host, summary.run_id, plan.context, trace_id)
    summary.details["k8s"] = {"namespace": plan.namespace, "server": api.server,
                              "jobs": [job.name for _, _, job in plan.jobs]}
    session = K8sSession(api, namespace=plan.namespace, run_id=summary.run_id, run_dir=summary.run_dir,
                         reporter=reporter, records=records, emit=record, live_output=request.run.live_output,
                         pending_timeout=plan.settings.pending_timeout)
    session.total = len(plan.jobs) + len(plan.unrunnable)
    for model, reason in plan.unrunnable:
        session.fail(model, reason)
    reporter.message(f"madengine: run {summary.run_id}: {len(plan.jobs)} job(s) on {api.server}, namespace "
                     f"{plan.namespace}; results → {request.run.output}")
    started: set[str] = set()
    try:
        for model, image, job in plan.jobs:
            started.add(job.name)
            if build_image is not None and is_local_only(image.reference):
                failure = build_image(model, image, plan.context)
                if failure:
                    session.fail(model, failure, docker_image=image.reference)
                    continue
            session.submit(job, model, request.run.timeout_for(model.timeout))
        session.watch()
    except BaseException as exc:
        session.abort(exc)
        for model, _, job in plan.jobs:
            if job.name not in started:
                session.fail(model, f"not run: {interruption(exc) if isinstance(exc, KeyboardInterrupt) else exc}")
        if not isinstance(exc, KeyboardInterrupt):
            raise
        summary.interrupted = interruption(exc)
        summary.signal = getattr(exc, "signum", 0)


__all__ = ["K8sPlan", "K8sRun", "PreparedRun", "plan_k8s_run", "prepare_run", "render_to_folder", "run_on_k8s"]
