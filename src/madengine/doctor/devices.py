"""The GPU device nodes, and whether this user may open them.

AMD GPUs are ``/dev/kfd`` (the compute driver) and one ``/dev/dri/renderD*`` node per GPU; NVIDIA
GPUs are ``/dev/nvidiactl``, ``/dev/nvidia-uvm`` and one ``/dev/nvidiaN`` per GPU. A user who may not
read and write them runs on the CPU without a word from the framework; the fix is a group
(``video``/``render`` on AMD hosts) or a container started with the devices.
"""

from __future__ import annotations

import grp
import os
import re
from pathlib import Path

from madengine.context.detect import AMD, NVIDIA
from madengine.doctor.checks import FAIL, PASS, WARN, Check, skipped

NAME = "devices"
_NVIDIA_GPU = re.compile(r"^nvidia\d+$")


def gpu_nodes(vendor: str, dev: Path) -> tuple[list[Path], list[Path]]:
    """(the nodes every GPU shares, one node per GPU) of ``vendor`` that exist under ``dev``."""
    if vendor == AMD:
        shared = [dev / "kfd"]
        per_gpu = sorted((dev / "dri").glob("renderD*")) if (dev / "dri").is_dir() else []
    elif vendor == NVIDIA:
        shared = [dev / "nvidiactl", dev / "nvidia-uvm"]
        per_gpu = sorted((p for p in dev.glob("nvidia*") if _NVIDIA_GPU.match(p.name)), key=lambda p: int(p.name[6:]))
    else:
        return [], []
    return [p for p in shared if p.exists()], per_gpu


def any_gpu_nodes(dev: Path) -> str:
    """The vendor whose device nodes exist under ``dev`` ('' when none): a driver is loaded even
    where its tools are missing."""
    for vendor in (NVIDIA, AMD):
        shared, per_gpu = gpu_nodes(vendor, dev)
        if per_gpu and (shared or vendor == NVIDIA):
            return vendor
    return ""


def _group(path: Path) -> str:
    try:
        gid = path.stat().st_gid
    except OSError:
        return ""
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _denied(paths: list[Path]) -> list[Path]:
    return [p for p in paths if not os.access(p, os.R_OK | os.W_OK)]


def check_devices(vendor: str, count: int, dev: Path = Path("/dev")) -> Check:
    """Every node the ``count`` GPUs of ``vendor`` need exists and this user may read and write it."""
    if vendor not in (AMD, NVIDIA):
        return skipped(NAME, "no GPU: no device nodes needed")
    shared, per_gpu = gpu_nodes(vendor, dev)
    needed = [dev / "kfd"] if vendor == AMD else [dev / "nvidiactl"]
    missing = [p for p in needed if p not in shared]
    if missing or not per_gpu:
        names = ", ".join(str(p) for p in missing) or (f"{dev}/dri/renderD*" if vendor == AMD else f"{dev}/nvidiaN")
        fix = ("load the driver (sudo modprobe amdgpu); in a container, start it with --device /dev/kfd --device "
               "/dev/dri" if vendor == AMD else
               "load the driver (sudo modprobe nvidia); in a container, start it with --gpus all")
        return Check(NAME, FAIL, f"{names} missing: {vendor} GPUs cannot be opened", fix, need="gpu",
                     data={"missing": [str(p) for p in missing]})
    nodes = shared + per_gpu
    denied = _denied(nodes)
    groups = sorted({_group(p) for p in nodes} - {""})
    data = {"nodes": [str(p) for p in nodes], "groups": groups, "denied": [str(p) for p in denied]}
    if denied:
        wanted = sorted({_group(p) for p in denied} - {""}) or ["video", "render"]
        return Check(NAME, FAIL, f"this user may not read and write {', '.join(str(p) for p in denied[:4])}"
                     + (" ..." if len(denied) > 4 else ""),
                     f"add the user to the group(s) {', '.join(wanted)} (sudo usermod -aG {','.join(wanted)} "
                     "$USER), then log in again", need="gpu", data=data)
    shown = f"{', '.join(str(p) for p in shared)} and {len(per_gpu)} "
    shown += "render node(s)" if vendor == AMD else "GPU node(s)"
    if len(per_gpu) < count:
        return Check(NAME, WARN, f"{shown}: fewer than the {count} GPUs detected", "check that every GPU's driver "
                     "instance loaded (dmesg)", need="gpu", data=data)
    if vendor == NVIDIA and dev / "nvidia-uvm" not in shared:
        return Check(NAME, WARN, f"{shown}, but no {dev}/nvidia-uvm: CUDA makes it on first use only where "
                     "nvidia-modprobe is installed", "sudo modprobe nvidia-uvm (or install nvidia-modprobe)",
                     need="gpu", data=data)
    return Check(NAME, PASS, f"{shown}, read/write for this user"
                 + (f" (group(s) {', '.join(groups)})" if groups else ""), need="gpu", data=data)
