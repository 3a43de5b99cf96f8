"""Where a benchmarking command records what it measured: the fields its request shares with the
other benchmarking commands (``bench`` of ONNX models, ``bench SCRIPT.py``, ``scorecard``)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Mapping


@dataclasses.dataclass(kw_only=True)
class Recording:
    """perf.csv, the runs folder and the trace of one command, and what it was run with."""

    output: Path | None = Path("perf.csv")
    runs_dir: Path = Path("madengine_runs")
    command_line: str = ""
    environ: Mapping[str, str] = dataclasses.field(default_factory=lambda: dict(os.environ))
    trace: bool = True  # --no-trace turns it off
    trace_file: Path | None = None  # --trace FILE: the trace.json elsewhere than the run folder
