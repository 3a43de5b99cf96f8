"""Faults during a run end cleanly: SIGTERM/SIGHUP, a Docker engine that goes away, a model whose
main process dies while a child holds its output, an OOM kill, a full or read-only disk, invalid
docker options, docker_mounts, and flags that do not apply. Real signals, a real engine (behind
a proxy the test cuts), a real tmpfs; docs/reliability.md lists which test proves what."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import psutil
import pytest

from conftest import BASE_IMAGE, require_service, run_process, terminal_signals
from socket_proxy import SocketProxy
from madengine.results import read_rows

PREFIX = "ci-fault"  # every image these tests build starts with it


def make_repo(root: Path, models: list[dict], scripts: dict[str, str]) -> Path:
    (root / "docker").mkdir(parents=True)
    (root / "docker" / "fault.Dockerfile").write_text(f"ARG BASE_DOCKER={BASE_IMAGE}\nFROM ${{BASE_DOCKER}}\n")
    (root / "scripts").mkdir()
    for name, text in scripts.items():
        (root / "scripts" / name).write_text("#!/usr/bin/env bash\n" + text)
    entries = [{"dockerfile": "docker/fault", "tags": ["faults"], **m} for m in models]
    (root / "models.json").write_text(json.dumps(entries))
    return root


SCRIPTS = {
    "fast.sh": "echo 'performance: 7 x'\n",
    "sleeper.sh": "echo started; sleep 60; echo 'performance: 1 x'\n",
}


def three_models(root: Path) -> Path:
    return make_repo(root, [{"name": "fault_fast", "scripts": "scripts/fast.sh"},
                            {"name": "fault_sleeper", "scripts": "scripts/sleeper.sh"},
                            {"name": "fault_after", "scripts": "scripts/fast.sh"}], SCRIPTS)


def rows(repo: Path, name: str = "perf.csv") -> dict[str, dict[str, str]]:
    return {r["model"]: r for r in read_rows(repo / name)}


class Run:
    """``madengine run`` as a real process whose stderr is read as it comes."""

    def __init__(self, repo: Path, *args: str, env: dict | None = None, preexec=None) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "madengine", "run", "--live-output", *args], cwd=repo,
                                     stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})},
                                     preexec_fn=preexec or terminal_signals)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stderr), daemon=True)
        self.reader.start()

    def wait_for(self, text: str, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.lines):
            assert self.proc.poll() is None, "".join(self.lines)
            assert time.monotonic() < deadline, "".join(self.lines)
            time.sleep(0.1)

    def finish(self, timeout: float = 120) -> int:
        code = self.proc.wait(timeout=timeout)
        self.reader.join(timeout=5)
        return code

    @property
    def run_id(self) -> str:
        line = next(line for line in self.lines if line.startswith("madengine: run "))
        return line.split()[2].rstrip(":")


def processes_of(run_id: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("MAD_RUN_ID") == run_id:
                found.append(proc)
        except psutil.Error:
            continue
    return found


@pytest.fixture
def fault_docker(docker_client, docker_cleanup):
    docker_cleanup.append(PREFIX)
    return docker_client


def containers_of(client, run_id: str) -> list:
    return client.containers.list(all=True, filters={"label": f"madengine.run={run_id}"})


# -- SIGTERM and SIGHUP ---------------------------------------------------------------------------

@pytest.mark.parametrize("signum,code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
@pytest.mark.parametrize("executor", ["local", "docker"])
def test_ci_cancel_signals_end_the_run_like_ctrl_c(tmp_path, executor, signum, code, request):
    client = request.getfixturevalue("fault_docker") if executor == "docker" else None
    repo = three_models(tmp_path / "repo")
    run = Run(repo, "--tags", "faults", "--executor", executor, "--timeout", "0")
    run.wait_for("] started")  # the sleeper's script is running
    run.proc.send_signal(signum)
    assert run.finish() == code, "".join(run.lines)
    name = signal.Signals(signum).name
    got = rows(repo)
    assert got["fault_fast"]["status"] == "SUCCESS" and got["fault_fast"]["performance"] == "7"
    assert got["fault_sleeper"]["status"] == "FAILURE" and f"interrupted by {name}" in got["fault_sleeper"]["reason"]
    assert got["fault_after"]["status"] == "FAILURE" and got["fault_after"]["reason"] == f"not run: interrupted by {name}"
    assert (repo / "perf.html").is_file() and "0 succeeded" not in "".join(run.lines)
    assert not processes_of(run.run_id)
    assert not list((repo / "madengine_runs" / run.run_id).glob("*/work"))
    if client is not None:
        assert not containers_of(client, run.run_id)


def _nohup() -> None:
    terminal_signals()
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # what nohup does before it starts the command


def test_a_run_started_with_nohup_survives_the_hangup(tmp_path):
    """``nohup madengine run ...``: the user asked for the run to outlive the terminal; SIGHUP,
    ignored when madengine started, stays ignored (SIGTERM still stops the run)."""
    repo = make_repo(tmp_path / "repo", [{"name": "fault_nap", "scripts": "scripts/nap.sh"}],
                     {"nap.sh": "echo started; sleep 2; echo 'performance: 2 x'\n"})
    run = Run(repo, "--tags", "faults", "--executor", "local", "--no-html", preexec=_nohup)
    run.wait_for("] started")
    run.proc.send_signal(signal.SIGHUP)
    assert run.finish() == 0, "".join(run.lines)
    assert rows(repo)["fault_nap"]["status"] == "SUCCESS"


# -- the Docker engine goes away ------------------------------------------------------------------

def test_engine_gone_mid_run_fails_in_flight_and_remaining_models_and_cleans_up_later(tmp_path, fault_docker):
    repo = three_models(tmp_path / "repo")
    assert run_process("build", "--tags", "fault_sleeper", cwd=repo).returncode == 0  # no build through the proxy
    proxy = SocketProxy("/var/run/docker.sock", listen=tmp_path / "engine.sock").start()
    run = Run(repo, "--tags", "fault_sleeper", "fault_after", "--executor", "docker", "--timeout", "0",
              env={"DOCKER_HOST": f"unix://{tmp_path / 'engine.sock'}"})
    run.wait_for("] started")
    run_id = run.run_id
    proxy.stop()
    time.sleep(3)
    proxy.start()  # the engine answers again: the container left running must now be removed
    assert run.finish() == 1, "".join(run.lines)
    got = rows(repo)
    assert got["fault_sleeper"]["reason"].startswith("docker engine unavailable: "), got["fault_sleeper"]
    assert got["fault_after"]["status"] == "FAILURE"
    assert got["fault_after"]["reason"].startswith("docker engine unavailable: ") and "not run" in got["fault_after"]["reason"]
    assert not containers_of(fault_docker, run_id)


# -- a child keeps the output open after the model's main process ended ---------------------------

@pytest.mark.parametrize("executor", ["local", "docker"])
def test_step_ends_with_its_main_process_and_its_group_is_killed(tmp_path, executor, request):
    if executor == "docker":
        request.getfixturevalue("fault_docker")
    marker = f"orphan-{uuid.uuid4().hex[:8]}"
    repo = make_repo(tmp_path / "repo", [{"name": "fault_orphan", "scripts": "scripts/orphan.sh"}],
                     {"orphan.sh": f"bash -c 'exec -a {marker} sleep 3600' &\necho 'performance: 3 x'\n"})
    # the orphan would hold the output open for an hour: a run that waited for it times out here
    done = run_process("run", "--tags", "faults", "--executor", executor, "--no-html", cwd=repo, timeout=300)
    assert done.returncode == 0, done.stderr
    assert rows(repo)["fault_orphan"]["status"] == "SUCCESS"
    assert float(rows(repo)["fault_orphan"]["test_duration"]) < 120  # the script's own moment, not the orphan's hour
    assert subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 1  # killed


# -- out of memory --------------------------------------------------------------------------------

def test_oom_kill_says_out_of_memory_with_the_limit(tmp_path, fault_docker):
    repo = make_repo(tmp_path / "repo", [{"name": "fault_oom", "scripts": "scripts/oom.sh",
                                          "additional_docker_run_options": "--memory 64m --memory-swap 64m"}],
                     {"oom.sh": "exec python3 -c 'x = bytearray(512 * 1024 * 1024); print(\"performance: 1 x\")'\n"})
    done = run_process("run", "--tags", "faults", "--executor", "docker", "--no-html", cwd=repo, timeout=300)
    assert done.returncode == 1, done.stderr
    reason = rows(repo)["fault_oom"]["reason"]
    assert "out of memory" in reason and "64 MiB" in reason, reason


def test_invalid_docker_option_values_are_a_failure_row_naming_the_option(tmp_path, fault_docker):
    models = [{"name": f"fault_opt{i}", "scripts": "scripts/fast.sh", "additional_docker_run_options": opts}
              for i, opts in enumerate(("--cpus two", "--pids-limit x", "--ulimit nofile=a"))]
    repo = make_repo(tmp_path / "repo", models, SCRIPTS)
    done = run_process("run", "--tags", "faults", "--executor", "docker", "--no-html", cwd=repo, timeout=300)
    assert done.returncode == 1 and "internal error" not in done.stderr, done.stderr
    got = rows(repo)
    for i, option in enumerate(("--cpus", "--pids-limit", "--ulimit")):
        assert got[f"fault_opt{i}"]["status"] == "FAILURE" and option in got[f"fault_opt{i}"]["reason"]


# -- disks: full, read-only -----------------------------------------------------------------------

@pytest.fixture
def tmpfs(tmp_path):
    """A real tmpfs of 1 MiB (needs root: CI runs as root)."""
    point = tmp_path / "small"
    point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(point)], capture_output=True)
    require_service("tmpfs mount (root)", mounted.returncode == 0, mounted.stderr.decode().strip())
    yield point
    subprocess.run(["umount", "-l", str(point)], check=False)


def test_full_disk_before_the_run_is_bad_input(tmp_path, tmpfs):
    repo = three_models(tmp_path / "repo")
    (tmpfs / "filler").write_bytes(b"\0" * (1024 * 1024 - 4096))
    try:
        (tmpfs / "filler2").write_bytes(b"\0" * 8192)
    except OSError:
        pass
    done = run_process("run", "--tags", "fault_fast", "--executor", "local", "-o", str(tmpfs / "perf.csv"),
                       cwd=repo, timeout=120)
    assert done.returncode == 2, done.stderr
    assert str(tmpfs) in done.stderr and "cannot write results" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert not (repo / "madengine_runs").exists() or not any((repo / "madengine_runs").iterdir())


def test_read_only_output_is_bad_input(tmp_path, tmpfs):
    repo = three_models(tmp_path / "repo")
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    done = run_process("run", "--tags", "fault_fast", "--executor", "local", "--runs-dir", str(tmpfs / "runs"),
                       cwd=repo, timeout=120)
    assert done.returncode == 2 and "Read-only file system" in done.stderr, done.stderr


def test_disk_filling_mid_run_never_tears_a_row_and_keeps_it_for_update_perf(tmp_path, tmpfs):
    """The first model's row lands; the second model fills the disk perf.csv is on; its row is not
    written at all (no torn row), is kept as JSON in the run folder, and update-perf adds it later."""
    # the filler's row is larger than a page, so it needs space the full disk no longer has
    repo = make_repo(tmp_path / "repo", [{"name": "fault_fast", "scripts": "scripts/fast.sh"},
                                         {"name": "fault_filler", "scripts": "scripts/filler.sh",
                                          "args": "--note " + "x" * 6000}],
                     {**SCRIPTS, "filler.sh": "head -c 4194304 /dev/zero > \"$FILL_PATH\" 2>/dev/null\n"
                                              "echo 'performance: 5 x'\n"})
    perf = tmpfs / "perf.csv"
    done = run_process("run", "--tags", "faults", "--executor", "local", "-o", str(perf), "--no-html",
                       "--additional-context", json.dumps({"docker_env_vars": {"FILL_PATH": str(tmpfs / "fill")}}),
                       cwd=repo, timeout=120)
    assert done.returncode == 1, done.stderr
    text = perf.read_text()
    assert text.endswith("\n") and len(read_rows(perf)) == 1  # the first row, whole; nothing torn
    kept = sorted((repo / "madengine_runs").glob("*/unrecorded/*.json"))
    assert len(kept) == 1 and "update-perf --single-result" in done.stderr
    (tmpfs / "fill").unlink()
    added = run_process("report", "update-perf", "--single-result", str(kept[0]), "--perf-csv", str(perf), cwd=repo)
    assert added.returncode == 0, added.stderr
    assert [r["model"] for r in read_rows(perf)] == ["fault_fast", "fault_filler"]
    assert read_rows(perf)[1]["performance"] == "5"


# -- docker_mounts ----------------------------------------------------------------------------------

def test_docker_mounts_mount_host_paths_read_only_where_asked(tmp_path, fault_docker):
    data = tmp_path / "data"
    data.mkdir()
    (data / "input.txt").write_text("42\n")
    data.chmod(0o777)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    scratch.chmod(0o777)
    repo = make_repo(tmp_path / "repo", [{"name": "fault_mounts", "scripts": "scripts/mounts.sh"}],
                     {"mounts.sh": "v=$(cat /ref/input.txt)\n"
                                   "if touch /ref/x 2>/dev/null; then echo 'ref is writable'; exit 5; fi\n"
                                   "echo ok > /scratch/out.txt\necho \"performance: $v x\"\n"})
    context = {"docker_mounts": {"/ref": f"{data}:ro", "/scratch": {"host": str(scratch), "read_only": False}}}
    done = run_process("run", "--tags", "faults", "--executor", "docker", "--no-html",
                       "--additional-context", json.dumps(context), cwd=repo, timeout=300)
    assert done.returncode == 0, done.stderr
    assert rows(repo)["fault_mounts"]["performance"] == "42"
    assert (scratch / "out.txt").read_text() == "ok\n"


def test_docker_mounts_missing_host_path_and_local_executor_are_bad_input(tmp_path):
    repo = three_models(tmp_path / "repo")
    missing = run_process("run", "--tags", "fault_fast", "--executor", "docker", "--additional-context",
                          json.dumps({"docker_mounts": {"/data": str(tmp_path / "nope")}}), cwd=repo)
    assert missing.returncode == 2 and "does not exist" in missing.stderr and "docker_mounts" in missing.stderr
    local = run_process("run", "--tags", "fault_fast", "--executor", "local", "--additional-context",
                        json.dumps({"docker_mounts": {"/data": str(tmp_path)}}), cwd=repo)
    assert local.returncode == 2 and "docker_mounts applies to the docker executor" in local.stderr
    for out in (missing, local):
        assert len(out.stderr.strip().splitlines()) == 1


# -- flags that do not apply --------------------------------------------------------------------------

@pytest.mark.parametrize("flags,applies", [
    (["--dry-run"], "--executor slurm"), (["--no-wait"], "--executor slurm"),
    (["--partition", "p"], "--executor slurm"), (["--nodes", "2"], "--executor slurm"),
    (["--time", "10"], "--executor slurm"), (["--gpus-per-node", "1"], "--executor slurm"),
    (["--slurm-args=--exclusive"], "--executor slurm"),
    (["--registry", "localhost:5000"], "--manifest-file"), (["--image-archive", "x"], "--manifest-file"),
    (["--executor", "slurm", "--parallel", "2"], "--parallel"),
])
def test_flags_that_do_not_apply_are_bad_input(tmp_path, monkeypatch, cli, flags, applies):
    repo = three_models(tmp_path / "repo")
    monkeypatch.chdir(repo)
    result = cli("run", "--tags", "fault_fast", "--executor", "local", *flags) if "--executor" not in flags \
        else cli("run", "--tags", "fault_fast", *flags)
    assert result.code == 2 and applies in result.stderr, result
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (repo / "perf.csv").exists()  # nothing ran
