"""Planning one model's run: its key, its GPUs, the environment its scripts see, its model step.

The plan itself is a :class:`madengine.core.spec.RunSpec`; these are the pieces the runner
fills it with.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
import shlex
import shutil
from pathlib import Path
from typing import Mapping

from madengine.catalog.schema import Model
from madengine.context.context import Context, parse_gpu_list
from madengine.core.errors import ExecutionError, LaunchError
from madengine.core.spec import CONTAINER_WORKSPACE, Step
from madengine.launch import DEFAULT_PORT, DistributedSpec, NodeLaunch, NodePlacement, node_launch
from madengine.launch.network import rendezvous_interface
from madengine.launch.ports import check_port_free, free_port
from madengine.launch.spec import check_block, merge_blocks, spec_from_block

#: host variables handed to the model when set (distributed launchers and GPU pinning rely on them)
PASSTHROUGH_ENV = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "NODE_RANK", "NNODES", "NPROC_PER_NODE",
                   "MAD_MULTI_NODE_RUNNER", "MAD_COLLECT_METRICS", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME",
                   "NCCL_DEBUG", "NCCL_IB_DISABLE", "NCCL_NET_GDR_LEVEL", "MIOPEN_USER_DB_PATH")


def image_key(model_name: str, dockerfile_stem: str) -> str:
    """``ci-<model>_<dockerfile stem>``, lower-cased, ``/`` → ``_``."""
    return f"ci-{model_name.replace('/', '_').lower()}_{dockerfile_stem.lower()}"


def local_key(model_name: str) -> str:
    return model_name.replace("/", "_").lower()


def env_name(key: str) -> str:
    """A tag config key as an environment/build-arg name: ``batch-size`` → ``BATCH_SIZE``."""
    return re.sub(r"[^A-Za-z0-9_]", "_", key).upper()


def tag_config_vars(model: Model) -> dict[str, str]:
    out = {env_name(k): v for k, v in model.tag_configs}
    for key, value in model.tag_configs:
        if env_name(key) == "BATCH_SIZE":
            out["MAD_MODEL_BATCH_SIZE"] = value
    return out


def available_gpus(context: Context) -> list[int]:
    """The GPU indices runs may use: the context's ``docker_gpus``, else every detected GPU."""
    if context.gpu_vendor == "CPU":
        return []
    if context.get("docker_gpus") is not None:
        return parse_gpu_list(context.get("docker_gpus"))
    return list(range(context.system_ngpus))


def resolve_gpus(model: Model, context: Context) -> list[int]:
    """The GPU indices a run gets: ``n_gpus`` of the available ones (-1 = all); a job with a
    ``distributed`` block that names ``nproc_per_node`` gets one GPU per rank."""
    if context.gpu_vendor == "CPU":
        return []
    available = available_gpus(context)
    spec = distributed_spec(model, context)
    wanted = spec.nproc_per_node if spec is not None and spec.nproc_per_node else \
        int(context.get("n_gpus", model.n_gpus))
    if wanted == -1:
        return available
    if wanted > len(available):
        raise ExecutionError(f"model '{model.name}' needs {wanted} GPU(s) but {len(available)} are available")
    return available[:wanted]


# -- distributed launchers (madengine.launch) -----------------------------------------------------
#: the variables that make a run one node of a multi-node job: the executor that starts the node
#: (the Slurm job script, a Kubernetes pod) sets them in madengine's own environment
NODE_ENV = ("NNODES", "NODE_RANK", "MASTER_ADDR")


def distributed_spec(model: Model, context: Context) -> DistributedSpec | None:
    """The model's ``distributed`` block with the context's laid over it key by key (the context's
    was checked when the context was read); None when neither has one. Raises LaunchError."""
    block = model.extra.get("distributed")
    overlay = context.distributed
    if block is None and not overlay:
        return None
    where = f"model '{model.name}': distributed"
    checked = check_block(block, source=model.source, where=where) if block is not None else {}
    source = f"{model.source} + context" if block is not None and overlay else \
        (model.source if block is not None else "context")
    return spec_from_block(merge_blocks(checked, overlay), source=source, where=where, model_name=model.name)


def job_node(environ: Mapping[str, str], spec: DistributedSpec) -> NodePlacement | None:
    """This run's place in a multi-node job, from the variables of :data:`NODE_ENV` (with
    ``MASTER_PORT`` and ``MAD_NODE_HOSTS``, a comma list of every node's address, when set);
    None when they are not all set. Raises LaunchError when they disagree with the spec."""
    if not all(environ.get(name) for name in NODE_ENV):
        return None
    nnodes, rank = environ["NNODES"].strip(), environ["NODE_RANK"].strip()
    port = environ.get("MASTER_PORT", "").strip()
    if not (nnodes.isdigit() and rank.isdigit() and (port.isdigit() or not port)):
        raise LaunchError(f"NNODES={nnodes!r}, NODE_RANK={rank!r}, MASTER_PORT={port!r} are not whole numbers",
                          path="environment", hint="the executor that starts each node sets them")
    if int(nnodes) != spec.nnodes:
        raise LaunchError(f"this node belongs to a job of NNODES={nnodes}, the model asks for nnodes {spec.nnodes}",
                          path="environment", field="NNODES", hint="make distributed.nnodes and the job's nodes agree")
    hosts = tuple(h.strip() for h in environ.get("MAD_NODE_HOSTS", "").split(",") if h.strip())
    return NodePlacement(node_rank=int(rank), master_addr=environ["MASTER_ADDR"].strip(),
                         master_port=int(port) if port else spec.master_port or DEFAULT_PORT, hosts=hosts)


def check_distributed(models: list[Model], context: Context, environ: Mapping[str, str]) -> None:
    """Bad ``distributed`` blocks are exit 2 before anything is built: a malformed block, more ranks
    than visible GPUs, or a multi-node job on an executor that runs one node (local, docker)."""
    visible = available_gpus(context)
    for model in models:
        spec = distributed_spec(model, context)
        if spec is None:
            continue
        if visible and spec.nproc_per_node and spec.nproc_per_node > len(visible):
            raise LaunchError(f"nproc_per_node {spec.nproc_per_node} is more than the {len(visible)} visible GPU(s)",
                              path=model.source, field=f"model '{model.name}': distributed.nproc_per_node",
                              hint=f"set it to {len(visible)} or fewer (or change docker_gpus)")
        node = job_node(environ, spec) if spec.multi_node else NodePlacement()
        if node is None:
            raise LaunchError(f"nnodes {spec.nnodes} needs a multi-node executor; this one runs one node",
                              path=model.source, field=f"model '{model.name}': distributed.nnodes",
                              hint="use --executor slurm, or set nnodes to 1")
        try:  # the placement's own checks (parallel sizes, node list), as this node will run it
            node_launch(spec, dataclasses.replace(node, devices=tuple(visible[:spec.nproc_per_node or len(visible)]),
                                                  workspace=CONTAINER_WORKSPACE))
        except LaunchError as exc:
            raise LaunchError(exc.message, path=model.source, field=f"model '{model.name}': {exc.field}",
                              hint=exc.hint) from None


def check_ports(models: list[Model], context: Context, executor: str, environ: Mapping[str, str]) -> None:
    """A ``master_port`` that is taken where it is bound: exit 2 before any model runs. Checked on
    the host for the local executor and on node rank 0 of a multi-node job; a container of the
    docker executor has a network of its own."""
    for model in models:
        spec = distributed_spec(model, context)
        if spec is None:
            continue
        node = job_node(environ, spec) if spec.multi_node else None
        port = node.master_port if node is not None else spec.master_port
        if port is not None and (node.node_rank == 0 if node is not None else executor == "local"):
            check_port_free(port, source=model.source)


def plan_launch(model: Model, context: Context, gpu_ids: list[int], workspace: str,
                environ: Mapping[str, str]) -> NodeLaunch | None:
    """What this node of the model's job runs (None without a ``distributed`` block): a one-node
    job rendezvous on this host, at its ``master_port`` or a free port; a node of a multi-node job
    where :func:`job_node` says, NCCL and Gloo on the interface that routes to the rendezvous unless
    the user chose one (the environment or the context's ``docker_env_vars``). Raises LaunchError."""
    spec = distributed_spec(model, context)
    if spec is None:
        return None
    node = job_node(environ, spec) if spec.multi_node else None
    if spec.multi_node and node is None:
        raise LaunchError(f"nnodes {spec.nnodes} needs a multi-node executor", field="distributed.nnodes")
    if node is not None:
        node = dataclasses.replace(node, socket_ifname=rendezvous_interface(node.master_addr, environ,
                                                                            context.docker_env_vars))
    place = node or NodePlacement(master_port=spec.master_port or free_port())
    place = dataclasses.replace(place, devices=tuple(gpu_ids), workspace=workspace)
    return node_launch(spec, place)


def model_env(model: Model, context: Context, gpu_ids: list[int], run_id: str, executor: str,
              environ: Mapping[str, str], launch: NodeLaunch | None = None) -> dict[str, str]:
    """The MAD_* variables, the launcher's (``launch``: ``MAD_MULTI_NODE_RUNNER``, ``MASTER_ADDR``, ...,
    over the host's), context ``docker_env_vars`` and tag configs the model's scripts see."""
    env = {
        "MAD_MODEL_NAME": model.name,
        "MAD_GPU_VENDOR": context.gpu_vendor,
        "MAD_SYSTEM_NGPUS": str(context.system_ngpus),
        "MAD_SYSTEM_GPU_ARCHITECTURE": context.gpu_architecture,
        "MAD_SYSTEM_GPU_PRODUCT_NAME": str(context.get("gpu_product_name", "")),
        "MAD_RUNTIME_NGPUS": str(len(gpu_ids)),
        "MAD_GUEST_OS": context.guest_os,
        "MAD_RUN_ID": run_id,
        "MAD_EXECUTOR": executor,
        "JENKINS_BUILD_NUMBER": environ.get("BUILD_NUMBER", "0"),
    }
    if model.multiple_results:
        env["MAD_OUTPUT_CSV"] = model.multiple_results
    if context.get("batch_size") is not None:
        env["MAD_MODEL_BATCH_SIZE"] = str(context.get("batch_size"))
    for name in PASSTHROUGH_ENV:
        if name in environ:
            env[name] = environ[name]
    if launch is not None:
        env.update(launch.env)
    env.update(context.docker_env_vars)
    env.update(tag_config_vars(model))
    return env


def script_step(model: Model, root: Path, args: str, clone: Path | None = None) -> tuple[Step, Path | None]:
    """The model script as a step, and the folder to copy into the work folder (None: the script is
    in the ``clone`` of the model's ``url``, run from the clone's root). The script is looked for in
    the model repository, then in the clone; the error names both places."""
    try:
        argv_args = shlex.split(args)
    except ValueError as exc:
        raise ExecutionError(f"model '{model.name}': args cannot be parsed ({exc})") from None
    script = root / model.scripts
    if script.is_dir() or script.is_file():
        argv, folder = _script_argv(model, script)
        return Step("model", [*argv, *argv_args], is_model=True), folder
    if clone is None:
        raise ExecutionError(f"model '{model.name}': script {model.scripts} not found in the model repository "
                             f"(looked for {script})")
    cloned = clone / model.scripts
    if not (cloned.is_dir() or cloned.is_file()):
        raise ExecutionError(f"model '{model.name}': script {model.scripts} not found in the model repository "
                             f"(looked for {script}) nor in its clone of {model.url} (looked for {model.scripts} "
                             f"in the clone {clone.name}/)")
    argv, folder = _script_argv(model, cloned)
    inside = str(folder.relative_to(clone))
    return Step("model", [*argv[:-1], posixpath.join(inside, argv[-1]) if inside != "." else argv[-1],
                          *argv_args], is_model=True), None


def _script_argv(model: Model, script: Path) -> tuple[list[str], Path]:
    """(interpreter and script name, the script's folder) of a script file or a folder with run.sh."""
    if script.is_dir():
        if not (script / "run.sh").is_file():
            raise ExecutionError(f"model '{model.name}': scripts folder {model.scripts} has no run.sh "
                                 f"(looked for {script / 'run.sh'})")
        return ["bash", "run.sh"], script
    return ["python3" if script.suffix == ".py" else "bash", script.name], script.parent


def copy_tree(source: Path, destination: Path) -> None:
    """Copy a folder's contents into ``destination`` (which may exist), following links.

    A model whose script sits at the repository root copies the root: the folder that holds
    ``destination`` itself (the runs folder, when it is inside the repository) is left out, or the
    copy would copy itself without end.
    """
    destination.mkdir(parents=True, exist_ok=True)
    inside = destination.resolve()
    for entry in source.iterdir():
        if entry.is_dir() and inside.is_relative_to(entry.resolve()):
            continue
        target = destination / entry.name
        if entry.is_dir():
            shutil.copytree(entry, target, dirs_exist_ok=True, symlinks=False)
        else:
            shutil.copy2(entry, target)


def relative_to(path: Path, root: Path) -> str:
    """``path`` as shown in rows and messages: relative to the model repository when inside it."""
    try:
        return str(Path(path).relative_to(root))
    except ValueError:
        return str(path)
