"""What the vendor tools say about the GPUs and their driver, read from their structured outputs.

The run context counts the GPUs (:mod:`madengine.context.detect`); the doctor asks the same tools
for more: the driver and toolkit versions, each GPU's product, architecture and memory. Each
output is parsed by a pure function, tested on recorded outputs (``tests/fixtures/doctor/``):

* ``nvidia-smi -q -x`` (XML: ``driver_version``, ``cuda_version``, one ``gpu`` element per GPU);
* ``amd-smi static --json`` (a JSON list of GPUs on ROCm 6.0–6.3, ``{"gpu_data": [...]}`` later);
* ``rocm-smi --showproductname --showdriverversion --json`` (``cardN`` objects and ``system``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from madengine.context.detect import amd_driver_version, rocm_tool

#: seconds a vendor tool has to answer (amd-smi takes a few on a busy 8-GPU host)
TOOL_TIMEOUT = 60.0


class VendorOutputError(ValueError):
    """A vendor tool printed something that is not the format it documents."""


@dataclasses.dataclass(frozen=True)
class GpuDetail:
    index: int
    product: str
    architecture: str  #: NVIDIA: the product architecture (Hopper); AMD: the gfx target (gfx942)
    memory_mib: float | None = None
    bus_id: str = ""


@dataclasses.dataclass(frozen=True)
class VendorReport:
    """What one vendor tool reported: driver, toolkit and the GPUs."""

    tool: str
    driver: str
    toolkit: str  #: "CUDA 12.4" (the newest CUDA the driver supports), "ROCm 6.2.0"
    gpus: tuple[GpuDetail, ...]

    def products(self) -> str:
        """``4 × NVIDIA H100 80GB HBM3 (Hopper, 81559 MiB)``; mixed GPUs are listed by kind."""
        kinds: dict[tuple[str, str, float | None], int] = {}
        for gpu in self.gpus:
            key = (gpu.product, gpu.architecture, gpu.memory_mib)
            kinds[key] = kinds.get(key, 0) + 1
        parts = []
        for (product, arch, memory), number in kinds.items():
            facts = ", ".join(p for p in (arch, f"{memory:.0f} MiB" if memory else "") if p)
            parts.append(f"{number} × {product or 'unnamed GPU'}" + (f" ({facts})" if facts else ""))
        return "; ".join(parts) or "no GPU"

    def to_dict(self) -> dict[str, Any]:
        return {"tool": self.tool, "driver": self.driver, "toolkit": self.toolkit,
                "gpus": [dataclasses.asdict(gpu) for gpu in self.gpus]}


_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")


def _number(text: Any) -> float | None:
    """``'81559 MiB'`` → 81559.0; a JSON ``{"value": 196592, "unit": "MB"}`` → 196592.0; N/A → None."""
    if isinstance(text, dict):
        return _number(text.get("value"))
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    match = _NUMBER.search(str(text or ""))
    return float(match.group(0)) if match else None


def _text(element: ElementTree.Element | None, path: str) -> str:
    found = element.find(path) if element is not None else None
    return (found.text or "").strip() if found is not None else ""


def parse_nvidia_smi_xml(text: str) -> VendorReport:
    """``nvidia-smi -q -x``: the driver, the CUDA version it supports, and each GPU."""
    start = text.find("<?xml")
    try:
        root = ElementTree.fromstring(text[start if start >= 0 else 0:].encode("utf-8"))
    except ElementTree.ParseError as exc:
        raise VendorOutputError(f"nvidia-smi -q -x printed no XML ({exc})") from None
    if root.tag != "nvidia_smi_log":
        raise VendorOutputError(f"nvidia-smi -q -x printed <{root.tag}>, not <nvidia_smi_log>")
    gpus = []
    for position, gpu in enumerate(root.findall("gpu")):
        minor = _text(gpu, "minor_number")
        gpus.append(GpuDetail(index=int(minor) if minor.isdigit() else position, product=_text(gpu, "product_name"),
                              architecture=_text(gpu, "product_architecture"),
                              memory_mib=_number(_text(gpu, "fb_memory_usage/total")), bus_id=gpu.get("id", "")))
    cuda = _text(root, "cuda_version")
    return VendorReport("nvidia-smi -q -x", _text(root, "driver_version"), f"CUDA {cuda}" if cuda else "",
                        tuple(gpus))


def _json(text: str, tool: str) -> Any:
    """The JSON a tool printed, after any warning lines it printed first."""
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    if not starts:
        raise VendorOutputError(f"{tool} printed no JSON")
    try:
        return json.loads(text[min(starts):])
    except ValueError as exc:
        raise VendorOutputError(f"{tool} printed malformed JSON ({exc})") from None


def parse_amd_smi_static(text: str, toolkit: str = "") -> VendorReport:
    """``amd-smi static --json``: each GPU's market name, gfx target, VRAM and the amdgpu driver."""
    data = _json(text, "amd-smi static --json")
    entries = data.get("gpu_data") if isinstance(data, dict) else data
    if not isinstance(entries, list):
        raise VendorOutputError("amd-smi static --json printed no list of GPUs")
    gpus, drivers = [], []
    for position, entry in enumerate(e for e in entries if isinstance(e, dict)):
        asic = entry.get("asic") if isinstance(entry.get("asic"), dict) else {}
        board = entry.get("board") if isinstance(entry.get("board"), dict) else {}
        vram = entry.get("vram") if isinstance(entry.get("vram"), dict) else {}
        driver = entry.get("driver") if isinstance(entry.get("driver"), dict) else {}
        bus = entry.get("bus") if isinstance(entry.get("bus"), dict) else {}
        index = entry.get("gpu")
        gpus.append(GpuDetail(index=index if isinstance(index, int) else position,
                              product=str(asic.get("market_name") or board.get("product_name") or ""),
                              architecture=str(asic.get("target_graphics_version") or ""),
                              memory_mib=_number(vram.get("size")), bus_id=str(bus.get("bdf") or "")))
        if driver.get("version"):
            drivers.append(str(driver["version"]))
    return VendorReport("amd-smi static --json", drivers[0] if drivers else "", toolkit, tuple(gpus))


def parse_rocm_smi_json(text: str, toolkit: str = "") -> VendorReport:
    """``rocm-smi --showproductname --showdriverversion --json``."""
    data = _json(text, "rocm-smi --json")
    if not isinstance(data, dict):
        raise VendorOutputError("rocm-smi --json printed no object")
    cards = sorted(((int(name[4:]), values) for name, values in data.items()
                    if name.startswith("card") and name[4:].isdigit() and isinstance(values, dict)))
    gpus = tuple(GpuDetail(index=index, product=str(values.get("Card Series") or values.get("Card Model") or ""),
                           architecture=str(values.get("GFX Version") or "")) for index, values in cards)
    system = data.get("system") if isinstance(data.get("system"), dict) else {}
    return VendorReport("rocm-smi --json", str(system.get("Driver version") or ""), toolkit, gpus)


@dataclasses.dataclass(frozen=True)
class ToolAnswer:
    """A tool's output, or why there is none (not installed, failed with its message, timed out)."""

    found: bool
    output: str = ""
    problem: str = ""


def run_tool(argv: list[str], timeout: float = TOOL_TIMEOUT) -> ToolAnswer:
    """Run a vendor tool (no shell); a failure is an answer naming it, never an exception."""
    if shutil.which(argv[0]) is None and not os.access(argv[0], os.X_OK):
        return ToolAnswer(False, problem=f"{os.path.basename(argv[0])} is not installed")
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return ToolAnswer(True, problem=f"{os.path.basename(argv[0])} did not answer within {timeout:.0f} s")
    except OSError as exc:
        return ToolAnswer(True, problem=f"{os.path.basename(argv[0])} cannot run ({exc.strerror})")
    if done.returncode != 0:
        said = next((line.strip() for line in (done.stderr + "\n" + done.stdout).splitlines() if line.strip()), "")
        return ToolAnswer(True, done.stdout, f"{os.path.basename(argv[0])} exited with {done.returncode}"
                                             + (f": {said[:300]}" if said else ""))
    return ToolAnswer(True, done.stdout)


def rocm_version() -> str:
    """``ROCm 6.2.0`` from ``$ROCM_PATH/.info/version``; '' when ROCm is not installed there."""
    base = Path(os.environ.get("ROCM_PATH", "/opt/rocm"))
    try:
        text = (base / ".info" / "version").read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return ""
    return f"ROCm {text.splitlines()[0].split('-')[0]}" if text else ""


def read_nvidia() -> tuple[VendorReport | None, str]:
    """nvidia-smi's report, or None and why not."""
    answer = run_tool(["nvidia-smi", "-q", "-x"])
    if answer.problem:
        return None, answer.problem
    try:
        return parse_nvidia_smi_xml(answer.output), ""
    except VendorOutputError as exc:
        return None, str(exc)


def read_amd(sys_root: str = "/sys") -> tuple[VendorReport | None, str]:
    """amd-smi's report, else rocm-smi's, with the driver from sysfs where the tool gives none;
    or None and why not."""
    problems = []
    toolkit = rocm_version()
    for name, argv, parse in (("amd-smi", ["static", "--json"], parse_amd_smi_static),
                              ("rocm-smi", ["--showproductname", "--showdriverversion", "--json"],
                               parse_rocm_smi_json)):
        tool = rocm_tool(name)
        if tool is None:
            problems.append(f"{name} is not installed")
            continue
        answer = run_tool([tool, *argv])
        if answer.problem:
            problems.append(answer.problem)
            continue
        try:
            report = parse(answer.output, toolkit)
        except VendorOutputError as exc:
            problems.append(str(exc))
            continue
        if not report.driver:
            report = dataclasses.replace(report, driver=amd_driver_version(sys_root))
        return report, ""
    return None, "; ".join(problems)
