"""``scripts/gpu-smoke.sh`` end to end on this CPU host, from a folder ``scripts/gpu-wheels.sh``
filled (madengine's wheel, its dependencies, nvidia-ml-py, transformers), over this interpreter's
PyTorch: the doctor's JSON, the pyt_* models on the CPU, a 2-rank gloo torchrun job (the bundled
ResNet's own "auto" block, no override), every row in one folder. No GPU here: the GPU steps say in
one line that they cannot run (the sampler), or run on the CPU (the collective, the models)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, require_service
from madengine.results import read_rows

SMOKE = str(REPO / "scripts" / "gpu-smoke.sh")


def smoke(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """The script as a user runs it: no PYTHONPATH (a test session's would put its madengine first)."""
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    return subprocess.run(["bash", SMOKE, *argv], capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpu-wheels")
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    built = subprocess.run(["bash", str(REPO / "scripts" / "gpu-wheels.sh"), str(folder), "--python-version", version],
                           capture_output=True, text=True, timeout=900, env={**os.environ, "MADENGINE_PYTHON": sys.executable})
    require_service("the wheels of madengine's dependencies (pip's index and cache)", built.returncode == 0,
                    f"scripts/gpu-wheels.sh failed: {built.stderr.strip()[-400:]}")
    return folder


def test_the_wheels_folder_is_small_and_complete(wheels):
    names = sorted(path.name for path in wheels.glob("*.whl"))
    assert any(name.startswith("madengine-") for name in names)
    for wanted in ("nvidia_ml_py-", "transformers-", "docker-", "jinja2-", "psutil-", "orjson-"):
        assert any(name.startswith(wanted) for name in names), wanted
    assert not any(name.startswith(("torch-", "numpy-")) for name in names)  # the host's own
    assert sum(path.stat().st_size for path in wheels.iterdir()) < 48 * 2 ** 20


@pytest.mark.slow
def test_gpu_smoke_runs_every_step_on_the_cpu_here(wheels, tmp_path):
    out = tmp_path / "smoke"
    done = smoke("--wheels", str(wheels), "--out", str(out), "--python", sys.executable, timeout=1500)
    summary = (out / "summary.txt").read_text()
    assert done.returncode == 0, summary + done.stderr[-3000:]
    assert f"from {out / 'venv'}/lib/" in summary.splitlines()[0]  # the wheel's madengine
    assert not [line for line in summary.splitlines() if line.startswith(("WARN", "FAIL"))], summary
    assert "CPU-only host: every step runs on the CPU" in summary
    sampler = [line for line in summary.splitlines() if line.startswith("GPU sampler:")]
    assert len(sampler) == 1 and "skipped, no GPU monitoring backend answers here" in sampler[0]
    doctor = json.loads((out / "doctor.json").read_text())
    checks = {check["name"]: check for check in doctor["checks"]}
    assert doctor["exit_code"] == 0 and {"docker", "collective", "model pyt_bert_inference"} <= set(checks)
    # the torchrun job as models.json has it, no override: 2 gloo ranks on a CPU host
    assert "torchrun with 2 rank(s) on the CPU (gloo)" in checks["model pyt_resnet50_train"]["summary"]
    rows = read_rows(out / "perf.csv")
    assert {row["status"] for row in rows} == {"SUCCESS"}, [(r["model"], r["reason"]) for r in rows]
    models = {row["model"] for row in rows}
    assert {"pyt_bert_inference_throughput", "pyt_gpt2_generate_tokens_per_second", "pyt_resnet50_train"} <= models
    job = next(row for row in rows if row["model"] == "pyt_resnet50_train")
    assert (job["launcher"], job["world_size"], job["executor"], job["dist_backend"]) == \
        ("torchrun", "2", "local", "gloo")
    for row in rows:
        context = json.loads(row["context"])
        assert (context["gpu_vendor"], context["system_ngpus"]) == ("CPU", 0) and "gpu_driver_version" in context
        assert float(row["cpu_util_mean"]) > 0  # the CPU host's sampler: cpu_monitor
    assert sum(1 for line in summary.splitlines() if line.startswith("row ")) == len(rows)


@pytest.mark.parametrize("argv, message", [
    (["--out", "x"], "gpu-smoke: --wheels is required"),
    (["--wheels", "{empty}"], "gpu-smoke: --wheels {empty} holds no madengine wheel"),
    (["--wheels", "{empty}/none"], "gpu-smoke: --wheels {empty}/none is not a folder"),
    (["--wheels", "{empty}", "--gpus", "2"], "gpu-smoke: unknown argument '--gpus'"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, argv, message):
    empty = tmp_path / "empty"
    empty.mkdir()
    done = smoke(*(a.replace("{empty}", str(empty)) for a in argv))
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and done.stderr.startswith(message.replace("{empty}", str(empty)))
    assert not Path("x").exists()
