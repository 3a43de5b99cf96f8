"""``madengine clean``, which every ``madengine run`` also does first: remove the containers and
stop the local processes that runs whose madengine process is gone left behind (a SIGKILL, an
engine that could not remove a container in time), and say so. See
:mod:`madengine.execution.leftovers` for what is judged gone and what is never touched."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from madengine.core.errors import ServiceError
from madengine.core.events import Reporter
from madengine.execution.leftovers import Leftover, remove_containers, stop_processes


@dataclasses.dataclass
class CleanSummary:
    leftovers: list[Leftover] = dataclasses.field(default_factory=list)
    #: why containers were not looked at ('' when they were): no engine answers
    containers_unchecked: str = ""

    @property
    def failed(self) -> list[Leftover]:
        return [leftover for leftover in self.leftovers if not leftover.removed]

    def to_json(self) -> dict[str, Any]:
        return {"leftovers": [leftover.to_json() for leftover in self.leftovers],
                "containers_checked": not self.containers_unchecked, "containers_unchecked": self.containers_unchecked}


def clean(environ: Mapping[str, str], reporter: Reporter) -> CleanSummary:
    """Everything ended runs left on this host; containers only when a Docker engine answers."""
    from madengine.execution.docker import connect

    try:
        engine = connect(environ)
    except ServiceError as exc:
        engine = None
        unchecked = str(exc)
    summary = remove_leftovers(engine, reporter)
    if engine is None:
        summary.containers_unchecked = unchecked
    return summary


def remove_leftovers(engine: Any, reporter: Reporter) -> CleanSummary:
    """Stop ended runs' processes and (with an ``engine``) remove their containers, one message
    each. A failure to list or remove is a warning: it never fails the run that cleans up."""
    summary = CleanSummary(stop_processes())
    if engine is not None:
        from madengine.execution.docker import is_engine_gone
        from madengine.execution.engine import EngineError

        try:
            summary.leftovers += remove_containers(engine)
        except Exception as exc:
            if not (isinstance(exc, EngineError) or is_engine_gone(exc)):
                raise
            summary.containers_unchecked = f"the Docker engine did not list its containers ({exc})"
            reporter.message(f"madengine: warning: containers of ended runs not checked: {exc}")
    for leftover in summary.leftovers:
        reporter.message(f"madengine: {'' if leftover.removed else 'warning: '}{leftover.describe()}")
    return summary
