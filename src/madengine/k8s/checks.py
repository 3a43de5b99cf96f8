"""What the API server would refuse, or what madengine promises, that the OpenAPI schema does not
say: checked on every rendered object (``kubernetes-validate --strict`` checks the schema).

* names: DNS-1123 subdomains (a Service's a DNS-1035 label; a Job's leaves room for its pods'
  host names), label keys and values (values at most 63 characters), data keys, env names;
* Jobs: ``restartPolicy`` Never (a ``podFailurePolicy`` needs it) or OnFailure; Indexed mode with
  ``completions``; parallelism equal to completions (every node of a job runs at once); **a
  failure policy**: disruptions ignored first, the model's non-zero exit failing the Job, pods
  replaced once failed, and a ``successPolicy`` on index 0 for an sglang-disagg job;
* **one pod per node**: a job of several nodes has a required pod anti-affinity on its own label
  over ``kubernetes.io/hostname`` (unless ``one_pod_per_node: false``);
* resources: **CPU and memory requested** (never BestEffort); an extended resource (a GPU) has its
  limit equal to its request; requests within limits;
* **shm sized**: ``/dev/shm`` is a memory emptyDir with a size, within the memory limit;
* Secrets: every ``data`` value is base64; no ``stringData``; **no secret outside Secrets**: a
  variable whose name looks secret comes from a Secret (``valueFrom``), never a literal value of
  the pod spec or a node's variables file;
* least privilege: no privileged container or privilege escalation, every capability dropped and
  only the allowed ones added, the runtime's seccomp profile unless unconfined was asked, no host
  network, IPC or PID unless asked, read-only ConfigMap and data mounts, no service account token;
* wiring: every mount names a volume, a ConfigMap volume's items name keys of the job's ConfigMap,
  an Indexed Job's pods have the headless Service's name as subdomain and match its selector.

What was asked beyond the defaults is an :class:`~madengine.k8s.pod.Allowed` (a rendered job's
``allowed``): the checks allow that and nothing more.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
from typing import Any, Iterable, Mapping, Sequence

from madengine.core.redact import looks_secret
from madengine.k8s.names import (ENV_NAME, LABEL_MAX, is_data_key, is_dns_1035_label, is_dns_subdomain,
                                 is_label_value, is_qualified_name, parse_quantity)
from madengine.k8s.pod import CONTAINER, HOSTNAME_TOPOLOGY, LABEL_JOB, Allowed

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


def _container(where: str, container: Mapping[str, Any], volumes: Mapping[str, Mapping[str, Any]],
               allow: Allowed) -> list[str]:
    resources = container.get("resources") or {}
    problems = _resources(where, resources)
    requests = resources.get("requests") or {}
    problems += [f"{where}: no {kind} request (a pod without requests is BestEffort, evicted first)"
                 for kind in ("cpu", "memory") if kind not in requests]
    for env in container.get("env") or []:
        if not ENV_NAME.match(str(env.get("name", ""))):
            problems.append(f"{where}: env name {env.get('name')!r} is not valid")
        if looks_secret(str(env.get("name", ""))) and "value" in env:
            problems.append(f"{where}: variable {env.get('name')} looks secret and has its value in the pod spec "
                            "(it must come from a Secret)")
    problems += _security(where, container.get("securityContext") or {}, allow)
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


def _security(where: str, security: Mapping[str, Any], allow: Allowed) -> list[str]:
    problems = []
    if security.get("privileged") is not False or security.get("allowPrivilegeEscalation") is not False:
        problems.append(f"{where}: the container must be unprivileged without privilege escalation")
    capabilities = security.get("capabilities") or {}
    added = [c for c in capabilities.get("add") or [] if c not in allow.capabilities]
    if capabilities.get("drop") != ["ALL"] or added:
        problems.append(f"{where}: every capability must be dropped and none added but those asked"
                        + (f" (not asked: {', '.join(added)})" if added else ""))
    unconfined = [kind for kind in ("seccompProfile", "appArmorProfile")
                  if (security.get(kind) or {}).get("type") == "Unconfined"]
    if unconfined and not allow.unconfined:
        problems.append(f"{where}: {' and '.join(unconfined)} Unconfined was not asked")
    return problems


def _shm(where: str, pod: Mapping[str, Any], allow: Allowed) -> list[str]:
    """``/dev/shm`` is a memory emptyDir with a size, no larger than the memory limit."""
    volumes = {v.get("name"): v for v in pod.get("volumes") or []}
    for container in pod.get("containers") or []:
        mount = next((m for m in container.get("volumeMounts") or [] if m.get("mountPath") == "/dev/shm"), None)
        if mount is None:
            if not allow.no_shm:
                return [f"{where}: no /dev/shm volume (the runtime's 64 MiB starves data loaders and NCCL)"]
            continue
        empty = (volumes.get(mount.get("name")) or {}).get("emptyDir") or {}
        size, limit = parse_quantity(empty.get("sizeLimit")), parse_quantity(
            ((container.get("resources") or {}).get("limits") or {}).get("memory"))
        if empty.get("medium") != "Memory" or size is None:
            return [f"{where}: /dev/shm must be a memory emptyDir with a sizeLimit"]
        if limit is not None and size > limit:
            return [f"{where}: /dev/shm {empty['sizeLimit']} is more than the memory limit (it counts against it)"]
    return []


def _one_per_node(where: str, name: str, pod: Mapping[str, Any]) -> list[str]:
    terms = ((pod.get("affinity") or {}).get("podAntiAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or []
    if any(t.get("topologyKey") == HOSTNAME_TOPOLOGY and
           ((t.get("labelSelector") or {}).get("matchLabels") or {}).get(LABEL_JOB) == name for t in terms):
        return []
    return [f"{where}: the pods of a job of several nodes must be on different nodes (a required pod anti-affinity "
            f"on {LABEL_JOB}={name} over {HOSTNAME_TOPOLOGY})"]


def _failure_policy(where: str, spec: Mapping[str, Any], pod: Mapping[str, Any]) -> list[str]:
    rules = (spec.get("podFailurePolicy") or {}).get("rules") or []
    problems = []
    first = rules[0] if rules else {}
    if first.get("action") != "Ignore" or not any(c.get("type") == "DisruptionTarget"
                                                  for c in first.get("onPodConditions") or []):
        problems.append(f"{where}: its podFailurePolicy must first ignore disruptions (DisruptionTarget)")
    if not any(r.get("action") == "FailJob" and (r.get("onExitCodes") or {}).get("containerName") == CONTAINER
               for r in rules):
        problems.append(f"{where}: its podFailurePolicy must fail the Job on the model's non-zero exit")
    if rules and pod.get("restartPolicy") != "Never":
        problems.append(f"{where}: a podFailurePolicy needs restartPolicy Never")
    if spec.get("podReplacementPolicy") != "Failed":
        problems.append(f"{where}: podReplacementPolicy must be Failed (a new pod only once the old one has ended)")
    env = {e.get("name"): e.get("value") for c in pod.get("containers") or [] for e in c.get("env") or []}
    disagg = env.get("SGLANG_DISAGG_MODE") == "enabled" and (spec.get("completions") or 1) > 1
    if disagg and (spec.get("successPolicy") or {}).get("rules") != [{"succeededIndexes": "0"}]:
        problems.append(f"{where}: an sglang-disagg job succeeds when its benchmark pod (index 0) does: "
                        "successPolicy succeededIndexes 0")
    return problems


def _pod(where: str, pod: Mapping[str, Any], allow: Allowed) -> list[str]:
    problems = []
    if pod.get("restartPolicy") not in ("Never", "OnFailure"):
        problems.append(f"{where}: restartPolicy must be Never or OnFailure, got {pod.get('restartPolicy')!r}")
    for key, asked, flag in (("hostNetwork", allow.host_network, "host_network"),
                             ("hostIPC", allow.host_ipc, "host_ipc"), ("hostPID", False, "host_pid")):
        if pod.get(key) and not asked:
            problems.append(f"{where}: {key} is set but the k8s block did not ask for {flag}")
    if pod.get("automountServiceAccountToken") is not False:
        problems.append(f"{where}: the pod must not mount a service account token")
    if ((pod.get("securityContext") or {}).get("seccompProfile") or {}).get("type") != "RuntimeDefault":
        problems.append(f"{where}: the pod must use the runtime's default seccomp profile")
    volumes = {v.get("name"): v for v in pod.get("volumes") or []}
    for container in [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]:
        problems += _container(f"{where} container {container.get('name')}", container, volumes, allow)
    return problems + _shm(where, pod, allow)


def _job(obj: Mapping[str, Any], allow: Allowed) -> list[str]:
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
    pod = template.get("spec") or {}
    problems += _labels(f"{where} template", (template.get("metadata") or {}).get("labels"))
    problems += _pod(where, pod, allow)
    problems += _failure_policy(where, spec, pod)
    if (completions or 1) > 1 and not allow.shared_nodes:
        problems += _one_per_node(where, name, pod)
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
    data = obj.get("data") or {}
    problems = [f"{where}: data key {key!r} is not valid" for key in [*data, *(obj.get("binaryData") or {})]
                if not is_data_key(key)]
    both = set(data) & set(obj.get("binaryData") or {})
    problems += [f"{where}: key {key!r} is in data and binaryData" for key in sorted(both)]
    for key, text in data.items():  # a node's variables file is data of the pod spec: no secret in it
        if key.startswith("node-") and key.endswith(".env"):
            problems += [f"{where}: {key} sets {line.partition('=')[0]}, which looks secret (it must come from a "
                         "Secret)" for line in str(text).splitlines() if looks_secret(line.partition("=")[0])]
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


def problems(objects: Iterable[Mapping[str, Any]], allow: Allowed | None = None, *, host_network: bool = False,
             host_ipc: bool = False) -> list[str]:
    """Every problem of a set of rendered objects (one job's, or any list); [] when none. ``allow``:
    what was asked beyond the defaults (a rendered job's ``allowed``)."""
    objects = list(objects)
    allow = allow or Allowed()
    allow = dataclasses.replace(allow, host_network=allow.host_network or host_network,
                                host_ipc=allow.host_ipc or host_ipc)
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


def check_plan(job: Any) -> None:
    """A rendered job that breaks a rule is a bug of madengine's (exit 3), never sent."""
    found = problems(job.objects, job.allowed)
    if found:
        raise RuntimeError(f"madengine rendered objects Kubernetes would refuse for {job.name}: " + "; ".join(found))


__all__ = ["check_plan", "problems"]
