"""Container options by GPU vendor (no GPU can run here: the options are checked as data), the
MAD_* environment, and the translation of additional_docker_run_options."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from madengine.catalog import model_from_entry
from madengine.context import Context
from madengine.core.errors import ExecutionError
from madengine.core.spec import RunSpec
from madengine.execution.build import base_image
from madengine.execution.docker import DockerExecutor
from madengine.execution.dockeropts import engine_fields, parse_run_options
from madengine.execution.plan import model_env, resolve_gpus


def _model(**fields):
    return model_from_entry({"name": "m", "scripts": "run.sh", **fields}, source="models.json")


def _context(vendor: str, ngpus: int, **extra) -> Context:
    return Context({"gpu_vendor": vendor, "system_ngpus": ngpus, "gpu_architecture": "arch", "guest_os": "UBUNTU",
                    **extra})


def _spec(tmp_path: Path, model, env, gpu_ids) -> RunSpec:
    return RunSpec(key="ci-m_x", model=model, workdir=tmp_path, log_path=tmp_path / "l", artifacts_dir=tmp_path,
                   env=env, steps=[], gpu_ids=gpu_ids)


def test_nvidia_gets_device_requests_for_its_gpus(tmp_path):
    model = _model(n_gpus="2")
    ctx = _context("NVIDIA", 4)
    gpus = resolve_gpus(model, ctx)
    args = DockerExecutor(client=None, images=None)._create_args(_spec(tmp_path, model, model_env(model, ctx, gpus, "r", "docker", {}), gpus))
    host = args["HostConfig"]
    (request,) = host["DeviceRequests"]
    assert request["DeviceIDs"] == ["0", "1"] and request["Capabilities"] == [["gpu"]]
    assert "Devices" not in host and "Privileged" not in host and "CapAdd" not in host


def test_amd_gets_kfd_and_render_nodes(tmp_path):
    model = _model(n_gpus="1")
    ctx = _context("AMD", 2)
    args = DockerExecutor(client=None, images=None)._create_args(_spec(tmp_path, model, model_env(model, ctx, [0], "r", "docker", {}), [0]))
    host = args["HostConfig"]
    assert host["Devices"][0] == {"PathOnHost": "/dev/kfd", "PathInContainer": "/dev/kfd", "CgroupPermissions": "rwm"}
    assert "DeviceRequests" not in host


def test_cpu_gets_no_devices_and_least_privilege(tmp_path):
    model = _model()
    ctx = _context("CPU", 0)
    args = DockerExecutor(client=None, images=None)._create_args(_spec(tmp_path, model, model_env(model, ctx, [], "r", "docker", {}), []))
    host = args["HostConfig"]
    for key in ("Devices", "DeviceRequests", "Privileged", "CapAdd", "SecurityOpt", "NetworkMode", "IpcMode"):
        assert key not in host
    assert host["Binds"][0] == f"{tmp_path.resolve()}:/myworkspace:rw" and host["Init"] is True
    assert args["User"] == f"{os.getuid()}:{os.getgid()}" and "MAD_MODEL_NAME=m" in args["Env"]


def test_model_options_reach_the_engine_fields(tmp_path):
    model = _model(additional_docker_run_options="--shm-size 8G --ipc=host --cap-add SYS_PTRACE -e A=1 "
                                                 "-v /data:/data:ro --device /dev/fuse --ulimit memlock=-1:-1 "
                                                 "-u 0:0 --memory 512m --cpus 1.5 --tmpfs /scratch:size=1g")
    ctx = _context("CPU", 0)
    args = DockerExecutor(client=None, images=None)._create_args(
        _spec(tmp_path, model, model_env(model, ctx, [], "r", "docker", {}), []))
    host = args["HostConfig"]
    assert host["ShmSize"] == 8 << 30 and host["IpcMode"] == "host" and host["CapAdd"] == ["SYS_PTRACE"]
    assert host["Memory"] == 512 << 20 and host["NanoCpus"] == 1_500_000_000
    assert host["Ulimits"] == [{"Name": "memlock", "Soft": -1, "Hard": -1}]
    assert host["Devices"] == [{"PathOnHost": "/dev/fuse", "PathInContainer": "/dev/fuse", "CgroupPermissions": "rwm"}]
    assert host["Tmpfs"] == {"/scratch": "size=1g"} and "/data:/data:ro" in host["Binds"]
    assert args["User"] == "0:0" and "A=1" in args["Env"]


@pytest.mark.parametrize("text", ["8Q", "lots", "0", "-5m", ""])
def test_bad_sizes_name_the_option(text):
    with pytest.raises(ExecutionError, match="--shm-size"):
        parse_run_options(f"--shm-size={text}")


def test_gpu_resolution():
    assert resolve_gpus(_model(n_gpus="-1"), _context("NVIDIA", 8)) == list(range(8))
    assert resolve_gpus(_model(n_gpus="2"), _context("AMD", 8, docker_gpus="4-7")) == [4, 5]
    assert resolve_gpus(_model(n_gpus="4"), _context("CPU", 0)) == []
    with pytest.raises(ExecutionError, match="needs 3 GPU"):
        resolve_gpus(_model(n_gpus="3"), _context("NVIDIA", 2))


def test_mad_environment():
    model = _model(n_gpus="2", multiple_results="r.csv")
    model.tag_configs = [("batch-size", "64")]
    ctx = _context("NVIDIA", 4, docker_env_vars={"OMP_NUM_THREADS": "1"})
    ctx.values["gpu_architecture"] = "NVIDIA H100 80GB HBM3"
    env = model_env(model, ctx, [0, 1], "run-1", "docker", {"BUILD_NUMBER": "42", "NCCL_DEBUG": "INFO"})
    assert env["JENKINS_BUILD_NUMBER"] == "42" and env["NCCL_DEBUG"] == "INFO"  # from the injected environment
    assert env["MAD_MODEL_NAME"] == "m" and env["MAD_GPU_VENDOR"] == "NVIDIA"
    assert env["MAD_SYSTEM_NGPUS"] == "4" and env["MAD_RUNTIME_NGPUS"] == "2"
    assert env["MAD_SYSTEM_GPU_ARCHITECTURE"] == "NVIDIA H100 80GB HBM3"
    assert env["MAD_OUTPUT_CSV"] == "r.csv" and env["MAD_MODEL_BATCH_SIZE"] == "64" and env["BATCH_SIZE"] == "64"
    assert env["OMP_NUM_THREADS"] == "1" and env["MAD_GUEST_OS"] == "UBUNTU"


def test_run_options_translation():
    opts = parse_run_options("--shm-size 8G --ipc=host --cap-add SYS_PTRACE --cap-add SYS_ADMIN -e A=1 "
                             "-v /data:/data:ro --device /dev/fuse --ulimit memlock=-1:-1 --privileged -u 0:0")
    assert opts["shm_size"] == 8 << 30 and opts["ipc_mode"] == "host" and opts["cap_add"] == ["SYS_PTRACE", "SYS_ADMIN"]
    assert opts["environment"] == {"A": "1"} and opts["volumes"] == {"/data": {"bind": "/data", "mode": "ro"}}
    assert opts["devices"] == ["/dev/fuse"] and opts["privileged"] is True and opts["user"] == "0:0"
    with pytest.raises(ExecutionError, match="unsupported option '--mount'"):
        parse_run_options("--mount type=bind")
    with pytest.raises(ExecutionError, match="needs a value"):
        parse_run_options("--shm-size")


def test_base_image_resolution():
    text = "ARG BASE_DOCKER=rocm/pytorch:latest\nFROM ${BASE_DOCKER}\n"
    assert base_image(text, {}) == "rocm/pytorch:latest"
    assert base_image(text, {"BASE_DOCKER": "my/base:1"}) == "my/base:1"
    assert base_image("FROM --platform=linux/amd64 debian:12 AS b\n", {}) == "debian:12"


_OPTION_WORDS = ["--shm-size", "--memory", "-m", "--memory-swap", "--cpus", "--pids-limit", "--ulimit", "--device",
                 "--cap-add", "-e", "-v", "--tmpfs", "--ipc", "--network", "--privileged", "--init", "-u", "--gpus",
                 "--mount", "--", "-"]
_VALUES = ["8G", "512m", "1gb", "-1", "0", "1.5", "x", "", "nofile=1:2", "a=b", "/a:/b:ro", "/a", "host", "1e9",
           "'", '"', "=", "ünï", "9" * 30]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_OPTION_WORDS), st.sampled_from(_VALUES),
                          st.builds(lambda o, v: f"{o}={v}", st.sampled_from(_OPTION_WORDS), st.sampled_from(_VALUES)),
                          st.text(max_size=8)), max_size=8))
def test_any_option_text_is_fields_or_one_error(words):
    """Whatever a model's additional_docker_run_options say: the engine's fields, or an
    ExecutionError naming what is wrong (never another exception)."""
    text = " ".join(words)
    try:
        options = parse_run_options(text)
    except ExecutionError as exc:
        assert "additional_docker_run_options" in str(exc)
        return
    for key in ("volumes", "environment", "gpus"):
        options.pop(key, None)
    top, host = engine_fields(options)
    assert set(top) <= {"User", "Hostname"}
    for name in ("ShmSize", "Memory", "MemorySwap"):
        assert name not in host or type(host[name]) is int
