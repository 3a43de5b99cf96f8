"""GPU/host detection: parsers on recorded outputs of each vendor tool, and the detection wiring
with stand-in tools on PATH (no GPU can run here; the stand-ins print the recorded outputs)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from madengine.context import detect

REC = Path(__file__).parent / "fixtures" / "detect"


def read(name: str) -> str:
    return (REC / name).read_text()


def test_nvidia_query_parser():
    gpus = detect.parse_nvidia_query(read("nvidia-smi-query.txt"))
    assert len(gpus) == 4
    assert gpus[0] == {"index": "0", "name": "NVIDIA H100 80GB HBM3", "compute_cap": "9.0", "driver_version": "550.54.15"}


def test_nvidia_list_parser_and_short_arch():
    names = detect.parse_nvidia_list(read("nvidia-smi-L.txt"))
    assert names == ["NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB"]
    assert detect.nvidia_short_arch(names[0]) == "A100"
    assert detect.nvidia_short_arch("NVIDIA H100 80GB HBM3") == "H100"


def test_amd_smi_list_parser():
    assert detect.parse_amd_smi_list(read("amd-smi-list.txt")) == 2


def test_rocm_smi_parsers():
    text = read("rocm-smi-showproductname.txt")
    assert detect.parse_rocm_smi_ids(text) == 2
    assert detect.parse_rocm_smi_product(text) == "AMD Instinct MI300X OAM"
    assert detect.parse_rocm_smi_gfx(text) == "gfx942"


def test_rocminfo_parser_skips_cpu_agents():
    arch, count, product = detect.parse_rocminfo(read("rocminfo.txt"))
    assert (arch, count, product) == ("gfx90a", 2, "AMD Instinct MI250X/MI250")


def test_parsers_tolerate_empty_output():
    assert detect.parse_nvidia_query("") == []
    assert detect.parse_amd_smi_list("") == 0
    assert detect.parse_rocminfo("") == ("", 0, "")


def _fake_tool(bindir: Path, name: str, recorded: str, args_ok: str = "") -> None:
    script = bindir / name
    script.write_text(f"#!/bin/sh\ncat '{REC / recorded}'\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def fake_path(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "no-rocm"))
    return bindir


def test_detects_nvidia_host(fake_path):
    _fake_tool(fake_path, "nvidia-smi", "nvidia-smi-query.txt")
    info = detect.detect_gpus()
    assert (info.vendor, info.count, info.architecture) == ("NVIDIA", 4, "NVIDIA H100 80GB HBM3")


def test_detects_amd_host(fake_path):
    _fake_tool(fake_path, "amd-smi", "amd-smi-list.txt")
    _fake_tool(fake_path, "rocm-smi", "rocm-smi-showproductname.txt")
    info = detect.detect_gpus()
    assert (info.vendor, info.count, info.architecture, info.product_name) == ("AMD", 2, "gfx942", "AMD Instinct MI300X OAM")


def test_detects_amd_host_with_rocminfo_only(fake_path):
    _fake_tool(fake_path, "rocminfo", "rocminfo.txt")
    info = detect.detect_gpus()
    assert (info.vendor, info.count, info.architecture) == ("AMD", 2, "gfx90a")


def test_cpu_host_is_first_class(fake_path):
    info = detect.detect_gpus()
    assert info.vendor == "CPU" and info.count == 0 and info.architecture == os.uname().machine


def test_driver_versions_of_both_vendors(fake_path, tmp_path):
    _fake_tool(fake_path, "nvidia-smi", "nvidia-smi-query.txt")
    assert detect.detect_gpus().driver_version == "550.54.15"
    module = tmp_path / "sys" / "module" / "amdgpu"
    module.mkdir(parents=True)
    (module / "version").write_text("6.7.0\n")
    assert detect.amd_driver_version(str(tmp_path / "sys")) == "6.7.0"
    assert detect.amd_driver_version(str(tmp_path / "no-sys")) == ""  # a driver built into the kernel


def test_rows_carry_the_driver_version(fake_path):
    from madengine.context import build_context

    _fake_tool(fake_path, "nvidia-smi", "nvidia-smi-query.txt")
    summary = build_context().summary()
    assert (summary["gpu_vendor"], summary["system_ngpus"], summary["gpu_driver_version"]) == ("NVIDIA", 4, "550.54.15")
    assert summary["gpu_product_name"] == summary["gpu_architecture"] == "NVIDIA H100 80GB HBM3"
