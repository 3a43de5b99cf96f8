"""The Kubernetes objects of one model's job, as plain dicts (the API's JSON): pure, no I/O.

Per job (one model, one image):

* a **ConfigMap** ``<job>-files``: the model's scripts folder, madengine's pod entry script
  (``pod_entry.sh``), the list of files to copy and, on several nodes, each node's own variables
  (``nodes/<rank>.env``: what differs between nodes, e.g. ``NODE_RANK`` inside the runner);
* a **Secret** ``<job>-env`` for the model's credentials (its ``cred`` entry), referenced by the
  pod's environment with ``secretKeyRef``: never in the ConfigMap or the pod spec; a
  ``kubernetes.io/dockerconfigjson`` Secret ``<job>-pull`` when registry credentials are given;
* one node: a **Job** of one pod; several nodes: a headless **Service** ``<job>`` and an
  **Indexed Job** (completions = parallelism = nnodes) whose pods are ``<job>-<rank>.<job>``, so the
  launcher's rendezvous is pod 0's stable DNS name.

Least privilege: no privileged container, no privilege escalation, every capability dropped, the
runtime's default seccomp profile, no service account token, no host network or IPC unless the
``k8s`` block asks, the ConfigMap and the data volume mounted read-only. ``$`` in every value the
kubelet would expand (env values, args) is escaped, so a value reaches the model as written.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from madengine.core.errors import InputError
from madengine.core.spec import CONTAINER_WORKSPACE
from madengine.k8s.names import ENV_NAME, dns_label, is_data_key, label_value
from madengine.k8s.settings import K8sSettings
from madengine.launch import DEFAULT_PORT, DistributedSpec, NodeLaunch, NodePlacement, node_launch

ENTRY_SCRIPT = Path(__file__).with_name("pod_entry.sh")
#: where the ConfigMap is mounted in the pod, and the entry point's command
FILES_MOUNT = "/madengine"
COMMAND = ["sh", f"{FILES_MOUNT}/entry.sh"]
DATA_MOUNT = "/data"
RESULTS_MOUNT = "/results"
CONTAINER = "model"
#: a ConfigMap holds at most 1 MiB (etcd's object limit), keys and values together
CONFIGMAP_LIMIT = 1 << 20
MANAGED_BY = "madengine"
LABEL_JOB = "madengine.io/job"
LABEL_MODEL = "madengine.io/model"
LABEL_RUN = "madengine.io/run-id"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
#: Kubernetes caps an Indexed Job's completions; madengine jobs are far smaller
MAX_NODES = 1000
#: the job name leaves room for ``-<index>`` in the pods' host names (63 characters)
_NAME_HEAD = 38


@dataclasses.dataclass(frozen=True)
class JobInputs:
    """What one model's job is made of, resolved by the caller (files read, image chosen)."""

    model_name: str
    #: the model as selected, tag configs included (``numpy_matmul:size=64``): names its job
    label: str
    image_key: str
    image: str
    argv: tuple[str, ...]
    files: Mapping[str, bytes]
    env: Mapping[str, str]
    run_id: str
    namespace: str
    spec: DistributedSpec | None = None
    gpu_count: int = 0
    gpu_resource: str = ""
    timeout: int | None = None
    #: the model's credential variables (NAME_USERNAME, ...): into the Secret, never the pod spec
    secret_env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: (registry host, user, password) for the image pull Secret
    registry_auth: tuple[str, str, str] | None = None
    #: where the image came from, for the rows (not rendered)
    dockerfile: str = ""
    image_id: str = ""


@dataclasses.dataclass
class JobPlan:
    """One model's rendered job: its objects in the order they are created."""

    name: str
    model_name: str
    label: str
    image: str
    namespace: str
    nnodes: int
    launcher: str
    nproc_per_node: int
    objects: list[dict[str, Any]]
    gpu_count: int = 0
    gpu_resource: str = ""
    #: the names of the Secrets (their objects hold credentials: never printed or written by default)
    secrets: tuple[str, ...] = ()
    dockerfile: str = ""
    image_id: str = ""

    def object(self, kind: str) -> dict[str, Any] | None:
        return next((o for o in self.objects if o["kind"] == kind), None)

    @property
    def distributed(self) -> bool:
        return self.launcher != ""


def job_name(label: str, image_key: str) -> str:
    """``mad-<model>-<hash>``: the same for the same model, tag configs and image on every run
    (so a re-run replaces its job), at most 51 characters."""
    digest = hashlib.sha256(f"{label}\0{image_key}".encode("utf-8", "surrogatepass")).hexdigest()[:8]
    head = dns_label(label.split(":")[0], _NAME_HEAD)
    return f"mad-{head}-{digest}" if head else f"mad-{digest}"


def node_host(name: str, rank: int, namespace: str, domain: str) -> str:
    """Pod ``rank``'s stable DNS name: ``<job>-<rank>.<service>.<namespace>.svc.<domain>``."""
    return f"{name}-{rank}.{name}.{namespace}.svc.{domain}"


def escape(value: str) -> str:
    """``value`` as the kubelet gives it back: ``$(NAME)`` and ``$$`` are its syntax, so every ``$``
    is doubled."""
    return value.replace("$", "$$")


# -- the launcher on each node -------------------------------------------------------------------
def node_launches(spec: DistributedSpec, name: str, inputs: JobInputs, domain: str) -> list[NodeLaunch]:
    """Every node's launch (rank 0 first); several nodes meet at pod 0's DNS name."""
    if spec.nnodes > MAX_NODES:
        raise InputError(f"nnodes {spec.nnodes} is more than the {MAX_NODES} nodes a madengine job may have",
                         path="distributed.nnodes")
    devices = tuple(range(inputs.gpu_count))
    port = spec.master_port or DEFAULT_PORT
    if not spec.multi_node:
        return [node_launch(spec, NodePlacement(node_rank=0, master_addr="127.0.0.1", master_port=port,
                                                devices=devices, workspace=CONTAINER_WORKSPACE))]
    hosts = tuple(node_host(name, rank, inputs.namespace, domain) for rank in range(spec.nnodes))
    return [node_launch(spec, NodePlacement(node_rank=rank, master_addr=hosts[0], master_port=port, devices=devices,
                                            hosts=hosts, workspace=CONTAINER_WORKSPACE))
            for rank in range(spec.nnodes)]


def split_env(launches: Sequence[NodeLaunch]) -> tuple[dict[str, str], list[dict[str, str]]]:
    """(the variables every node shares, each node's own): one pod template serves every node."""
    keys = dict.fromkeys(key for launch in launches for key in launch.env)
    shared = {key: launches[0].env[key] for key in keys
              if all(launch.env.get(key) == launches[0].env.get(key) for launch in launches)}
    own = [{key: value for key, value in launch.env.items() if key not in shared} for launch in launches]
    for node in own:
        for key, value in node.items():
            if "\n" in value or "\r" in value or not ENV_NAME.match(key):
                raise InputError(f"{key} of a node cannot be written to its variables file", field=key)
    files = [dict(launch.files) for launch in launches]
    if any(f != files[0] for f in files):
        raise InputError("the launcher writes different files on different nodes", field="distributed")
    return shared, own


# -- the objects ---------------------------------------------------------------------------------
def _labels(name: str, inputs: JobInputs) -> dict[str, str]:
    return {"app.kubernetes.io/name": "madengine", "app.kubernetes.io/managed-by": MANAGED_BY,
            "app.kubernetes.io/instance": name, LABEL_JOB: name, LABEL_MODEL: label_value(inputs.model_name),
            LABEL_RUN: label_value(inputs.run_id)}


def _meta(name: str, inputs: JobInputs) -> dict[str, Any]:
    """An object's metadata: its name, and the labels of the job it belongs to."""
    return {"name": name, "namespace": inputs.namespace, "labels": _labels(inputs_job(inputs), inputs)}


def inputs_job(inputs: JobInputs) -> str:
    return job_name(inputs.label, inputs.image_key)


def configmap(name: str, inputs: JobInputs, nodes: Sequence[Mapping[str, str]], launch_files: Mapping[str, str]) \
        -> tuple[dict[str, Any], list[dict[str, str]]]:
    """The ConfigMap of the job's files and its volume's items (key → path in the mount)."""
    data: dict[str, str] = {"entry.sh": ENTRY_SCRIPT.read_text(encoding="utf-8")}
    binary: dict[str, str] = {}
    items = [{"key": "entry.sh", "path": "entry.sh"}]
    files = dict(inputs.files)
    files.update({path: text.encode("utf-8") for path, text in launch_files.items()})
    listed = []
    for index, (path, content) in enumerate(sorted(files.items())):
        if "\n" in path or "\r" in path or path.startswith("/") or ".." in path.split("/"):
            raise InputError(f"file {path!r} of the scripts folder cannot be given to a pod", path=inputs.model_name)
        key = f"f{index}-{dns_label(Path(path).name, 40) or 'file'}"
        try:
            data[key] = content.decode("utf-8")
        except UnicodeDecodeError:
            binary[key] = base64.b64encode(content).decode("ascii")
        items.append({"key": key, "path": f"files/{path}"})
        listed.append(path)
    data["files.list"] = "".join(f"{path}\n" for path in listed)
    items.append({"key": "files.list", "path": "files.list"})
    if len(nodes) > 1:
        for rank, own in enumerate(nodes):
            key = f"node-{rank}.env"
            data[key] = "".join(f"{k}={v}\n" for k, v in own.items())
            items.append({"key": key, "path": f"nodes/{rank}.env"})
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": _meta(f"{name}-files", inputs), "data": data}
    if binary:
        body["binaryData"] = binary
    size = sum(len(k) + len(v.encode("utf-8")) for k, v in data.items()) + \
        sum(len(k) + len(base64.b64decode(v)) for k, v in binary.items())
    if size > CONFIGMAP_LIMIT:
        raise InputError(f"the scripts folder of model '{inputs.model_name}' is {size} bytes; a ConfigMap holds at "
                         f"most {CONFIGMAP_LIMIT}", path=inputs.model_name,
                         hint="keep large files (data, weights) out of the scripts folder: mount them with k8s.data_pvc")
    assert all(is_data_key(key) for key in [*data, *binary])
    return body, items


def _b64(text: str) -> str:
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


def secrets(name: str, inputs: JobInputs) -> list[dict[str, Any]]:
    """The job's Secrets: the model's credential variables; the registry's pull credentials."""
    out = []
    if inputs.secret_env:
        out.append({"apiVersion": "v1", "kind": "Secret", "metadata": _meta(f"{name}-env", inputs), "type": "Opaque",
                    "data": {key: _b64(value) for key, value in sorted(inputs.secret_env.items())}})
    if inputs.registry_auth is not None:
        host, user, password = inputs.registry_auth
        auth = {"auths": {host: {"username": user, "password": password, "auth": _b64(f"{user}:{password}")}}}
        out.append({"apiVersion": "v1", "kind": "Secret", "metadata": _meta(f"{name}-pull", inputs),
                    "type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": _b64(json.dumps(auth))}})
    return out


def service(name: str, inputs: JobInputs, port: int) -> dict[str, Any]:
    """The headless Service that gives every pod of the Indexed Job its DNS name (before the pods
    are ready: the rendezvous happens while they start)."""
    return {"apiVersion": "v1", "kind": "Service", "metadata": _meta(name, inputs),
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": {LABEL_JOB: name},
                     "ports": [{"name": "rendezvous", "port": port, "targetPort": port, "protocol": "TCP"}]}}


def _env(inputs: JobInputs, shared: Mapping[str, str], secret_name: str) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": "MAD_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "MAD_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "MAD_POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
    ]
    for key, value in {**shared, **inputs.env}.items():
        if not ENV_NAME.match(key):
            raise InputError(f"{key!r} is not a variable name Kubernetes accepts", field="docker_env_vars")
        env.append({"name": key, "value": escape(value)})
    for key in sorted(inputs.secret_env):
        env.append({"name": key, "valueFrom": {"secretKeyRef": {"name": secret_name, "key": key}}})
    return env


def _resources(settings: K8sSettings, inputs: JobInputs) -> dict[str, Any]:
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    for key, target, field in (("cpu", requests, "cpu"), ("memory", requests, "memory"),
                               ("cpu_limit", limits, "cpu"), ("memory_limit", limits, "memory")):
        if getattr(settings, key):
            target[field] = getattr(settings, key)
    if inputs.gpu_count and inputs.gpu_resource:
        requests[inputs.gpu_resource] = limits[inputs.gpu_resource] = str(inputs.gpu_count)  # extended: equal
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    return resources


def _volumes(name: str, settings: K8sSettings, items: list[dict[str, str]]) -> tuple[list, list]:
    volumes: list[dict[str, Any]] = [
        {"name": "madengine", "configMap": {"name": f"{name}-files", "items": items, "defaultMode": 0o555}},
        {"name": "workspace", "emptyDir": {}}]
    mounts: list[dict[str, Any]] = [{"name": "madengine", "mountPath": FILES_MOUNT, "readOnly": True},
                                    {"name": "workspace", "mountPath": CONTAINER_WORKSPACE}]
    if settings.shm_size:
        volumes.append({"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": settings.shm_size}})
        mounts.append({"name": "shm", "mountPath": "/dev/shm"})
    if settings.data_pvc:
        volumes.append({"name": "data", "persistentVolumeClaim": {"claimName": settings.data_pvc, "readOnly": True}})
        mounts.append({"name": "data", "mountPath": DATA_MOUNT, "readOnly": True})
    if settings.results_pvc:
        volumes.append({"name": "results", "persistentVolumeClaim": {"claimName": settings.results_pvc}})
        mounts.append({"name": "results", "mountPath": RESULTS_MOUNT})
    return volumes, mounts


def pod_spec(name: str, inputs: JobInputs, settings: K8sSettings, shared: Mapping[str, str],
             items: list[dict[str, str]], multi_node: bool) -> dict[str, Any]:
    volumes, mounts = _volumes(name, settings, items)
    env = _env(inputs, shared, f"{name}-env")
    if multi_node:  # the job controller sets it too; said here so the pod spec shows where the rank comes from
        env.insert(0, {"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
            "fieldPath": f"metadata.annotations['{INDEX_ANNOTATION}']"}}})
    container: dict[str, Any] = {
        "name": CONTAINER, "image": inputs.image, "imagePullPolicy": settings.image_pull_policy,
        "command": list(COMMAND), "args": [escape(arg) for arg in inputs.argv], "workingDir": CONTAINER_WORKSPACE,
        "env": env, "volumeMounts": mounts,
        "securityContext": {"privileged": False, "allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]}}}
    resources = _resources(settings, inputs)
    if resources:
        container["resources"] = resources
    spec: dict[str, Any] = {"restartPolicy": "Never", "automountServiceAccountToken": False,
                            "enableServiceLinks": False, "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                            "containers": [container], "volumes": volumes}
    if multi_node:
        spec["subdomain"] = name
    if settings.service_account:
        spec["serviceAccountName"] = settings.service_account
    if settings.host_ipc:
        spec["hostIPC"] = True
    if settings.host_network:
        spec["hostNetwork"] = True
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    if settings.node_selector:
        spec["nodeSelector"] = dict(settings.node_selector)
    if settings.tolerations:
        spec["tolerations"] = [dict(t) for t in settings.tolerations]
    pull = [*settings.image_pull_secrets, *([f"{name}-pull"] if inputs.registry_auth is not None else [])]
    if pull:
        spec["imagePullSecrets"] = [{"name": secret} for secret in pull]
    return spec


def job(name: str, inputs: JobInputs, settings: K8sSettings, pod: dict[str, Any], nnodes: int) -> dict[str, Any]:
    spec: dict[str, Any] = {"completions": nnodes, "parallelism": nnodes, "backoffLimit": settings.backoff_limit,
                            "template": {"metadata": {"labels": _labels(name, inputs)}, "spec": pod}}
    if nnodes > 1:
        spec["completionMode"] = "Indexed"
    if inputs.timeout:
        spec["activeDeadlineSeconds"] = inputs.timeout
    if settings.ttl_seconds_after_finished is not None:
        spec["ttlSecondsAfterFinished"] = settings.ttl_seconds_after_finished
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": _meta(name, inputs), "spec": spec}


def render_job(inputs: JobInputs, settings: K8sSettings) -> JobPlan:
    """Every object of one model's job (InputError when the job cannot be expressed)."""
    name = inputs_job(inputs)
    spec = inputs.spec
    launches = node_launches(spec, name, inputs, settings.cluster_domain) if spec is not None else []
    shared, own = split_env(launches) if launches else ({}, [])
    # the model's own variables (the context's docker_env_vars among them) win, as on docker
    shared = {k: v for k, v in shared.items() if k not in inputs.env}
    own = [{k: v for k, v in node.items() if k not in inputs.env} for node in own]
    nnodes = spec.nnodes if spec is not None else 1
    config, items = configmap(name, inputs, own, launches[0].files if launches else {})
    objects = [*secrets(name, inputs), config]
    if nnodes > 1:
        objects.append(service(name, inputs, spec.master_port or DEFAULT_PORT))  # type: ignore[union-attr]
    pod = pod_spec(name, inputs, settings, shared, items, nnodes > 1)
    objects.append(job(name, inputs, settings, pod, nnodes))
    return JobPlan(name=name, model_name=inputs.model_name, label=inputs.label, image=inputs.image,
                   namespace=inputs.namespace, nnodes=nnodes, launcher=spec.launcher if spec is not None else "",
                   nproc_per_node=launches[0].nproc_per_node if launches else 1, objects=objects,
                   gpu_count=inputs.gpu_count, gpu_resource=inputs.gpu_resource,
                   secrets=tuple(o["metadata"]["name"] for o in objects if o["kind"] == "Secret"),
                   dockerfile=inputs.dockerfile, image_id=inputs.image_id)


__all__ = ["COMMAND", "CONFIGMAP_LIMIT", "DATA_MOUNT", "FILES_MOUNT", "INDEX_ANNOTATION", "JobInputs", "JobPlan",
           "LABEL_JOB", "LABEL_MODEL", "LABEL_RUN", "RESULTS_MOUNT", "escape", "job_name", "node_host", "render_job"]
