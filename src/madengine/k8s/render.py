"""The Kubernetes objects of one model's job, as plain dicts (the API's JSON): pure, no I/O.

Per job (one model, one image):

* a **ConfigMap** ``<job>-files``: the model's scripts folder, madengine's pod entry script
  (``pod_entry.sh``), the list of files to copy, the steps around the model step (tools, pre/post
  scripts: ``steps/<n>.args``) and, on several nodes, each node's own variables
  (``nodes/<rank>.env``: what differs between nodes, e.g. ``NODE_RANK`` inside the runner);
* a **Secret** ``<job>-env`` for the model's credentials (its ``cred`` entry) and every variable
  whose name looks secret, referenced by the pod's environment with ``secretKeyRef``: never in
  the ConfigMap or the pod spec; a ``kubernetes.io/dockerconfigjson`` Secret ``<job>-pull`` when
  registry credentials are given;
* one node: a **Job** of one pod; several nodes: a headless **Service** ``<job>`` and an
  **Indexed Job** (completions = parallelism = nnodes) whose pods are ``<job>-<rank>.<job>``, so the
  launcher's rendezvous is pod 0's stable DNS name.

The Job fails on the model's own non-zero exit and ignores disruptions (a ``podFailurePolicy``:
a preemption, an eviction or a node drain marks the pod ``DisruptionTarget`` and the Job makes it
again, without counting a failure); a pod is replaced only once it has failed
(``podReplacementPolicy: Failed``); an sglang-disagg job succeeds when its benchmark pod (index 0)
does (``successPolicy``), and its servers are stopped then; a retry asked for (``backoff_limit``) is
per index on several nodes. The pod template is :mod:`madengine.k8s.pod`'s.
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
from madengine.k8s.pod import (CONTAINER, COMMAND, DATA_MOUNT, FILES_MOUNT, INDEX_ANNOTATION, LABEL_JOB, RESULTS_MOUNT,
                               Allowed, JobInputs, allowed, escape, model_variables, pod_spec, split_secrets)
from madengine.k8s.settings import K8sSettings
from madengine.launch import DEFAULT_PORT, DistributedSpec, NodeLaunch, NodePlacement, node_launch

ENTRY_SCRIPT = Path(__file__).with_name("pod_entry.sh")
#: a ConfigMap holds at most 1 MiB (etcd's object limit), keys and values together
CONFIGMAP_LIMIT = 1 << 20
MANAGED_BY = "madengine"
LABEL_MODEL = "madengine.io/model"
LABEL_RUN = "madengine.io/run-id"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: the pod condition of a pod stopped by a preemption, an eviction, a drain or the kubelet
DISRUPTION = "DisruptionTarget"
#: the entry script's status when it could not prepare the run (a retry may help: counted, not fatal)
ENTRY_FAILURE = 90
#: Kubernetes caps an Indexed Job's completions; madengine jobs are far smaller
MAX_NODES = 1000
#: the job name leaves room for ``-<index>`` in the pods' host names (63 characters)
_NAME_HEAD = 38
#: the launcher whose benchmark pod (index 0) decides the job: its servers never end by themselves
SUCCESS_BY_INDEX_0 = ("sglang-disagg",)


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
    #: what the checks allow beyond least privilege (the block's and the model's asking)
    allowed: Allowed = Allowed()
    #: seconds a pod may take to stop (the kubelet's grace period)
    grace: int = 0
    #: the tools' summaries of their outputs (row values), run once the outputs are back
    finalizers: tuple[Any, ...] = ()

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
def _labels(name: str, inputs: JobInputs, settings: K8sSettings) -> dict[str, str]:
    return {**settings.labels, "app.kubernetes.io/name": "madengine", "app.kubernetes.io/managed-by": MANAGED_BY,
            "app.kubernetes.io/instance": name, LABEL_JOB: name, LABEL_MODEL: label_value(inputs.model_name),
            LABEL_RUN: label_value(inputs.run_id)}


def _meta(name: str, inputs: JobInputs, settings: K8sSettings) -> dict[str, Any]:
    """An object's metadata: its name, and the labels (and annotations) of the job it belongs to."""
    meta: dict[str, Any] = {"name": name, "namespace": inputs.namespace,
                            "labels": _labels(inputs_job(inputs), inputs, settings)}
    if settings.annotations:
        meta["annotations"] = dict(settings.annotations)
    return meta


def inputs_job(inputs: JobInputs) -> str:
    return job_name(inputs.label, inputs.image_key)


def _step_files(inputs: JobInputs) -> tuple[dict[str, str], str]:
    """The steps around the model step as data: ``steps/<n>.args`` (one argument a line) and the
    list ``steps.list`` (``pre|post <n> <name>`` a line)."""
    files: dict[str, str] = {}
    listed = []
    steps = [("pre", step) for step in inputs.pre_steps] + [("post", step) for step in inputs.post_steps]
    for index, (when, (name, argv)) in enumerate(steps):
        if any("\n" in arg or "\r" in arg for arg in argv) or "\n" in name or "\r" in name:
            raise InputError(f"step {name!r} has an argument of several lines, which a pod's step file cannot hold",
                             path=inputs.model_name, field="tools")
        files[f"step-{index}.args"] = "".join(f"{arg}\n" for arg in argv)
        listed.append(f"{when} {index} {name}\n")
    return files, "".join(listed)


def configmap(name: str, inputs: JobInputs, settings: K8sSettings, nodes: Sequence[Mapping[str, str]],
              launch_files: Mapping[str, str]) -> tuple[dict[str, Any], list[dict[str, str]]]:
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
    steps, steps_list = _step_files(inputs)
    if steps:
        for key, text in steps.items():
            data[key] = text
            items.append({"key": key, "path": f"steps/{key.removeprefix('step-')}"})
        data["steps.list"] = steps_list
        items.append({"key": "steps.list", "path": "steps.list"})
    if len(nodes) > 1:
        for rank, own in enumerate(nodes):
            key = f"node-{rank}.env"
            data[key] = "".join(f"{k}={v}\n" for k, v in own.items())
            items.append({"key": key, "path": f"nodes/{rank}.env"})
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": _meta(f"{name}-files", inputs, settings), "data": data}
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


def secret_values(inputs: JobInputs) -> dict[str, str]:
    """The values of the job's Secret: the model's credentials and its secret-looking variables."""
    return split_secrets(model_variables(inputs), inputs.secret_env)[1]


def secrets(name: str, inputs: JobInputs, settings: K8sSettings) -> list[dict[str, Any]]:
    """The job's Secrets: the model's secret variables; the registry's pull credentials."""
    out = []
    values = secret_values(inputs)
    if values:
        out.append({"apiVersion": "v1", "kind": "Secret", "metadata": _meta(f"{name}-env", inputs, settings),
                    "type": "Opaque", "data": {key: _b64(value) for key, value in sorted(values.items())}})
    if inputs.registry_auth is not None:
        host, user, password = inputs.registry_auth
        auth = {"auths": {host: {"username": user, "password": password, "auth": _b64(f"{user}:{password}")}}}
        out.append({"apiVersion": "v1", "kind": "Secret", "metadata": _meta(f"{name}-pull", inputs, settings),
                    "type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": _b64(json.dumps(auth))}})
    return out


def service(name: str, inputs: JobInputs, settings: K8sSettings, port: int) -> dict[str, Any]:
    """The headless Service that gives every pod of the Indexed Job its DNS name (before the pods
    are ready: the rendezvous happens while they start)."""
    return {"apiVersion": "v1", "kind": "Service", "metadata": _meta(name, inputs, settings),
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": {LABEL_JOB: name},
                     "ports": [{"name": "rendezvous", "port": port, "targetPort": port, "protocol": "TCP"}]}}


def failure_policy() -> dict[str, Any]:
    """Disruptions are not the model's failures; the model's own non-zero exit fails the Job at
    once (a deterministic failure is not rerun); anything else counts against the backoff limit."""
    return {"rules": [
        {"action": "Ignore", "onPodConditions": [{"type": DISRUPTION, "status": "True"}]},
        {"action": "FailJob", "onExitCodes": {"containerName": CONTAINER, "operator": "NotIn",
                                              "values": [0, ENTRY_FAILURE]}},
    ]}


def job(name: str, inputs: JobInputs, settings: K8sSettings, pod: dict[str, Any], nnodes: int) -> dict[str, Any]:
    template: dict[str, Any] = {"labels": _labels(name, inputs, settings)}
    if settings.annotations:
        template["annotations"] = dict(settings.annotations)
    spec: dict[str, Any] = {"completions": nnodes, "parallelism": nnodes, "backoffLimit": settings.backoff_limit,
                            "podFailurePolicy": failure_policy(), "podReplacementPolicy": "Failed",
                            "template": {"metadata": template, "spec": pod}}
    if nnodes > 1:
        spec["completionMode"] = "Indexed"
        if settings.backoff_limit:  # a node's pod is retried on its own, the others keep running
            spec["backoffLimitPerIndex"] = settings.backoff_limit
            spec["maxFailedIndexes"] = 0
            spec["backoffLimit"] = settings.backoff_limit * nnodes
    if inputs.spec is not None and inputs.spec.launcher in SUCCESS_BY_INDEX_0 and nnodes > 1:
        spec["successPolicy"] = {"rules": [{"succeededIndexes": "0"}]}
    if inputs.timeout:
        spec["activeDeadlineSeconds"] = inputs.timeout
    if settings.ttl_seconds_after_finished is not None:
        spec["ttlSecondsAfterFinished"] = settings.ttl_seconds_after_finished
    meta = _meta(name, inputs, settings)
    if settings.queue_name:
        meta["labels"][QUEUE_LABEL] = settings.queue_name
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


def render_job(inputs: JobInputs, settings: K8sSettings) -> JobPlan:
    """Every object of one model's job (InputError when the job cannot be expressed)."""
    name = inputs_job(inputs)
    spec = inputs.spec
    launches = node_launches(spec, name, inputs, settings.cluster_domain) if spec is not None else []
    shared, own = split_env(launches) if launches else ({}, [])
    # the model's own variables (the context's docker_env_vars among them) win, as on docker
    mine = model_variables(inputs)
    shared = {k: v for k, v in shared.items() if k not in mine}
    own = [{k: v for k, v in node.items() if k not in mine} for node in own]
    nnodes = spec.nnodes if spec is not None else 1
    ranks = launches[0].nproc_per_node if launches else max(1, inputs.gpu_count)
    config, items = configmap(name, inputs, settings, own, launches[0].files if launches else {})
    objects = [*secrets(name, inputs, settings), config]
    if nnodes > 1:
        objects.append(service(name, inputs, settings, spec.master_port or DEFAULT_PORT))  # type: ignore[union-attr]
    pod = pod_spec(name, inputs, settings, shared, items, nnodes, ranks, sorted(secret_values(inputs)))
    objects.append(job(name, inputs, settings, pod, nnodes))
    return JobPlan(name=name, model_name=inputs.model_name, label=inputs.label, image=inputs.image,
                   namespace=inputs.namespace, nnodes=nnodes, launcher=spec.launcher if spec is not None else "",
                   nproc_per_node=launches[0].nproc_per_node if launches else 1, objects=objects,
                   gpu_count=inputs.gpu_count, gpu_resource=inputs.gpu_resource,
                   secrets=tuple(o["metadata"]["name"] for o in objects if o["kind"] == "Secret"),
                   dockerfile=inputs.dockerfile, image_id=inputs.image_id, allowed=allowed(settings, inputs),
                   grace=pod["terminationGracePeriodSeconds"])


__all__ = ["COMMAND", "CONFIGMAP_LIMIT", "DATA_MOUNT", "DISRUPTION", "FILES_MOUNT", "INDEX_ANNOTATION", "JobInputs",
           "JobPlan", "LABEL_JOB", "LABEL_MODEL", "LABEL_RUN", "QUEUE_LABEL", "RESULTS_MOUNT", "escape", "job_name",
           "node_host", "render_job"]
