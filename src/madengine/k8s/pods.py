"""What the API server says about a job and its pods, read into small typed states, and why a job
failed in words a row can carry: pure functions of the API's JSON (tests feed them dicts).

A pod that cannot start is not a pod that runs late: an image that cannot be pulled, a pod no node
can take (too few GPUs) or a container the kubelet cannot create is *blocked*; the session fails
its job once it has been blocked for ``k8s.pending_timeout`` seconds.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any, Mapping

from madengine.k8s.render import DISRUPTION, INDEX_ANNOTATION, LABEL_JOB

PULL_FAILURES = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "RegistryUnavailable")
START_FAILURES = ("CreateContainerConfigError", "CreateContainerError", "RunContainerError")


@dataclasses.dataclass(frozen=True)
class PodState:
    """One pod of a madengine job, as last seen."""

    name: str
    job: str
    rank: int
    phase: str
    node: str = ""
    created: str = ""
    waiting: str = ""
    waiting_message: str = ""
    terminated: str = ""
    exit_code: int | None = None
    started_at: str = ""
    finished_at: str = ""
    #: the scheduler's message while no node can take the pod ('' once scheduled)
    unschedulable: str = ""
    #: the memory limit of its container, for an OOMKilled pod's reason
    memory_limit: str = ""
    #: why Kubernetes stopped the pod (a preemption, an eviction, a drain: its DisruptionTarget
    #: condition's reason); '' when it did not
    disruption: str = ""

    @property
    def ended(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def has_log(self) -> bool:
        """Its container started (running or ended): a log can be read."""
        return bool(self.started_at) or self.phase in ("Running", "Succeeded", "Failed") and not self.waiting

    def blocked(self) -> str:
        """Why the pod cannot start ('' when it can or did): a pull, scheduling or start failure."""
        if self.waiting in PULL_FAILURES:
            return f"image pull failed ({self.waiting}): {self.waiting_message}".rstrip(": ")
        if self.unschedulable:
            return f"unschedulable: {self.unschedulable}"
        if self.waiting in START_FAILURES:
            return f"the container could not start ({self.waiting}): {self.waiting_message}".rstrip(": ")
        return ""

    def where(self) -> str:
        """``pod P on node N``, for reasons."""
        return f"pod {self.name}" + (f" on node {self.node}" if self.node else "")


def _rank(meta: Mapping[str, Any]) -> int:
    for table in (meta.get("annotations") or {}, meta.get("labels") or {}):
        value = str(table.get(INDEX_ANNOTATION, ""))
        if value.isdigit():
            return int(value)
    return 0


def _container(status: Mapping[str, Any]) -> Mapping[str, Any]:
    statuses = status.get("containerStatuses") or []
    return statuses[0] if statuses and isinstance(statuses[0], Mapping) else {}


def pod_state(obj: Mapping[str, Any]) -> PodState:
    """A pod (the API's JSON) as a :class:`PodState`."""
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    container = _container(status)
    state = container.get("state") or {}
    waiting, terminated, running = state.get("waiting") or {}, state.get("terminated") or {}, state.get("running") or {}
    unschedulable = next((str(c.get("message") or "no node can take the pod") for c in status.get("conditions") or []
                          if c.get("type") == "PodScheduled" and c.get("status") == "False"
                          and c.get("reason") == "Unschedulable"), "")
    disruption = next((str(c.get("reason") or "disrupted") for c in status.get("conditions") or []
                       if c.get("type") == DISRUPTION and c.get("status") == "True"), "")
    containers = spec.get("containers") or [{}]
    limit = str(((containers[0].get("resources") or {}).get("limits") or {}).get("memory", ""))
    code = terminated.get("exitCode")
    return PodState(
        name=str(meta.get("name", "")), job=str((meta.get("labels") or {}).get(LABEL_JOB, "")), rank=_rank(meta),
        phase=str(status.get("phase") or "Pending"), node=str(spec.get("nodeName") or ""),
        created=str(meta.get("creationTimestamp") or ""), waiting=str(waiting.get("reason") or ""),
        waiting_message=str(waiting.get("message") or "")[:300], terminated=str(terminated.get("reason") or ""),
        exit_code=int(code) if isinstance(code, int) else None,
        started_at=str(terminated.get("startedAt") or running.get("startedAt") or ""),
        finished_at=str(terminated.get("finishedAt") or ""), unschedulable=unschedulable[:300], memory_limit=limit,
        disruption=disruption[:100])


@dataclasses.dataclass(frozen=True)
class JobState:
    """A Job's end as its controller says: finished, and the reason of a failure."""

    finished: bool
    failed: bool = False
    reason: str = ""
    message: str = ""
    #: created suspended (a Kueue queue holds it until its quota admits it): not running yet
    suspended: bool = False


def job_state(obj: Mapping[str, Any] | None) -> JobState:
    """``Complete`` or ``Failed`` conditions (status True) end a job; anything else is not the end."""
    if not obj:
        return JobState(finished=True, failed=True, reason="Deleted", message="the Job is gone")
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Complete":
            return JobState(finished=True)
        if condition.get("type") == "Failed":
            return JobState(finished=True, failed=True, reason=str(condition.get("reason") or ""),
                            message=str(condition.get("message") or ""))
    return JobState(finished=False, suspended=bool((obj.get("spec") or {}).get("suspend")))


def _instant(text: str) -> float | None:
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def containers_time(pods: Mapping[int, PodState]) -> float | None:
    """Seconds from the first container's start to the last one's end (the API's timestamps, to the
    second), or None when a pod did not both start and end."""
    starts = [_instant(p.started_at) for p in pods.values()]
    ends = [_instant(p.finished_at) for p in pods.values()]
    if not pods or None in starts or None in ends:
        return None
    return max(ends) - min(starts)  # type: ignore[type-var]


def disruptions(pods: Mapping[str, PodState], final: Mapping[int, PodState]) -> list[str]:
    """A note for each pod Kubernetes stopped (preempted, evicted, drained) and made again: the job
    went on, and its figure may have been measured on another node."""
    kept = {pod.name for pod in final.values()}
    return [f"node rank {pod.rank}: pod {pod.name}{' on node ' + pod.node if pod.node else ''} was stopped by "
            f"Kubernetes ({pod.disruption}) and made again" for pod in sorted(pods.values(), key=lambda p: p.created)
            if pod.disruption and pod.name not in kept]


def final_pods(pods: Mapping[str, PodState]) -> dict[int, PodState]:
    """The pod that speaks for each node rank: the last one made (a retried rank has several),
    a successful one first."""
    best: dict[int, PodState] = {}
    for pod in sorted(pods.values(), key=lambda p: (p.phase == "Succeeded", p.created, p.name)):
        best[pod.rank] = pod
    return best


__all__ = ["JobState", "PULL_FAILURES", "PodState", "START_FAILURES", "containers_time", "disruptions", "final_pods",
           "job_state", "pod_state"]
