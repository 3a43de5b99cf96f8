"""Where a step's output goes: the per-run log file (redacted), live output, and the parser."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from pathlib import Path
from typing import Callable, Iterator, TextIO

from madengine.core.redact import redact


@dataclasses.dataclass
class StepResult:
    exit_code: int | None
    duration: float
    output: str = ""  # the lines that matter for parsing (model steps only)
    timed_out: bool = False
    #: the Ctrl-C or signal (:class:`madengine.core.errors.Interrupted`) that cut the step short
    interrupted: BaseException | None = None
    error: str = ""  # the executor could not run the step at all
    #: what the executor knows about a non-zero exit ('out of memory: ...'); '' when nothing
    cause: str = ""
    #: the global ranks of a distributed job still running when the executor ended the step
    #: (timeout, interrupt): the ranks that hung, when the others had finished
    ranks_running: tuple[int, ...] = ()


class LineSink:
    """Splits a byte stream into lines; writes each (redacted) to the log and the live callback."""

    def __init__(self, log: TextIO, live: Callable[[str], None] | None, keep: bool) -> None:
        self._log = log
        self._live = live
        self._keep = keep
        self._pending = b""
        self.kept: list[str] = []

    def feed(self, chunk: bytes) -> None:
        data = self._pending + chunk
        *lines, self._pending = data.split(b"\n")
        for raw in lines:
            self._line(raw)

    def close(self) -> None:
        if self._pending:
            self._line(self._pending)
            self._pending = b""
        self._log.flush()

    def _line(self, raw: bytes) -> None:
        text = redact(raw.decode("utf-8", "replace").rstrip("\r"))
        self._log.write(text + "\n")
        if self._live is not None:
            self._live(text)
        if self._keep:
            self.kept.append(text)

    def text(self) -> str:
        return "\n".join(self.kept)


def open_log(path: Path) -> TextIO:
    path.parent.mkdir(parents=True, exist_ok=True)
    return open(path, "a", encoding="utf-8")


@contextlib.contextmanager
def deadline(seconds: float | None, expire: Callable[[], None]) -> Iterator[threading.Event]:
    """Call ``expire`` (kill the step) if the block still runs after ``seconds`` (None: never);
    the event yielded says whether it did."""
    expired = threading.Event()

    def fire() -> None:
        expired.set()
        expire()

    timer = threading.Timer(seconds, fire) if seconds else None
    if timer:
        timer.daemon = True
        timer.start()
    try:
        yield expired
    finally:
        if timer:
            timer.cancel()
