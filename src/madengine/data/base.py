"""What every downloading provider shares: its fetch statistics and the run log it writes to."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

from madengine.core.errors import ExecutionError
from madengine.core.redact import redact


@dataclasses.dataclass
class FetchStats:
    fetched: int = 0  # files written this run
    unchanged: int = 0  # files already in the mirror and identical to the source
    bytes_fetched: int = 0
    reused: bool = False  # the whole data set was taken from the mirror without asking the source

    def summary(self) -> str:
        if self.reused:
            return "reused the mirror, nothing downloaded"
        from madengine.data.mirror import human_size

        return f"{self.fetched} file(s) downloaded ({human_size(self.bytes_fetched)}), {self.unchanged} unchanged"


class DataLog:
    """Provider progress: every line goes (redacted) to the model's run.log; ``message`` lines
    also go to the reporter (stderr), and with live output the fetch output does too."""

    def __init__(self, log_path: Path, message: Callable[[str], None],
                 live: Callable[[str], None] | None = None) -> None:
        self.log_path = log_path
        self._message = message
        self._live = live

    def line(self, text: str) -> None:
        text = redact(text)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "a", encoding="utf-8") as log:
            log.write(text + "\n")
        if self._live is not None:
            self._live(text)

    def message(self, text: str) -> None:
        self.line(f"=== madengine data: {text}")
        self._message(redact(f"madengine: data {text}"))


def unavailable(dataname: str, ptype: str, reason: str) -> ExecutionError:
    """The error a provider raises when it was reachable but could not deliver."""
    return ExecutionError(redact(f"data not available: '{dataname}' ({ptype}): {reason}"))
