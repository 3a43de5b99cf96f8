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

BLOCK_NAMES = ("k8s", "kubernetes")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
GPU_RESOURCES = {"AMD": "amd.com/gpu", "NVIDIA": "nvidia.com/gpu"}
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
TOLERATION_KEYS = ("key", "operator", "value", "effect", "tolerationSeconds")
MAX_GPUS = 1024
#: a Job's backoff limit above this is surely a mistake (each retry reruns the whole benchmark)
MAX_BACKOFF = 100
DEFAULT_SHM = "1Gi"
DEFAULT_TTL = 3600
DEFAULT_PENDING_TIMEOUT = 300
_HINT = 'e.g. {"k8s": {"namespace": "ml-perf", "gpu_resource_name": "amd.com/gpu", "memory": "64Gi"}}'


@dataclasses.dataclass(frozen=True)
class K8sSettings:
    """The checked ``k8s`` block (see docs/distributed.md, "Kubernetes")."""

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
    cpu: str = ""
    cpu_limit: str = ""
    memory: str = ""
    memory_limit: str = ""
    #: /dev/shm of the pod (a memory-backed emptyDir): PyTorch's workers share tensors through it
    shm_size: str = DEFAULT_SHM
    node_selector: Mapping[str, str] = dataclasses.field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    #: PersistentVolumeClaims madengine mounts (never creates): data read-only at /data, results at /results
    data_pvc: str = ""
    results_pvc: str = ""
    ttl_seconds_after_finished: int | None = DEFAULT_TTL
    backoff_limit: int = 0
    host_ipc: bool = False
    host_network: bool = False
    service_account: str = ""
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


def _node_selector(value: Any, source: str) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise _bad("node_selector", f"must be an object of label: value, got {brief(value)}", source)
    out = {}
    for label, text in value.items():
        if not is_qualified_name(label):
            raise _bad("node_selector", f"{brief(label)} is not a label key", source)
        if not isinstance(text, str) or not is_label_value(text):
            raise _bad(f"node_selector.{label}", f"{brief(text)} is not a label value (at most 63 letters, "
                                                 "digits, '-', '_', '.')", source)
        out[str(label)] = text
    return out


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
    "shm_size": lambda v, s: "" if v in (None, "") else _quantity("shm_size", v, s),
    "node_selector": _node_selector,
    "tolerations": lambda v, s: tuple(_toleration(i, t, s) for i, t in enumerate(_list("tolerations", v, s))),
    "data_pvc": lambda v, s: _name("data_pvc", v, s), "results_pvc": lambda v, s: _name("results_pvc", v, s),
    "ttl_seconds_after_finished": lambda v, s: _optional_count("ttl_seconds_after_finished", v, s, MAX_TIMEOUT),
    "backoff_limit": lambda v, s: _count("backoff_limit", v, s, 0, MAX_BACKOFF),
    "host_ipc": lambda v, s: _flag("host_ipc", v, s), "host_network": lambda v, s: _flag("host_network", v, s),
    "service_account": lambda v, s: _name("service_account", v, s),
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
    return settings


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
