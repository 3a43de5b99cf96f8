"""What the API server would refuse, or what madengine promises, that the OpenAPI schema does not
say: checked on every rendered object (``kubernetes-validate --strict`` checks the schema).

* names: DNS-1123 subdomains (a Service's a DNS-1035 label; a Job's leaves room for its pods'
  host names), label keys and values (values at most 63 characters), data keys, env names;
* Jobs: ``restartPolicy`` Never or OnFailure; Indexed mode with ``completions``; parallelism equal
  to completions (every node of a job runs at once);
* resources: an extended resource (a GPU) has its limit equal to its request; requests within limits;
* Secrets: every ``data`` value is base64; no ``stringData`` (it would be shown by ``kubectl get -o yaml``
  of the rendered file as text);
* least privilege: no privileged container or privilege escalation, capabilities dropped, no host
  network, IPC or PID unless the ``k8s`` block asks, read-only ConfigMap and data mounts, no
  service account token;
* wiring: every mount names a volume, a ConfigMap volume's items name keys of the job's ConfigMap,
  an Indexed Job's pods have the headless Service's name as subdomain and match its selector.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, Iterable, Mapping, Sequence

from madengine.k8s.names import (ENV_NAME, LABEL_MAX, is_data_key, is_dns_1035_label, is_dns_subdomain,
                                 is_label_value, is_qualified_name, parse_quantity)

_STANDARD_RESOURCES = ("cpu", "memory", "ephemeral-storage")
#: pod host names are ``<job>-<index>``: a DNS label
_HOSTNAME_MAX = LABEL_MAX


def _labels(where: str, labels: Mapping[str, Any] | None) -> list[str]:
    problems = []
    for key, value in (labels or {}).items():
        if not is_qualified_name(key):
            problems.append(f"{where}: label key {key!r} is not a qualified name")
        if not isinstance(value, str) or not is_label_value(value):
            problems.append(f"{where}: label {key}={value!r} is not a label value (≤ {LABEL_MAX} characters)")
    return problems


def _metadata(obj: Mapping[str, Any]) -> list[str]:
    meta = obj.get("metadata") or {}
    name, kind = meta.get("name", ""), obj.get("kind", "?")
    where = f"{kind} {name}"
    problems = _labels(where, meta.get("labels"))
    if kind == "Service":
        if not is_dns_1035_label(name):
            problems.append(f"{where}: a Service's name must be a DNS-1035 label")
    elif not is_dns_subdomain(name):
        problems.append(f"{where}: the name is not a DNS-1123 subdomain")
    namespace = meta.get("namespace")
    if namespace is not None and not (is_dns_subdomain(namespace) and len(namespace) <= LABEL_MAX):
        problems.append(f"{where}: namespace {namespace!r} is not a DNS-1123 label")
    return problems


def _resources(where: str, resources: Mapping[str, Any]) -> list[str]:
    problems = []
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    for table, name in ((requests, "request"), (limits, "limit")):
        for key, value in table.items():
            number = parse_quantity(value)
            if number is None or number < 0:
                problems.append(f"{where}: {name} {key}={value!r} is not a quantity")
    for key in set(requests) | set(limits):
        extended = key not in _STANDARD_RESOURCES and not key.startswith("hugepages-")
        if extended and requests.get(key) != limits.get(key):
            problems.append(f"{where}: {key} limit {limits.get(key)!r} must equal its request {requests.get(key)!r}")
        low, high = parse_quantity(requests.get(key)), parse_quantity(limits.get(key))
        if low is not None and high is not None and low > high:
            problems.append(f"{where}: {key} request {requests[key]} is more than its limit {limits[key]}")
    return problems


def _container(where: str, container: Mapping[str, Any], volumes: Mapping[str, Mapping[str, Any]]) -> list[str]:
    problems = _resources(where, container.get("resources") or {})
    for env in container.get("env") or []:
        if not ENV_NAME.match(str(env.get("name", ""))):
            problems.append(f"{where}: env name {env.get('name')!r} is not valid")
    security = container.get("securityContext") or {}
    if security.get("privileged") is not False or security.get("allowPrivilegeEscalation") is not False:
        problems.append(f"{where}: the container must be unprivileged without privilege escalation")
    if (security.get("capabilities") or {}).get("drop") != ["ALL"] or (security.get("capabilities") or {}).get("add"):
        problems.append(f"{where}: every capability must be dropped and none added")
    for mount in container.get("volumeMounts") or []:
        volume = volumes.get(mount.get("name"))
        if volume is None:
            problems.append(f"{where}: mount {mount.get('name')!r} names no volume")
            continue
        read_only = "configMap" in volume or "secret" in volume or \
            (volume.get("persistentVolumeClaim") or {}).get("readOnly")
        if read_only and not mount.get("readOnly"):
            problems.append(f"{where}: volume {mount.get('name')!r} must be mounted read-only")
    return problems


def _pod(where: str, pod: Mapping[str, Any], allow: Mapping[str, bool]) -> list[str]:
    problems = []
    if pod.get("restartPolicy") not in ("Never", "OnFailure"):
        problems.append(f"{where}: restartPolicy must be Never or OnFailure, got {pod.get('restartPolicy')!r}")
    for key, flag in (("hostNetwork", "host_network"), ("hostIPC", "host_ipc"), ("hostPID", "host_pid")):
        if pod.get(key) and not allow.get(flag):
            problems.append(f"{where}: {key} is set but the k8s block did not ask for {flag}")
    if pod.get("automountServiceAccountToken") is not False:
        problems.append(f"{where}: the pod must not mount a service account token")
    volumes = {v.get("name"): v for v in pod.get("volumes") or []}
    for container in [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]:
        problems += _container(f"{where} container {container.get('name')}", container, volumes)
    return problems


def _job(obj: Mapping[str, Any], allow: Mapping[str, bool]) -> list[str]:
    name = (obj.get("metadata") or {}).get("name", "")
    where = f"Job {name}"
    spec = obj.get("spec") or {}
    problems = []
    completions, parallelism = spec.get("completions"), spec.get("parallelism")
    if spec.get("completionMode") == "Indexed":
        if not isinstance(completions, int) or completions < 1:
            problems.append(f"{where}: Indexed mode requires completions")
        elif len(f"{name}-{completions - 1}") > _HOSTNAME_MAX:
            problems.append(f"{where}: its pods' host names {name}-<index> would be longer than {_HOSTNAME_MAX}")
    if completions is not None and parallelism != completions:
        problems.append(f"{where}: parallelism {parallelism} must equal completions {completions} (every node at once)")
    template = spec.get("template") or {}
    problems += _labels(f"{where} template", (template.get("metadata") or {}).get("labels"))
    problems += _pod(where, template.get("spec") or {}, allow)
    return problems


def _secret(obj: Mapping[str, Any]) -> list[str]:
    where = f"Secret {(obj.get('metadata') or {}).get('name', '')}"
    problems = [f"{where}: stringData holds values as plain text"] if obj.get("stringData") else []
    for key, value in (obj.get("data") or {}).items():
        if not is_data_key(key):
            problems.append(f"{where}: data key {key!r} is not valid")
        try:
            base64.b64decode(str(value), validate=True)
        except (binascii.Error, ValueError):
            problems.append(f"{where}: data {key} is not base64")
    return problems


def _configmap(obj: Mapping[str, Any]) -> list[str]:
    where = f"ConfigMap {(obj.get('metadata') or {}).get('name', '')}"
    problems = [f"{where}: data key {key!r} is not valid" for key in [*(obj.get("data") or {}),
                                                                      *(obj.get("binaryData") or {})]
                if not is_data_key(key)]
    both = set(obj.get("data") or {}) & set(obj.get("binaryData") or {})
    problems += [f"{where}: key {key!r} is in data and binaryData" for key in sorted(both)]
    return problems


def _wiring(objects: Sequence[Mapping[str, Any]]) -> list[str]:
    """Across the objects of one job: ConfigMap items, the Service and the Indexed Job's pods."""
    by_kind: dict[str, dict[str, Mapping[str, Any]]] = {}
    for obj in objects:
        by_kind.setdefault(obj.get("kind", ""), {})[(obj.get("metadata") or {}).get("name", "")] = obj
    problems = []
    for name, job in by_kind.get("Job", {}).items():
        template = (job.get("spec") or {}).get("template") or {}
        pod, labels = template.get("spec") or {}, (template.get("metadata") or {}).get("labels") or {}
        for volume in pod.get("volumes") or []:
            source = volume.get("configMap")
            if source is None:
                continue
            config = by_kind.get("ConfigMap", {}).get(source.get("name"))
            keys = set((config or {}).get("data") or {}) | set((config or {}).get("binaryData") or {})
            problems += [f"Job {name}: item key {item.get('key')!r} is not in ConfigMap {source.get('name')}"
                         for item in source.get("items") or [] if config is not None and item.get("key") not in keys]
        if (job.get("spec") or {}).get("completionMode") == "Indexed" and (job["spec"].get("completions") or 0) > 1:
            service = by_kind.get("Service", {}).get(pod.get("subdomain", ""))
            if service is None:
                problems.append(f"Job {name}: an Indexed Job of several nodes needs its headless Service as subdomain")
            elif service["spec"].get("clusterIP") != "None" or \
                    any(labels.get(k) != v for k, v in (service["spec"].get("selector") or {}).items()):
                problems.append(f"Job {name}: Service {service['metadata']['name']} is not headless or does not "
                                "select the job's pods")
    return problems


def problems(objects: Iterable[Mapping[str, Any]], *, host_network: bool = False, host_ipc: bool = False) -> list[str]:
    """Every problem of a set of rendered objects (one job's, or any list); [] when none."""
    objects = list(objects)
    allow = {"host_network": host_network, "host_ipc": host_ipc}
    found: list[str] = []
    for obj in objects:
        found += _metadata(obj)
        kind = obj.get("kind")
        if kind == "Job":
            found += _job(obj, allow)
        elif kind == "Secret":
            found += _secret(obj)
        elif kind == "ConfigMap":
            found += _configmap(obj)
        elif kind == "Pod":
            found += _pod(f"Pod {(obj.get('metadata') or {}).get('name')}", obj.get("spec") or {}, allow)
    return found + _wiring(objects)


def check_plan(job: Any, settings: Any) -> None:
    """A rendered job that breaks a rule is a bug of madengine's (exit 3), never sent."""
    found = problems(job.objects, host_network=settings.host_network, host_ipc=settings.host_ipc)
    if found:
        raise RuntimeError(f"madengine rendered objects Kubernetes would refuse for {job.name}: " + "; ".join(found))


__all__ = ["check_plan", "problems"]
