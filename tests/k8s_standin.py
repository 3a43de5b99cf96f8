"""A local stand-in for a Kubernetes cluster: a real HTTP server speaking enough of the Kubernetes
REST API for madengine's client (ConfigMaps, Secrets, Services, Jobs, Pods and their logs, watches,
nodes), whose pods really run — as containers of the real Docker engine.

Kubernetes cannot run here, so this is the one stand-in of the k8s tests; what it does is the
least of a cluster, done for real:

* the **API**: create (409 when it exists), read, replace (a Service's update must name the
  ``resourceVersion`` it replaces, as the API server requires), delete with ``propagationPolicy``
  (Foreground: the Job stays, marked for deletion, until its pods are gone), list and watch pods
  by label selector (newline-delimited JSON events, ``resourceVersion`` and ``timeoutSeconds``),
  pod logs (``follow`` streams until the container ends); every request is recorded;
* a **job controller**: a Job's pods (one per index of an Indexed Job, host name ``<job>-<index>``
  and the index annotation), none while the Job is ``suspend``ed; ``backoffLimit``,
  ``backoffLimitPerIndex``/``maxFailedIndexes``, the ``podFailurePolicy`` (rules in order:
  ``onPodConditions``, ``onExitCodes``; ``Ignore``, ``FailJob``, ``FailIndex``, ``Count``), a pod
  replaced only once it has failed (``podReplacementPolicy: Failed``), ``successPolicy``
  (``succeededIndexes``: its other pods are stopped, ``SuccessCriteriaMet`` then ``Complete``),
  ``activeDeadlineSeconds`` (counted from the Job's start or resumption), ``Complete``/``Failed``
  conditions, set once the Job's pods have stopped;
* **Kueue** (``kueue_admit_after``): a Job labelled ``kueue.x-k8s.io/queue-name`` is created
  suspended (Kueue's webhook) and admitted (resumed) that many seconds later;
* a **scheduler** of ``nodes`` nodes (each with ``allocatable`` and ``node_labels``): a pod goes to
  the first node whose labels match its node selector and required node affinity, whose
  allocatable holds each of its requests, and that runs no pod its required pod anti-affinity
  (over ``kubernetes.io/hostname``) excludes; none: it stays Pending with ``PodScheduled=False,
  Unschedulable`` and the scheduler's message (each node's reasons counted, sorted). Requests of
  the pods already there are not subtracted;
* a **kubelet** on Docker: the image must be in the engine (nothing can be pulled here: a missing
  image is ``ErrImagePull`` then ``ImagePullBackOff``; with ``Never`` it is ``ErrImageNeverPull``);
  the container gets the pod's command and args and environment after the kubelet's ``$(VAR)``
  expansion (downward API fields, ``secretKeyRef``, ``envFrom``), the ConfigMap volume's items as
  read-only files, emptyDirs, ``/dev/shm`` of a memory emptyDir, PVCs as host folders, the memory
  limit (so OOMKilled is the kernel's), dropped and added capabilities, no-new-privileges,
  ``runAsUser``/``runAsGroup``/``supplementalGroups``, ``runAsNonRoot`` (refused for an image
  that runs as root: ``CreateContainerConfigError``), a read-only root file system, seccomp
  unconfined; pods whose subdomain is a headless Service's get
  ``<host>.<service>.<namespace>.svc.cluster.local`` on a Docker network, which is what cluster
  DNS gives them. It **stops a pod as the kubelet does**: SIGTERM to the container, SIGKILL after
  the pod's ``terminationGracePeriodSeconds`` (default 30), the pod kept (its log readable) until
  it has stopped; a deleted pod is removed then;
* **disruptions**: the Eviction API (``POST pods/<name>/eviction``, or :meth:`StandIn.evict`)
  marks the pod ``DisruptionTarget`` (``EvictionByEvictionAPI``) and stops it the same way.

Not modelled: host namespaces (``hostNetwork``/``hostIPC`` pods run on the stand-in's network),
AppArmor, node accounting of requests, preemption.

Nothing here pretends a pod ran: a pod's log is its container's, its exit code the process's.
"""

from __future__ import annotations

import base64
import copy
import datetime
import http.server
import json
import os
import re
import shutil
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

INDEX = "batch.kubernetes.io/job-completion-index"
_PATH = re.compile(r"^/(?:api/v1|apis/batch/v1)(?:/namespaces/(?P<ns>[^/]+))?/(?P<kind>[a-z]+)"
                   r"(?:/(?P<name>[^/]+))?(?:/(?P<sub>log|eviction))?$")
_KINDS = {"configmaps": "ConfigMap", "secrets": "Secret", "services": "Service", "jobs": "Job", "pods": "Pod",
          "nodes": "Node"}
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
HOSTNAME = "kubernetes.io/hostname"
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_DECIMAL = {"m": 1e-3, "": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def quantity(text: Any) -> float:
    match = re.match(r"^([0-9.]+)([A-Za-z]*)$", str(text))
    number, suffix = float(match.group(1)), match.group(2)
    return number * (_BINARY.get(suffix) or _DECIMAL[suffix])


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def selects(selector: str, labels: dict[str, str]) -> bool:
    for part in filter(None, (selector or "").split(",")):
        key, _, value = part.partition("=")
        if labels.get(key) != value:
            return False
    return True


def expand(text: str, env: dict[str, str]) -> str:
    """The kubelet's ``$(VAR)`` expansion: ``$$`` is ``$``, ``$(NAME)`` a defined variable's value."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end > 0 and text[i + 2:end] in env:
                    out.append(env[text[i + 2:end]])
                    i = end + 1
                    continue
        out.append(text[i])
        i += 1
    return "".join(out)


def _node_affinity(spec: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a node's labels satisfy the pod's required node affinity (any of its terms)."""
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms")
    if not required:
        return True

    def holds(requirement: dict[str, Any]) -> bool:
        key, operator, values = requirement["key"], requirement["operator"], requirement.get("values") or []
        return {"In": lambda: labels.get(key) in values, "NotIn": lambda: labels.get(key) not in values,
                "Exists": lambda: key in labels, "DoesNotExist": lambda: key not in labels,
                "Gt": lambda: key in labels and int(labels[key]) > int(values[0]),
                "Lt": lambda: key in labels and int(labels[key]) < int(values[0])}[operator]()

    return any(all(holds(r) for r in term.get("matchExpressions") or []) for term in required)


class Gone(Exception):
    pass


class StandIn:
    """The stand-in cluster (``start()`` it; ``close()`` removes every container it made)."""

    def __init__(self, docker_client: Any, *, allocatable: dict[str, str] | None = None,
                 node_labels: dict[str, str] | None = None, nodes: int = 1, nodes_forbidden: bool = False,
                 pull_backoff_after: float = 0.5, refuse: dict[tuple[str, str], tuple[int, str]] | None = None,
                 kueue_admit_after: float | None = None) -> None:
        self.docker = docker_client
        self.id = uuid.uuid4().hex[:8]
        self.node = "standin-node"
        self.node_names = [self.node] + [f"standin-node-{i}" for i in range(1, nodes)]
        #: a GPU node's (requests are checked against it; nothing is accounted)
        self.allocatable = {"cpu": "64", "memory": "512Gi", "pods": "110", **(allocatable or {})}
        self.node_labels = {node: {HOSTNAME: node, **(node_labels or {})} for node in self.node_names}
        self.nodes_forbidden = nodes_forbidden
        self.pull_backoff_after = pull_backoff_after
        self.kueue_admit_after = kueue_admit_after
        #: (method, kind) → (HTTP status, message): what an admission policy or RBAC would refuse
        self.refuse = dict(refuse or {})
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}  # (kind, ns, name) → object
        self.version = 0
        self.events: list[tuple[int, str, dict[str, Any]]] = []  # pod events (version, type, pod)
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.containers: dict[str, Any] = {}  # pod name → container
        self.waiters: dict[str, threading.Thread] = {}  # pod name → the thread that records its end
        self.folder = Path(tempfile.mkdtemp(prefix=f"k8s-standin-{self.id}-"))
        self.network = None
        self.server: http.server.ThreadingHTTPServer | None = None
        self.closed = False

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> "StandIn":
        standin = self

        class Handler(_Handler):
            cluster = standin

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.network = self.docker.networks.create(f"k8s-standin-{self.id}", driver="bridge",
                                                   labels={"madengine-test": "k8s-standin"})
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def kubeconfig(self, path: Path, context: str = "standin", namespace: str = "default") -> Path:
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": context,
            "clusters": [{"name": "standin", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": {"token": "standin-token"}}],
            "contexts": [{"name": context, "context": {"cluster": "standin", "user": "tester",
                                                       "namespace": namespace}}]}))
        return path

    def close(self) -> None:
        self.closed = True
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        for container in list(self.containers.values()):
            self._remove(container)
        for container in self.docker.containers.list(all=True, filters={"label": f"k8s-standin={self.id}"}):
            self._remove(container)
        if self.network is not None:
            try:
                self.network.remove()
            except Exception:
                pass
        shutil.rmtree(self.folder, ignore_errors=True)

    @staticmethod
    def _remove(container: Any) -> None:
        try:
            container.remove(force=True)
        except Exception:
            pass

    # -- what tests look at ------------------------------------------------------------------------
    def seen(self, method: str, kind: str, name: str | None = None, sub: str | None = None) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["method"] == method and r["kind"] == kind
                and (name is None or r["name"] == name) and (sub is None or r["sub"] == sub)]

    def pods(self, **labels: str) -> list[dict[str, Any]]:
        with self.lock:
            return [copy.deepcopy(o) for (k, _, _), o in self.objects.items()
                    if k == "Pod" and all(o["metadata"]["labels"].get(a) == b for a, b in labels.items())]

    def names(self, kind: str) -> list[str]:
        with self.lock:
            return sorted(name for (k, _, name) in self.objects if k == kind)

    # -- the store -----------------------------------------------------------------------------
    def _stamp(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        return obj

    def put(self, obj: dict[str, Any], event: str = "MODIFIED") -> dict[str, Any]:
        with self.lock:
            meta = obj["metadata"]
            self._stamp(obj)
            self.objects[(obj["kind"], meta.get("namespace", ""), meta["name"])] = obj
            if obj["kind"] == "Pod":
                self.events.append((self.version, event, copy.deepcopy(obj)))
                self.changed.notify_all()
            return copy.deepcopy(obj)

    def get(self, kind: str, ns: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            found = self.objects.get((kind, ns, name))
            return copy.deepcopy(found) if found is not None else None

    def drop(self, kind: str, ns: str, name: str) -> None:
        with self.lock:
            obj = self.objects.pop((kind, ns, name), None)
            if obj is not None and kind == "Pod":
                self._stamp(obj)
                self.events.append((self.version, "DELETED", copy.deepcopy(obj)))
                self.changed.notify_all()

    def update_pod(self, ns: str, name: str, change: Any) -> None:
        with self.lock:
            pod = self.objects.get(("Pod", ns, name))
            if pod is None:
                raise Gone(name)
            change(pod)
            self.put(pod)

    # -- API: create, replace, delete ----------------------------------------------------------------
    def create(self, kind: str, ns: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        name = body["metadata"]["name"]
        with self.lock:
            if (kind, ns, name) in self.objects:
                return 409, _status(409, "AlreadyExists", f'{kind.lower()}s "{name}" already exists')
            obj = copy.deepcopy(body)
            obj["metadata"].update(namespace=ns, uid=str(uuid.uuid4()), creationTimestamp=now())
            queued = kind == "Job" and self.kueue_admit_after is not None and \
                QUEUE_LABEL in (obj["metadata"].get("labels") or {})
            if kind == "Job":
                obj["status"] = {}
                if queued:  # Kueue's webhook: the Job waits in its queue
                    obj["spec"]["suspend"] = True
            stored = self.put(obj, "ADDED")
        if kind == "Job":
            threading.Thread(target=self._run_job, args=(ns, name, stored["metadata"]["uid"]), daemon=True).start()
            if queued:
                threading.Thread(target=self._admit, args=(ns, name), daemon=True).start()
        return 201, stored

    def _admit(self, ns: str, name: str) -> None:
        """Kueue admits the Job once its queue has quota: it is resumed."""
        time.sleep(self.kueue_admit_after or 0)
        with self.lock:
            job = self.objects.get(("Job", ns, name))
            if job is not None:
                job["spec"]["suspend"] = False
                self.put(job)

    def replace(self, kind: str, ns: str, name: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self.lock:
            current = self.objects.get((kind, ns, name))
            if current is None:
                return 404, _status(404, "NotFound", f'{kind.lower()}s "{name}" not found')
            given = body["metadata"].get("resourceVersion")
            if kind == "Service" and not given:
                return 422, _status(422, "Invalid", "metadata.resourceVersion: Invalid value: 0x0: must be "
                                                    "specified for an update")
            if given and given != current["metadata"]["resourceVersion"]:
                return 409, _status(409, "Conflict", "the object has been modified")
            obj = copy.deepcopy(body)
            obj["metadata"].update(namespace=ns, uid=current["metadata"]["uid"],
                                   creationTimestamp=current["metadata"]["creationTimestamp"])
            return 200, self.put(obj)

    def delete(self, kind: str, ns: str, name: str, body: dict[str, Any] | None) -> tuple[int, dict[str, Any]]:
        current = self.get(kind, ns, name)
        if current is None:
            return 404, _status(404, "NotFound", f'{kind.lower()}s "{name}" not found')
        if kind == "Pod":  # stopped with its grace period, then removed
            self.update_pod(ns, name, lambda p: p["metadata"].update(deletionTimestamp=now()))
            threading.Thread(target=self._delete_pod, args=(ns, name), daemon=True).start()
            return 200, self.get(kind, ns, name) or {}
        if kind != "Job":
            self.drop(kind, ns, name)
            return 200, _status(200, "Success", "deleted")
        policy = (body or {}).get("propagationPolicy", "Background")
        with self.lock:
            job = self.objects[(kind, ns, name)]
            job["metadata"]["deletionTimestamp"] = now()
            if policy == "Foreground":
                job["metadata"]["finalizers"] = ["foregroundDeletion"]
            self.put(job)
        threading.Thread(target=self._delete_job, args=(ns, name, policy), daemon=True).start()
        return 200, self.get(kind, ns, name) or {}

    def _delete_pod(self, ns: str, name: str) -> None:
        self._terminate(ns, name)
        self.drop("Pod", ns, name)
        self._remove(self.containers.pop(name, None))

    def _delete_job(self, ns: str, name: str, policy: str) -> None:
        if policy == "Background":
            self.drop("Job", ns, name)
        if policy != "Orphan":
            stopping = [threading.Thread(target=self._delete_pod, args=(ns, pod["metadata"]["name"]), daemon=True)
                        for pod in self.pods(**{"job-name": name}) if pod["metadata"]["namespace"] == ns]
            for thread in stopping:
                thread.start()
            for thread in stopping:
                thread.join()
        self.drop("Job", ns, name)

    def evict(self, ns: str, name: str, reason: str = "EvictionByEvictionAPI") -> None:
        """A disruption (the Eviction API, a preemption, a drain): the pod is marked
        ``DisruptionTarget`` and stopped with its grace period (in the background)."""
        threading.Thread(target=self._terminate, args=(ns, name, reason), daemon=True).start()

    # -- the job controller --------------------------------------------------------------------------
    def _run_job(self, ns: str, name: str, uid: str) -> None:
        """The job controller of one Job (its uid: a Job made again under the same name has its own)."""
        try:
            self._control_job(ns, name, uid)
        except Gone:  # deleted (or replaced) while a pod was being made: the controller stops
            return

    def _control_job(self, ns: str, name: str, uid: str) -> None:
        job = self.get("Job", ns, name)
        if not self._active(job, uid):
            return
        spec = job["spec"]
        completions = int(spec.get("completions") or 1)
        indexed = spec.get("completionMode") == "Indexed"
        per_index = spec.get("backoffLimitPerIndex")
        failures, succeeded, failed_indexes = 0, set(), set()
        index_failures: dict[int, int] = {}
        started: float | None = None
        running: dict[int, str] = {}
        while not self.closed:
            job = self.get("Job", ns, name)
            if not self._active(job, uid):
                return
            if job["spec"].get("suspend"):
                started = None  # the deadline counts from the Job's resumption
                time.sleep(0.1)
                continue
            if started is None:
                started = time.monotonic()
                for index in range(completions):
                    if index not in succeeded and index not in failed_indexes and index not in running:
                        running[index] = self._make_pod(job, index, indexed)
            deadline = spec.get("activeDeadlineSeconds")
            if deadline and time.monotonic() - started > deadline:
                self._end_job(ns, name, uid, running, "Failed", "DeadlineExceeded", "Job was active longer than "
                                                                                  "specified deadline")
                return
            for index, pod_name in list(running.items()):
                pod = self.get("Pod", ns, pod_name)
                phase = (pod or {}).get("status", {}).get("phase")
                if phase == "Succeeded":
                    succeeded.add(index)
                    del running[index]
                elif phase == "Failed" or pod is None:
                    del running[index]
                    action, message = self._policy_action(spec, pod or {}, index)
                    if action == "FailJob":
                        self._end_job(ns, name, uid, running, "Failed", "PodFailurePolicy", message)
                        return
                    if action != "Ignore":
                        failures += 1
                        index_failures[index] = index_failures.get(index, 0) + 1
                        if action == "FailIndex" or (per_index is not None and index_failures[index] > per_index):
                            failed_indexes.add(index)
                            if len(failed_indexes) > int(spec.get("maxFailedIndexes", completions)):
                                self._end_job(ns, name, uid, running, "Failed", "MaxFailedIndexesExceeded",
                                              "Job has exceeded the specified maximal number of failed indexes")
                                return
                            continue
                        if failures > int(spec.get("backoffLimit", 6)) and per_index is None:
                            self._end_job(ns, name, uid, running, "Failed", "BackoffLimitExceeded",
                                          "Job has reached the specified backoff limit")
                            return
                    running[index] = self._make_pod(job, index, indexed)
            if self._success_policy_met(spec, succeeded):
                self._end_job(ns, name, uid, running, "Complete", "SuccessPolicy", "Matched rules at index 0",
                              success=True)
                return
            if len(succeeded | failed_indexes) == completions:
                if failed_indexes:
                    self._end_job(ns, name, uid, running, "Failed", "FailedIndexes", "Job has failed indexes")
                else:
                    self._end_job(ns, name, uid, running, "Complete", "", "")
                return
            time.sleep(0.1)

    @staticmethod
    def _active(job: dict[str, Any] | None, uid: str) -> bool:
        """``job`` is the Job of ``uid`` (not another made under its name since) and is not being deleted."""
        return job is not None and job["metadata"]["uid"] == uid and not job["metadata"].get("deletionTimestamp")

    @staticmethod
    def _policy_action(spec: dict[str, Any], pod: dict[str, Any], index: int) -> tuple[str, str]:
        """The first rule of the Job's podFailurePolicy a failed pod matches: (action, message)."""
        status = pod.get("status") or {}
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        terminated = ((status.get("containerStatuses") or [{}])[0].get("state") or {}).get("terminated") or {}
        code = terminated.get("exitCode")
        for rule in (spec.get("podFailurePolicy") or {}).get("rules") or []:
            on_conditions = rule.get("onPodConditions") or []
            if any(conditions.get(c["type"]) == c.get("status", "True") for c in on_conditions):
                return rule["action"], f"Pod {pod['metadata']['name']} has condition matching {rule['action']} rule"
            codes = rule.get("onExitCodes")
            if codes and code is not None and code != 0 and \
                    (code in codes["values"]) == (codes["operator"] == "In"):
                return rule["action"], (f"Container {codes.get('containerName', 'model')} for pod "
                                        f"{pod['metadata']['namespace']}/{pod['metadata']['name']} failed with exit "
                                        f"code {code} matching {rule['action']} rule at index {index}")
        return "Count", ""

    @staticmethod
    def _success_policy_met(spec: dict[str, Any], succeeded: set[int]) -> bool:
        for rule in (spec.get("successPolicy") or {}).get("rules") or []:
            wanted = set()
            for part in str(rule.get("succeededIndexes", "")).split(","):
                low, _, high = part.partition("-")
                if low:
                    wanted |= set(range(int(low), int(high or low) + 1))
            if wanted and wanted <= succeeded:
                return True
        return False

    def _end_job(self, ns: str, name: str, uid: str, running: dict[int, str], kind: str, reason: str, message: str,
                 success: bool = False) -> None:
        """The Job's end: its remaining pods stopped (their grace period), then its condition."""
        if success:
            self._set_conditions(ns, name, uid, [("SuccessCriteriaMet", reason, message)])
        elif kind == "Failed":
            self._set_conditions(ns, name, uid, [("FailureTarget", reason, message)])
        stopping = [threading.Thread(target=self._terminate, args=(ns, pod_name), daemon=True)
                    for pod_name in running.values()]
        for thread in stopping:
            thread.start()
        for thread in stopping:
            thread.join()
        self._set_conditions(ns, name, uid, [(kind, reason, message)], final=True)

    def _set_conditions(self, ns: str, name: str, uid: str, conditions: list[tuple[str, str, str]],
                        final: bool = False) -> None:
        with self.lock:
            job = self.objects.get(("Job", ns, name))
            if job is None or job["metadata"]["uid"] != uid:
                return
            status = job.setdefault("status", {})
            status["conditions"] = [c for c in status.get("conditions") or [] if c["type"] not in
                                    {kind for kind, _, _ in conditions}] + \
                [{"type": kind, "status": "True", "reason": reason, "message": message, "lastTransitionTime": now()}
                 for kind, reason, message in conditions]
            if final:
                status["completionTime" if conditions[0][0] == "Complete" else "failedTime"] = now()
            self.put(job)

    def _make_pod(self, job: dict[str, Any], index: int, indexed: bool) -> str:
        ns, job_name = job["metadata"]["namespace"], job["metadata"]["name"]
        template = copy.deepcopy(job["spec"]["template"])
        name = f"{job_name}-{index}-{uuid.uuid4().hex[:5]}" if indexed else f"{job_name}-{uuid.uuid4().hex[:5]}"
        meta = template.get("metadata") or {}
        labels = {**(meta.get("labels") or {}), "job-name": job_name, "batch.kubernetes.io/job-name": job_name,
                  "controller-uid": job["metadata"]["uid"]}
        annotations = dict(meta.get("annotations") or {})
        spec = template["spec"]
        if indexed:
            labels[INDEX] = annotations[INDEX] = str(index)
            spec["hostname"] = f"{job_name}-{index}"
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": ns, "labels": labels, "annotations": annotations,
                            "uid": str(uuid.uuid4()), "creationTimestamp": now(),
                            "ownerReferences": [{"kind": "Job", "name": job_name, "uid": job["metadata"]["uid"]}]},
               "spec": spec, "status": {"phase": "Pending", "conditions": []}}
        with self.lock:  # no pod for a Job that is going (or gone and made again): its deletion saw none
            if not self._active(self.objects.get(("Job", ns, job_name)), job["metadata"]["uid"]):
                raise Gone(job_name)
            self.put(pod, "ADDED")
        threading.Thread(target=self._kubelet, args=(ns, name), daemon=True).start()
        return name

    # -- the scheduler and the kubelet ----------------------------------------------------------------
    def _why_not(self, node: str, pod: dict[str, Any]) -> list[str]:
        """Why ``node`` cannot take ``pod`` (the scheduler's words), [] when it can."""
        spec, labels = pod["spec"], self.node_labels[node]
        if any(labels.get(key) != value for key, value in (spec.get("nodeSelector") or {}).items()) or \
                not _node_affinity(spec, labels):
            return ["node(s) didn't match Pod's node affinity/selector"]
        requests = (spec["containers"][0].get("resources") or {}).get("requests") or {}
        short = [f"Insufficient {key}" for key, value in requests.items()
                 if quantity(value) > quantity(self.allocatable.get(key, "0"))]
        if short:
            return short
        for term in ((spec.get("affinity") or {}).get("podAntiAffinity") or {}).get(
                "requiredDuringSchedulingIgnoredDuringExecution") or []:
            match = (term.get("labelSelector") or {}).get("matchLabels") or {}
            if term.get("topologyKey") == HOSTNAME and any(
                    other["spec"].get("nodeName") == node and other["metadata"]["name"] != pod["metadata"]["name"]
                    and other["status"].get("phase") not in ("Succeeded", "Failed")
                    and all(other["metadata"]["labels"].get(k) == v for k, v in match.items())
                    for (kind, _, _), other in self.objects.items() if kind == "Pod"):
                return ["node(s) didn't match pod anti-affinity rules"]
        return []

    def _schedule(self, ns: str, name: str) -> str:
        """Bind the pod to the first node that can take it: '' then, else the scheduler's message."""
        with self.lock:
            pod = self.objects.get(("Pod", ns, name))
            if pod is None:
                raise Gone(name)
            reasons: dict[str, int] = {}
            for node in self.node_names:
                why = self._why_not(node, pod)
                if not why:
                    pod["spec"]["nodeName"] = node
                    pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]
                    self.put(pod)
                    return ""
                for reason in why:
                    reasons[reason] = reasons.get(reason, 0) + 1
        total = len(self.node_names)
        said = ", ".join(sorted(f"{count} {reason}" for reason, count in reasons.items()))
        return f"0/{total} nodes are available: {said}. preemption: 0/{total} nodes are available: {total} No " \
               "preemption victims found for incoming pod."

    def _set_waiting(self, ns: str, name: str, reason: str, message: str) -> None:
        def change(pod: dict[str, Any]) -> None:
            pod["status"]["containerStatuses"] = [{"name": "model", "ready": False, "restartCount": 0,
                                                   "image": pod["spec"]["containers"][0]["image"],
                                                   "state": {"waiting": {"reason": reason, "message": message}}}]
        self.update_pod(ns, name, change)

    def _kubelet(self, ns: str, name: str) -> None:
        try:
            refusal = self._schedule(ns, name)
            if refusal:
                self.update_pod(ns, name, lambda p: p["status"].update(conditions=[{
                    "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": refusal}]))
                return
            container = self.get("Pod", ns, name)["spec"]["containers"][0]
            if not self._image_present(container["image"]):
                self._cannot_pull(ns, name, container)
                return
            self._start(ns, name)
        except Gone:
            return

    def _image_present(self, image: str) -> bool:
        from docker.errors import ImageNotFound

        try:
            self.docker.images.get(image)
            return True
        except ImageNotFound:
            return False

    def _cannot_pull(self, ns: str, name: str, container: dict[str, Any]) -> None:
        image = container["image"]
        if container.get("imagePullPolicy") == "Never":
            self._set_waiting(ns, name, "ErrImageNeverPull", f'Container image "{image}" is not present with pull '
                                                             'policy of Never')
            return
        self._set_waiting(ns, name, "ErrImagePull", f'failed to pull and unpack image "{image}": failed to resolve '
                                                    'reference: no such host')
        time.sleep(self.pull_backoff_after)
        self._set_waiting(ns, name, "ImagePullBackOff", f'Back-off pulling image "{image}"')

    def _env(self, pod: dict[str, Any]) -> dict[str, str]:
        """The container's environment as the kubelet builds it (in order, ``$(VAR)`` expanded)."""
        meta, spec = pod["metadata"], pod["spec"]
        env: dict[str, str] = {}
        for source in spec["containers"][0].get("envFrom") or []:  # first: env wins over it
            ref = source["secretRef"]
            secret = self.get("Secret", meta["namespace"], ref["name"])
            if secret is None:
                raise RuntimeError(f'secret "{ref["name"]}" not found')
            env.update({k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()})
        for item in spec["containers"][0].get("env") or []:
            if "value" in item:
                env[item["name"]] = expand(item["value"], env)
                continue
            source = item["valueFrom"]
            if "fieldRef" in source:
                path = source["fieldRef"]["fieldPath"]
                annotation = re.match(r"^metadata\.annotations\['(.+)'\]$", path)
                value = {"metadata.name": meta["name"], "metadata.namespace": meta["namespace"],
                         "spec.nodeName": spec.get("nodeName", "")}.get(path) if not annotation else \
                    meta.get("annotations", {}).get(annotation.group(1), "")
                env[item["name"]] = str(value)
            elif "secretKeyRef" in source:
                ref = source["secretKeyRef"]
                secret = self.get("Secret", meta["namespace"], ref["name"])
                if secret is None or ref["key"] not in (secret.get("data") or {}):
                    raise RuntimeError(f'secret "{ref["name"]}" not found')
                env[item["name"]] = base64.b64decode(secret["data"][ref["key"]]).decode()
        if INDEX in meta.get("annotations", {}):
            env.setdefault("JOB_COMPLETION_INDEX", meta["annotations"][INDEX])
        return env

    def _volumes(self, pod: dict[str, Any]) -> tuple[list[str], int | None]:
        """Docker binds for the pod's volumes, and the size of its /dev/shm."""
        meta, spec = pod["metadata"], pod["spec"]
        root = self.folder / meta["name"]
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        binds, shm = [], None
        for mount in spec["containers"][0].get("volumeMounts") or []:
            volume = volumes[mount["name"]]
            read_only = ":ro" if mount.get("readOnly") else ":rw"
            if "emptyDir" in volume and volume["emptyDir"].get("medium") == "Memory" and mount["mountPath"] == "/dev/shm":
                shm = int(quantity(volume["emptyDir"].get("sizeLimit", "64Mi")))
                continue
            if "configMap" in volume:
                folder = root / f"cm-{mount['name']}"
                self._write_configmap(meta["namespace"], volume["configMap"], folder)
            elif "persistentVolumeClaim" in volume:
                folder = self.folder / "pvc" / volume["persistentVolumeClaim"]["claimName"]
                folder.mkdir(parents=True, exist_ok=True)
                os.chmod(folder, 0o777)  # a volume any user of the pod writes (as with fsGroup)
            else:
                folder = root / f"dir-{mount['name']}"
                folder.mkdir(parents=True, exist_ok=True)
                os.chmod(folder, 0o777)  # the kubelet makes emptyDirs world-writable
            binds.append(f"{folder}:{mount['mountPath']}{read_only}")
        return binds, shm

    def _write_configmap(self, ns: str, source: dict[str, Any], folder: Path) -> None:
        config = self.get("ConfigMap", ns, source["name"])
        if config is None:
            raise RuntimeError(f'configmap "{source["name"]}" not found')
        data = {k: v.encode() for k, v in (config.get("data") or {}).items()}
        data.update({k: base64.b64decode(v) for k, v in (config.get("binaryData") or {}).items()})
        items = source.get("items") or [{"key": k, "path": k} for k in data]
        for item in items:
            path = folder / item["path"]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data[item["key"]])
            os.chmod(path, source.get("defaultMode", 0o644))

    def _user(self, pod: dict[str, Any], image: str) -> tuple[str | None, str]:
        """(the docker user of the pod's security context, the kubelet's refusal or '')."""
        security = pod["spec"].get("securityContext") or {}
        user, group = security.get("runAsUser"), security.get("runAsGroup")
        if security.get("runAsNonRoot") and user is None:
            configured = str((self.docker.images.get(image).attrs.get("Config") or {}).get("User") or "")
            if configured.split(":")[0] in ("", "0", "root"):
                return None, "container has runAsNonRoot and image will run as root"
        if user is None and group is None:
            return None, ""
        return f"{user if user is not None else 0}{f':{group}' if group is not None else ''}", ""

    def _start(self, ns: str, name: str) -> None:
        pod = self.get("Pod", ns, name)
        spec, container = pod["spec"], pod["spec"]["containers"][0]
        try:
            env = self._env(pod)
            binds, shm = self._volumes(pod)
        except RuntimeError as exc:
            self._set_waiting(ns, name, "CreateContainerConfigError", str(exc))
            return
        user, refusal = self._user(pod, container["image"])
        if refusal:
            self._set_waiting(ns, name, "CreateContainerConfigError", refusal)
            return
        limits = (container.get("resources") or {}).get("limits") or {}
        security = container.get("securityContext") or {}
        capabilities = security.get("capabilities") or {}
        hostname = spec.get("hostname") or name
        aliases = []
        service = self.get("Service", ns, spec.get("subdomain", "")) if spec.get("subdomain") else None
        if service is not None and service["spec"].get("clusterIP") == "None" and \
                selects(",".join(f"{k}={v}" for k, v in service["spec"].get("selector", {}).items()),
                        pod["metadata"]["labels"]):
            aliases = [f"{hostname}.{spec['subdomain']}.{ns}.svc.cluster.local", f"{hostname}.{spec['subdomain']}"]
        security_opt = (["no-new-privileges"] if security.get("allowPrivilegeEscalation") is False else []) + \
            (["seccomp=unconfined"] if (security.get("seccompProfile") or {}).get("type") == "Unconfined" else [])
        options: dict[str, Any] = dict(
            image=container["image"], entrypoint=[expand(a, env) for a in container.get("command") or []] or None,
            command=[expand(a, env) for a in container.get("args") or []], environment=env, hostname=hostname,
            working_dir=container.get("workingDir"), volumes=binds, detach=True,
            name=f"k8s-standin-{self.id}-{name}", labels={"k8s-standin": self.id, "madengine-test": "k8s-standin"},
            cap_drop=["ALL"] if "ALL" in capabilities.get("drop", []) else None,
            cap_add=list(capabilities.get("add") or []) or None, security_opt=security_opt or None,
            privileged=bool(security.get("privileged")), network=self.network.name,
            read_only=bool(security.get("readOnlyRootFilesystem")),
            group_add=[str(g) for g in (spec.get("securityContext") or {}).get("supplementalGroups") or []] or None)
        if user is not None:
            options["user"] = user
        if shm:
            options["shm_size"] = shm
        if "memory" in limits:
            options["mem_limit"] = options["memswap_limit"] = int(quantity(limits["memory"]))
        if "cpu" in limits:
            options["nano_cpus"] = int(quantity(limits["cpu"]) * 1e9)
        created = self.docker.containers.create(**options)
        self.containers[name] = created
        if aliases:
            self.network.disconnect(created)
            self.network.connect(created, aliases=aliases)
        created.start()
        created.reload()
        started = created.attrs["State"]["StartedAt"][:19] + "Z"

        def running(p: dict[str, Any]) -> None:
            p["status"]["phase"] = "Running"
            p["status"]["containerStatuses"] = [{"name": "model", "ready": True, "restartCount": 0,
                                                 "image": container["image"], "containerID": f"docker://{created.id}",
                                                 "state": {"running": {"startedAt": started}}}]
        self.update_pod(ns, name, running)
        waiter = threading.Thread(target=self._wait, args=(ns, name, created, started), daemon=True)
        self.waiters[name] = waiter
        waiter.start()

    def _wait(self, ns: str, name: str, container: Any, started: str) -> None:
        try:
            code = container.wait()["StatusCode"]
            container.reload()
            state = container.attrs["State"]
        except Exception:
            return  # removed (the pod was deleted)
        reason = "OOMKilled" if state.get("OOMKilled") else "Completed" if code == 0 else "Error"

        def ended(p: dict[str, Any]) -> None:
            if p["status"].get("phase") in ("Succeeded", "Failed"):
                return
            p["status"]["phase"] = "Succeeded" if code == 0 else "Failed"
            p["status"]["containerStatuses"][0]["state"] = {"terminated": {
                "exitCode": code, "reason": reason, "startedAt": started, "finishedAt": now()}}
        try:
            self.update_pod(ns, name, ended)
        except Gone:
            pass

    def _terminate(self, ns: str, name: str, disruption: str = "") -> None:
        """Stop a pod as the kubelet does: SIGTERM, SIGKILL after its grace period; its end recorded
        (a pod that never started ends Failed). ``disruption``: the reason of its DisruptionTarget."""
        pod = self.get("Pod", ns, name)
        if pod is None:
            return
        if disruption:
            self.update_pod(ns, name, lambda p: p["status"].setdefault("conditions", []).append({
                "type": "DisruptionTarget", "status": "True", "reason": disruption,
                "message": "Eviction API: evicting", "lastTransitionTime": now()}))
        grace = pod["spec"].get("terminationGracePeriodSeconds", 30)
        container = self.containers.get(name)
        if container is not None:
            try:
                container.kill(signal="SIGTERM")
                container.wait(timeout=grace)
            except Exception:  # still running after its grace period (or already gone)
                try:
                    container.kill(signal="SIGKILL")
                    container.wait(timeout=30)
                except Exception:
                    pass
        waiter = self.waiters.get(name)
        if waiter is not None:
            waiter.join(30)
        try:
            self.update_pod(ns, name, lambda p: p["status"].update(phase="Failed")
                            if p["status"].get("phase") not in ("Succeeded", "Failed") else None)
        except Gone:
            pass

    # -- logs ------------------------------------------------------------------------------------
    def log(self, ns: str, name: str) -> Any:
        pod = self.get("Pod", ns, name)
        if pod is None:
            return None
        return self.containers.get(name)

    # -- watches -----------------------------------------------------------------------------------
    def watch(self, ns: str, selector: str, since: int | None, seconds: float):
        """Pod events after ``since`` (all current pods as ADDED when None), for ``seconds``."""
        deadline = time.monotonic() + seconds
        with self.lock:
            if since is None:
                pending = [(self.version, "ADDED", copy.deepcopy(o)) for (k, n, _), o in self.objects.items()
                           if k == "Pod" and n == ns]
                since = self.version
            else:
                pending = [e for e in self.events if e[0] > since]
                since = max([since, *[e[0] for e in pending]])
        while True:
            for _, kind, obj in pending:
                if obj["metadata"]["namespace"] == ns and selects(selector, obj["metadata"]["labels"]):
                    yield kind, obj
            with self.lock:
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    return
                if not any(e[0] > since for e in self.events):
                    self.changed.wait(min(left, 0.5))
                pending = [e for e in self.events if e[0] > since]
                if pending:
                    since = pending[-1][0]


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure" if code >= 400 else "Success",
            "message": message, "reason": reason, "code": code}


class _Handler(http.server.BaseHTTPRequestHandler):
    cluster: StandIn
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _begin_stream(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _chunk(self, data: bytes) -> None:
        if data:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _route(self, method: str) -> None:
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        match = _PATH.match(parts.path)
        if match is None or match.group("kind") not in _KINDS:
            self._send(404, _status(404, "NotFound", f"the server could not find {parts.path}"))
            return
        kind, ns, name, sub = _KINDS[match.group("kind")], match.group("ns") or "", match.group("name"), \
            match.group("sub")
        self.cluster.requests.append({"method": method, "kind": kind, "namespace": ns, "name": name, "sub": sub,
                                      "query": query, "body": body, "at": time.monotonic()})
        refused = self.cluster.refuse.get((method, kind))
        if refused is not None:
            self._send(refused[0], _status(refused[0], "Forbidden" if refused[0] == 403 else "Invalid", refused[1]))
            return
        try:
            self._dispatch(method, kind, ns, name, sub, query, body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _dispatch(self, method: str, kind: str, ns: str, name: str | None, sub: str | None, query: dict[str, str],
                  body: Any) -> None:
        cluster = self.cluster
        if kind == "Node":
            if cluster.nodes_forbidden:
                self._send(403, _status(403, "Forbidden", 'nodes is forbidden: User "tester" cannot list resource '
                                                          '"nodes" at the cluster scope'))
                return
            nodes = [{"metadata": {"name": node, "labels": cluster.node_labels[node]},
                      "status": {"allocatable": cluster.allocatable, "capacity": cluster.allocatable}}
                     for node in cluster.node_names]
            items = [node for node in nodes if selects(query.get("labelSelector", ""), node["metadata"]["labels"])]
            self._send(200, {"kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": items})
            return
        if sub == "log":
            self._log(ns, name, query)
            return
        if sub == "eviction" and method == "POST":
            if cluster.get("Pod", ns, name) is None:
                self._send(404, _status(404, "NotFound", f'pods "{name}" not found'))
                return
            cluster.evict(ns, name)
            self._send(201, _status(201, "Success", "evicted"))
            return
        if method == "GET" and name is None:
            if query.get("watch", "").lower() == "true":
                self._watch(ns, query)
                return
            with cluster.lock:
                items = [copy.deepcopy(o) for (k, n, _), o in cluster.objects.items()
                         if k == kind and n == ns and selects(query.get("labelSelector", ""), o["metadata"]["labels"])]
                version = str(cluster.version)
            self._send(200, {"kind": f"{kind}List", "apiVersion": "v1", "metadata": {"resourceVersion": version},
                             "items": items})
            return
        if method == "GET":
            found = cluster.get(kind, ns, name)
            self._send(200, found) if found is not None else \
                self._send(404, _status(404, "NotFound", f'{kind.lower()}s "{name}" not found'))
            return
        code, answer = {"POST": lambda: cluster.create(kind, ns, body), "PUT": lambda: cluster.replace(kind, ns, name, body),
                        "DELETE": lambda: cluster.delete(kind, ns, name, body)}[method]()
        self._send(code, answer)

    def _watch(self, ns: str, query: dict[str, str]) -> None:
        version = query.get("resourceVersion")
        since = int(version) if version and version != "0" else None
        self._begin_stream("application/json")
        for kind, obj in self.cluster.watch(ns, query.get("labelSelector", ""), since,
                                            float(query.get("timeoutSeconds", 30))):
            self._chunk(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
        self._end_stream()

    def _log(self, ns: str, name: str, query: dict[str, str]) -> None:
        container = self.cluster.log(ns, name)
        if container is None:
            pod = self.cluster.get("Pod", ns, name)
            if pod is None:
                self._send(404, _status(404, "NotFound", f'pods "{name}" not found'))
            else:
                self._send(400, _status(400, "BadRequest", f'container "model" in pod "{name}" is waiting to start'))
            return
        self._begin_stream("text/plain")
        try:
            if query.get("follow", "").lower() == "true":
                for chunk in container.logs(stream=True, follow=True):
                    self._chunk(chunk)
            else:
                self._chunk(container.logs())
        except Exception:
            pass
        self._end_stream()

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_PUT(self) -> None:
        self._route("PUT")

    def do_DELETE(self) -> None:
        self._route("DELETE")
