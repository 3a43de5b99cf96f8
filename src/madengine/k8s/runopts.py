"""A model's ``additional_docker_run_options`` on a pod: each docker flag either maps onto the pod
spec or is bad input (exit 2) naming the flag and what to use instead. None is dropped.

| docker flag | on the pod |
|---|---|
| ``--shm-size`` | the ``/dev/shm`` emptyDir's size |
| ``--cap-add`` / ``--cap-drop`` | capabilities added / left out (every other one is dropped) |
| ``--ipc host`` / ``--network host`` | ``hostIPC`` / ``hostNetwork`` (``private``, ``bridge``: the pod's own) |
| ``--device PATH`` | the extended resource that gives the device: the GPU resource for ``/dev/kfd``, ``/dev/dri``, ``/dev/nvidia*``; ``k8s.rdma_resource`` for ``/dev/infiniband``; ``k8s.device_resources`` for any other |
| ``--gpus`` | the GPU resource (``k8s.gpu_count``) |
| ``-e``/``--env`` | the pod's variables (secret-looking names through its Secret) |
| ``--security-opt seccomp=unconfined`` / ``apparmor=unconfined`` / ``no-new-privileges`` | the container's seccomp / AppArmor profile; no privilege escalation (always) |
| ``--group-add GID``, ``--user UID[:GID]`` | ``supplementalGroups``, ``runAsUser``/``runAsGroup`` (numbers; ``root`` is 0) |
| ``--memory``/``-m``, ``--cpus`` | the memory and CPU limits (``k8s.memory_limit``/``cpu_limit`` win) |
| ``--tmpfs PATH[:size=N]`` | a memory-backed emptyDir at PATH |
| ``--read-only`` | ``readOnlyRootFilesystem`` |
| ``--init`` | nothing to add: the pod's entry script is its PID 1 and reaps orphans |

Refused: ``--privileged``, ``--volume`` (``k8s.data_pvc``/``results_pvc``), ``--cpuset-cpus``
(``k8s.qos: Guaranteed``), ``--pid``, ``--hostname``, ``--dns``, ``--memory-swap``,
``--pids-limit``, ``--ulimit``, ``--userns``, ``--runtime``, and any value these do not take.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from madengine.core.errors import ExecutionError, InputError
from madengine.execution.dockeropts import option_name, parse_run_options
from madengine.k8s.names import byte_quantity, parse_quantity
from madengine.k8s.settings import CAPABILITIES, K8sSettings

#: devices a GPU's device plugin gives (AMD: the KFD and render nodes; NVIDIA: its device files)
GPU_DEVICES = ("/dev/kfd", "/dev/dri", "/dev/nvidia")
RDMA_DEVICES = "/dev/infiniband"
#: what to use instead of each refused flag
_INSTEAD = {
    "privileged": "a privileged pod is never rendered: add what the model needs with k8s.capabilities",
    "volumes": "mount data with k8s.data_pvc (read-only at /data) and keep results with k8s.results_pvc",
    "cpuset_cpus": "k8s.qos Guaranteed with whole CPUs lets the kubelet's static CPU manager pin them",
    "pid_mode": "madengine never renders hostPID",
    "hostname": "a pod's host name is its own name",
    "dns": "the pod uses the cluster's DNS",
    "memswap_limit": "a pod has no swap limit: give k8s.memory_limit",
    "pids_limit": "the pod's process limit is the kubelet's (podPidsLimit)",
    "ulimits": "ulimits are the container runtime's on a cluster",
    "userns_mode": "user namespaces are the pod spec's hostUsers, which madengine leaves to the cluster",
    "runtime": "the runtime is a RuntimeClass the cluster admin names",
}


@dataclasses.dataclass
class PodOptions:
    """What a model's docker options ask of its pod."""

    shm_bytes: int | None = None
    capabilities: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    host_ipc: bool = False
    host_network: bool = False
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    #: extended resources for ``--device`` (name → count)
    resources: dict[str, int] = dataclasses.field(default_factory=dict)
    seccomp_unconfined: bool = False
    apparmor_unconfined: bool = False
    supplemental_groups: tuple[int, ...] = ()
    run_as_user: int | None = None
    run_as_group: int | None = None
    memory_limit: str = ""
    cpu_limit: str = ""
    #: memory-backed emptyDirs: mount path → size ('' for none)
    tmpfs: dict[str, str] = dataclasses.field(default_factory=dict)
    read_only_root: bool = False


def pod_options(model: Any, settings: K8sSettings, gpu_resource: str) -> PodOptions:
    """The pod fields a model's ``additional_docker_run_options`` ask for (InputError, exit 2, for a
    flag with no pod equivalent)."""
    field = f"{model.name}.additional_docker_run_options"

    def refuse(key: str, message: str, hint: str) -> InputError:
        return InputError(f"{option_name(key)} {message}", path=model.source, field=field, hint=hint)

    try:
        parsed = parse_run_options(model.additional_docker_run_options)
    except ExecutionError as exc:
        raise InputError(exc.message, path=model.source, field=field, hint=exc.hint) from None
    out = PodOptions()
    for key, value in parsed.items():
        if key in _INSTEAD:
            raise refuse(key, "has no pod equivalent", _INSTEAD[key])
        _MAPPERS[key](out, value, settings, gpu_resource, lambda message, hint, k=key: refuse(k, message, hint))
    return out


def _shm(out: PodOptions, value: int, *_: Any) -> None:
    out.shm_bytes = value if value > 0 else None


def _capability(name: str, refuse: Any) -> str:
    text = name.upper().removeprefix("CAP_")
    if text == "ALL":
        raise refuse("ALL is a privileged pod", "name the capabilities the model needs")
    if text not in CAPABILITIES:
        raise refuse(f"{name!r} is not a Linux capability", "e.g. SYS_PTRACE, IPC_LOCK")
    return text


def _cap_add(out: PodOptions, value: list[str], _settings: Any, _gpu: str, refuse: Any) -> None:
    out.capabilities = tuple(dict.fromkeys([*out.capabilities, *(_capability(v, refuse) for v in value)]))


def _cap_drop(out: PodOptions, value: list[str], _settings: Any, _gpu: str, refuse: Any) -> None:
    names = [v.upper() for v in value]
    out.dropped = tuple(dict.fromkeys([*out.dropped, *(n if n == "ALL" else _capability(n, refuse) for n in names)]))


def _ipc(out: PodOptions, value: str, _settings: Any, _gpu: str, refuse: Any) -> None:
    if value == "host":
        out.host_ipc = True
    elif value != "private":
        raise refuse(f"{value!r} has no pod equivalent", "a pod's IPC is private, or the host's with --ipc host")


def _network(out: PodOptions, value: str, _settings: Any, _gpu: str, refuse: Any) -> None:
    if value == "host":
        out.host_network = True
    elif value not in ("bridge", "default"):
        raise refuse(f"{value!r} has no pod equivalent", "a pod has the cluster's network, or the host's with "
                                                         "--network host")


def _devices(out: PodOptions, value: list[str], settings: K8sSettings, gpu: str, refuse: Any) -> None:
    for item in value:
        path = item.split(":")[0].rstrip("/")
        resource = device_resource(path, settings, gpu)
        if resource is None:
            if _under(path, GPU_DEVICES):
                raise refuse(f"{path}: a GPU's devices come with the GPU resource, and this job asks none",
                             "set k8s.gpu_resource_name (or gpu_vendor) and k8s.gpu_count")
            if _under(path, (RDMA_DEVICES,)):
                raise refuse(f"{path}: RDMA devices come from the RDMA device plugin's resource",
                             "name it with k8s.rdma_resource, e.g. rdma/hca_shared_devices_a")
            raise refuse(f"{path}: a pod gets a device through the extended resource of its device plugin",
                         'map it with k8s.device_resources, e.g. {"' + path + '": "example.com/device"}')
        if resource != gpu:  # the GPUs are asked already, by their count
            out.resources[resource] = max(out.resources.get(resource, 0), 1)


def device_resource(path: str, settings: K8sSettings, gpu: str) -> str | None:
    """The extended resource that gives device ``path`` to a pod, or None when none is known."""
    for prefix, resource in sorted(settings.device_resources.items(), key=lambda item: -len(item[0])):
        if _under(path, (prefix,)):
            return resource
    if _under(path, GPU_DEVICES):
        return gpu or None
    if _under(path, (RDMA_DEVICES,)):
        return settings.rdma_resource or None
    return None


def _under(path: str, prefixes: tuple[str, ...]) -> bool:
    return any(path == p or path.startswith(p + "/") or (p == "/dev/nvidia" and path.startswith(p)) for p in prefixes)


def _gpus(_out: PodOptions, _value: str, _settings: Any, gpu: str, refuse: Any) -> None:
    if not gpu:
        raise refuse("asks GPUs and this job asks none", "set k8s.gpu_resource_name (or gpu_vendor) and k8s.gpu_count")


def _env(out: PodOptions, value: Mapping[str, str], *_: Any) -> None:
    out.env.update(value)


def _security(out: PodOptions, value: list[str], _settings: Any, _gpu: str, refuse: Any) -> None:
    for item in value:
        kind, _, setting = item.replace(":", "=", 1).partition("=")
        if kind == "no-new-privileges" and setting in ("", "true"):
            continue  # every container runs without privilege escalation
        if kind == "seccomp" and setting == "unconfined":
            out.seccomp_unconfined = True
        elif kind == "apparmor" and setting == "unconfined":
            out.apparmor_unconfined = True
        else:
            raise refuse(f"{item!r} has no pod equivalent",
                         "seccomp=unconfined, apparmor=unconfined and no-new-privileges are understood")


def _number(text: str, names: Mapping[str, int], what: str, refuse: Any) -> int:
    if text.isdigit() and int(text) < 2**31:
        return int(text)
    if text in names:
        return names[text]
    raise refuse(f"{text!r} is not a {what} number", f"a pod takes numeric ids: give the {what} id (getent "
                                                     f"{'group' if what == 'group' else 'passwd'} {text} in the image)")


def _groups(out: PodOptions, value: list[str], _settings: Any, _gpu: str, refuse: Any) -> None:
    out.supplemental_groups = tuple(dict.fromkeys([*out.supplemental_groups,
                                                   *(_number(v, {"root": 0}, "group", refuse) for v in value)]))


def _user(out: PodOptions, value: str, _settings: Any, _gpu: str, refuse: Any) -> None:
    user, _, group = value.partition(":")
    out.run_as_user = _number(user, {"root": 0}, "user", refuse)
    if group:
        out.run_as_group = _number(group, {"root": 0}, "group", refuse)


def _memory(out: PodOptions, value: int, _settings: Any, _gpu: str, refuse: Any) -> None:
    if value <= 0:
        raise refuse("-1 (no limit) is a pod without k8s.memory_limit", "drop the flag")
    out.memory_limit = byte_quantity(value)


def _cpus(out: PodOptions, value: int, *_: Any) -> None:
    out.cpu_limit = f"{-(-value // 1_000_000)}m"  # nano-CPUs, rounded up to the millicores a pod takes


def _tmpfs(out: PodOptions, value: Mapping[str, str], _settings: Any, _gpu: str, refuse: Any) -> None:
    for path, options in value.items():
        if not path.startswith("/") or path.rstrip("/") in ("", "/dev/shm"):
            raise refuse(f"{path!r} cannot be a pod's memory volume", "give an absolute path other than / "
                                                                      "(/dev/shm is --shm-size)")
        size = next((o.partition("=")[2] for o in options.split(",") if o.startswith("size=")), "")
        count = _docker_bytes(size) if size else 0
        if count is None:
            raise refuse(f"size {size!r} is not a size", "e.g. size=64m")
        out.tmpfs[path.rstrip("/")] = byte_quantity(count) if count else ""


def _docker_bytes(text: str) -> int | None:
    """A docker size (``64m``, ``1g``, ``512k``, bytes; units of 1024) as bytes, or None."""
    value = text.strip().lower().removesuffix("b")
    scale = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(value[-1:], 1)
    digits = value[:-1] if scale > 1 else value
    return int(digits) * scale if digits.isdigit() and int(digits) > 0 else None


def _read_only(out: PodOptions, *_: Any) -> None:
    out.read_only_root = True


def _init(*_: Any) -> None:
    """The pod's entry script is its PID 1: it reaps orphans, as docker's init would."""


_MAPPERS = {"shm_size": _shm, "cap_add": _cap_add, "cap_drop": _cap_drop, "ipc_mode": _ipc, "network_mode": _network,
            "devices": _devices, "gpus": _gpus, "environment": _env, "security_opt": _security,
            "group_add": _groups, "user": _user, "mem_limit": _memory, "nano_cpus": _cpus, "tmpfs": _tmpfs,
            "read_only": _read_only, "init": _init}

__all__ = ["PodOptions", "device_resource", "pod_options"]
