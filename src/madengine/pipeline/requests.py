"""What ``madengine run`` and ``madengine build`` were asked, as typed option groups."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from madengine.distributed.options import DEFAULT_MANIFEST, ParallelOptions, SlurmOptions, TransportOptions
from madengine.execution.options import BuildOptions, RunOptions


@dataclasses.dataclass(frozen=True)
class RunRequest:
    run: RunOptions = RunOptions()
    build: BuildOptions = BuildOptions()
    transport: TransportOptions = TransportOptions()
    parallel: ParallelOptions = ParallelOptions()
    #: Slurm settings from flags; used when ``run.executor`` is ``slurm``
    slurm: SlurmOptions = SlurmOptions()


@dataclasses.dataclass(frozen=True)
class BuildRequest:
    tags: tuple[str, ...] = ()
    context_file: str | None = None
    context_string: str | None = None
    runs_dir: Path = Path("madengine_runs")
    manifest_file: str = DEFAULT_MANIFEST
    build: BuildOptions = BuildOptions()
    transport: TransportOptions = TransportOptions()
