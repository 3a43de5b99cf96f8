"""Typed options of the build/run split, parallel scheduling and Slurm (what the flags say), and
the flags of a run's images (:data:`TRANSPORT_FLAGS`, a :mod:`madengine.core.flagtable` table)."""

from __future__ import annotations

import dataclasses
from typing import Any

from madengine.core.flagtable import Flag

DEFAULT_MANIFEST = "build_manifest.json"

#: madengine run: where its images come from (:class:`TransportOptions`)
TRANSPORT_FLAGS = (
    Flag(("--manifest-file", "-m"), "manifest_file", "run exactly the images of a build manifest (from 'madengine "
         "build') without rebuilding", metavar="JSON"),
    Flag(("--registry",), "registry", "registry to pull manifest images from", metavar="HOST[/NS]"),
    Flag(("--image-archive",), "image_archive", "folder of 'docker save' archives to load manifest images from",
         metavar="DIR"),
)


@dataclasses.dataclass(frozen=True)
class TransportOptions:
    """Where a run's images come from, or where a build sends them."""

    manifest_file: str | None = None
    registry: str | None = None
    image_archive: str | None = None
    #: registry password given on stdin (``build --password-stdin``); else the environment's
    password: str | None = None


@dataclasses.dataclass(frozen=True)
class ParallelOptions:
    workers: int = 1


@dataclasses.dataclass(frozen=True)
class SlurmOptions:
    partition: str | None = None
    nodes: int | None = None
    gpus_per_node: int | None = None
    time: str | None = None
    slurm_args: str | None = None
    no_wait: bool = False
    dry_run: bool = False

    def overrides(self) -> dict[str, Any]:
        """The settings the flags give, over the context's ``slurm`` section."""
        values = {"partition": self.partition, "nodes": self.nodes, "gpus_per_node": self.gpus_per_node,
                  "time": self.time, "slurm_args": self.slurm_args}
        return {k: v for k, v in values.items() if v is not None}
