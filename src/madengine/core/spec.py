"""What one run of one model is, independent of the executor: its steps, mounts and work folder.

These types sit in the core because every package that shapes a run touches them: execution runs
them, data providers add mounts and environment, tools wrap the model step, bench adds the ONNX
harness step. Paths the model sees are relative to the work folder, which the docker executor
mounts at :data:`CONTAINER_WORKSPACE` and the local executor uses in place.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, ContextManager

CONTAINER_WORKSPACE = "/myworkspace"
#: a run's work folder in its artifacts folder (``<runs dir>/<run id>/<key>/work``): the model's
#: files while it runs, removed when the run of the model ends
WORK_FOLDER = "work"


@dataclasses.dataclass
class Step:
    """One command run in the work folder: a pre-script, the model script, or a post-script."""

    name: str
    argv: list[str]
    cwd: str = ""  # relative to the work folder
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    is_model: bool = False


@dataclasses.dataclass
class Mount:
    host: str
    container: str
    read_only: bool = True


@dataclasses.dataclass
class RunSpec:
    key: str
    model: Any  # catalog.Model (typed loosely: the core imports nothing of the project)
    workdir: Path
    log_path: Path
    artifacts_dir: Path
    env: dict[str, str]
    steps: list[Step]
    model_cwd: str = ""
    timeout: int | None = None
    mounts: list[Mount] = dataclasses.field(default_factory=list)
    gpu_ids: list[int] = dataclasses.field(default_factory=list)
    #: CPUs the run is pinned to (``--parallel`` slots); empty means no pinning
    cpus: list[int] = dataclasses.field(default_factory=list)
    docker_file: str = ""
    image: str = ""
    git_commit: str = ""
    #: files the model or tools write that are collected into the artifacts folder (glob patterns)
    collect: list[str] = dataclasses.field(default_factory=list)
    #: set by providers/tools: perf row values (dataname, data_provider_type, ...)
    row_values: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: the run is exactly one execution of one step (no pre/post-scripts, no repeats): an executor
    #: may run it as the container's own process instead of a step inside a waiting container
    one_shot: bool = False
    #: ``--keep-alive``: the container (or work folder) is kept after the run on purpose
    keep_alive: bool = False
    #: texts written into the work folder before the steps run, by path relative to it (the
    #: DeepSpeed hostfile of a distributed job)
    files: dict[str, str] = dataclasses.field(default_factory=dict)
    #: a distributed job's launch on this node (``madengine.launch.NodeLaunch``; None otherwise)
    launch: Any = None
    #: called after the steps ran and files were collected; each returns extra perf row values
    #: (standard column names set the column, other names become extra columns at the end)
    finalizers: list[Callable[["RunSpec"], dict[str, Any]]] = dataclasses.field(default_factory=list)
    #: entered around each run of the model step, left when it ended: what works beside the model
    #: while it runs (a serving model's load generator, which ends its server when it is done)
    around_model: list[Callable[["RunSpec"], ContextManager[Any]]] = dataclasses.field(default_factory=list)
    #: the CSV of one row per result the model step writes (``multiple_results``'s format), relative
    #: to the work folder: the model's ``multiple_results``, or the load points of a serving model
    results_table: str = ""
    #: the run's container shares the host's network (a serving model's endpoint, reached from here)
    host_network: bool = False

    @property
    def run_id(self) -> str:
        return self.env.get("MAD_RUN_ID", "")
