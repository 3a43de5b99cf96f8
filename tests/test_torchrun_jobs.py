"""Real torchrun jobs over gloo on CPU (tests/fixtures/torchrun), on the local and docker executors:
one row per job with its world size; a rank that fails, is killed or hangs makes a FAILURE row
naming the rank; a timeout, Ctrl-C or SIGTERM ends every rank; and nothing is left running —
checked by looking for any process that carries the test's own mark in its environment (the
ranks inherit it) and any container of the run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from conftest import require_module, run_process
from job_helpers import assert_no_marked_process, make_torch_repo, marked_context, marked_processes, new_mark
from madengine.results import read_rows

pytestmark = pytest.mark.slow
torch = require_module("torch")
IMAGE_PREFIX = "ci-tr_"
RANK_WORDS = "rank 1 (node 0, local rank 1)"


@pytest.fixture
def torch_repo(tmp_path, monkeypatch):
    repo = make_torch_repo(tmp_path / "repo")
    monkeypatch.chdir(repo)
    monkeypatch.delenv("MODEL_DIR", raising=False)
    for name in ("NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "MAD_MULTI_NODE_RUNNER"):
        monkeypatch.delenv(name, raising=False)
    return repo


@pytest.fixture(scope="module")
def torch_images(docker_client, pyt_wheels, tmp_path_factory):
    """The fixture models' images, built once before the tests (a test's own timing never includes
    the torch image's build) and removed after the module."""
    repo = make_torch_repo(tmp_path_factory.mktemp("torch-images") / "repo")
    built = run_process("build", "--tags", "torchrun", "broken", "hangs", cwd=repo, env={"MODEL_DIR": str(repo)},
                        timeout=1800)
    assert built.returncode == 0, built.stderr[-3000:]
    yield
    from docker.errors import APIError

    for image in docker_client.images.list():
        for tag in image.tags:
            if tag.startswith(IMAGE_PREFIX):
                try:
                    docker_client.images.remove(tag, force=True)
                except APIError:
                    pass


@pytest.fixture(params=["local", "docker"])
def executor(request):
    if request.param == "docker":
        request.getfixturevalue("torch_images")
    return request.param


@pytest.fixture
def mark():
    return new_mark()


def _context(mark: str) -> str:
    return json.dumps(marked_context(mark))


def assert_nothing_left(mark: str, executor: str, said: str = "") -> None:
    assert_no_marked_process(mark)
    if executor == "docker":
        import docker

        client = docker.from_env()
        deadline = time.monotonic() + 20  # a container's removal is asynchronous (a busy engine: seconds)
        while time.monotonic() < deadline and _containers(client):
            time.sleep(0.2)
        assert not _containers(client), f"containers left behind; madengine said: {said[-3000:]}"


def _containers(client) -> list[str]:
    return [c.name for c in client.containers.list(all=True) if c.name.startswith("container_ci-tr_")]


def _row(repo: Path) -> dict[str, str]:
    rows = read_rows(repo / "perf.csv")
    assert len(rows) == 1, rows
    return rows[0]


def _artifact(row: dict[str, str], ending: str) -> Path:
    return Path(next(a for a in row["artifacts"].split(",") if a.endswith(ending)))


def test_a_torchrun_job_is_one_row_with_its_world_size(torch_repo, cli, executor, mark):
    result = cli("run", "--tags", "torchrun", "--executor", executor, "-c", _context(mark))
    assert result.code == 0, result
    row = _row(torch_repo)
    assert (row["model"], row["status"], row["metric"]) == ("tr_ddp", "SUCCESS", "samples_per_second")
    assert (row["launcher"], row["world_size"], row["nnodes"], row["nproc_per_node"]) == ("torchrun", "2", "1", "2")
    assert (row["node_aggregation"], row["node_n"], row["node_cv"]) == ("sum", "1", "")
    assert json.loads(row["node_performance"]) == [float(row["performance"])] and float(row["performance"]) > 0
    # the node's log holds every rank's lines; each rank's own files are kept apart, by global rank
    log = _artifact(row, "run.log").read_text()
    assert "[default0]:rank 0 of 2: 6 steps" in log and "[default1]:rank 1 of 2: 6 steps" in log
    ranks = _artifact(row, "ranks/node-0")
    assert sorted(p.name for p in ranks.iterdir()) == ["rank-0", "rank-1"]
    assert (ranks / "rank-1" / "stdout.log").read_text().startswith("rank 1 of 2: 6 steps\n")
    assert "performance:" in (ranks / "rank-0" / "stdout.log").read_text()
    assert_nothing_left(mark, executor)


def test_a_rank_that_fails_is_named_with_its_own_stderr(torch_repo, cli, executor, mark):
    result = cli("run", "--tags", "tr_fail", "--executor", executor, "-c", _context(mark))
    assert result.code == 1, result
    row = _row(torch_repo)
    assert row["status"] == "FAILURE"
    # its exception, even when gloo's threads then abort the interpreter's exit (SIGABRT, "terminate called
    # without an active exception"): the code says how the rank ended, the message why
    how, _, said = row["reason"].partition(": ")
    assert how in (f"{RANK_WORDS} exited with code 1", f"{RANK_WORDS} was killed by SIGABRT"), row["reason"]
    assert said == "RuntimeError: rank 1 failed on purpose at step 3", row["reason"]
    assert (row["world_size"], row["launcher"]) == ("2", "torchrun")
    stderr = _artifact(row, "ranks/node-0") / "rank-1" / "stderr.log"
    assert "rank 1 failed on purpose" in stderr.read_text()
    assert_nothing_left(mark, executor)


def test_a_rank_killed_mid_run_is_named(torch_repo, cli, executor, mark):
    result = cli("run", "--tags", "tr_killed", "--executor", executor, "-c", _context(mark))
    assert result.code == 1, result
    row = _row(torch_repo)
    assert row["status"] == "FAILURE" and row["reason"] == f"{RANK_WORDS} was killed by SIGKILL", row["reason"]
    assert_nothing_left(mark, executor)


def test_a_hung_rank_is_ended_with_every_other_at_the_timeout(torch_repo, cli, executor, mark):
    result = cli("run", "--tags", "hangs", "--executor", executor, "--timeout", "40", "-c", _context(mark))
    assert result.code == 1, result
    row = _row(torch_repo)
    assert row["status"] == "FAILURE"
    assert row["reason"] == (f"timeout: model ran longer than 40 s; {RANK_WORDS} was still running; "
                             "every process of the job was ended"), row["reason"]
    assert float(row["test_duration"]) < 40 + 15, row  # the timeout and the grace period, never the hang
    assert_nothing_left(mark, executor)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_and_sigterm_end_every_rank(torch_repo, executor, mark, signum):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-m", "madengine", "run", "--tags", "hangs", "--executor", executor,
                             "-c", _context(mark)], cwd=torch_repo, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while not _hanging(torch_repo):
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"no hanging rank: {proc.communicate()}")
            time.sleep(0.3)
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signum if signum != signal.SIGINT else proc.returncode == 130, stderr
    row = _row(torch_repo)
    expected = "interrupted" if signum == signal.SIGINT else "interrupted by SIGTERM"
    assert row["status"] == "FAILURE" and row["reason"].startswith(expected), row["reason"]
    assert_nothing_left(mark, executor, stderr)


def test_a_stop_that_reaches_every_process_at_once_still_names_the_hung_rank(torch_repo, mark):
    """What Slurm does to a node's madengine when another node failed (``srun --kill-on-bad-exit``):
    SIGTERM to every process of its step in one pass, madengine first, its ranks too, so the hung
    rank may be gone before madengine looks. The reason names it all the same."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-m", "madengine", "run", "--tags", "hangs", "--executor", "local",
                             "-c", _context(mark)], cwd=torch_repo, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while not _hanging(torch_repo) or len(_ranks(mark)) != 1:  # rank 0 finished, rank 1 hangs
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"no hanging rank alone: {proc.communicate()}")
            time.sleep(0.3)
        time.sleep(3.0)  # rank 0 ended well before the stop: it is not named
        step = psutil.Process(proc.pid).children(recursive=True)
        proc.send_signal(signal.SIGTERM)
        for process in step:
            try:
                process.send_signal(signal.SIGTERM)
            except psutil.Error:
                pass
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    row = _row(torch_repo)
    assert row["status"] == "FAILURE", row
    assert row["reason"].startswith(f"interrupted by SIGTERM during model; {RANK_WORDS} was still running"), \
        row["reason"]
    assert_nothing_left(mark, "local", stderr)


def _ranks(mark: str) -> list[int]:
    """The marked processes that are ranks (RANK and LOCAL_RANK in their environment)."""
    return [pid for pid in marked_processes(mark) if {"RANK", "LOCAL_RANK"} <= set(_environ(pid))]


def _environ(pid: int) -> dict[str, str]:
    try:
        return psutil.Process(pid).environ()
    except psutil.Error:
        return {}


def _hanging(repo: Path) -> bool:
    """Rank 1 said it hangs (in its own log file, which it writes unbuffered)."""
    return any("rank 1 hangs" in log.read_text(errors="replace")
               for log in repo.glob("madengine_runs/*/*/work/madengine_ranks/node-0/*/attempt_*/1/stdout.log"))


def test_parallel_counts_a_jobs_ranks_and_never_oversubscribes(torch_repo, cli, mark):
    """Two 2-rank jobs with --parallel 2 on 2 CPUs: each needs both CPUs, so they run one at a time."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs, in CI too: two 2-rank jobs that must share 2 CPUs cannot be made on one")
    models = json.loads((torch_repo / "models.json").read_text())
    second = dict(models[0], name="tr_ddp2")
    (torch_repo / "models.json").write_text(json.dumps(models + [second]))
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, sorted(before)[:2])
    try:
        result = cli("run", "--tags", "torchrun", "--executor", "local", "--parallel", "2", "-c", _context(mark))
    finally:
        os.sched_setaffinity(0, before)
    assert result.code == 0, result
    spans = []  # when each job's ranks ran, as they said
    for row in read_rows(torch_repo / "perf.csv"):
        assert row["status"] == "SUCCESS" and row["world_size"] == "2", row
        said = [line.split() for line in _artifact(row, "run.log").read_text().splitlines() if " ran from " in line]
        spans.append((min(float(words[-3]) for words in said), max(float(words[-1]) for words in said)))
    (_, first_end), (second_start, _) = sorted(spans)
    assert second_start >= first_end, spans  # the second job's ranks began after the first's ended
    assert_nothing_left(mark, "local")


def test_docker_gives_a_jobs_container_shared_memory_for_its_ranks():
    from madengine.execution.docker import job_host_config

    one = job_host_config(2, 1)
    assert one["IpcMode"] == "private" and one["ShmSize"] >= 2 << 30 and "NetworkMode" not in one
    assert job_host_config(8, 2)["NetworkMode"] == "host"  # the other nodes reach its rendezvous
    assert job_host_config(8, 1)["ShmSize"] in (8 << 30, int(os.sysconf("SC_PHYS_PAGES")
                                                             * os.sysconf("SC_PAGE_SIZE") * 0.5))

