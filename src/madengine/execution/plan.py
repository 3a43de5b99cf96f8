"""Planning one model's run: its key, its GPUs, the environment its scripts see, its model step.

The plan itself is a :class:`madengine.core.spec.RunSpec`; these are the pieces the runner
fills it with.
"""

from __future__ import annotations

import posixpath
import re
import shlex
import shutil
from pathlib import Path
from typing import Mapping

from madengine.catalog.schema import Model
from madengine.context.context import Context, parse_gpu_list
from madengine.core.errors import ExecutionError
from madengine.core.spec import Step

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


def resolve_gpus(model: Model, context: Context) -> list[int]:
    """The GPU indices a run gets: ``n_gpus`` of the available ones (-1 = all)."""
    if context.gpu_vendor == "CPU":
        return []
    available = parse_gpu_list(context.get("docker_gpus")) if context.get("docker_gpus") is not None \
        else list(range(context.system_ngpus))
    wanted = int(context.get("n_gpus", model.n_gpus))
    if wanted == -1:
        return available
    if wanted > len(available):
        raise ExecutionError(f"model '{model.name}' needs {wanted} GPU(s) but {len(available)} are available")
    return available[:wanted]


def model_env(model: Model, context: Context, gpu_ids: list[int], run_id: str, executor: str,
              environ: Mapping[str, str]) -> dict[str, str]:
    """The MAD_* variables, context ``docker_env_vars`` and tag configs the model's scripts see."""
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
