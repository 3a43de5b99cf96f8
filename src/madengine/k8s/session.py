"""A cluster run in flight: submit every model's job at once, watch their pods, stream each pod's
log into the run folder, and as each job ends record its row and delete what it made.

* **Submit**: each object is created, or replaces what an earlier run of the same model left
  (:meth:`KubeApi.apply`); a job the API server refuses is a FAILURE row, the others go on.
* **Watch**: one watch of the run's pods (label ``madengine.io/run-id``); each pod's phase is
  progress, like any run; a pod whose container started gets a log tap that writes its log
  (redacted) to ``<run folder>/<job>/<pod>.log`` as it comes, and to ``--live-output``.
* **End**: the Job's ``Complete``/``Failed`` condition, or madengine's own verdict: a pod blocked
  (image pull, unschedulable, container start) for ``k8s.pending_timeout`` seconds, or the model's
  timeout passed. Then its rows (:mod:`madengine.k8s.collect`), then clean-up: the Job with
  Foreground propagation (its pods go first), its ConfigMap, Secrets and Service.
* **Ctrl-C / SIGTERM** (and any error): every job still running is deleted the same way and waited
  for (its pods' grace period: the model's trap runs and the results are copied), and gets a
  FAILURE row saying so; nothing is left on the cluster.
* **Queued**: a Job created suspended (Kueue holds it until its queue admits it) is "queued"; its
  timeout counts from its admission. A pod Kubernetes stopped and made again (a preemption, an
  eviction: ``DisruptionTarget``) is a note of the row, not a failure.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path
from typing import Any, Callable

from madengine.catalog import Model
from madengine.core.errors import MadEngineError, ServiceError, interruption
from madengine.core.events import MODEL, PHASE, RESULT, Progress, Reporter
from madengine.core.redact import redact
from madengine.k8s.client import Expired, KubeApi
from madengine.k8s.collect import job_records
from madengine.k8s.pods import JobState, PodState, containers_time, disruptions, final_pods, job_state, pod_state
from madengine.k8s.render import LABEL_JOB, LABEL_RUN, JobPlan
from madengine.results import PerfRecord, RecordFactory

#: seconds one watch call lasts before the jobs are checked again
WATCH_SECONDS = 5
#: failed watches in a row before the run gives up (its jobs are then deleted)
WATCH_RETRIES = 5
#: seconds past the model's timeout before madengine stops a job Kubernetes did not stop
TIMEOUT_GRACE = 60
#: seconds clean-up after Ctrl-C waits for each job to be gone
GONE_WAIT = 60.0
#: seconds a finished pod's log tap may take to drain
TAP_DRAIN = 30.0


class LogTap(threading.Thread):
    """Follows one pod's log into its file, line by line, redacted (and live, when asked)."""

    def __init__(self, api: KubeApi, namespace: str, pod: str, path: Path, live: Callable[[str], None] | None):
        super().__init__(name=f"log-{pod}", daemon=True)
        self.api, self.namespace, self.pod, self.path, self.live = api, namespace, pod, path, live
        self.error = ""
        self.lock = threading.Lock()

    def run(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = b""
        try:
            response = self.api.log_stream(self.namespace, self.pod)
            with open(self.path, "w", encoding="utf-8") as log:
                try:
                    for chunk in response.stream(1 << 16, decode_content=True):
                        lines = (partial + chunk).split(b"\n")
                        partial = lines.pop()
                        self._write(log, lines)
                    self._write(log, [partial] if partial else [])
                finally:
                    response.release_conn()
        except (MadEngineError, OSError, Exception) as exc:  # the final read in finish() recovers the text
            self.error = f"{type(exc).__name__}: {redact(str(exc))[:200]}"

    def _write(self, log: Any, lines: list[bytes]) -> None:
        for raw in lines:
            line = redact(raw.decode("utf-8", "replace").rstrip("\r"))
            with self.lock:
                log.write(line + "\n")
                log.flush()
            if self.live is not None:
                self.live(line)

    def finish(self) -> None:
        """After the pod ended: let the tap drain, then take the whole log from the API server so the
        file is complete even if the stream broke (a pod already deleted keeps what was streamed)."""
        if self.ident is not None:  # started (a pod that ended between two events is only read here)
            self.join(TAP_DRAIN)
        try:
            text = self.api.log_text(self.namespace, self.pod).decode("utf-8", "replace")
        except (MadEngineError, OSError):
            return
        with self.lock:
            self.path.write_text("".join(redact(line.rstrip("\r")) + "\n" for line in text.split("\n")[:-1])
                                 + (redact(text.split("\n")[-1]) + "\n" if text and not text.endswith("\n") else ""),
                                 encoding="utf-8")


@dataclasses.dataclass
class JobRun:
    """One model's job, from submission to its rows."""

    plan: JobPlan
    model: Model
    timeout: int | None
    index: int
    submitted: float
    pods: dict[str, PodState] = dataclasses.field(default_factory=dict)
    taps: dict[str, LogTap] = dataclasses.field(default_factory=dict)
    blocked_since: dict[str, float] = dataclasses.field(default_factory=dict)
    phase: str = ""
    done: bool = False
    #: when the Job was last seen suspended (queued by Kueue): its timeout counts from its admission
    queued_until: float = 0.0

    @property
    def folder_name(self) -> str:
        return self.plan.name


class K8sSession:
    """Every job of one run on one cluster namespace."""

    def __init__(self, api: KubeApi, *, namespace: str, run_id: str, run_dir: Path, reporter: Reporter,
                 records: RecordFactory, emit: Callable[[PerfRecord], None], live_output: bool = False,
                 pending_timeout: float = 300, clock: Callable[[], float] = time.monotonic) -> None:
        self.api, self.namespace, self.run_id, self.run_dir = api, namespace, run_id, run_dir
        self.reporter, self.records, self.emit, self.live_output = reporter, records, emit, live_output
        self.pending_timeout, self.clock = pending_timeout, clock
        self.jobs: dict[str, JobRun] = {}
        self.total = 0
        self.index = 0

    # -- submit --------------------------------------------------------------------------------
    def fail(self, model: Model, reason: str, **values: Any) -> None:
        """A model that gets no job (its image could not be built, its build failed): its row."""
        self.index += 1
        self.reporter.progress(Progress(MODEL, model=model.tagged_name, index=self.index, total=self.total))
        record = self.records.failure(model, reason, **values)
        self.emit(record)
        self.reporter.progress(Progress(RESULT, model=model.tagged_name, index=self.index, total=self.total,
                                        status=record.status, detail=record.reason))

    def submit(self, plan: JobPlan, model: Model, timeout: int | None) -> None:
        """Create (or replace) the job's objects, in order; a refusal is the model's FAILURE row."""
        self.index += 1
        self.reporter.progress(Progress(MODEL, model=model.tagged_name, index=self.index, total=self.total))
        run = JobRun(plan, model, timeout, self.index, self.clock())
        self.jobs[plan.name] = run
        try:
            for obj in plan.objects:
                how = self.api.apply(obj)
                self.reporter.message(f"madengine: k8s {obj['kind']} {plan.namespace}/{obj['metadata']['name']} {how}")
        except ServiceError as exc:
            self._finish(run, JobState(finished=True, failed=True), verdict=f"not submitted: {exc}")
            return
        self._phase(run, "pending")
        try:
            self._check(run)  # a queue (Kueue) may hold it: "queued", its timeout not running yet
        except ServiceError:
            pass  # the watch checks it again

    # -- watch ---------------------------------------------------------------------------------
    def active(self) -> list[JobRun]:
        return [run for run in self.jobs.values() if not run.done]

    def watch(self) -> None:
        """Until every job has ended: follow the run's pods, check the jobs after each event that
        may end one and at least every :data:`WATCH_SECONDS`. A watch that expired is listed
        again; an API server that stops answering is tried :data:`WATCH_RETRIES` times."""
        version, failures = "", 0
        while self.active():
            try:
                version = self._watch_once(version)
                for run in self.active():
                    self._check(run)
                failures = 0
            except Expired:
                version = ""
            except ServiceError as exc:
                failures += 1
                if failures > WATCH_RETRIES:
                    raise
                self.reporter.message(f"madengine: watching the pods failed ({exc}); trying again")
                version = ""
                time.sleep(min(failures, 5))

    def _watch_once(self, version: str) -> str:
        """One watch call (a list first when there is no version to watch from); the version reached."""
        selector = f"{LABEL_RUN}={self.run_id}"
        if not version:
            items, version = self.api.list_pods(self.namespace, selector)
            for obj in items:
                self._on_pod(obj)
        for _, obj in self.api.watch_pods(self.namespace, selector, version, WATCH_SECONDS):
            version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
            run = self._on_pod(obj)
            if run is not None and not run.done:
                self._check(run)
            if not self.active():
                break
        return version

    def _on_pod(self, obj: dict[str, Any]) -> JobRun | None:
        pod = pod_state(obj)
        run = self.jobs.get(pod.job)
        if run is None or run.done:
            return run
        run.pods[pod.name] = pod
        self._tap(run, pod)
        if pod.blocked():
            run.blocked_since.setdefault(pod.name, self.clock())
        else:
            run.blocked_since.pop(pod.name, None)
        if any(p.phase == "Running" for p in run.pods.values()):
            self._phase(run, "running")
        return run

    def _tap(self, run: JobRun, pod: PodState) -> None:
        """Follow the log of a pod whose container started (once)."""
        if pod.has_log and pod.name not in run.taps:
            live = (lambda line, key=f"{run.model.tagged_name}/{pod.rank}": self.reporter.output(key, line)) \
                if self.live_output else None
            tap = LogTap(self.api, self.namespace, pod.name, self.run_dir / run.folder_name / f"{pod.name}.log", live)
            run.taps[pod.name] = tap
            tap.start()

    def _check(self, run: JobRun) -> None:
        """End the job when its controller says so, or when madengine must stop it."""
        state = job_state(self.api.read("Job", run.plan.name, self.namespace))
        if state.finished:
            self._finish(run, state)
            return
        now = self.clock()
        if state.suspended:
            run.queued_until = now
            self._phase(run, "queued")
            return
        for name, since in run.blocked_since.items():
            if now - since >= self.pending_timeout:
                pod = run.pods[name]
                who = f"node rank {pod.rank} ({pod.where()})" if run.plan.nnodes > 1 else pod.where()
                waited = f" for {now - since:.0f} s" if self.pending_timeout else ""
                self._finish(run, state, verdict=f"{who}: {pod.blocked()}{waited} (k8s.pending_timeout)")
                return
        if run.timeout and now - max(run.submitted, run.queued_until) > run.timeout + TIMEOUT_GRACE:
            self._finish(run, state, verdict=f"timeout: the job ran longer than {run.timeout} s; madengine "
                                             "stopped it")

    # -- end -----------------------------------------------------------------------------------
    def _phase(self, run: JobRun, phase: str) -> None:
        if phase != run.phase:
            run.phase = phase
            self.reporter.progress(Progress(PHASE, model=run.model.tagged_name, phase=phase))

    def _logs(self, run: JobRun, pods: dict[int, PodState]) -> dict[int, Path]:
        """Each node rank's complete log file (a pod that never started has none)."""
        logs = {}
        for rank, pod in pods.items():
            tap = run.taps.get(pod.name)
            if tap is None and pod.has_log:  # ended between two events: read once
                tap = LogTap(self.api, self.namespace, pod.name, self.run_dir / run.folder_name / f"{pod.name}.log",
                             None)
                run.taps[pod.name] = tap
                tap.path.parent.mkdir(parents=True, exist_ok=True)
            if tap is not None:
                tap.finish()
                if tap.path.is_file():
                    logs[rank] = tap.path
        return logs

    def _finish(self, run: JobRun, state: JobState, verdict: str = "") -> None:
        """The job's rows, then its clean-up (also when making the rows failed). A job madengine
        stops (``verdict``) is deleted first: its logs are read once its pods have ended."""
        run.done = True
        if verdict:
            self.cleanup(run, wait=True)
        else:  # the pods as the API server has them now: a watch event may still be on its way
            self._refresh(run)
        try:
            records = self._rows(run, state, verdict)
        finally:
            if not verdict:
                self.cleanup(run)
        self._record(run, records)

    def _refresh(self, run: JobRun) -> None:
        try:
            # this run's pods only: an earlier run's Job of the same name may have left pods going
            items, _ = self.api.list_pods(self.namespace, f"{LABEL_RUN}={self.run_id},{LABEL_JOB}={run.plan.name}")
        except ServiceError:
            return  # the states the watch gave stand
        for obj in items:
            pod = pod_state(obj)
            run.pods[pod.name] = pod

    def _rows(self, run: JobRun, state: JobState, verdict: str) -> list[PerfRecord]:
        pods = final_pods(run.pods)
        logs = self._logs(run, pods)
        return job_records(self.records, run.model, run.plan, state, pods, logs, folder=self.run_dir / run.folder_name,
                           timeout=run.timeout, verdict=verdict, duration=containers_time(pods),
                           notes=disruptions(run.pods, pods))

    def _record(self, run: JobRun, records: list[PerfRecord]) -> None:
        for record in records:
            self.emit(record)
            artifacts = record.artifacts if isinstance(record.artifacts, list) else []
            self.reporter.progress(Progress(RESULT, model=run.model.tagged_name, index=run.index, total=self.total,
                                            status=record.status, seconds=self.clock() - run.submitted,
                                            detail=record.reason or f"{record.performance} {record.metric}",
                                            log=artifacts[0] if artifacts else ""))

    def cleanup(self, run: JobRun, wait: bool = False) -> None:
        """Delete the job (its pods first: Foreground) and its ConfigMap, Secrets and Service."""
        plan = run.plan
        self.api.delete("Job", plan.name, self.namespace, "Foreground")
        for obj in plan.objects:
            if obj["kind"] != "Job":
                self.api.delete(obj["kind"], obj["metadata"]["name"], self.namespace, "Foreground")
        if wait:  # its pods stop within their grace period: the model's, then the copy of its results
            self.api.wait_gone("Job", plan.name, self.namespace, max(GONE_WAIT, plan.grace + TIMEOUT_GRACE))

    def abort(self, exc: BaseException) -> None:
        """Ctrl-C, SIGTERM or an error: every job still running is deleted (and waited for), then
        recorded as a FAILURE that says why. A second Ctrl-C does not stop the clean-up."""
        reason = interruption(exc) if isinstance(exc, KeyboardInterrupt) else f"stopped: {exc}"
        runs = self.active()
        for run in runs:
            run.done = True
            self._refresh(run)  # pods the watch has not shown yet: their logs are followed while they stop
            for pod in list(run.pods.values()):
                self._tap(run, pod)
        for run in runs:
            self.reporter.message(f"madengine: deleting k8s job {self.namespace}/{run.plan.name} ({reason})")
            for _ in range(3):
                try:
                    self.cleanup(run, wait=True)
                    break
                except KeyboardInterrupt:
                    continue
                except MadEngineError as error:
                    self.reporter.message(f"madengine: warning: clean-up of {run.plan.name} failed: {error}; "
                                          f"delete it with: kubectl delete job {run.plan.name} -n {self.namespace}")
                    break
        for run in runs:
            self._record(run, self._rows(run, JobState(finished=True, failed=True), reason))


__all__ = ["K8sSession", "JobRun", "LogTap"]
