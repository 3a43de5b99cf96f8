"""How the core reports progress without printing: the CLI passes a :class:`Reporter`.

Messages are lines of text; :class:`Progress` events are structured, so that the CLI can draw a
live line on a terminal and plain timestamped lines in a CI log from the same events.
"""

from __future__ import annotations

import dataclasses

#: kinds of :class:`Progress` events, in the order a command emits them
START, MODEL, PHASE, STEP, RESULT, FINISH = "start", "model", "phase", "step", "result", "finish"


@dataclasses.dataclass(frozen=True)
class Progress:
    """One step of a command's progress.

    ``start``: the command begins ``total`` models (``estimate``: seconds, from earlier runs);
    ``model``: model ``index`` of ``total`` begins (``estimate``: its seconds last time);
    ``phase``: it enters ``phase`` (building, running, parsing, ...);
    ``step``: one of its steps ended (``detail``: the command, ``seconds``; for ``--verbose``);
    ``result``: a row (``status``, ``detail``: figure or reason, ``seconds``: the model's time,
    ``log``: its log);
    ``finish``: the command ended after ``seconds``.
    """

    kind: str
    model: str = ""
    index: int = 0
    total: int = 0
    phase: str = ""
    status: str = ""
    detail: str = ""
    seconds: float | None = None
    estimate: float | None = None
    log: str = ""


class Reporter:
    """Receives progress from the core. The default discards everything."""

    def message(self, text: str) -> None:
        """A notice or warning line (e.g. 'no Docker engine answers; ...')."""

    def output(self, key: str, line: str) -> None:
        """One line of a model's (or build's) output, when live output is on."""

    def data(self, text: str) -> None:
        """Output a machine reads (e.g. a submitted job id, a rendered script): stdout in the CLI."""

    def progress(self, event: Progress) -> None:
        """Where a command is: which model, which phase, how long things took."""
