"""Where a benchmarking command records what it measured: the fields its request shares with the
other benchmarking commands (``bench`` of ONNX models, ``bench SCRIPT.py``, ``scorecard``)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Callable, Mapping

from madengine.core.host import runnable_per_cpu


@dataclasses.dataclass(kw_only=True)
class Recording:
    """perf.csv, the runs folder and the trace of one command, and what it was run with."""

    output: Path | None = Path("perf.csv")
    runs_dir: Path = Path("madengine_runs")
    command_line: str = ""
    environ: Mapping[str, str] = dataclasses.field(default_factory=lambda: dict(os.environ))
    trace: bool = True  # --no-trace turns it off
    trace_file: Path | None = None  # --trace FILE: the trace.json elsewhere than the run folder
    #: the host's load per logical CPU now, read at the start and end of every benchmark (its row's
    #: host_load_start/host_load_end and busy-host note, as a run row's): the CLI's Host.load
    load: Callable[[], float | None] = runnable_per_cpu
