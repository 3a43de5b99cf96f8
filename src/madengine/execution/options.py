"""Typed options of a run and of image builds (what the CLI flags say, already checked).

Option groups are split by who reads them: :class:`RunOptions` (running models) and
:class:`BuildOptions` (building images) here; transport, parallel and Slurm options live with the
code that reads them in :mod:`madengine.distributed.options`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

DEFAULT_TIMEOUT = 7200


@dataclasses.dataclass(frozen=True)
class BuildOptions:
    no_cache: bool = False  # --clean-docker-cache
    pull: bool = False
    rebuild: bool = False  # build even when an image of the same build inputs exists
    live_output: bool = False


@dataclasses.dataclass(frozen=True)
class RunOptions:
    tags: tuple[str, ...] = ()
    #: None → the model's ``timeout`` (else DEFAULT_TIMEOUT); 0 → never; N → N seconds
    timeout: int | None = None
    live_output: bool = False
    context_file: str | None = None
    context_string: str | None = None
    generate_sys_env_details: bool = False
    keep_alive: bool = False
    keep_model_dir: bool = False
    skip_model_run: bool = False
    disable_skip_gpu_arch: bool = False
    output: Path = Path("perf.csv")
    executor: str = "auto"  # auto | docker | local | slurm | k8s
    data_config_file_name: str = "data.json"
    tools_json_file_name: str | None = None
    force_mirror_local: str | None = None
    runs_dir: Path = Path("madengine_runs")
    #: the model repository (None: ``MODEL_DIR``, else the current folder)
    root: Path | None = None
    #: runs of the model step that count (None: the model's ``repeat`` field, else 1)
    repeat: int | None = None
    #: runs of the model step before those, discarded (warm-up)
    warmup_runs: int = 0
    trace: bool = True  # --no-trace turns it off
    trace_file: Path | None = None  # --trace FILE: the trace.json elsewhere than the run folder
    db_url: str | None = None  # --db-url: also record each row into this results database (else MADENGINE_DB_URL)

    def timeout_for(self, model_timeout: int | None) -> int | None:
        """Seconds allowed for the model script; None means no limit."""
        if self.timeout is not None:
            return None if self.timeout == 0 else self.timeout
        if model_timeout is not None:
            return None if model_timeout == 0 else model_timeout
        return DEFAULT_TIMEOUT
