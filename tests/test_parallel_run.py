"""``madengine run --parallel N``: same results as a sequential run, disjoint CPUs/GPUs for models
that run at the same time, whole lines in logs and perf.csv.

GPUs cannot be had here: the GPU test declares four NVIDIA GPUs through the context (the one mock)
and checks what the local executor hands each model (``CUDA_VISIBLE_DEVICES``). CPU pinning is
real (host affinity; a container's cpuset on the real Docker engine).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from conftest import terminal_signals
from madengine.results import read_rows

WORK = r'''
import os, sys, time
name = os.environ["MAD_MODEL_NAME"]
seconds, value = float(sys.argv[1]), sys.argv[2]
start = time.time()
cpus = sorted(os.sched_getaffinity(0))
for i in range(50):
    print(f"tick {name} {i} " + "x" * 200, flush=True)
barrier, together = os.environ.get("PAR_BARRIER"), int(os.environ.get("PAR_TOGETHER", "0"))
if barrier:  # wait (a minute at most) until `together` models have started: then their windows overlap
    open(os.path.join(barrier, name), "w").close()
    waited = time.monotonic() + 60
    while len(os.listdir(barrier)) < together and time.monotonic() < waited:
        time.sleep(0.05)
time.sleep(seconds)
end = time.time()
gpus = os.environ.get("CUDA_VISIBLE_DEVICES", "")
print(f"window cpus={','.join(map(str, cpus))} gpus={gpus} start={start} end={end}")
if value == "fail":
    sys.exit(3)
print(f"performance: {value} units")
'''


def _models(count: int, seconds: float, **extra) -> list[dict]:
    models = [{"name": f"par_{i}", "dockerfile": "docker/par", "scripts": "scripts/par/work.py",
               "args": f"{seconds} {i + 1}.5", "n_gpus": "0", "tags": ["par"], **extra} for i in range(count)]
    models.append({"name": "par_fail", "dockerfile": "docker/par", "scripts": "scripts/par/work.py",
                   "args": f"{seconds} fail", "n_gpus": "0", "tags": ["par"], **extra})
    return models


@pytest.fixture
def par_repo(tmp_path, monkeypatch):
    def make(models: list[dict]) -> Path:
        repo = tmp_path / "repo"
        (repo / "scripts" / "par").mkdir(parents=True)
        (repo / "docker").mkdir()
        (repo / "scripts" / "par" / "work.py").write_text(WORK)
        (repo / "docker" / "par.Dockerfile").write_text(
            "ARG BASE_DOCKER=madengine-base:bookworm\nFROM ${BASE_DOCKER}\nLABEL madengine.test=parallel\n")
        (repo / "models.json").write_text(json.dumps(models))
        monkeypatch.chdir(repo)
        monkeypatch.delenv("MODEL_DIR", raising=False)
        return repo
    return make


def _together(tmp_path: Path, models: int, container: bool = False) -> list[str]:
    """A context making the first ``models`` models that run at once wait for each other before
    their timed sleep, so that "they ran at the same time" holds however slowly a loaded machine
    starts them (a model run alone waits a minute and the test fails, as it should)."""
    barrier = tmp_path / f"barrier-{uuid.uuid4().hex[:8]}"
    barrier.mkdir(mode=0o777)
    inside = "/barrier" if container else str(barrier)
    context = {"docker_env_vars": {"PAR_BARRIER": inside, "PAR_TOGETHER": str(models)}}
    if container:
        context["docker_mounts"] = {inside: str(barrier)}
    return ["--additional-context", json.dumps(context)]


def _results(path: Path) -> set[tuple[str, str, str, str, str]]:
    """Model, status, figure, metric and the reason up to what the model printed (its timings differ)."""
    return {(r["model"], r["status"], r["performance"], r["metric"], r["reason"].split(": ")[0])
            for r in read_rows(path)}


def _windows(repo: Path, runs_dir: str = "madengine_runs") -> dict[str, dict[str, str]]:
    found = {}
    for log in (repo / runs_dir).glob("*/*/run.log"):
        match = re.search(r"window (cpus=\S* gpus=\S* start=\S+ end=\S+)", log.read_text())
        if match:
            found[log.parent.name] = dict(part.split("=", 1) for part in match.group(1).split())
    return found


def _overlapping(windows: dict[str, dict[str, str]]) -> list[tuple[str, str]]:
    names = sorted(windows)
    return [(a, b) for i, a in enumerate(names) for b in names[i + 1:]
            if float(windows[a]["start"]) < float(windows[b]["end"])
            and float(windows[b]["start"]) < float(windows[a]["end"])]


def test_parallel_results_equal_sequential_ones(par_repo, cli):
    repo = par_repo(_models(3, 0.3))
    sequential = cli("run", "--tags", "par", "--executor", "local", "-o", "seq.csv", "--no-html")
    parallel = cli("run", "--tags", "par", "--executor", "local", "--parallel", "2", "-o", "par.csv", "--no-html",
                   "--live-output")
    assert sequential.code == parallel.code == 1, (sequential, parallel)  # par_fail fails in both
    assert _results(repo / "seq.csv") == _results(repo / "par.csv")
    assert len(_results(repo / "par.csv")) == 4
    # concurrent output stays whole: every streamed line carries exactly its own model's prefix
    ticks = [line for line in parallel.stderr.splitlines() if " tick " in line]
    assert len(ticks) == 4 * 50
    assert all(re.fullmatch(r"\[(par_\w+)\] tick \1 \d+ x{200}", line) for line in ticks)


def _share(workers: int) -> int:
    """The CPUs each of ``workers`` models gets: an equal share of those this process may use."""
    return max(1, len(os.sched_getaffinity(0)) // workers)


def test_cpu_models_run_at_once_on_disjoint_cpus(par_repo, cli, tmp_path):
    repo = par_repo(_models(3, 0.5))
    one_cpu = len(os.sched_getaffinity(0)) < 2  # one CPU cannot be split: the models wait for it in turn
    together = [] if one_cpu else _together(tmp_path, 2)
    result = cli("run", "--tags", "par", "--executor", "local", "--parallel", "2", "--no-html", *together)
    assert result.code == 1, result
    windows = _windows(repo)
    assert len(windows) == 4
    pairs = _overlapping(windows)
    if one_cpu:
        assert not pairs, ("models shared the one CPU", windows)
    else:
        assert pairs, "no two models ran at the same time"
    for a, b in pairs:
        assert not set(windows[a]["cpus"].split(",")) & set(windows[b]["cpus"].split(",")), (a, b, windows)
    assert all(len(w["cpus"].split(",")) == _share(2) for w in windows.values()), windows


def test_gpu_models_get_disjoint_gpu_sets(par_repo, cli, tmp_path):
    repo = par_repo(_models(3, 0.5, n_gpus="2"))
    context = json.loads(_together(tmp_path, 2)[1])
    context = json.dumps({"gpu_vendor": "NVIDIA", "system_ngpus": 4, "gpu_architecture": "sm_90", **context})
    result = cli("run", "--tags", "par", "--executor", "local", "--parallel", "4", "-c", context, "--no-html")
    assert result.code == 1, result
    windows = _windows(repo)
    assert {w["gpus"] for w in windows.values()} <= {"0,1", "2,3"}
    pairs = _overlapping(windows)
    assert pairs, "no two models ran at the same time"
    for a, b in pairs:  # two GPUs each out of four: at most two at once, never sharing one
        assert windows[a]["gpus"] != windows[b]["gpus"], (a, b, windows)
    assert all(r["n_gpus"] == "2" for r in read_rows(repo / "perf.csv"))


@pytest.mark.docker
def test_containers_get_disjoint_cpusets(par_repo, cli, docker_client, docker_cleanup, tmp_path):
    docker_cleanup.append("ci-par_")
    repo = par_repo(_models(2, 0.5)[:2])
    one_cpu = len(os.sched_getaffinity(0)) < 2  # one CPU: the second container waits for it
    together = [] if one_cpu else _together(tmp_path, 2, container=True)
    result = cli("run", "--tags", "par", "--executor", "docker", "--parallel", "2", "--no-html", *together)
    assert result.code == 0, result
    windows = _windows(repo)
    cpus = [set(w["cpus"].split(",")) for w in windows.values()]
    assert len(windows) == 2 and all(len(c) == _share(2) for c in cpus), windows
    if one_cpu:
        assert not _overlapping(windows), windows
    else:
        assert _overlapping(windows) and not cpus[0] & cpus[1], windows


def test_ctrl_c_ends_every_running_model_and_records_it(par_repo):
    repo = par_repo(_models(3, 60))
    proc = subprocess.Popen([sys.executable, "-m", "madengine", "run", "--tags", "par", "--executor", "local",
                             "--parallel", "2", "--no-html"], cwd=repo, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=terminal_signals)
    running = 2 if len(os.sched_getaffinity(0)) >= 2 else 1  # one CPU: one model at a time
    deadline = time.monotonic() + 120
    while len(list(repo.glob("madengine_runs/*/*/run.log"))) < running and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    rows = read_rows(repo / "perf.csv")
    assert len(rows) == 4 and all(r["status"] == "FAILURE" and "interrupted" in r["reason"] for r in rows), rows
    assert sum(r["reason"] == "not run: interrupted" for r in rows) == 4 - running, rows  # those never started
    assert not _processes_under(repo)  # the models' processes were ended, not orphaned


def _processes_under(folder: Path) -> list[int]:
    import psutil

    found = []
    for proc in psutil.process_iter(["pid", "cwd"]):
        if proc.info["pid"] != os.getpid() and (proc.info["cwd"] or "").startswith(str(folder)):
            found.append(proc.info["pid"])
    return found
