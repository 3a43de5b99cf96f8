"""The interface every executor implements, and the image-source strategy behind docker runs.

An :class:`Executor` takes one model from "what do I run it as" to "it ran and was cleaned up":

* :meth:`Executor.targets` — what the model runs as: one target per selected Dockerfile (docker),
  per manifest image (a manifest run), or the host itself (local);
* :meth:`Executor.obtain_image` — the image for a target (built, found up to date, or fetched);
* :meth:`Executor.probe` — the software (framework versions) and thread settings the model's
  steps will see (:mod:`madengine.execution.provenance`), before anything of the model starts;
* :meth:`Executor.start`, :meth:`Executor.run_step`, :meth:`Executor.stop` — one container (or work
  folder) per run, each step in it, then clean-up;
* :meth:`Executor.abort` — end everything a run started (Ctrl-C, SIGTERM, a parallel slot's crash).

Where a docker run's images come from is an :class:`ImageSource`: built from the catalog's
Dockerfiles (:class:`madengine.execution.images.BuildImages`) or taken from a build manifest
(:class:`madengine.distributed.manifest.ManifestImages`). It is passed in, never subclassed.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

from madengine.core.spec import RunSpec, Step
from madengine.execution.provenance import Probe
from madengine.execution.streams import LineSink, StepResult


@dataclasses.dataclass
class Target:
    """One way to run a model: its key (``ci-<model>_<stem>``, or the local key) and image."""

    key: str
    #: the Dockerfile shown in the row (relative to the model repository)
    docker_file: str = ""
    #: set when the target cannot run at all: the FAILURE reason (e.g. a failed manifest build)
    failure: str = ""
    #: what the image source needs to obtain the image (build inputs, a manifest entry)
    source: Any = None
    #: what obtaining the image is called in progress lines
    obtaining: str = "building"


@dataclasses.dataclass
class ImageInfo:
    """The image a target runs: ``run_as`` is what the container is created from (a name, or an
    image id when the name may since point at another build)."""

    image: str
    image_id: str
    base_docker: str = ""
    docker_sha: str = ""
    duration: float = 0.0
    #: how it was obtained: built | up to date | tagged | manifest
    how: str = "built"

    @property
    def run_as(self) -> str:
        return self.image_id if self.how == "manifest" else self.image


class ImageSource(Protocol):
    def targets(self, model: Any) -> list[Target]:
        """The targets of ``model``; a MadEngineError when none can be chosen."""

    def obtain(self, target: Target) -> ImageInfo:
        """The image of ``target``; a MadEngineError (its row's reason) when it cannot be had."""


class Executor(Protocol):
    name: str

    def targets(self, model: Any) -> list[Target]: ...

    def obtain_image(self, target: Target) -> ImageInfo | None: ...

    def workspace(self, spec: RunSpec) -> str:
        """The work folder as the model's steps see it."""

    def probe(self, spec: RunSpec) -> Probe:
        """The framework versions (one light probe per image, cached) and the thread settings of
        the model step of ``spec``."""

    def start(self, spec: RunSpec) -> None: ...

    def run_step(self, spec: RunSpec, step: Step, timeout: int | None, sink: LineSink) -> StepResult: ...

    def stop(self, spec: RunSpec, keep_alive: bool) -> None: ...

    def abort(self, run_id: str) -> None:
        """Kill every container or process group run ``run_id`` started (they are cleaned up by
        :meth:`stop`, which the runner still calls)."""

    def close(self) -> list[str]:
        """Wait until everything :meth:`stop` started to clean up is gone; the names of what is still
        left behind (containers an engine that went away could not remove), else an empty list."""
