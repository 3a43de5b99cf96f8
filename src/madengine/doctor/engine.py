"""The Docker engine, and how its containers reach the GPUs.

The engine is asked through the same client a run uses (:class:`madengine.execution.engine.Engine`,
``DOCKER_HOST`` of the command's environment): its version, storage driver and image folder
(``/info``), and the free space there when the engine runs on this host. A GPU container needs the
NVIDIA Container Toolkit (``--gpus``: the engine's ``nvidia`` runtime or its hook) or, on AMD hosts,
``/dev/kfd`` and the render nodes that madengine maps into each container.
"""

from __future__ import annotations

import dataclasses
import errno
import glob
import os
import shutil
from pathlib import Path
from typing import Any, Mapping

from madengine.context.detect import AMD, NVIDIA
from madengine.doctor.checks import FAIL, PASS, WARN, Check, skipped
from madengine.execution.engine import DEFAULT_SOCKET, Engine, EngineError, EngineTimeout

NAME, RUNTIME = "docker", "gpu-runtime"
#: seconds the engine has to answer each call of the check
ENGINE_TIMEOUT = 10.0
GIB = 1024 ** 3
#: below this much free space in the engine's folder an image build fails (the pyt image is 1.45 GB)
LOW_DISK_GIB, NO_DISK_GIB = 20.0, 2.0
#: where the NVIDIA Container Toolkit's CDI specifications live
CDI_DIRS = ("/etc/cdi", "/var/run/cdi")


@dataclasses.dataclass(frozen=True)
class EngineFacts:
    """What the engine said (``info`` is None when it did not answer) and where it is."""

    check: Check
    info: Mapping[str, Any] | None
    local: bool


def _address(environ: Mapping[str, str]) -> str:
    return environ.get("DOCKER_HOST", "").strip() or f"unix://{DEFAULT_SOCKET}"


def _unanswered(environ: Mapping[str, str], executor: str, exc: BaseException) -> Check:
    """The line for an engine that did not answer: a dead or refused engine fails, no engine at all
    only warns when runs can use the local executor."""
    address = _address(environ)
    named = bool(environ.get("DOCKER_HOST", "").strip())
    socket_path = address[len("unix://"):] if address.startswith("unix://") else ""
    absent = not named and socket_path and not os.path.exists(socket_path)
    data = {"address": address, "error": type(exc).__name__}
    if isinstance(exc, PermissionError) or getattr(exc, "errno", None) == errno.EACCES:
        return Check(NAME, FAIL, f"permission denied on {socket_path or address}",
                     "add the user to the docker group (sudo usermod -aG docker $USER), then log in again",
                     need="docker", data=data)
    if absent:
        summary = f"no Docker engine on this host ({socket_path} does not exist)"
        if executor == "docker":
            return Check(NAME, FAIL, summary, "install and start Docker Engine, or use --executor local",
                         need="docker", data=data)
        return Check(NAME, WARN, summary + ": runs use the local executor",
                     "install Docker Engine to run models in containers", need="docker", data=data)
    detail = "did not answer in time" if isinstance(exc, EngineTimeout) else f"does not answer ({type(exc).__name__})"
    return Check(NAME, FAIL, f"the Docker engine at {address} {detail}",
                 "start it (sudo systemctl start docker), or point DOCKER_HOST at a running engine; "
                 "--executor local runs without one", need="docker", data=data)


def _free_space(folder: str) -> float | None:
    try:
        stats = os.statvfs(folder)
    except OSError:
        return None
    return stats.f_bavail * stats.f_frsize / GIB


def check_engine(environ: Mapping[str, str], executor: str) -> EngineFacts:
    """Whether the engine answers, its version, storage driver and free disk for images."""
    if executor in ("local", "slurm", "k8s"):
        return EngineFacts(skipped(NAME, f"not needed by --executor {executor}"), None, False)
    engine = Engine.from_env(environ).bounded(ENGINE_TIMEOUT)
    try:
        version, info = engine.version(), engine.info()
    except (OSError, EngineError, EngineTimeout, ImportError) as exc:
        return EngineFacts(_unanswered(environ, executor, exc), None, False)
    local = isinstance(engine.address, str)
    root, driver = str(info.get("DockerRootDir") or ""), str(info.get("Driver") or "")
    free = _free_space(root) if local and root else None
    data = {"address": _address(environ), "version": version.get("Version", ""),
            "api_version": version.get("ApiVersion", ""), "storage_driver": driver, "root_dir": root,
            "free_gib": round(free, 1) if free is not None else None}
    summary = (f"Docker {data['version']} (API {data['api_version']}) at {data['address']}: storage driver "
               f"{driver or 'unknown'}, " + (f"{free:.1f} GiB free in {root}" if free is not None else
                                             "free disk unknown (the engine is not on this host)"))
    if free is not None and free < NO_DISK_GIB:
        check = Check(NAME, FAIL, summary, f"free space in {root}: docker system prune, or move the engine's "
                      "data-root to a larger disk", need="docker", data=data)
    elif free is not None and free < LOW_DISK_GIB:
        check = Check(NAME, WARN, summary, f"images need several GiB each: free space in {root} "
                      "(docker system prune)", need="docker", data=data)
    elif driver == "vfs":
        check = Check(NAME, WARN, summary, "vfs copies every layer in full: configure overlay2 in "
                      "/etc/docker/daemon.json", need="docker", data=data)
    else:
        check = Check(NAME, PASS, summary, need="docker", data=data)
    return EngineFacts(check, info, local)


def _nvidia_toolkit(info: Mapping[str, Any], local: bool) -> str:
    """How this engine gives containers NVIDIA GPUs ('' when it cannot)."""
    runtimes = info.get("Runtimes") or {}
    if "nvidia" in runtimes:
        return "the engine's nvidia runtime"
    if local and shutil.which("nvidia-container-runtime-hook"):
        return "the NVIDIA Container Toolkit's hook"
    if local and any(glob.glob(os.path.join(d, "nvidia*.yaml")) or glob.glob(os.path.join(d, "nvidia*.json"))
                     for d in CDI_DIRS):
        return "CDI specifications of the NVIDIA Container Toolkit"
    return ""


def check_gpu_runtime(facts: EngineFacts, vendor: str, dev: Path = Path("/dev")) -> Check:
    """Whether containers of this engine can get the GPUs (the docker executor's way for ``vendor``)."""
    if vendor not in (AMD, NVIDIA):
        return skipped(RUNTIME, "no GPU: containers need no GPU runtime")
    if facts.info is None:
        return skipped(RUNTIME, "no Docker engine to give containers GPUs")
    if vendor == NVIDIA:
        how = _nvidia_toolkit(facts.info, facts.local)
        if how:
            return Check(RUNTIME, PASS, f"containers get NVIDIA GPUs (--gpus) through {how}", need="docker")
        return Check(RUNTIME, FAIL, "the engine has no nvidia runtime: containers cannot get the GPUs",
                     "install nvidia-container-toolkit, then sudo nvidia-ctk runtime configure --runtime=docker && "
                     "sudo systemctl restart docker (or use --executor local)", need="docker",
                     data={"runtimes": sorted(facts.info.get("Runtimes") or {})})
    if not facts.local:
        return Check(RUNTIME, WARN, "the engine is on another host: its /dev/kfd and render nodes are not checked "
                     "here", "run madengine doctor on the engine's host", need="docker")
    renders = sorted((dev / "dri").glob("renderD*")) if (dev / "dri").is_dir() else []
    if not (dev / "kfd").exists() or not renders:
        return Check(RUNTIME, FAIL, f"{dev}/kfd or {dev}/dri/renderD* missing: containers cannot get the GPUs",
                     "load the amdgpu driver (sudo modprobe amdgpu)", need="docker")
    return Check(RUNTIME, PASS, f"containers get {dev}/kfd and {len(renders)} render node(s) with their groups",
                 need="docker", data={"render_nodes": [str(p) for p in renders]})
