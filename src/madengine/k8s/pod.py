"""The pod template of a model's job, as the API's JSON: pure, no I/O.

* **Environment**: the model's variables (as the docker run gives them), the launcher's shared
  ones, and the entry script's (grace, socket interface, addresses to resolve). A variable whose
  name looks secret (``HF_TOKEN``, ``*_PASSWORD``: :func:`madengine.core.redact.looks_secret`)
  and the model's credentials reach the pod only by ``secretKeyRef`` to the job's Secret;
  ``k8s.env_from_secret`` names existing Secrets (``envFrom``).
* **Resources**: CPU and memory are always requested (per GPU, or a CPU pod's least), so a pod is
  never BestEffort; limits when asked, equal to the requests with ``qos: Guaranteed``; GPUs and
  other extended resources (RDMA, a model's ``--device``) with limits = requests.
* **Shared memory**: ``/dev/shm`` is a memory emptyDir sized like the docker executor's (1 GiB per
  rank, at least 2 GiB), the model's ``--shm-size``, or ``k8s.shm_size``.
* **Placement**: the pods of a job of several nodes on different Kubernetes nodes (a required pod
  anti-affinity on the job's label), beside ``k8s.affinity``, node selector, tolerations, priority
  class and scheduler.
* **Security**: least privilege unless the block relaxes it (see :func:`security`).
* **Stopping**: ``terminationGracePeriodSeconds`` is the model's ``k8s.stop_grace`` plus the time
  the entry script needs to copy results and logs after it (:data:`COPY_SECONDS`).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, Mapping, Sequence

from madengine.core.errors import InputError
from madengine.core.redact import looks_secret
from madengine.core.spec import CONTAINER_WORKSPACE
from madengine.execution.docker import shm_for_ranks
from madengine.k8s.names import ENV_NAME, byte_quantity, parse_quantity, times_quantity
from madengine.k8s.runopts import PodOptions
from madengine.k8s.settings import K8sSettings
from madengine.launch import DistributedSpec

#: where the ConfigMap is mounted in the pod, and the entry point's command
FILES_MOUNT = "/madengine"
COMMAND = ["sh", f"{FILES_MOUNT}/entry.sh"]
DATA_MOUNT = "/data"
RESULTS_MOUNT = "/results"
CONTAINER = "model"
LABEL_JOB = "madengine.io/job"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
#: seconds after the model's grace for the entry script to print and copy results and logs
COPY_SECONDS = 30
#: what a pod without GPUs asks (a pod is never BestEffort: it would be evicted first)
CPU_POD_REQUESTS = {"cpu": "1", "memory": "4Gi"}
#: the container runtime's default capabilities less NET_RAW: what an image that must run as root
#: usually needs (chown, apt's setgroups, su)
ROOT_CAPABILITIES = ("AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
                     "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT")
#: variables a launcher fills with the nodes' host names, which the entry script turns into addresses
ADDRESS_VARIABLES = ("SGLANG_NODE_IPS",)
#: this host's interface says nothing about a pod's: the entry script finds it (host network only)
SOCKET_VARIABLES = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
HOSTNAME_TOPOLOGY = "kubernetes.io/hostname"


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
    #: what the model's ``additional_docker_run_options`` ask of its pod
    options: PodOptions = dataclasses.field(default_factory=PodOptions)
    #: capabilities the run adds (SYS_PTRACE for profiling tools)
    capabilities: tuple[str, ...] = ()
    #: steps around the model step (tools, pre/post scripts): (name, argv) each
    pre_steps: tuple[tuple[str, tuple[str, ...]], ...] = ()
    post_steps: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: files the steps write that come back with the log (tool outputs), as glob patterns
    outputs: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Allowed:
    """What the ``k8s`` block (or the model's docker options) asked beyond least privilege and the
    defaults: the semantic checks allow these and nothing else."""

    host_network: bool = False
    host_ipc: bool = False
    capabilities: tuple[str, ...] = ()
    #: seccomp or AppArmor unconfined (``--security-opt``)
    unconfined: bool = False
    #: the pods of one job may share a Kubernetes node (``one_pod_per_node: false``)
    shared_nodes: bool = False
    #: no /dev/shm volume (``shm_size: null``)
    no_shm: bool = False


def escape(value: str) -> str:
    """``value`` as the kubelet gives it back: ``$(NAME)`` and ``$$`` are its syntax, so every ``$``
    is doubled."""
    return value.replace("$", "$$")


# -- environment ---------------------------------------------------------------------------------
def model_variables(inputs: JobInputs) -> dict[str, str]:
    """The model's own variables (the docker run's, then its ``-e`` options, as on docker)."""
    return {**inputs.env, **inputs.options.env}


def split_secrets(variables: Mapping[str, str], credentials: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(plain variables, the Secret's): credentials and every variable whose name looks secret."""
    plain = {k: v for k, v in variables.items() if not looks_secret(k) or k in credentials}
    secret = {**{k: v for k, v in variables.items() if looks_secret(k) and k not in credentials}, **credentials}
    return plain, secret


def entry_variables(inputs: JobInputs, settings: K8sSettings, shared: Mapping[str, str],
                    host_network: bool) -> dict[str, str]:
    """What the entry script reads: the model's grace after SIGTERM, the socket interface of a
    host-network pod, the variables whose host names become addresses."""
    own = model_variables(inputs)
    out = {"MAD_STOP_GRACE": str(settings.stop_grace)}
    if host_network:
        out["MAD_SOCKET_IFNAME"] = settings.socket_ifname or "auto"
    resolve = [name for name in ADDRESS_VARIABLES if name in shared and name not in own]
    if resolve:
        out["MAD_RESOLVE_ADDRESSES"] = ",".join(resolve)
    if inputs.outputs:
        out["MAD_OUTPUT_FILES"] = "\n".join(inputs.outputs)
    return out


def container_env(inputs: JobInputs, shared: Mapping[str, str], extra: Mapping[str, str], secret_name: str,
                  secret_keys: Sequence[str]) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": "MAD_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "MAD_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "MAD_POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
    ]
    plain, _ = split_secrets(model_variables(inputs), inputs.secret_env)
    launcher = {k: v for k, v in shared.items() if k not in SOCKET_VARIABLES}
    for key, value in {**launcher, **extra, **plain}.items():
        if not ENV_NAME.match(key):
            raise InputError(f"{key!r} is not a variable name Kubernetes accepts", field="docker_env_vars")
        env.append({"name": key, "value": escape(value)})
    for key in sorted(secret_keys):
        env.append({"name": key, "valueFrom": {"secretKeyRef": {"name": secret_name, "key": key}}})
    return env


# -- resources -----------------------------------------------------------------------------------
def _request(settings: K8sSettings, inputs: JobInputs, kind: str, limit: str) -> str:
    """The pod's CPU or memory request: the block's, else per GPU (a CPU pod's least), never above
    the model's own limit (``--memory``/``--cpus``) when the request is not the block's."""
    given = getattr(settings, kind)
    if given:
        if limit and parse_quantity(given) > parse_quantity(limit):  # type: ignore[operator]
            raise InputError(f"the request {given} is more than the limit {limit} of the model's "
                             "additional_docker_run_options", path="context", field=f"k8s.{kind}",
                             hint=f"make k8s.{kind} at most {limit}, or give k8s.{kind}_limit")
        return given
    gpus = inputs.gpu_count if inputs.gpu_resource else 0
    value = times_quantity(getattr(settings, f"{kind}_per_gpu"), gpus) if gpus else CPU_POD_REQUESTS[kind]
    if limit and parse_quantity(value) > parse_quantity(limit):  # type: ignore[operator]
        return limit
    return value


def extended_resources(settings: K8sSettings, inputs: JobInputs) -> dict[str, int]:
    """Extended resources other than the GPUs: the block's, the model's devices, RDMA."""
    out = dict(inputs.options.resources)
    out.update(settings.extended_resources)
    if settings.rdma_resource:
        out.setdefault(settings.rdma_resource, 1)
    return out


def resources(settings: K8sSettings, inputs: JobInputs) -> dict[str, Any]:
    options = inputs.options
    limits: dict[str, str] = {}
    for kind in ("cpu", "memory"):
        limit = getattr(settings, f"{kind}_limit") or getattr(options, f"{kind}_limit")
        if settings.guaranteed and limit and not getattr(settings, kind):
            limits[kind] = limit  # the model's own limit is its request too
        elif limit:
            limits[kind] = limit
    requests = {kind: limits[kind] if settings.guaranteed and kind in limits else
                _request(settings, inputs, kind, limits.get(kind, "")) for kind in ("cpu", "memory")}
    if settings.guaranteed:
        limits.update(requests)
    for name, count in extended_resources(settings, inputs).items():
        requests[name] = limits[name] = str(count)
    if inputs.gpu_count and inputs.gpu_resource:
        requests[inputs.gpu_resource] = limits[inputs.gpu_resource] = str(inputs.gpu_count)  # extended: equal
    out: dict[str, Any] = {"requests": requests}
    if limits:
        out["limits"] = limits
    return out


def shm_size(settings: K8sSettings, inputs: JobInputs, ranks: int, memory_limit: str = "") -> str:
    """``/dev/shm``'s size: the block's ('' for none), the model's ``--shm-size``, else the docker
    executor's, at most half the memory limit (it counts against it, as on docker against the host's)."""
    given, field = (settings.shm_size, "k8s.shm_size") if settings.shm_size is not None else \
        (byte_quantity(inputs.options.shm_bytes) if inputs.options.shm_bytes else None,
         f"{inputs.model_name}.additional_docker_run_options")
    limit = parse_quantity(memory_limit) if memory_limit else None
    if given is not None:
        if given and limit is not None and parse_quantity(given) > limit:  # type: ignore[operator]
            raise InputError(f"/dev/shm of {given} is more than the memory limit {memory_limit}, which it counts "
                             "against", path="context", field=field,
                             hint="make /dev/shm smaller or raise k8s.memory_limit")
        return given
    size = shm_for_ranks(ranks)
    if limit is not None:
        size = min(size, int(limit) // 2)
    return byte_quantity(size)


# -- security ------------------------------------------------------------------------------------
def rdma_asked(settings: K8sSettings, inputs: JobInputs) -> bool:
    return any(name.startswith("rdma/") or name == settings.rdma_resource
               for name in extended_resources(settings, inputs))


def capabilities(settings: K8sSettings, inputs: JobInputs) -> tuple[str, ...]:
    """What the container gets back of the capabilities every container drops: the profile's (less
    the model's ``--cap-drop``), the block's, the model's ``--cap-add``, the tools' and RDMA's."""
    dropped = set(inputs.options.dropped)
    profile = [c for c in (ROOT_CAPABILITIES if settings.security_profile == "root-compatible" else ())
               if "ALL" not in dropped and c not in dropped]
    rdma = ["IPC_LOCK"] if rdma_asked(settings, inputs) else []
    return tuple(dict.fromkeys([*profile, *settings.capabilities, *inputs.options.capabilities, *inputs.capabilities,
                                *rdma]))


def security(settings: K8sSettings, inputs: JobInputs) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the container's security context, the pod's): never privileged, no privilege escalation,
    every capability dropped and only the asked ones added, the runtime's seccomp profile unless the
    model's ``--security-opt`` says unconfined; user, group and non-root as the block (or the
    model's ``--user``/``--group-add``) say."""
    options = inputs.options
    container: dict[str, Any] = {"privileged": False, "allowPrivilegeEscalation": False,
                                 "capabilities": {"drop": ["ALL"]}}
    added = capabilities(settings, inputs)
    if added:
        container["capabilities"]["add"] = list(added)
    if options.read_only_root:
        container["readOnlyRootFilesystem"] = True
    if options.seccomp_unconfined:
        container["seccompProfile"] = {"type": "Unconfined"}
    if options.apparmor_unconfined:
        container["appArmorProfile"] = {"type": "Unconfined"}
    pod: dict[str, Any] = {"seccompProfile": {"type": "RuntimeDefault"}}
    for field, value in (("runAsUser", settings.run_as_user if settings.run_as_user is not None else
                          options.run_as_user),
                         ("runAsGroup", settings.run_as_group if settings.run_as_group is not None else
                          options.run_as_group),
                         ("fsGroup", settings.fs_group), ("runAsNonRoot", settings.run_as_non_root)):
        if value is not None:
            pod[field] = value
    if options.supplemental_groups:
        pod["supplementalGroups"] = list(options.supplemental_groups)
    return container, pod


def allowed(settings: K8sSettings, inputs: JobInputs) -> Allowed:
    return Allowed(host_network=settings.host_network or inputs.options.host_network,
                   host_ipc=settings.host_ipc or inputs.options.host_ipc, capabilities=capabilities(settings, inputs),
                   unconfined=inputs.options.seccomp_unconfined or inputs.options.apparmor_unconfined,
                   shared_nodes=not settings.one_pod_per_node, no_shm=settings.shm_size == "")


# -- volumes and placement ------------------------------------------------------------------------
def volumes(name: str, settings: K8sSettings, inputs: JobInputs, items: list[dict[str, str]],
            shm: str) -> tuple[list, list]:
    out: list[dict[str, Any]] = [
        {"name": "madengine", "configMap": {"name": f"{name}-files", "items": items, "defaultMode": 0o555}},
        {"name": "workspace", "emptyDir": {}}]
    mounts: list[dict[str, Any]] = [{"name": "madengine", "mountPath": FILES_MOUNT, "readOnly": True},
                                    {"name": "workspace", "mountPath": CONTAINER_WORKSPACE}]
    if shm:
        out.append({"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": shm}})
        mounts.append({"name": "shm", "mountPath": "/dev/shm"})
    for index, (path, size) in enumerate(sorted(inputs.options.tmpfs.items())):
        out.append({"name": f"tmpfs-{index}", "emptyDir": {"medium": "Memory", **({"sizeLimit": size} if size else {})}})
        mounts.append({"name": f"tmpfs-{index}", "mountPath": path})
    if settings.data_pvc:
        out.append({"name": "data", "persistentVolumeClaim": {"claimName": settings.data_pvc, "readOnly": True}})
        mounts.append({"name": "data", "mountPath": DATA_MOUNT, "readOnly": True})
    if settings.results_pvc:
        out.append({"name": "results", "persistentVolumeClaim": {"claimName": settings.results_pvc}})
        mounts.append({"name": "results", "mountPath": RESULTS_MOUNT})
    return out, mounts


def affinity(name: str, settings: K8sSettings, nnodes: int) -> dict[str, Any]:
    """The block's affinity, and for a job of several nodes one pod per Kubernetes node: a
    "2-node" result measured on one node would be a one-node measurement."""
    out = copy.deepcopy(dict(settings.affinity))
    if nnodes > 1 and settings.one_pod_per_node:
        terms = out.setdefault("podAntiAffinity", {}).setdefault("requiredDuringSchedulingIgnoredDuringExecution", [])
        terms.append({"labelSelector": {"matchLabels": {LABEL_JOB: name}}, "topologyKey": HOSTNAME_TOPOLOGY})
    return out


def pod_spec(name: str, inputs: JobInputs, settings: K8sSettings, shared: Mapping[str, str],
             items: list[dict[str, str]], nnodes: int, ranks: int, secret_keys: Sequence[str]) -> dict[str, Any]:
    host_network = settings.host_network or inputs.options.host_network
    requested = resources(settings, inputs)
    shm = shm_size(settings, inputs, ranks, (requested.get("limits") or {}).get("memory", ""))
    mounts_volumes, mounts = volumes(name, settings, inputs, items, shm)
    env = container_env(inputs, shared, entry_variables(inputs, settings, shared, host_network), f"{name}-env",
                        secret_keys)
    if nnodes > 1:  # the job controller sets it too; said here so the pod spec shows where the rank comes from
        env.insert(0, {"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
            "fieldPath": f"metadata.annotations['{INDEX_ANNOTATION}']"}}})
    container_security, pod_security = security(settings, inputs)
    container: dict[str, Any] = {
        "name": CONTAINER, "image": inputs.image, "imagePullPolicy": settings.image_pull_policy,
        "command": list(COMMAND), "args": [escape(arg) for arg in inputs.argv], "workingDir": CONTAINER_WORKSPACE,
        "env": env, "volumeMounts": mounts, "resources": requested,
        "securityContext": container_security}
    if settings.env_from_secret:
        container["envFrom"] = [{"secretRef": {"name": secret}} for secret in settings.env_from_secret]
    spec: dict[str, Any] = {"restartPolicy": "Never", "automountServiceAccountToken": False,
                            "enableServiceLinks": False, "securityContext": pod_security,
                            "terminationGracePeriodSeconds": settings.stop_grace + COPY_SECONDS,
                            "containers": [container], "volumes": mounts_volumes}
    if nnodes > 1:
        spec["subdomain"] = name
    placement = affinity(name, settings, nnodes)
    if placement:
        spec["affinity"] = placement
    for field, value in (("serviceAccountName", settings.service_account),
                         ("priorityClassName", settings.priority_class_name),
                         ("schedulerName", settings.scheduler_name)):
        if value:
            spec[field] = value
    if settings.host_ipc or inputs.options.host_ipc:
        spec["hostIPC"] = True
    if host_network:
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


__all__ = ["ADDRESS_VARIABLES", "Allowed", "COMMAND", "CONTAINER", "COPY_SECONDS", "DATA_MOUNT", "FILES_MOUNT",
           "INDEX_ANNOTATION", "JobInputs", "LABEL_JOB", "RESULTS_MOUNT", "ROOT_CAPABILITIES", "allowed",
           "capabilities", "escape", "model_variables", "pod_spec", "resources", "security", "shm_size",
           "split_secrets"]
