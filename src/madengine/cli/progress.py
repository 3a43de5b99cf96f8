"""How a command's progress looks: a live line on a terminal, plain timestamped lines elsewhere.

Both views draw the same :class:`madengine.core.events.Progress` events:

* on a TTY (stderr), a live line redrawn every half second — ``[2/5] resnet50 · running 12.3 s ·
  elapsed 0:45 · ETA 1:20`` — with each finished model printed above it, its status in colour;
* anywhere else (a CI log, a file), one plain line per event, each with a UTC timestamp and never a
  control code.

``--quiet`` keeps errors, warnings and the final summary; ``--verbose`` adds every step's command
and time. Colour follows ``NO_COLOR`` and ``--no-color``. rich is imported only by the live view.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any, Callable

from madengine.core import events
from madengine.core.events import Progress

STATUS_STYLES = {"SUCCESS": "green", "FAILURE": "bold red", "SKIPPED": "yellow"}
#: the phases a plain log shows without --verbose (the short ones only make noise there)
SHOWN_PHASES = ("building", "fetching image", "fetching data", "queued", "pre-scripts", "running", "post-scripts")


def colour_enabled(environ: Any, no_color: bool) -> bool:
    """Colour unless ``--no-color`` or ``NO_COLOR`` (any non-empty value, as no-color.org says)."""
    return not no_color and not environ.get("NO_COLOR", "")


def duration(seconds: float | None) -> str:
    """``0.4 s``, ``12.3 s``, ``3m05s``, ``1h02m``."""
    if seconds is None:
        return "?"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


@dataclasses.dataclass
class _Model:
    label: str
    index: int
    started: float
    estimate: float | None = None
    phase: str = ""
    phase_started: float = 0.0


class ProgressState:
    """What the views need to know: models in flight, their phases, and an ETA."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.started = clock()
        self.total = 0
        self.done = 0
        self.finished_seconds: list[float] = []
        self.estimates: dict[str, float | None] = {}
        self.running: dict[str, _Model] = {}

    def update(self, event: Progress) -> str:
        """Apply ``event``; returns what a plain line should say after the model's name ('' for none)."""
        now = self.clock()
        if event.kind == events.START:
            self.total = event.total
            return ""
        if event.kind == events.MODEL:
            self.running[event.model] = _Model(event.model, event.index, now, event.estimate)
            self.estimates[event.model] = event.estimate
            return "started" + (f" (took {duration(event.estimate)} last time)" if event.estimate else "")
        model = self.running.get(event.model)
        if event.kind == events.PHASE and model is not None:
            previous = f" ({model.phase} took {duration(now - model.phase_started)})" if model.phase else ""
            model.phase, model.phase_started = event.phase, now
            return event.phase + previous
        if event.kind == events.RESULT:
            self.running.pop(event.model, None)
            self.done += 1
            if event.seconds is not None:
                self.finished_seconds.append(event.seconds)
        return ""

    def eta(self) -> float | None:
        """Seconds left: each model not finished takes its time of last run, else this run's mean."""
        if not self.total:
            return None
        typical = sum(self.finished_seconds) / len(self.finished_seconds) if self.finished_seconds else None
        now = self.clock()
        left = 0.0
        for model in self.running.values():
            expected = model.estimate or typical
            if expected is None:
                return None
            left += max(0.0, expected - (now - model.started))
        waiting = self.total - self.done - len(self.running)
        if waiting > 0:
            if typical is None:
                return None
            left += waiting * typical
        return left


class PlainView:
    """One line per event, timestamped: for logs and pipes (no control codes, ever)."""

    def __init__(self, write: Callable[[str], None], *, verbose: bool, quiet: bool,
                 wall_clock: Callable[[], Any]) -> None:
        self.write = write
        self.verbose = verbose
        self.quiet = quiet
        self.wall_clock = wall_clock
        self.state = ProgressState()

    def _line(self, text: str) -> None:
        self.write(f"{self.wall_clock().strftime('%H:%M:%S')} {text}")

    def message(self, text: str) -> None:
        if not self.quiet or _always_shown(text):
            self.write(text)

    def output(self, key: str, line: str) -> None:
        if not self.quiet:
            self.write(f"[{key}] {line}")

    def progress(self, event: Progress) -> None:
        said = self.state.update(event)
        if self.quiet:
            return
        where = f"[{event.index}/{event.total}] {event.model}" if event.index else event.model
        if event.kind == events.START:
            eta = self.state.eta() if event.estimate is None else event.estimate
            self._line(f"madengine: {event.total} model(s)" + (f", about {duration(eta)} by earlier runs" if eta
                                                              else ""))
        elif event.kind in (events.MODEL, events.PHASE) and said and (self.verbose or event.phase in SHOWN_PHASES):
            self._line(f"{where}: {said}")
        elif event.kind == events.STEP and self.verbose:
            self._line(f"{where}: step {event.phase} `{event.detail}` exit {event.status} in "
                       f"{duration(event.seconds)}")
        elif event.kind == events.RESULT:
            took = f" in {duration(event.seconds)}" if event.seconds is not None else ""
            eta = self.state.eta()
            left = f"; ETA {duration(eta)}" if eta and self.state.done < self.state.total else ""
            self._line(f"{where}: {event.status} {event.detail}{took}{left}")
        elif event.kind == events.FINISH:
            self._line(f"madengine: finished in {duration(event.seconds)}")

    def close(self) -> None:
        return None


class LiveView:
    """A live status line on a terminal (rich), with finished models printed above it."""

    REFRESH = 0.5

    def __init__(self, stream: Any, *, verbose: bool, quiet: bool, colour: bool) -> None:
        from rich.console import Console
        from rich.live import Live

        self.console = Console(file=stream, force_terminal=True, no_color=not colour, highlight=False,
                               soft_wrap=True)
        self.verbose = verbose
        self.quiet = quiet
        self.state = ProgressState()
        self.lock = threading.Lock()
        self.live = Live(self._status(), console=self.console, refresh_per_second=1 / self.REFRESH,
                         transient=True, get_renderable=self._status)
        self.started = False

    def _status(self) -> Any:
        from rich.text import Text

        with self.lock:
            parts = []
            for model in self.state.running.values():
                phase = f" · {model.phase} {duration(time.monotonic() - model.phase_started)}" if model.phase else ""
                parts.append(f"[{model.index}/{self.state.total}] {model.label}{phase}")
            eta = self.state.eta()
            tail = f"elapsed {duration(time.monotonic() - self.state.started)}" + \
                (f" · ETA {duration(eta)}" if eta else "")
        return Text(" | ".join(parts + [tail]), style="cyan")

    def _print(self, text: Any) -> None:
        if not self.started and not self.quiet:
            self.live.start()
            self.started = True
        self.console.print(text)

    def message(self, text: str) -> None:
        if not self.quiet or _always_shown(text):
            self._print(_plain_text(text))

    def output(self, key: str, line: str) -> None:
        if not self.quiet:
            self._print(_plain_text(f"[{key}] {line}"))

    def progress(self, event: Progress) -> None:
        from rich.text import Text

        with self.lock:
            self.state.update(event)
        if self.quiet:
            return
        if event.kind == events.START and not self.started:
            self.live.start()
            self.started = True
        elif event.kind == events.STEP and self.verbose:
            self._print(_plain_text(f"  [{event.model}] step {event.phase} `{event.detail}` exit {event.status} in "
                                    f"{duration(event.seconds)}"))
        elif event.kind == events.RESULT:
            line = Text(f"[{event.index}/{event.total}] " if event.index else "")
            line.append(f"{event.model} ")
            line.append(event.status, style=STATUS_STYLES.get(event.status, ""))
            line.append(f" {event.detail}" + (f" in {duration(event.seconds)}" if event.seconds is not None else ""))
            self._print(line)
        elif event.kind == events.FINISH:
            self.close()
            self.console.print(_plain_text(f"madengine: finished in {duration(event.seconds)}"))

    def close(self) -> None:
        if self.started:
            self.live.stop()
            self.started = False


def _plain_text(text: str) -> Any:
    from rich.text import Text

    return Text(text)  # no markup: a model's output is shown as it is


def _always_shown(text: str) -> bool:
    """Errors and warnings get through --quiet."""
    return text.startswith(("madengine: error", "madengine: warning")) or " warning" in text[:40]


def make_view(env: Any, *, verbose: bool, quiet: bool, no_color: bool) -> Any:
    """The live view on a terminal, the plain one anywhere else."""
    stream = env.stderr
    if _is_tty(stream):
        return LiveView(stream, verbose=verbose, quiet=quiet, colour=colour_enabled(env.environ, no_color))

    def write(text: str) -> None:
        print(text, file=stream, flush=True)

    return PlainView(write, verbose=verbose, quiet=quiet, wall_clock=env.clock)


def _is_tty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
