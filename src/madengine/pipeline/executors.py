"""Choosing the executor of a run and where its images come from."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping

from madengine.context import Context
from madengine.core.cachedir import cache_root
from madengine.core.errors import ServiceError
from madengine.core.events import Reporter
from madengine.core.host import Host
from madengine.execution import BuildOptions, Executor
from madengine.execution.provenance import ProbeCache
from madengine.pipeline.selection import Selection


def connect_docker(environ: Mapping[str, str], hint: str | None = None) -> Any:
    """The engine the (injected) environment's ``DOCKER_HOST`` names, once it answered."""
    from madengine.execution.docker import connect

    return connect(environ, hint=hint) if hint else connect(environ)


def wants_docker(executor: str, reporter: Reporter, environ: Mapping[str, str]) -> Any | None:
    """A Docker engine for ``docker``/``auto``; None when ``auto`` finds no engine (said on stderr)."""
    if executor == "local":
        return None
    try:
        return connect_docker(environ)
    except ServiceError:
        if executor == "docker":
            raise
        reporter.message("madengine: no Docker engine answers; running models with the local executor")
        return None


def build_images(client: Any, build: BuildOptions, *, root: Path, context: Context, run_dir: Path,
                 reporter: Reporter) -> Any:
    """The catalog image source: each model's matching Dockerfiles, built or found up to date."""
    from madengine.execution.build import DockerBuilder
    from madengine.execution.images import BuildImages

    live: Callable[[str], Any] = (lambda key: (lambda line: reporter.output(key, line))) if build.live_output \
        else (lambda key: None)
    return BuildImages(DockerBuilder(client, pull=build.pull, no_cache=build.no_cache, rebuild=build.rebuild),
                       root=root, context=context, run_dir=run_dir, reporter=reporter, live=live)


def choose_executor(executor: str, selection: Selection, build: BuildOptions, transport: Any, *, context: Context,
                    run_dir: Path, host: Host, reporter: Reporter) -> Executor:
    """docker (images built from the catalog, or the manifest's) or local."""
    if selection.manifest is not None:
        executor = "docker"
    client = wants_docker(executor, reporter, host.environ)
    probes = ProbeCache(cache_root(host.environ) / "probes")
    if client is None:
        from madengine.execution.local import LocalExecutor

        return LocalExecutor(host.environ, probes)
    from madengine.execution.docker import DockerExecutor

    if selection.manifest is not None:
        from madengine.distributed import transport as image_transport
        from madengine.distributed.manifest import ManifestImages

        images: Any = ManifestImages(selection.manifest, client, transport, reporter,
                                     image_transport.registry_auth(host.environ))
    else:
        images = build_images(client, build, root=selection.catalog.root, context=context, run_dir=run_dir,
                              reporter=reporter)
    return DockerExecutor(client, images, probes)
