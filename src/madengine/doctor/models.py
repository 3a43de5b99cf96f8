"""What the selected models need of this host, asked the way a run asks it.

For each model: the executor it would run on (``auto``: docker when the engine answers, else
local), the GPUs it would get (:func:`madengine.execution.plan.resolve_gpus`), its ``distributed``
block against the visible GPUs (:func:`madengine.execution.plan.check_distributed`), the Dockerfiles
that match this host's context (the vendor filter of the docker executor) and its
``skip_gpu_arch``. A model that would fail or be refused is a FAIL line saying why.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Iterable, Mapping

from madengine.catalog import Model
from madengine.context import Context, select_dockerfiles
from madengine.core.errors import ConfigError, ExecutionError, LaunchError
from madengine.doctor.checks import FAIL, PASS, WARN, Check
from madengine.execution.plan import check_distributed, distributed_spec, resolve_gpus
from madengine.execution.runner import arch_skip_reason
from madengine.launch import collective_backend, procs_per_node


def effective_executor(executor: str, engine_answers: bool) -> str:
    """The executor a run would use: ``auto`` is docker when an engine answers, else local."""
    if executor == "auto":
        return "docker" if engine_answers else "local"
    return executor


def model_needs(executor: str, context: Context, models: Iterable[Model]) -> set[str]:
    """What the models need of this host: ``docker``, ``gpu``, ``slurm``, ``k8s``."""
    needs = {executor} if executor in ("docker", "slurm", "k8s") else set()
    for model in models:
        try:
            if resolve_gpus(model, context):
                needs.add("gpu")
        except ExecutionError:
            needs.add("gpu")
    return needs


def check_model(model: Model, context: Context, executor: str, root: Path, environ: Mapping[str, str]) -> Check:
    name = f"model {model.name}"
    if executor in ("slurm", "k8s"):
        return Check(name, PASS, f"runs on {executor} nodes: their GPUs are checked where it runs")
    skipped = arch_skip_reason(model, context.gpu_architecture)
    if skipped:
        return Check(name, WARN, f"would be SKIPPED ({skipped})", "run it on another GPU architecture, or "
                     "--disable-skip-gpu-arch")
    try:
        check_distributed([model], context, environ)
        gpus = resolve_gpus(model, context)
    except (ExecutionError, LaunchError) as exc:
        return Check(name, FAIL, exc.message, exc.hint or "run it on a host with more GPUs, or set n_gpus (or "
                     "distributed.nproc_per_node) in --additional-context", need="gpu")
    where = f"on GPU(s) {','.join(map(str, gpus))}" if gpus else "on the CPU"
    spec = distributed_spec(model, context)
    if spec is not None:
        where = f"{spec.launcher} with {procs_per_node(spec, gpus)} rank(s) {where} " \
            f"({collective_backend(spec, gpus)})"
    if executor == "docker":
        try:
            files = select_dockerfiles(root, model.name, model.dockerfile, context.values)
        except (ExecutionError, ConfigError) as exc:
            return Check(name, FAIL, exc.message, "use --executor local (the scripts run on the host), or add a "
                         f"Dockerfile for {context.gpu_vendor}", need="docker")
        return Check(name, PASS, f"docker ({', '.join(f.path.name for f in files)}), {where}")
    script = root / model.scripts
    if model.scripts and not model.url and not script.exists():
        return Check(name, FAIL, f"its script {model.scripts} does not exist", "check the model's 'scripts'")
    if script.suffix == ".py" and shutil.which("python3", path=environ.get("PATH")) is None:
        return Check(name, FAIL, f"{model.scripts} needs python3 on PATH", "install python3")
    return Check(name, PASS, f"local ({model.scripts}), {where}")
