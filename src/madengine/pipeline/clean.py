"""``madengine clean``, which every ``madengine run`` also does first (:func:`reap`), whatever its
executor: remove the containers and stop the local processes that runs whose madengine process is
gone left behind (a SIGKILL, an engine that could not remove a container in time), and say so. See
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


#: how long a run that needs no engine (local, Slurm, Kubernetes) waits for one to answer before
#: it reaps without it: such a run must not wait on an engine that is down or hangs
REAP_PING = 2.0
#: each engine call of that reaping (a forced removal of a running container takes a moment)
REAP_CALL = 10.0


def reap(engine: Any, environ: Mapping[str, str], reporter: Reporter) -> CleanSummary:
    """What every run does before its models: :func:`remove_leftovers` with the run's ``engine``,
    or (a run that needs none) the engine ``DOCKER_HOST`` names when it answers within
    :data:`REAP_PING` seconds: a container a SIGKILLed docker run left is removed by the next run of
    any executor. Without an engine, only processes are looked at, and nothing is said about it."""
    if engine is None:
        engine = _answering_engine(environ)
    return remove_leftovers(engine, reporter)


def _answering_engine(environ: Mapping[str, str]) -> Any:
    from madengine.execution.docker import connect

    try:
        return connect(environ, timeout=REAP_PING).bounded(REAP_CALL)
    except ServiceError:
        return None


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
