"""Images built from the catalog: each model's Dockerfiles whose ``# CONTEXT`` header matches the
host, built (or found up to date) under ``ci-<model>_<dockerfile stem>``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from madengine.context import Context, select_dockerfiles
from madengine.core.events import Reporter
from madengine.execution.build import DockerBuilder, build_inputs
from madengine.execution.executor import ImageInfo, Target
from madengine.execution.plan import image_key, relative_to, tag_config_vars


def build_args(model: Any, context: Context) -> dict[str, str]:
    """The build args offered: the context's ``docker_build_arg`` and the model's tag configs (which
    win). Only those the Dockerfile declares reach the build (:func:`build_inputs`)."""
    args = dict(context.docker_build_arg)
    args.update(tag_config_vars(model))
    return args


class BuildImages:
    """The image source of an ordinary docker run and of ``madengine build``."""

    def __init__(self, builder: DockerBuilder, *, root: Path, context: Context, run_dir: Path, reporter: Reporter,
                 live: Callable[[str], Callable[[str], None] | None]) -> None:
        self.builder = builder
        self.root = root
        self.context = context
        self.run_dir = run_dir
        self.reporter = reporter
        self.live = live

    def targets(self, model: Any) -> list[Target]:
        dockerfiles = select_dockerfiles(self.root, model.name, model.dockerfile, self.context.values)
        args = build_args(model, self.context)
        return [Target(key=image_key(model.name, d.stem), docker_file=relative_to(d.path, self.root),
                       source=build_inputs(d.path, (self.root / model.dockercontext) if model.dockercontext
                                           else d.path.parent, args))
                for d in dockerfiles]

    def obtain(self, target: Target) -> ImageInfo:
        self.reporter.message(f"madengine: image {target.key} from {target.docker_file}")
        info = self.builder.build(target.key, target.source, self.run_dir / target.key / "build.log",
                                  self.live(target.key))
        skipped = _SKIPPED.get(info.how)
        if skipped:  # said, so that a skipped build is never a surprise
            self.reporter.message(f"madengine: {target.key} {skipped}; --rebuild forces a build")
        return info

    def close(self) -> None:
        """After the run's containers are gone: remove the images rebuilds replaced that they held."""
        self.builder.close()


_SKIPPED = {"up to date": "is up to date (its build inputs are unchanged)",
            "tagged": "is tagged from an image built from the same inputs"}
