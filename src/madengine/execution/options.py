"""Options of one ``madengine run`` invocation (everything the CLI flags say)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

DEFAULT_TIMEOUT = 7200


@dataclasses.dataclass
class RunOptions:
    tags: list[str] = dataclasses.field(default_factory=list)
    #: None → the model's ``timeout`` (else DEFAULT_TIMEOUT); 0 → never; N → N seconds
    timeout: int | None = None
    live_output: bool = False
    clean_docker_cache: bool = False
    pull: bool = False
    context_file: str | None = None
    context_string: str | None = None
    generate_sys_env_details: bool = False
    keep_alive: bool = False
    keep_model_dir: bool = False
    skip_model_run: bool = False
    disable_skip_gpu_arch: bool = False
    output: Path = Path("perf.csv")
    executor: str = "auto"  # auto | docker | local | slurm
    data_config_file_name: str = "data.json"
    tools_json_file_name: str | None = None
    force_mirror_local: str | None = None
    runs_dir: Path = Path("madengine_runs")
    command_line: str = ""
    #: build/run split and registry/archive transport (issue: beyond one machine)
    manifest_file: str | None = None
    registry: str | None = None
    image_archive: str | None = None
    #: run up to N models at once on this host (disjoint GPUs / cpusets)
    parallel: int = 1
    #: Slurm settings from flags (merged with a context ``slurm`` section by the Slurm executor)
    slurm: dict = dataclasses.field(default_factory=dict)
    no_wait: bool = False
    dry_run: bool = False

    def timeout_for(self, model_timeout: int | None) -> int | None:
        """Seconds allowed for the model script; None means no limit."""
        if self.timeout is not None:
            return None if self.timeout == 0 else self.timeout
        if model_timeout is not None:
            return None if model_timeout == 0 else model_timeout
        return DEFAULT_TIMEOUT
