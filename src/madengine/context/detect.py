"""Host detection: GPU vendor, architecture, count and product name; host OS.

Each vendor tool's real output is parsed by a pure function, unit-tested on recorded outputs:
``nvidia-smi --query-gpu=index,name,compute_cap --format=csv,noheader``, ``nvidia-smi -L``,
``amd-smi list``, ``rocm-smi --showproductname``/``--showid``, ``rocminfo``.
A host without a GPU is a first-class ``CPU`` host: 0 GPUs, architecture = the CPU's machine type.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

CPU, AMD, NVIDIA = "CPU", "AMD", "NVIDIA"
VENDORS = (AMD, NVIDIA, CPU)


@dataclasses.dataclass(frozen=True)
class GpuInfo:
    vendor: str
    count: int
    architecture: str
    product_name: str = ""
    driver_version: str = ""


def parse_nvidia_query(text: str) -> list[dict[str, str]]:
    """Rows of ``nvidia-smi --query-gpu=index,name,compute_cap,driver_version --format=csv,noheader``."""
    gpus = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) >= 2 and cells[0].isdigit():
            gpus.append({"index": cells[0], "name": cells[1],
                         "compute_cap": cells[2] if len(cells) > 2 else "",
                         "driver_version": cells[3] if len(cells) > 3 else ""})
    return gpus


_NVIDIA_L = re.compile(r"^GPU\s+(\d+):\s+(.+?)\s+\(UUID:", re.MULTILINE)


def parse_nvidia_list(text: str) -> list[str]:
    """GPU names from ``nvidia-smi -L``."""
    return [m.group(2) for m in _NVIDIA_L.finditer(text)]


def nvidia_short_arch(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' → 'H100'; 'NVIDIA A100-SXM4-40GB' → 'A100'; used for skip_gpu_arch."""
    words = name.replace("NVIDIA", "").replace("Tesla", "").replace("GeForce", "").split()
    return words[0].split("-")[0] if words else name


def parse_amd_smi_list(text: str) -> int:
    """GPU count from ``amd-smi list`` (one ``GPU: N`` block per GPU)."""
    return len(re.findall(r"^\s*GPU:\s*\d+", text, re.MULTILINE))


def parse_rocm_smi_ids(text: str) -> int:
    """GPU count from ``rocm-smi --showid`` / ``--showproductname`` (``GPU[N]`` prefixes)."""
    return len(set(re.findall(r"^GPU\[(\d+)\]", text, re.MULTILINE)))


def parse_rocm_smi_product(text: str) -> str:
    match = re.search(r"^GPU\[\d+\]\s*:\s*Card Series\s*:\s*(.+)$", text, re.MULTILINE | re.IGNORECASE)
    return match.group(1).strip() if match else ""


def parse_rocm_smi_gfx(text: str) -> str:
    """The first ``GFX Version`` of ``rocm-smi --showproductname`` (ROCm 6+)."""
    match = re.search(r"^GPU\[\d+\]\s*:\s*GFX Version\s*:\s*(gfx[0-9a-f]+)", text, re.MULTILINE | re.IGNORECASE)
    return match.group(1) if match else ""


def parse_rocminfo(text: str) -> tuple[str, int, str]:
    """(first gfx architecture, number of GPU agents, marketing name) from ``rocminfo``."""
    arch, count, product = "", 0, ""
    for block in re.split(r"\n\*{5,}\s*\n", text):
        name = re.search(r"^\s*Name:\s*(gfx[0-9a-f]+)\s*$", block, re.MULTILINE)
        kind = re.search(r"^\s*Device Type:\s*(\w+)", block, re.MULTILINE)
        if name and (kind is None or kind.group(1) == "GPU"):
            count += 1
            if not arch:
                arch = name.group(1)
                marketing = re.search(r"^\s*Marketing Name:\s*(.+)$", block, re.MULTILINE)
                product = marketing.group(1).strip() if marketing else ""
    return arch, count, product


def _run(argv: list[str], timeout: float = 20.0) -> str | None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def rocm_tool(name: str) -> str | None:
    """A ROCm tool on PATH, else in ``$ROCM_PATH/bin`` (``/opt/rocm/bin``)."""
    rocm = os.environ.get("ROCM_PATH", "/opt/rocm")
    for candidate in (shutil.which(name), f"{rocm}/bin/{name}"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def detect_nvidia() -> GpuInfo | None:
    tool = shutil.which("nvidia-smi")
    if not tool:
        return None
    out = _run([tool, "--query-gpu=index,name,compute_cap,driver_version", "--format=csv,noheader"])
    gpus = parse_nvidia_query(out or "")
    if gpus:
        return GpuInfo(NVIDIA, len(gpus), gpus[0]["name"], gpus[0]["name"], gpus[0]["driver_version"])
    names = parse_nvidia_list(_run([tool, "-L"]) or "")
    return GpuInfo(NVIDIA, len(names), names[0], names[0]) if names else None


def amd_driver_version(sys_root: str = "/sys") -> str:
    """The amdgpu kernel module's version as sysfs gives it (the ROCm/DKMS driver writes one; a
    driver built into the kernel has none: then '')."""
    try:
        return Path(sys_root, "module", "amdgpu", "version").read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return ""


def detect_amd() -> GpuInfo | None:
    count = 0
    amd_smi = rocm_tool("amd-smi")
    if amd_smi:
        count = parse_amd_smi_list(_run([amd_smi, "list"]) or "")
    product = ""
    rocm_smi = rocm_tool("rocm-smi")
    if rocm_smi:
        text = _run([rocm_smi, "--showproductname"]) or ""
        count = count or parse_rocm_smi_ids(text)
        product = parse_rocm_smi_product(text)
        arch = parse_rocm_smi_gfx(text)
    else:
        arch = ""
    rocminfo = rocm_tool("rocminfo")
    if rocminfo and not (arch and count):
        info_arch, agents, marketing = parse_rocminfo(_run([rocminfo]) or "")
        arch = arch or info_arch
        count = count or agents
        product = product or marketing
    if count == 0:
        return None
    return GpuInfo(AMD, count, arch, product, amd_driver_version())


def detect_gpus() -> GpuInfo:
    """The host's GPUs: NVIDIA, then AMD, else a CPU host."""
    return detect_nvidia() or detect_amd() or GpuInfo(CPU, 0, platform.machine(), _cpu_model())


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def detect_host_os() -> str:
    """HOST_UBUNTU / HOST_CENTOS / HOST_SLES / HOST_AZURE by package manager, as madengine reports it."""
    for tool, name in (("apt", "HOST_UBUNTU"), ("yum", "HOST_CENTOS"), ("zypper", "HOST_SLES"), ("tdnf", "HOST_AZURE")):
        if shutil.which(tool):
            return name
    return "HOST_UNKNOWN"
