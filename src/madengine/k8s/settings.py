"""The ``k8s`` block of a context (``--additional-context``, its file): where and how the jobs of
``madengine run --executor k8s`` and ``madengine k8s render`` run on a cluster.

Every key is checked here, once, with a one-line error naming the key (exit 2); the renderer and
the client read the typed :class:`K8sSettings` only. ``kubernetes`` is read as another name of
the block. Pure: no I/O (the kubeconfig file is read by :mod:`madengine.k8s.kubeconfig`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from madengine.core.errors import ContextError
from madengine.core.values import MAX_TIMEOUT, brief, whole_number
from madengine.k8s.names import (is_dns_label, is_dns_subdomain, is_label_value,
                                 is_qualified_name, parse_quantity, quantity_text)
from madengine.k8s.shapes import AFFINITY, ShapeError, checked

BLOCK_NAMES = ("k8s", "kubernetes")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
GPU_RESOURCES = {"AMD": "amd.com/gpu", "NVIDIA": "nvidia.com/gpu"}
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
TOLERATION_KEYS = ("key", "operator", "value", "effect", "tolerationSeconds")
MAX_GPUS = 1024
#: a Job's backoff limit above this is surely a mistake (each retry reruns the whole benchmark)
MAX_BACKOFF = 100
DEFAULT_TTL = 3600
DEFAULT_PENDING_TIMEOUT = 300
#: what a pod asks per GPU when ``cpu``/``memory`` are not given (8 GPUs: the reference's 32 CPUs, 128Gi)
DEFAULT_CPU_PER_GPU = "4"
DEFAULT_MEMORY_PER_GPU = "16Gi"
#: seconds a model gets to end after SIGTERM (a delete, a deadline, a preemption) before it is killed
DEFAULT_STOP_GRACE = 30
QOS_CLASSES = ("Burstable", "Guaranteed")
#: least privilege (every capability dropped), or the runtime's usual set for images that must run as root
PROFILES = ("restricted", "root-compatible")
#: Linux capabilities (capabilities(7)), without the CAP_ prefix
CAPABILITIES = ("AUDIT_CONTROL", "AUDIT_READ", "AUDIT_WRITE", "BLOCK_SUSPEND", "BPF", "CHECKPOINT_RESTORE", "CHOWN",
                "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "IPC_LOCK", "IPC_OWNER", "KILL", "LEASE",
                "LINUX_IMMUTABLE", "MAC_ADMIN", "MAC_OVERRIDE", "MKNOD", "NET_ADMIN", "NET_BIND_SERVICE",
                "NET_BROADCAST", "NET_RAW", "PERFMON", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYSLOG",
                "SYS_ADMIN", "SYS_BOOT", "SYS_CHROOT", "SYS_MODULE", "SYS_NICE", "SYS_PACCT", "SYS_PTRACE",
                "SYS_RAWIO", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "WAKE_ALARM")
#: label keys madengine sets itself (the job's, Kueue's queue): not the ``labels`` key's to change
RESERVED_LABEL_PREFIXES = ("app.kubernetes.io/", "madengine.io/", "kueue.x-k8s.io/", "batch.kubernetes.io/")
#: the most bytes of all annotations of an object (the API server's limit)
ANNOTATIONS_LIMIT = 256 * 1024
MAX_ID = 2**31 - 1
_HINT = 'e.g. {"k8s": {"namespace": "ml-perf", "gpu_resource_name": "amd.com/gpu", "memory": "64Gi"}}'


@dataclasses.dataclass(frozen=True)
class K8sSettings:
    """The checked ``k8s`` block (see docs/distributed.md, "Kubernetes")."""

    @property
    def guaranteed(self) -> bool:
        return self.qos == "Guaranteed"

    #: the kubeconfig file ('' → ``$KUBECONFIG``, else ``~/.kube/config``, else in-cluster) and its context
    kubeconfig: str = ""
    context: str = ""
    #: '' → the kubeconfig context's namespace, else ``default``
    namespace: str = ""
    image_pull_policy: str = "IfNotPresent"
    image_pull_secrets: tuple[str, ...] = ()
    #: the extended resource a pod asks GPUs of ('' → from gpu_vendor; none on a CPU context)
    gpu_resource_name: str = ""
    #: GPUs per pod (None → the launcher's nproc_per_node, else the model's n_gpus)
    gpu_count: int | None = None
    #: the pod's requests ('' → per GPU below, or a CPU pod's least) and limits ('' → none)
    cpu: str = ""
    cpu_limit: str = ""
    memory: str = ""
    memory_limit: str = ""
    cpu_per_gpu: str = DEFAULT_CPU_PER_GPU
    memory_per_gpu: str = DEFAULT_MEMORY_PER_GPU
    #: Guaranteed: limits equal to the requests (the pod is the last to be evicted, its CPUs can be pinned)
    qos: str = "Burstable"
    #: other extended resources per pod (``rdma/hca_shared_devices_a: 1``): requests = limits
    extended_resources: Mapping[str, int] = dataclasses.field(default_factory=dict)
    #: the extended resource of the RDMA device plugin; asking it adds IPC_LOCK (pinned memory)
    rdma_resource: str = ""
    #: a model's ``--device`` path (or a folder of devices) → the extended resource that gives it
    device_resources: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: /dev/shm of the pod (a memory-backed emptyDir): None → like the docker executor (1Gi per
    #: rank, at least 2Gi), or the model's ``--shm-size``; '' (null) → none
    shm_size: str | None = None
    node_selector: Mapping[str, str] = dataclasses.field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    affinity: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    #: a job of several nodes puts each pod on its own Kubernetes node (a pod anti-affinity)
    one_pod_per_node: bool = True
    priority_class_name: str = ""
    scheduler_name: str = ""
    #: a Kueue LocalQueue: the Job's ``kueue.x-k8s.io/queue-name`` label
    queue_name: str = ""
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: PersistentVolumeClaims madengine mounts (never creates): data read-only at /data, results at /results
    data_pvc: str = ""
    results_pvc: str = ""
    ttl_seconds_after_finished: int | None = DEFAULT_TTL
    backoff_limit: int = 0
    host_ipc: bool = False
    host_network: bool = False
    #: NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME of a host_network pod ('' → its node's default-route interface)
    socket_ifname: str = ""
    service_account: str = ""
    run_as_user: int | None = None
    run_as_group: int | None = None
    fs_group: int | None = None
    run_as_non_root: bool | None = None
    #: capabilities added to the container (SYS_PTRACE is added by itself when tools are selected)
    capabilities: tuple[str, ...] = ()
    security_profile: str = "restricted"
    #: existing Secrets whose every key becomes a variable of the pod (``envFrom``)
    env_from_secret: tuple[str, ...] = ()
    stop_grace: int = DEFAULT_STOP_GRACE
    cluster_domain: str = "cluster.local"
    #: seconds a pod may stay unschedulable or unable to pull its image before its job fails
    pending_timeout: int = DEFAULT_PENDING_TIMEOUT


def _bad(key: str, message: str, source: str, hint: str | None = None) -> ContextError:
    return ContextError(message, path=source, field=f"k8s.{key}", hint=hint)


def _text(key: str, value: Any, source: str) -> str:
    if not isinstance(value, str) or not value.isprintable():
        raise _bad(key, f"must be a string, got {brief(value)}", source)
    return value.strip()


def _name(key: str, value: Any, source: str, *, label: bool = False) -> str:
    text = _text(key, value, source)
    if not (is_dns_label(text) if label else is_dns_subdomain(text)):
        what = "a DNS-1123 label" if label else "a DNS-1123 subdomain"
        raise _bad(key, f"{brief(value)} is not {what} (lower-case letters, digits and '-', at most "
                        f"{63 if label else 253} characters)", source)
    return text


def _quantity(key: str, value: Any, source: str) -> str:
    text = quantity_text(value)
    number = parse_quantity(value)
    if text is None or number is None:
        raise _bad(key, f"{brief(value)} is not a Kubernetes resource quantity", source,
                   hint="write e.g. 16Gi, 512Mi, 500M, 2, 500m")
    if number <= 0:
        raise _bad(key, f"must be more than 0, got {brief(value)}", source)
    return text


def _count(key: str, value: Any, source: str, least: int, most: int) -> int:
    number = whole_number(value)
    if number is None or not least <= number <= most:
        raise _bad(key, f"must be a whole number from {least} to {most}, got {brief(value)}", source)
    return number


def _flag(key: str, value: Any, source: str) -> bool:
    if not isinstance(value, bool):
        raise _bad(key, f"must be true or false, got {brief(value)}", source)
    return value


def _choice(key: str, value: Any, source: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise _bad(key, f"unknown value {brief(value)}", source, hint="use one of " + ", ".join(choices))
    return value


def _gpu_resource(value: Any, source: str) -> str:
    text = _text("gpu_resource_name", value, source)
    if text and (not is_qualified_name(text, prefix_required=True) or text.split("/")[0].endswith("kubernetes.io")):
        raise _bad("gpu_resource_name", f"{brief(value)} is not an extended resource name", source,
                   hint="e.g. amd.com/gpu or nvidia.com/gpu")
    return text


def _label_map(key: str, value: Any, source: str, *, annotations: bool = False) -> dict[str, str]:
    """An object of label key → label value (``annotations``: → any text); madengine's own keys
    are not a user's to set (``labels``, ``annotations``)."""
    kind = "annotation" if annotations else "label"
    if not isinstance(value, Mapping):
        raise _bad(key, f"must be an object of {kind} key: {'text' if annotations else 'value'}, got {brief(value)}",
                   source)
    for name, text in value.items():
        if not is_qualified_name(name):
            raise _bad(key, f"{brief(name)} is not a {kind} key", source)
        if key != "node_selector" and str(name).startswith(RESERVED_LABEL_PREFIXES):
            raise _bad(f"{key}.{name}", f"is madengine's own {kind}", source,
                       hint="choose another key (a Kueue queue is k8s.queue_name)")
        if not isinstance(text, str) or not (annotations or is_label_value(text)):
            raise _bad(f"{key}.{name}", f"{brief(text)} is not a {'string' if annotations else 'label value'}" +
                       ("" if annotations else " (at most 63 letters, digits, '-', '_', '.')"), source)
    if annotations and sum(len(k.encode()) + len(v.encode()) for k, v in value.items()) > ANNOTATIONS_LIMIT:
        raise _bad(key, f"hold more than {ANNOTATIONS_LIMIT} bytes (the API server's limit)", source)
    return {str(name): text for name, text in value.items()}


def _toleration(index: int, value: Any, source: str) -> dict[str, Any]:
    key = f"tolerations[{index}]"
    if not isinstance(value, Mapping):
        raise _bad(key, f"must be an object, got {brief(value)}", source)
    unknown = [k for k in value if k not in TOLERATION_KEYS]
    if unknown:
        raise _bad(f"{key}.{unknown[0]}", "unknown key", source, hint="known keys: " + ", ".join(TOLERATION_KEYS))
    out: dict[str, Any] = {}
    operator = _choice(f"{key}.operator", value.get("operator", "Equal"), source, ("Equal", "Exists"))
    if value.get("key") not in (None, "") and not is_qualified_name(value["key"]):
        raise _bad(f"{key}.key", f"{brief(value['key'])} is not a taint key", source)
    if value.get("key"):
        out["key"] = value["key"]
    elif operator != "Exists":
        raise _bad(f"{key}.key", "an empty key needs operator Exists", source)
    out["operator"] = operator
    if value.get("value") not in (None, ""):
        if operator == "Exists" or not isinstance(value["value"], str) or not is_label_value(value["value"]):
            raise _bad(f"{key}.value", f"{brief(value['value'])} is not a taint value" +
                       (" (operator Exists takes none)" if operator == "Exists" else ""), source)
        out["value"] = value["value"]
    if value.get("effect") not in (None, ""):
        out["effect"] = _choice(f"{key}.effect", value["effect"], source, TAINT_EFFECTS)
    if value.get("tolerationSeconds") is not None:
        if out.get("effect") != "NoExecute":
            raise _bad(f"{key}.tolerationSeconds", "applies only with effect NoExecute", source)
        out["tolerationSeconds"] = _count(f"{key}.tolerationSeconds", value["tolerationSeconds"], source, 0,
                                          MAX_TIMEOUT)
    return out


def _pull_secrets(value: Any, source: str) -> tuple[str, ...]:
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list):
        raise _bad("image_pull_secrets", f"must be a list of Secret names, got {brief(value)}", source)
    return tuple(_name(f"image_pull_secrets[{i}]", name, source) for i, name in enumerate(names))


def _optional_count(key: str, value: Any, source: str, most: int) -> int | None:
    return None if value is None else _count(key, value, source, 0, most)


def _names(key: str, value: Any, source: str) -> tuple[str, ...]:
    """One name or a list of them (Secrets, ...), each a DNS-1123 subdomain."""
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list):
        raise _bad(key, f"must be a name or a list of names, got {brief(value)}", source)
    return tuple(_name(f"{key}[{i}]", name, source) for i, name in enumerate(names))


def _resource_name(key: str, value: Any, source: str) -> str:
    text = _text(key, value, source)
    if not is_qualified_name(text, prefix_required=True) or text.split("/")[0].endswith("kubernetes.io"):
        raise _bad(key, f"{brief(value)} is not an extended resource name", source,
                   hint="e.g. rdma/hca_shared_devices_a or example.com/fpga")
    return text


def _extended(value: Any, source: str) -> dict[str, int]:
    if not isinstance(value, Mapping):
        raise _bad("extended_resources", f"must be an object of resource: count, got {brief(value)}", source,
                   hint='e.g. {"rdma/hca_shared_devices_a": 1}')
    return {_resource_name(f"extended_resources.{name}", name, source):
            _count(f"extended_resources.{name}", count, source, 1, MAX_GPUS) for name, count in value.items()}


def _devices(value: Any, source: str) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise _bad("device_resources", f"must be an object of device path: extended resource, got {brief(value)}",
                   source, hint='e.g. {"/dev/fuse": "smarter-devices/fuse"}')
    out = {}
    for path, resource in value.items():
        if not isinstance(path, str) or not path.startswith("/dev/") or ".." in path.split("/"):
            raise _bad("device_resources", f"{brief(path)} is not a device path under /dev/", source)
        out[path.rstrip("/")] = _resource_name(f"device_resources.{path}", resource, source)
    return out


def _affinity(value: Any, source: str) -> dict[str, Any]:
    try:
        return checked(value, AFFINITY)
    except ShapeError as exc:
        raise _bad(f"affinity.{exc.path}".rstrip("."), exc.message, source,
                   hint=exc.hint or "write it as the pod spec's affinity (kubectl explain pod.spec.affinity)") \
            from None


def _queue(value: Any, source: str) -> str:
    text = _text("queue_name", value, source)
    if not text or not is_label_value(text):
        raise _bad("queue_name", f"{brief(value)} is not a label value (a Kueue LocalQueue name: at most 63 "
                                 "letters, digits, '-', '_', '.')", source, hint="e.g. team-a-queue")
    return text


def _capabilities(value: Any, source: str) -> tuple[str, ...]:
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list):
        raise _bad("capabilities", f"must be a list of capability names, got {brief(value)}", source)
    out = []
    for index, name in enumerate(names):
        text = name.upper().removeprefix("CAP_") if isinstance(name, str) else ""
        if text not in CAPABILITIES:
            raise _bad(f"capabilities[{index}]", f"{brief(name)} is not a Linux capability", source,
                       hint="e.g. SYS_PTRACE, IPC_LOCK (a privileged pod is never rendered)")
        if text not in out:
            out.append(text)
    return tuple(out)


def _ifname(value: Any, source: str) -> str:
    text = _text("socket_ifname", value, source)
    if not all(c.isalnum() or c in "._-^=,:" for c in text) or len(text) > 200:
        raise _bad("socket_ifname", f"{brief(value)} is not an interface name (NCCL_SOCKET_IFNAME syntax)", source,
                   hint="e.g. eth0, ib0 or ^lo,docker")
    return text


#: each key's reader: (value, source) → the typed value
_READERS = {
    "kubeconfig": lambda v, s: _text("kubeconfig", v, s),
    "context": lambda v, s: _text("context", v, s),
    "namespace": lambda v, s: _name("namespace", v, s, label=True),
    "image_pull_policy": lambda v, s: _choice("image_pull_policy", v, s, PULL_POLICIES),
    "image_pull_secrets": _pull_secrets,
    "gpu_resource_name": _gpu_resource,
    "gpu_count": lambda v, s: _optional_count("gpu_count", v, s, MAX_GPUS),
    "cpu": lambda v, s: _quantity("cpu", v, s), "cpu_limit": lambda v, s: _quantity("cpu_limit", v, s),
    "memory": lambda v, s: _quantity("memory", v, s), "memory_limit": lambda v, s: _quantity("memory_limit", v, s),
    "cpu_per_gpu": lambda v, s: _quantity("cpu_per_gpu", v, s),
    "memory_per_gpu": lambda v, s: _quantity("memory_per_gpu", v, s),
    "qos": lambda v, s: _choice("qos", v, s, QOS_CLASSES),
    "extended_resources": _extended,
    "rdma_resource": lambda v, s: _resource_name("rdma_resource", v, s),
    "device_resources": _devices,
    "shm_size": lambda v, s: "" if v in (None, "") else _quantity("shm_size", v, s),
    "node_selector": lambda v, s: _label_map("node_selector", v, s),
    "tolerations": lambda v, s: tuple(_toleration(i, t, s) for i, t in enumerate(_list("tolerations", v, s))),
    "affinity": _affinity,
    "one_pod_per_node": lambda v, s: _flag("one_pod_per_node", v, s),
    "priority_class_name": lambda v, s: _name("priority_class_name", v, s),
    "scheduler_name": lambda v, s: _name("scheduler_name", v, s),
    "queue_name": _queue,
    "labels": lambda v, s: _label_map("labels", v, s),
    "annotations": lambda v, s: _label_map("annotations", v, s, annotations=True),
    "data_pvc": lambda v, s: _name("data_pvc", v, s), "results_pvc": lambda v, s: _name("results_pvc", v, s),
    "ttl_seconds_after_finished": lambda v, s: _optional_count("ttl_seconds_after_finished", v, s, MAX_TIMEOUT),
    "backoff_limit": lambda v, s: _count("backoff_limit", v, s, 0, MAX_BACKOFF),
    "host_ipc": lambda v, s: _flag("host_ipc", v, s), "host_network": lambda v, s: _flag("host_network", v, s),
    "socket_ifname": _ifname,
    "service_account": lambda v, s: _name("service_account", v, s),
    "run_as_user": lambda v, s: _count("run_as_user", v, s, 0, MAX_ID),
    "run_as_group": lambda v, s: _count("run_as_group", v, s, 0, MAX_ID),
    "fs_group": lambda v, s: _count("fs_group", v, s, 0, MAX_ID),
    "run_as_non_root": lambda v, s: _flag("run_as_non_root", v, s),
    "capabilities": _capabilities,
    "security_profile": lambda v, s: _choice("security_profile", v, s, PROFILES),
    "env_from_secret": lambda v, s: _names("env_from_secret", v, s),
    "stop_grace": lambda v, s: _count("stop_grace", v, s, 0, 3600),
    "cluster_domain": lambda v, s: _domain(v, s),
    "pending_timeout": lambda v, s: _count("pending_timeout", v, s, 0, MAX_TIMEOUT),
}
KNOWN_KEYS = tuple(_READERS)


def _list(key: str, value: Any, source: str) -> list:
    if not isinstance(value, list):
        raise _bad(key, f"must be a list, got {brief(value)}", source)
    return value


def _domain(value: Any, source: str) -> str:
    text = _text("cluster_domain", value, source).rstrip(".")
    if not is_dns_subdomain(text):
        raise _bad("cluster_domain", f"{brief(value)} is not a DNS domain", source, hint="e.g. cluster.local")
    return text


def block_of(context: Mapping[str, Any], source: str = "context") -> Mapping[str, Any]:
    """The context's ``k8s`` (or ``kubernetes``) block; {} when it has none."""
    given = [name for name in BLOCK_NAMES if context.get(name) is not None]
    if len(given) > 1:
        raise ContextError("both 'k8s' and 'kubernetes' are given", path=source, field="kubernetes",
                           hint="give the block once, as 'k8s'")
    block = context.get(given[0]) if given else {}
    if not isinstance(block, Mapping):
        raise ContextError(f"must be an object, got {brief(block)}", path=source, field=given[0], hint=_HINT)
    return block


def k8s_settings(block: Mapping[str, Any], *, source: str = "context") -> K8sSettings:
    """The typed settings of a ``k8s`` block, every key checked (ContextError, exit 2)."""
    if not isinstance(block, Mapping):
        raise ContextError(f"must be an object, got {brief(block)}", path=source, field="k8s", hint=_HINT)
    values: dict[str, Any] = {}
    for key, value in block.items():
        reader = _READERS.get(key)
        if reader is None:
            raise _bad(str(key), "unknown key", source, hint="known keys: " + ", ".join(KNOWN_KEYS))
        if value is None and key not in ("ttl_seconds_after_finished", "gpu_count", "shm_size"):
            continue  # null: the default
        values[key] = reader(value, source)
    settings = K8sSettings(**values)
    _check_requests_within_limits(settings, source)
    _check_combinations(settings, source)
    return settings


def _check_combinations(settings: K8sSettings, source: str) -> None:
    """Keys that contradict each other."""
    if settings.guaranteed:
        for limit in ("cpu_limit", "memory_limit"):
            if getattr(settings, limit):
                raise _bad(limit, "qos Guaranteed sets the limits equal to the requests", source,
                           hint=f"drop k8s.{limit}; give k8s.{limit.removesuffix('_limit')} (the request) only")
    if settings.run_as_non_root and settings.run_as_user == 0:
        raise _bad("run_as_non_root", "contradicts run_as_user 0 (root)", source,
                   hint="give run_as_user a non-zero user id")
    if settings.socket_ifname and not settings.host_network:
        raise _bad("socket_ifname", "applies to host_network pods only (a pod network has one interface)", source,
                   hint="set k8s.host_network true, or drop k8s.socket_ifname")


def _check_requests_within_limits(settings: K8sSettings, source: str) -> None:
    for request, limit in (("cpu", "cpu_limit"), ("memory", "memory_limit")):
        low, high = getattr(settings, request), getattr(settings, limit)
        if low and high and parse_quantity(low) > parse_quantity(high):  # type: ignore[operator]
            raise _bad(request, f"the request {low} is more than the limit {high}", source,
                       hint=f"make k8s.{request} at most k8s.{limit}")


def check_context_block(context: Mapping[str, Any], source: str = "context") -> None:
    """The block of a context as read (any executor): malformed is exit 2 at once."""
    block = block_of(context, source)
    if block:
        k8s_settings(block, source=source)


__all__ = ["BLOCK_NAMES", "GPU_RESOURCES", "K8sSettings", "KNOWN_KEYS", "PULL_POLICIES", "block_of",
           "check_context_block", "k8s_settings"]
