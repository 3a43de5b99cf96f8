"""From selected models to the inputs of their jobs: the context a cluster run sees, each model's
image, GPUs, files, environment and credentials (:class:`~madengine.k8s.render.JobInputs`).

What a pod cannot do is refused here, before anything is built or sent (exit 2): a model that
clones a repository (``url``), host mounts, ``--repeat``, a docker run option with no pod
equivalent, a local-only image the cluster would have to pull. Tools and pre/post scripts run in
the pod around the model step, as in a docker run (:func:`tool_steps`); profiling tools get
SYS_PTRACE.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Collection, Mapping, Sequence

from madengine.catalog import Model
from madengine.context import Context
from madengine.context.context import build_context
from madengine.context.dockerfiles import select_dockerfiles
from madengine.core.errors import ContextError, InputError
from madengine.core.redact import looks_secret, register_secret
from madengine.core.spec import RunSpec, Step
from madengine.execution.plan import distributed_spec, image_key, model_env, script_step
from madengine.k8s.pod import DATA_MOUNT, JobInputs
from madengine.k8s.runopts import pod_options
from madengine.k8s.settings import GPU_RESOURCES, K8sSettings, block_of, k8s_settings
from madengine.launch import DistributedSpec

#: the most bytes of one file of a scripts folder (the whole ConfigMap holds 1 MiB)
_FILE_LIMIT = 1 << 20
#: context keys a pod cannot honour (host folders)
_HOST_ONLY_KEYS = ("docker_mounts",)
#: the variables of the host a pod's model has no use for, left out when empty (the cluster's GPUs are not known here)
_KNOWN_ONLY_FROM_CONTEXT = {"MAD_SYSTEM_GPU_ARCHITECTURE": "gpu_architecture",
                            "MAD_SYSTEM_GPU_PRODUCT_NAME": "gpu_product_name"}


def k8s_context(context_file: str | None, context_string: str | None, catalog_keys: Collection[str] = ()) -> Context:
    """The context of a cluster run: the user's only (this host's GPUs say nothing about the
    cluster's); ``gpu_vendor`` follows ``k8s.gpu_resource_name`` when the context leaves it out.
    ``catalog_keys``: the keys the catalog's Dockerfile headers name."""
    context = build_context(context_file=context_file, context_string=context_string, detect=False,
                            catalog_keys=catalog_keys)
    values = context.values
    resource = block_of(values).get("gpu_resource_name")
    if "gpu_vendor" not in values or values.get("gpu_vendor") == "CPU":
        vendor = next((v for v, name in GPU_RESOURCES.items() if name == resource), None)
        if vendor is not None:
            values["gpu_vendor"] = vendor
    values.setdefault("gpu_vendor", "CPU")
    return context


def settings_of(context: Context, source: str = "context") -> K8sSettings:
    return k8s_settings(block_of(context.values, source), source=source)


def gpu_resource(settings: K8sSettings, context: Context) -> str:
    """The extended resource a pod asks GPUs of: the block's, else the vendor's; '' on a CPU context."""
    return settings.gpu_resource_name or GPU_RESOURCES.get(context.gpu_vendor, "")


def gpu_count(model: Model, spec: DistributedSpec | None, settings: K8sSettings, resource: str) -> int:
    """GPUs per pod: ``k8s.gpu_count``, else the launcher's ``nproc_per_node``, else ``n_gpus``."""
    if not resource:
        return 0
    if settings.gpu_count is not None:
        return settings.gpu_count
    if spec is not None and spec.nproc_per_node:
        return spec.nproc_per_node
    try:
        wanted = int(str(model.n_gpus).strip() or "1")
    except ValueError:
        raise InputError(f"n_gpus {model.n_gpus!r} is not a number", path=model.source,
                         field=f"{model.name}.n_gpus") from None
    if wanted < 0:
        raise InputError(f"n_gpus {wanted} (every GPU of the host) has no meaning on a cluster", path=model.source,
                         field=f"{model.name}.n_gpus", hint="set k8s.gpu_count to the GPUs each pod asks for")
    return wanted


def check_pod_can_run(model: Model, context: Context, settings: K8sSettings) -> None:
    """What a pod cannot do for this model: exit 2, naming the field."""
    if model.url:
        raise InputError("a model that clones a repository (url) cannot run on Kubernetes: its pod gets the "
                         "scripts folder through a ConfigMap", path=model.source, field=f"{model.name}.url",
                         hint="vendor the scripts into the model repository, or run it with --executor docker")
    if not model.scripts:
        raise InputError("a model without scripts has nothing to run in a pod", path=model.source,
                         field=f"{model.name}.scripts")
    if model.data_names and not settings.data_pvc:
        raise InputError(f"model '{model.name}' reads data ({model.data}) and a pod reaches data only through a "
                         "volume", path="context", field="k8s.data_pvc",
                         hint="give k8s.data_pvc, a PersistentVolumeClaim holding the data (mounted at /data)")


def check_context_applies(context: Context) -> None:
    for key in _HOST_ONLY_KEYS:
        if context.get(key):
            raise ContextError("does not apply to --executor k8s (a pod mounts no folder of this host)",
                               path="context", field=key,
                               hint="mount data with k8s.data_pvc and keep results with k8s.results_pvc")


def script_files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` by relative POSIX path (links followed, as a docker run copies
    them); caches and version-control folders left out."""
    files: dict[str, bytes] = {}
    for current, dirs, names in os.walk(folder, followlinks=True):
        dirs[:] = sorted(d for d in dirs if d not in ("__pycache__", ".git"))
        for name in sorted(names):
            path = Path(current) / name
            relative = path.relative_to(folder).as_posix()
            if not path.is_file():
                continue
            if path.stat().st_size > _FILE_LIMIT:
                raise InputError(f"{relative} is {path.stat().st_size} bytes; a pod's scripts travel in a ConfigMap "
                                 "of at most 1 MiB", path=str(folder),
                                 hint="keep data and weights out of the scripts folder (k8s.data_pvc)")
            files[relative] = path.read_bytes()
    return files


@dataclasses.dataclass(frozen=True)
class ImageChoice:
    """One image a model runs as: its key (``ci-<model>_<stem>``), the reference a pod pulls, the
    Dockerfile it was built from, and why it cannot run ('' when it can)."""

    key: str
    reference: str
    dockerfile: str = ""
    failure: str = ""
    image_id: str = ""


def catalog_images(model: Model, root: Path, context: Context) -> list[ImageChoice]:
    """The images a catalog run would build for ``model`` (one per matching Dockerfile): local tags."""
    return [ImageChoice(image_key(model.name, d.stem), image_key(model.name, d.stem), str(d.path.relative_to(root))
                        if d.path.is_relative_to(root) else str(d.path))
            for d in select_dockerfiles(root, model.name, model.dockerfile, context.values)]


def is_local_only(reference: str) -> bool:
    """A ``ci-*`` tag madengine built and never pushed: no registry in the name, so no node can pull it."""
    return "/" not in reference and reference.split(":")[0].split("@")[0].startswith("ci-")


def check_pullable(image: ImageChoice, model: Model, settings: K8sSettings) -> None:
    if is_local_only(image.reference) and settings.image_pull_policy != "Never":
        raise InputError(f"image {image.reference} of model '{model.name}' is only on this host, and the cluster "
                         f"must pull it (image_pull_policy {settings.image_pull_policy})", path="context",
                         field="k8s.image_pull_policy",
                         hint="push it with 'madengine build --registry HOST[/NS]' and run its manifest: 'madengine "
                              "run --manifest-file build_manifest.json --executor k8s'; or image_pull_policy Never "
                              "when every node has the image")


def pod_env(model: Model, context: Context, gpus: int, run_id: str) -> dict[str, str]:
    """The variables of the model's pod, as the docker executor gives its container (MAD_*,
    docker_env_vars, tag configs), less the host's pass-through ones: this host is not the pod's.
    The GPU architecture and product name come from the context, or are left out (this host's
    GPUs say nothing of the cluster's). Values of secret-looking names are registered for
    redaction: they travel in the job's Secret."""
    env = model_env(model, context, list(range(gpus)), run_id, "k8s", {}, None)
    env["MAD_DEPLOYMENT_TYPE"] = "kubernetes"
    if context.get("system_ngpus") is None:  # the pod sees the GPUs it asked for, whatever its node holds
        env["MAD_SYSTEM_NGPUS"] = str(gpus)
    for name, key in _KNOWN_ONLY_FROM_CONTEXT.items():
        if not context.get(key) and not context.docker_env_vars.get(name):
            env.pop(name, None)
    if model.data_names:
        env["MAD_DATAHOME"] = DATA_MOUNT
        env["MAD_DATANAME"] = ",".join(model.data_names)
    for name, value in env.items():
        if looks_secret(name):
            register_secret(value)
    return env


@dataclasses.dataclass(frozen=True)
class ToolSteps:
    """What the context's tools and pre/post scripts add to a pod's run (as ``apply_tools`` adds
    them to a docker run): steps before and after the model step, the model step's wrapper, the
    tools' files and variables, the outputs that come back, the summaries made of them."""

    pre: tuple[tuple[str, tuple[str, ...]], ...] = ()
    argv: tuple[str, ...] = ()
    post: tuple[tuple[str, tuple[str, ...]], ...] = ()
    files: Mapping[str, bytes] = dataclasses.field(default_factory=dict)
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    outputs: tuple[str, ...] = ()
    finalizers: tuple[Callable[[RunSpec], dict[str, Any]], ...] = ()
    #: profilers trace the model's processes: SYS_PTRACE (the reference's allowance on Kubernetes)
    capabilities: tuple[str, ...] = ()


def tool_steps(model: Model, context: Context, root: Path, tools_json: str | None, step: Step,
               timeout: int | None) -> ToolSteps:
    """The context's tools around ``step`` (ContextError/ConfigError, exit 2, for a bad tools entry)."""
    from madengine.tools import apply_tools

    if not (context.get("tools") or context.get("pre_scripts") or context.get("post_scripts")):
        return ToolSteps(argv=tuple(step.argv))
    with tempfile.TemporaryDirectory(prefix="madengine-k8s-tools-") as folder:
        work = Path(folder)
        spec = RunSpec(key=model.name, model=model, workdir=work, log_path=work / "run.log", artifacts_dir=work,
                       env={}, steps=[Step(step.name, list(step.argv), is_model=True)], timeout=timeout)
        apply_tools(spec, context.values, tools_json, root)
        model_at = next(i for i, s in enumerate(spec.steps) if s.is_model)
        files = {path.relative_to(work).as_posix(): path.read_bytes() for path in sorted(work.rglob("*"))
                 if path.is_file() and path.name != "run.log"}
    return ToolSteps(pre=tuple((s.name, tuple(s.argv)) for s in spec.steps[:model_at]),
                     argv=tuple(spec.steps[model_at].argv),
                     post=tuple((s.name, tuple(s.argv)) for s in spec.steps[model_at + 1:]), files=files,
                     env=dict(spec.env), outputs=tuple(spec.collect), finalizers=tuple(spec.finalizers),
                     capabilities=("SYS_PTRACE",) if context.get("tools") else ())


def job_inputs(model: Model, image: ImageChoice, *, context: Context, settings: K8sSettings, root: Path,
               namespace: str, run_id: str, timeout: int | None, secret_env: Mapping[str, str] | None = None,
               registry_auth: tuple[str, str, str] | None = None, tools_json: str | None = None) \
        -> tuple[JobInputs, ToolSteps]:
    """Everything one model's job is rendered from (reads its scripts folder), and its tools."""
    check_pod_can_run(model, context, settings)
    spec = distributed_spec(model, context)
    resource = gpu_resource(settings, context)
    gpus = gpu_count(model, spec, settings, resource)
    options = pod_options(model, settings, resource if gpus else "")
    step, folder = script_step(model, root, model.run_args)
    tools = tool_steps(model, context, root, tools_json, step, timeout)
    files = script_files(folder)
    clash = sorted(set(files) & set(tools.files))
    if clash:
        raise InputError(f"the scripts folder has {clash[0]}, where the tools' files go", path=str(folder),
                         field=f"{model.name}.scripts")
    inputs = JobInputs(model_name=model.name, label=model.tagged_name, image_key=image.key, image=image.reference,
                       argv=tools.argv, files={**files, **tools.files},
                       env={**pod_env(model, context, gpus, run_id), **tools.env}, run_id=run_id,
                       namespace=namespace, spec=spec, gpu_count=gpus, gpu_resource=resource, timeout=timeout,
                       secret_env=dict(secret_env or {}), registry_auth=registry_auth, dockerfile=image.dockerfile,
                       image_id=image.image_id, options=options, capabilities=tools.capabilities, pre_steps=tools.pre,
                       post_steps=tools.post, outputs=tools.outputs)
    return inputs, tools


def credential_env(models: Sequence[Model], root: Path, environ: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """Each model's ``cred`` entry as its variables (for its Secret), secrets registered for redaction."""
    out: dict[str, dict[str, str]] = {}
    wanted = [m for m in models if m.cred]
    if not wanted:
        return out
    from madengine.data.credentials import (credential_env as entry_env, credential_file, load_credentials,
                                            register_entry_secrets)

    credentials = load_credentials(credential_file(root), environ)
    for model in wanted:
        entry = credentials.model_entry(model.cred, model.name)
        register_entry_secrets(entry)
        out[model.name] = entry_env(model.cred, entry)
    return out


__all__ = ["ImageChoice", "ToolSteps", "catalog_images", "check_context_applies", "check_pullable", "credential_env",
           "gpu_count", "gpu_resource", "is_local_only", "job_inputs", "k8s_context", "pod_env",
           "script_files", "settings_of", "tool_steps"]

