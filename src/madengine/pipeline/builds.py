"""``madengine build``: build the selected models' images once and write an immutable build manifest.

A model whose Dockerfiles cannot be selected, or whose build, push or save fails, is listed under
``failed`` with its reason; the other models go on.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from madengine.catalog import model_root
from madengine.context import build_context
from madengine.context.dockerfiles import HeaderKeys
from madengine.core.errors import EngineUnavailable, MadEngineError
from madengine.core.events import Reporter
from madengine.core.host import Host
from madengine.core.ids import new_run_id
from madengine.distributed import transport
from madengine.distributed.manifest import (Manifest, Publisher, built_entry, failed_entry, new_manifest,
                                            write_manifest)
from madengine.pipeline.executors import build_images, connect_docker
from madengine.pipeline.requests import BuildRequest
from madengine.pipeline.selection import select


def build(request: BuildRequest, host: Host, reporter: Reporter | None = None) -> Manifest:
    reporter = reporter or Reporter()
    options = request.transport
    if options.registry:
        options = dataclasses.replace(options, registry=transport.check_registry(options.registry))
    selection = select(request.tags, root=model_root(host.environ))
    context = build_context(context_file=request.context_file, context_string=request.context_string,
                            catalog_keys=HeaderKeys.of(selection.catalog, selection.models))
    for warning in context.warnings():
        reporter.message(f"madengine: warning: {warning}")
    client = connect_docker(host.environ, "start dockerd (scripts/docker-up.sh); 'madengine build' builds images, "
                                          "which needs an engine")
    build_id = new_run_id()
    images = build_images(client, request.build, root=selection.catalog.root, context=context,
                          run_dir=Path(request.runs_dir) / build_id, reporter=reporter)
    manifest = new_manifest(build_id, host.now(), selection.catalog.root, list(request.tags), context, options)
    publisher = Publisher(client, manifest, reporter, build_id,
                          transport.registry_auth(host.environ, options.password) if options.registry else None)
    reporter.message(f"madengine: build {build_id}: {len(selection.models)} model(s); manifest → "
                     f"{request.manifest_file}")
    lost: EngineUnavailable | None = None  # the engine went or hangs: the models after it are not built
    for model in selection.models:
        if lost is not None:
            manifest.failed.append(failed_entry(model, f"{lost} (not built)"))
        else:
            lost = _build_model(model, images, publisher, manifest, reporter, host)
    images.close()
    write_manifest(manifest, Path(request.manifest_file))
    return manifest


def _build_model(model: Any, images: Any, publisher: Publisher, manifest: Manifest, reporter: Reporter,
                 host: Host) -> EngineUnavailable | None:
    """Build (and publish) each of the model's images into ``manifest``; the engine's loss when
    it went or stopped answering meanwhile."""
    from madengine.execution.docker import engine_calls

    try:
        targets = images.targets(model)
    except MadEngineError as exc:
        manifest.failed.append(failed_entry(model, str(exc)))
        return None
    for target in targets:
        try:
            with engine_calls():
                entry = built_entry(model, target, images.obtain(target), host.now())
        except MadEngineError as exc:
            manifest.failed.append(failed_entry(model, str(exc), target))
            reporter.message(f"madengine: {model.name}: build FAILED ({manifest.failed[-1].reason})")
            if isinstance(exc, EngineUnavailable):
                return exc
            continue
        try:
            publisher.publish(entry)
        except MadEngineError as exc:
            manifest.failed.append(failed_entry(model, f"built as {entry.image_id[:19]} but {exc}", target))
            reporter.message(f"madengine: {model.name}: build FAILED ({manifest.failed[-1].reason})")
            continue
        manifest.images.append(entry)
        reporter.message(f"madengine: {model.name}: built {entry.image} ({entry.image_id[:19]})")
    return None
