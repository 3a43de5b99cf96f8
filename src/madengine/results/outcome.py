"""What one invocation produced: its records, where they went, and whether it was cut short."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from madengine.results.columns import Status
from madengine.results.record import PerfRecord


@dataclasses.dataclass
class RunSummary:
    run_id: str
    executor: str
    perf_csv: Path
    run_dir: Path
    records: list[PerfRecord] = dataclasses.field(default_factory=list)
    #: why the run stopped early ('' when it ran to the end): 'interrupted', 'SIGTERM', ...
    interrupted: str = ""
    #: the signal that stopped it (its exit status is 128 + signal), 0 for none or Ctrl-C
    signal: int = 0
    #: extra sections of ``to_json`` (e.g. ``slurm``: job ids)
    details: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: rows that could not be written to perf.csv (a full disk, a read-only file): where each was
    #: kept instead, one entry per row ('' for a row that could be kept nowhere but on stderr)
    unrecorded: list[str] = dataclasses.field(default_factory=list)
    #: how the trace was written (``tracing.FlushResult``); None without one
    trace: Any = None

    @property
    def failed(self) -> list[PerfRecord]:
        return [r for r in self.records if r.status == Status.FAILURE]

    def unrecorded_files(self) -> list[str]:
        """The files the unrecorded rows are kept in, each once."""
        return list(dict.fromkeys(path for path in self.unrecorded if path))

    def counts(self) -> dict[str, int]:
        return {s: sum(1 for r in self.records if r.status == s) for s in Status.ALL}

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "executor": self.executor, "perf_csv": str(self.perf_csv),
            "run_dir": str(self.run_dir), "interrupted": bool(self.interrupted), "counts": self.counts(),
            "unrecorded": self.unrecorded,
            "results": [{"model": r.model, "status": r.status, "performance": r.performance, "metric": r.metric,
                         "reason": r.reason, "docker_image": r.docker_image, "test_duration": r.test_duration,
                         "warnings": r.warning_list()}
                        for r in self.records],
            **self.details,
        }
