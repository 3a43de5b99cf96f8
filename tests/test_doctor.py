"""``madengine doctor``: the vendor checks on recorded outputs of nvidia-smi, amd-smi and rocm-smi
(``tests/fixtures/doctor/``), the device-node and container-runtime checks, bad input (exit 2),
and the whole command for real on this CPU host: the Docker engine here, PyTorch of the test
interpreter, a gloo collective over 2 processes.

No GPU can run here. The GPU hosts are stand-ins: a fake ``nvidia-smi``/``amd-smi``/``rocm-smi`` on
PATH that prints the recorded output, and a folder of stand-in device nodes where a check reads
``/dev``. The one mock is ``os.access`` for a user who may not open the nodes (the tests run as root,
who may open anything).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from conftest import FIXTURES, docker_engine_available, require_service, run_process
from madengine.core.errors import InputError
from madengine.doctor import checks, devices, engine, torchcheck, vendors
from madengine.doctor.diagnose import DoctorRequest, prepare
from madengine.execution.engine import docker_host

DOCTOR = FIXTURES / "doctor"
DETECT = FIXTURES / "detect"
ALL_CHECKS = {"python", "madengine", "docker", "gpu", "driver", "devices", "gpu-runtime", "pytorch", "collective",
              "slurm", "kubernetes"}


def recorded(name: str) -> str:
    return (DOCTOR / name).read_text()


# -- the vendor tools' outputs ---------------------------------------------------------------------
def test_nvidia_smi_xml():
    report = vendors.parse_nvidia_smi_xml(recorded("nvidia-smi-q-x-h100.xml"))
    assert (report.driver, report.toolkit, len(report.gpus)) == ("550.54.15", "CUDA 12.4", 4)
    first = report.gpus[0]
    assert (first.index, first.product, first.architecture, first.memory_mib, first.bus_id) == (
        0, "NVIDIA H100 80GB HBM3", "Hopper", 81559.0, "00000000:18:00.0")
    assert [g.index for g in report.gpus] == [0, 1, 2, 3]
    assert report.products() == "4 × NVIDIA H100 80GB HBM3 (Hopper, 81559 MiB)"


@pytest.mark.parametrize("name, driver", [("amd-smi-static-mi300x-rocm62.json", "6.7.0"),
                                          ("amd-smi-static-mi300x-rocm70.json", "6.12.12")])
def test_amd_smi_static_json_old_and_new_layouts(name, driver):
    report = vendors.parse_amd_smi_static("WARNING: User is missing the following required groups: render\n"
                                          + recorded(name), "ROCm 6.2.0")
    assert (report.driver, report.toolkit, len(report.gpus)) == (driver, "ROCm 6.2.0", 2)
    assert report.gpus[1] == vendors.GpuDetail(1, "AMD Instinct MI300X OAM", "gfx942", 196592.0, "0000:22:00.0")


def test_rocm_smi_json():
    report = vendors.parse_rocm_smi_json(recorded("rocm-smi-productname-driver-mi300x.json"))
    assert report.driver == "6.7.0"
    assert [(g.index, g.product, g.architecture) for g in report.gpus] == [
        (0, "AMD Instinct MI300X OAM", "gfx942"), (1, "AMD Instinct MI300X OAM", "gfx942")]


@pytest.mark.parametrize("parse, text", [(vendors.parse_nvidia_smi_xml, recorded("nvidia-smi-no-driver.txt")),
                                         (vendors.parse_nvidia_smi_xml, "<gpu/>"),
                                         (vendors.parse_amd_smi_static, "ERROR: no devices"),
                                         (vendors.parse_amd_smi_static, '{"gpu_data": 3}'),
                                         (vendors.parse_rocm_smi_json, "[1, 2]")])
def test_unusable_vendor_output_is_one_error(parse, text):
    with pytest.raises(vendors.VendorOutputError):
        parse(text)


@given(st.text(max_size=300))
def test_vendor_parsers_raise_nothing_but_their_error(text):
    for parse in (vendors.parse_nvidia_smi_xml, vendors.parse_amd_smi_static, vendors.parse_rocm_smi_json):
        try:
            parse(text)
        except vendors.VendorOutputError:
            pass


# -- DOCKER_HOST ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["", "unix:///var/run/docker.sock", "tcp://10.0.0.5:2375", "tcp://[::1]:2376",
                                   "ssh://me@build-host", "https://engine.example:2376"])
def test_engine_urls(value):
    assert docker_host({"DOCKER_HOST": value}) == value


@pytest.mark.parametrize("value", ["notaurl", "/var/run/docker.sock", "localhost:2375", "unix://relative.sock",
                                   "tcp://host:99999", "tcp://host:port", "npipe:////./pipe/docker_engine",
                                   "ftp://host"])
def test_not_engine_urls(value):
    with pytest.raises(InputError) as raised:
        docker_host({"DOCKER_HOST": value})
    assert str(raised.value).startswith("DOCKER_HOST: ")


@given(st.text(max_size=80))
def test_docker_host_is_a_url_or_an_input_error(value):
    try:
        docker_host({"DOCKER_HOST": value})
    except InputError as exc:
        assert "\n" not in str(exc)


# -- device nodes and the container runtime ----------------------------------------------------------
def stand_in_nodes(root: Path, names: list[str]) -> Path:
    """A folder standing in for /dev with empty files where the nodes would be."""
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("")
    return root


def test_nvidia_nodes(tmp_path):
    dev = stand_in_nodes(tmp_path, ["nvidiactl", "nvidia-uvm", "nvidia0", "nvidia1", "nvidia-modeset"])
    check = devices.check_devices("NVIDIA", 2, dev)
    assert check.status == checks.PASS and "2 GPU node(s), read/write" in check.summary
    assert check.data["nodes"] == [str(dev / n) for n in ("nvidiactl", "nvidia-uvm", "nvidia0", "nvidia1")]
    assert devices.check_devices("NVIDIA", 4, dev).status == checks.WARN  # 2 nodes for 4 GPUs
    (dev / "nvidiactl").unlink()
    missing = devices.check_devices("NVIDIA", 2, dev)
    assert missing.status == checks.FAIL and "nvidiactl missing" in missing.summary and "modprobe" in missing.fix


def test_amd_nodes_and_the_groups_fix(tmp_path, monkeypatch):
    dev = stand_in_nodes(tmp_path, ["kfd", "dri/renderD128", "dri/renderD129", "dri/card0"])
    assert devices.check_devices("AMD", 2, dev).status == checks.PASS
    monkeypatch.setattr(devices.os, "access", lambda path, mode: not str(path).endswith("kfd"))  # a non-member
    denied = devices.check_devices("AMD", 2, dev)
    assert denied.status == checks.FAIL and str(dev / "kfd") in denied.summary
    assert "sudo usermod -aG" in denied.fix and "log in again" in denied.fix
    assert devices.check_devices("CPU", 0, dev).status == checks.SKIP


def test_gpu_runtime_of_the_engine(tmp_path):
    with_toolkit = engine.EngineFacts(checks.passed("docker", ""), {"Runtimes": {"runc": {}, "nvidia": {}}}, True)
    assert engine.check_gpu_runtime(with_toolkit, "NVIDIA").status == checks.PASS
    without = engine.EngineFacts(checks.passed("docker", ""), {"Runtimes": {"runc": {}}}, False)
    missing = engine.check_gpu_runtime(without, "NVIDIA")
    assert missing.status == checks.FAIL and "nvidia-ctk runtime configure" in missing.fix
    dev = stand_in_nodes(tmp_path, ["kfd", "dri/renderD128"])
    amd = engine.check_gpu_runtime(engine.EngineFacts(checks.passed("docker", ""), {}, True), "AMD", dev)
    assert amd.status == checks.PASS and "1 render node" in amd.summary
    assert engine.check_gpu_runtime(with_toolkit, "CPU").status == checks.SKIP


def test_a_failure_the_selected_models_do_not_need_is_a_warning():
    failed = checks.Check("devices", checks.FAIL, "no nodes", "load the driver", need="gpu")
    assert checks.not_needed(failed, {"docker"}).status == checks.WARN
    assert checks.not_needed(failed, {"gpu"}).status == checks.FAIL


# -- stand-in GPU hosts (the vendor tools print recorded outputs) ---------------------------------------
FAKE_NVIDIA_SMI = f"""#!/bin/sh
case "$*" in
  *-q*-x*) cat '{DOCTOR / "nvidia-smi-q-x-h100.xml"}' ;;
  *--query-gpu*) cat '{DETECT / "nvidia-smi-query.txt"}' ;;
  *-L*) for i in 0 1 2 3; do echo "GPU $i: NVIDIA H100 80GB HBM3 (UUID: GPU-$i)"; done ;;
  *) exit 2 ;;
esac
"""
FAKE_AMD_SMI = f"""#!/bin/sh
case "$1" in
  list) cat '{DETECT / "amd-smi-list.txt"}' ;;
  static) cat '{DOCTOR / "amd-smi-static-mi300x-rocm62.json"}' ;;
  *) exit 2 ;;
esac
"""
FAKE_ROCM_SMI = f"""#!/bin/sh
case "$*" in
  *--json*) cat '{DOCTOR / "rocm-smi-productname-driver-mi300x.json"}' ;;
  *) cat '{DETECT / "rocm-smi-showproductname.txt"}' ;;
esac
"""
NO_DRIVER = f"#!/bin/sh\ncat '{DOCTOR / 'nvidia-smi-no-driver.txt'}'\nexit 9\n"


@pytest.fixture
def stand_in_tools(tmp_path, monkeypatch):
    """A bin folder first on PATH (the test's tools), and no ROCm installation to find."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "no-rocm"))

    def install(name: str, script: str) -> None:
        (bin_dir / name).write_text(script)
        (bin_dir / name).chmod(0o755)

    return install


def doctor_json(*argv: str, env: dict | None = None) -> tuple[int, dict, str]:
    done = run_process("doctor", "--json", *argv, env=env, timeout=600)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else {}, done.stderr


def by_name(report: dict) -> dict:
    return {check["name"]: check for check in report["checks"]}


def test_nvidia_host_stand_in(stand_in_tools, tmp_path):
    stand_in_tools("nvidia-smi", FAKE_NVIDIA_SMI)
    code, report, _ = doctor_json("--no-collective", "--executor", "local", "--tags", "pyt_resnet50_train")
    found = by_name(report)
    assert found["gpu"]["status"] == "PASS" and found["gpu"]["data"]["system_ngpus"] == 4
    assert found["driver"]["status"] == "PASS"
    assert found["driver"]["summary"] == ("nvidia-smi -q -x: driver 550.54.15, CUDA 12.4: 4 × NVIDIA H100 80GB HBM3 "
                                          "(Hopper, 81559 MiB)")
    assert found["driver"]["data"]["gpus"][3]["bus_id"] == "00000000:5D:00.0"
    assert found["devices"]["status"] == "FAIL" and "--gpus all" in found["devices"]["fix"]  # no /dev/nvidia* here
    assert found["model pyt_resnet50_train"]["status"] == "PASS"
    # its "auto" block: one rank per visible GPU, over NCCL
    assert "torchrun with 4 rank(s) on GPU(s) 0,1,2,3 (nccl)" in found["model pyt_resnet50_train"]["summary"]
    assert report["context"]["gpu_driver_version"] == "550.54.15"
    assert code == 1 and report["exit_code"] == 1


def test_one_gpu_gets_one_rank_and_an_explicit_two_is_refused(stand_in_tools):
    stand_in_tools("nvidia-smi", FAKE_NVIDIA_SMI)
    code, report, _ = doctor_json("--no-collective", "--executor", "local", "--tags", "pyt_resnet50_train",
                                  "--additional-context", '{"docker_gpus": "0"}')
    model = by_name(report)["model pyt_resnet50_train"]
    assert model["status"] == "PASS" and "torchrun with 1 rank(s) on GPU(s) 0 (nccl)" in model["summary"]
    code, report, _ = doctor_json("--no-collective", "--executor", "local", "--tags", "pyt_resnet50_train",
                                  "--additional-context", '{"docker_gpus": "0", "distributed": {"nproc_per_node": 2}}')
    model = by_name(report)["model pyt_resnet50_train"]
    assert code == 1 and model["status"] == "FAIL"
    assert "nproc_per_node 2 is more than the 1 visible GPU(s)" in model["summary"] and "set it to 1" in model["fix"]


def test_nvidia_driver_not_loaded_is_a_fail_line(stand_in_tools):
    stand_in_tools("nvidia-smi", NO_DRIVER)
    done = run_process("doctor", "--no-collective", timeout=600)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    gpu = next(line for line in done.stdout.splitlines() if line.split()[1:2] == ["gpu"])
    assert gpu.startswith("FAIL") and "couldn't communicate with the NVIDIA driver" in gpu
    assert "(fix: load the NVIDIA driver" in gpu


def test_amd_host_stand_in(stand_in_tools, tmp_path):
    stand_in_tools("amd-smi", FAKE_AMD_SMI)
    stand_in_tools("rocm-smi", FAKE_ROCM_SMI)
    dev = stand_in_nodes(tmp_path / "dev", ["kfd", "dri/renderD128", "dri/renderD129"])
    from madengine.core.host import Host

    diagnosis = prepare(DoctorRequest(executor="local", collective=False, dev=dev), Host())
    found = {check.name: check for check in diagnosis.checks()}
    assert found["gpu"].summary.startswith("AMD: 2 × AMD Instinct MI300X OAM (gfx942)")
    assert found["driver"].status == checks.PASS
    assert found["driver"].summary == ("amd-smi static --json: driver 6.7.0: 2 × AMD Instinct MI300X OAM (gfx942, "
                                       "196592 MiB)")
    assert found["devices"].status == checks.PASS and "2 render node(s)" in found["devices"].summary


def test_amd_host_with_rocm_smi_only(stand_in_tools, tmp_path):
    stand_in_tools("rocm-smi", FAKE_ROCM_SMI)
    report, problem = vendors.read_amd(str(tmp_path))
    assert problem == "" and report is not None
    assert (report.tool, report.driver, len(report.gpus)) == ("rocm-smi --json", "6.7.0", 2)


# -- the whole command on this host --------------------------------------------------------------------
@pytest.mark.slow
def test_doctor_on_this_host_prints_every_check_and_the_json_lists_them():
    require_service("Docker engine", docker_engine_available(), "run scripts/docker-up.sh")
    done = run_process("doctor", timeout=600)
    assert "Traceback" not in done.stderr
    names = {line.split()[1] for line in done.stdout.splitlines()}
    assert names == ALL_CHECKS, done.stdout
    statuses = {line.split()[1]: line.split()[0] for line in done.stdout.splitlines()}
    assert statuses["docker"] == "PASS" and statuses["collective"] == "PASS", done.stdout
    assert done.returncode == 0 and "madengine doctor: this host can run models" in done.stderr
    collective = next(line for line in done.stdout.splitlines() if line.split()[1] == "collective")
    assert "gloo all_reduce of 16 MiB float32 over 2 CPU processes: bus bandwidth" in collective
    code, report, _ = doctor_json("--no-collective", "--tags", "pyt", "examples")
    assert code == 0 and set(by_name(report)) >= ALL_CHECKS
    models = [name for name in by_name(report) if name.startswith("model ")]
    assert {"model pyt_resnet50_train", "model pyt_bert_inference", "model numpy_matmul"} <= set(models)
    assert all(set(check) == {"name", "status", "summary", "fix", "data"} for check in report["checks"])


def test_a_dead_engine_is_a_fail_line(tmp_path):
    code, report, _ = doctor_json("--no-collective", env={"DOCKER_HOST": f"unix://{tmp_path}/engine.sock"})
    docker = by_name(report)["docker"]
    assert code == 1 and docker["status"] == "FAIL" and "does not answer" in docker["summary"]
    assert by_name(report)["gpu-runtime"]["status"] == "SKIP"


def test_a_missing_kubeconfig_and_slurm_are_fail_lines(tmp_path):
    env = {"KUBECONFIG": str(tmp_path / "none.yaml"), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
           "SLURM_CONF": str(tmp_path / "no-slurm.conf")}
    code, report, _ = doctor_json("--no-collective", "--executor", "k8s", env=env)
    kubernetes = by_name(report)["kubernetes"]
    assert code == 1 and kubernetes["status"] == "FAIL" and "none.yaml not found" in kubernetes["summary"]
    assert by_name(report)["docker"]["status"] == "SKIP"
    code, report, _ = doctor_json("--no-collective", "--executor", "slurm", env=env)
    assert code == 1 and by_name(report)["slurm"]["status"] == "FAIL"


@pytest.mark.parametrize("argv, env, message", [
    (["--tags", "no_such_model"], {}, "madengine: error: --tags: tag 'no_such_model' selects no model"),
    ([], {"DOCKER_HOST": "docker.example:2375"}, "madengine: error: DOCKER_HOST: 'docker.example:2375' is not a "
                                                  "Docker engine URL"),
    (["--additional-context", "{'gpu_vendor': 'INTEL'}"], {}, "madengine: error: --additional-context: gpu_vendor"),
    (["--executor", "k8s", "--additional-context", "{'k8s': {'nmespace': 'x'}}"], {}, "madengine: error: "),
    (["--collective-timeout", "0"], {}, "madengine doctor: error: argument --collective-timeout"),
])
def test_bad_input_is_one_line_and_exit_2(argv, env, message):
    done = run_process("doctor", *argv, env=env, timeout=120)
    assert done.returncode == 2, done
    assert done.stdout == "" and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.startswith(message), done.stderr


@pytest.mark.slow
def test_a_collective_past_its_time_is_ended_whole():
    """Its ranks cannot import torch within a second: every process they started is ended."""
    facts = torchcheck.TorchFacts(checks.passed("pytorch", ""), sys.executable, {"torch": "x", "gloo": True})
    before = time.monotonic()
    check = torchcheck.run_collective(facts, dict(os.environ), timeout=1.0)
    assert check.status == checks.FAIL and "did not finish within 1 s (its processes were ended)" in check.summary
    assert time.monotonic() - before < 30
    leftovers = subprocess.run(["pgrep", "-f", "MAD_DOCTOR_RESULT"], capture_output=True, text=True)
    assert leftovers.stdout.strip() == ""


@pytest.mark.parametrize("ranks", [1, 2])
def test_one_rank_reports_no_bandwidth(monkeypatch, ranks):
    """One rank's all_reduce moves nothing between GPUs: the H200 smoke test printed 9050 GB/s for it,
    twice what its memory can do. No GPU here: the ranks' outcome stands in for NCCL's."""
    monkeypatch.setattr(torchcheck, "_run_ranks", lambda *args: {"seconds": 0.001})
    found = {"torch": "2.11", "count": ranks, "nccl": True, "names": ["NVIDIA H200"] * ranks}
    facts = torchcheck.TorchFacts(checks.passed("pytorch", ""), sys.executable, found)
    check = torchcheck.run_collective(facts, {}, timeout=10)
    assert check.status == checks.PASS
    if ranks == 1:
        assert "GB/s" not in check.summary and "no bandwidth to measure" in check.summary
        assert check.data["algbw_gbps"] is None and check.data["busbw_gbps"] is None
    else:
        assert "bus bandwidth 268.44 GB/s (algorithm 268.44 GB/s)" in check.summary
