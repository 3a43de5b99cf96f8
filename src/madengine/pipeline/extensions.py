"""What shapes a model's run beyond its script: data providers, credentials, the ONNX harness and
tools, as run extensions (see :data:`madengine.execution.Extension`), and the checks that refuse
bad data.json, credential.json and tools.json before anything is built (exit 2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from madengine.catalog import Model
from madengine.context import Context
from madengine.core.events import Reporter
from madengine.core.errors import InputError
from madengine.core.spec import Mount, RunSpec
from madengine.execution import Extension, RunOptions
from madengine.tracing import NULL_TRACER, names


def _uses_tools(context: Context) -> bool:
    return bool(context.get("tools") or context.get("pre_scripts") or context.get("post_scripts"))


def check_inputs(models: Sequence[Model], options: RunOptions, context: Context, root: Path,
                 environ: Mapping[str, str]) -> None:
    """Bad data.json / credential.json / tools.json, an unknown tool, a bad ``repeat`` field, a bad
    ``distributed`` block: exit 2 before any build."""
    from madengine.execution.plan import check_distributed
    from madengine.execution.runner import check_repeat

    for model in models:
        check_repeat(model)
    check_distributed(list(models), context, environ)
    if any(m.extra.get("serving") is not None for m in models):
        from madengine.serving.models_json import check_blocks

        check_blocks(list(models), root)
    if any(m.data_names or m.cred or m.url for m in models):
        from madengine.data import check_run_inputs

        check_run_inputs(models, options.data_config_file_name, context, root, environ)
    if _uses_tools(context):
        from madengine.tools import validate_tools

        validate_tools(context, options.tools_json_file_name, root)


def context_mounts(context: Context, executor: str) -> list[Mount]:
    """The context's ``docker_mounts`` for a docker run; refused for a local one (exit 2): host
    processes see host paths as they are, and cannot be given other paths without root."""
    from madengine.context.mounts import check_host_paths, docker_mounts

    mounts = docker_mounts(context.docker_mounts)
    if not mounts:
        return []
    if executor != "docker":
        raise InputError("docker_mounts applies to the docker executor; the local executor runs models on this "
                         "host, where they read the host paths directly", path="context", field="docker_mounts",
                         hint="use --executor docker, or drop docker_mounts and point the model at the host paths")
    check_host_paths(mounts)
    return [Mount(m.host, m.container, m.read_only) for m in mounts]


def run_extensions(models: Sequence[Model], options: RunOptions, context: Context, root: Path, executor: str,
                   reporter: Reporter, environ: Mapping[str, str], tracer: Any = NULL_TRACER) -> list[Extension]:
    """The extensions these models need, in the order they apply: data, credentials, ONNX, serving,
    tools (tools wrap whatever model step the others produced)."""
    extensions: list[Extension] = []
    mounts = context_mounts(context, executor)
    if mounts:
        extensions.append(lambda spec: spec.mounts.extend(mounts))
    if any(m.data_names for m in models):
        from madengine.data import provide_data

        def data(spec: RunSpec) -> None:
            if not spec.model.data_names:
                return
            with tracer.span(names.SPAN_DATA_PROVISION, {names.ATTR_MODEL: spec.model.name}):
                provide_data(spec, data_file=options.data_config_file_name,
                             force_mirror_local=options.force_mirror_local, context=context, executor_name=executor,
                             reporter=reporter, live_output=options.live_output, root=root, environ=environ)

        extensions.append(data)
    if any(m.cred for m in models):
        from madengine.data.credentials import apply_model_credentials

        extensions.append(lambda spec: apply_model_credentials(spec, root, environ) if spec.model.cred else None)
    if any(m.onnx for m in models):
        from madengine.bench.models_json import onnx_step

        extensions.append(lambda spec: spec.steps.append(onnx_step(spec, root, executor)) if spec.model.onnx else None)
    if any(m.extra.get("serving") is not None for m in models):
        from madengine.serving.models_json import serving_extension

        extensions.append(serving_extension(root, executor, tracer, reporter.message))
    if _uses_tools(context):
        from madengine.tools import apply_tools

        extensions.append(lambda spec: apply_tools(spec, context, options.tools_json_file_name, root))
    return extensions
