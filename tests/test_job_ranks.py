"""The parts of a distributed job's run that need no torch: ending every process of a step (its
tree, and what carries its cookie after its parent died), the output pipe never awaited forever,
torchrun's account of a failure read into a reason naming the rank, rank logs kept apart, and
``--parallel`` counting a job's ranks."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from job_helpers import wait_for
from madengine.catalog.schema import Model
from madengine.context import Context
from madengine.core.spec import RunSpec, Step
from madengine.distributed.parallel import Need, ResourcePool, model_need
from madengine.execution.local import LocalExecutor
from madengine.execution import proctree
from madengine.execution.proctree import COOKIE_VAR, RankWatch, end_step, new_cookie, running_ranks, step_processes
from madengine.execution.ranks import collect_rank_logs, failed_rank, still_running, tail_line
from madengine.execution.streams import LineSink, StepResult
from madengine.launch import DistributedSpec, NodePlacement, node_launch

SESSIONS = """
setsid sleep 300 &                               # a worker in a session of its own (torchrun's)
( setsid sleep 300 & )                           # ... whose parent is gone: re-parented
echo started
sleep 300
"""


def _spawn(script: str, cookie: str) -> subprocess.Popen:
    return subprocess.Popen(["bash", "-c", script], env={**os.environ, COOKIE_VAR: cookie},
                            stdout=subprocess.PIPE, start_new_session=True)


def test_a_step_is_ended_whole_workers_in_sessions_of_their_own_too():
    cookie = new_cookie()
    proc = _spawn(SESSIONS, cookie)
    assert proc.stdout.readline() == b"started\n"
    deadline = time.monotonic() + 10
    while True:  # until both workers have become sleeps in sessions of their own
        found = step_processes(proc.pid, cookie)
        sleeps = [pid for pid, p in found.items() if p.name() == "sleep" and os.getsid(pid) == pid != proc.pid]
        if len(sleeps) == 2 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert len(sleeps) == 2, found
    os.killpg(proc.pid, 9)  # what ending the process group alone does ...
    proc.wait()
    assert step_processes(None, cookie), "the workers survive the end of the step's process group"
    assert end_step(None, cookie, grace=1.0) >= 2  # ... and what the cookie finds
    assert step_processes(None, cookie) == {}


def test_the_ranks_still_running_are_named_by_their_environment():
    cookie = new_cookie()
    env = {**os.environ, COOKIE_VAR: cookie}
    ranks = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], env={**env, "RANK": str(r),
                              "LOCAL_RANK": str(r - 2)}, start_new_session=True) for r in (3, 2)]
    launcher = subprocess.Popen(["sleep", "300"], env={**env, "RANK": "0"})  # a RANK alone is no rank
    try:
        deadline = time.monotonic() + 10
        while running_ranks(None, cookie) != (2, 3) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert running_ranks(None, cookie) == (2, 3)
    finally:
        end_step(None, cookie, grace=1.0)
    assert all(p.wait(timeout=10) is not None for p in (*ranks, launcher))


def test_a_rank_ended_by_the_same_stop_is_still_named_by_the_watch(monkeypatch):
    """Slurm signals every process of its step at once: the hung rank may be gone before madengine
    acts on its own signal. The watch saw it running just before; once the window has passed, a
    rank that ended is no longer named."""
    monkeypatch.setattr(proctree, "WATCH_WINDOW", 1.0)
    cookie = new_cookie()
    rank = subprocess.Popen(["sleep", "300"], env={**os.environ, COOKIE_VAR: cookie, "RANK": "1", "LOCAL_RANK": "0"})
    try:
        with RankWatch(None, cookie, interval=0.05) as watch:
            wait_for(lambda: 1 in watch._running_until, timeout=10)  # a look has seen the rank running
            rank.kill()  # the stop reaches the rank first
            rank.wait()
            assert running_ranks(None, cookie) == ()  # what a look after the stop alone sees
            assert watch.ranks_at_stop() == (1,)
            wait_for(lambda: 1 in watch._gone, timeout=10)  # a look has found it gone
            time.sleep(1.5)
            assert watch.ranks_at_stop() == ()
    finally:
        rank.kill()
        rank.wait()


def _spec(tmp_path: Path, argv: list[str]) -> RunSpec:
    model = Model(name="m", source="models.json")
    return RunSpec(key="m", model=model, workdir=tmp_path, log_path=tmp_path / "run.log", artifacts_dir=tmp_path,
                   env={}, steps=[Step("model", argv)], timeout=None)


def test_an_orphan_holding_the_output_pipe_never_blocks_the_step(tmp_path):
    pid_file = tmp_path / "orphan.pid"
    # a process out of reach (no cookie: its environment was cleared) keeps the step's output open
    script = f"env -i setsid sh -c 'echo $$ > {pid_file}; exec sleep 60' & " \
             f"while [ ! -s {pid_file} ]; do sleep 0.05; done; echo done"
    executor = LocalExecutor(dict(os.environ))
    spec = _spec(tmp_path, ["bash", "-c", script])
    started = time.monotonic()
    with open(tmp_path / "log.txt", "w") as log:
        result = executor.run_step(spec, spec.steps[0], None, LineSink(log, None, keep=True))
    try:
        assert result.exit_code == 0 and result.output == "done"
        assert time.monotonic() - started < 20  # the drain period, not the orphan's 60 s
    finally:
        os.kill(int(pid_file.read_text()), 9)


def test_a_daemon_outlives_its_step_for_the_post_script_and_ends_with_the_run(tmp_path):
    """A pre-script's daemon in a session of its own (the GPU sampler) survives its step; what is
    left of the run when it ends (a daemon nobody stopped, workers a dead launcher left) does not."""
    pid_file = tmp_path / "daemon.pid"
    executor = LocalExecutor(dict(os.environ))
    script = ("setsid sleep 300 </dev/null >/dev/null 2>&1 & pid=$!\n"  # as gpu_profiler_start.sh does:
              'until [ "$(ps -o sid= -p $pid | tr -d " ")" = "$pid" ]; do sleep 0.02; done\n'  # it left the session
              f"echo $pid > {pid_file}\n")
    spec = _spec(tmp_path, ["bash", "-c", script])
    executor.start(spec)
    with open(tmp_path / "log.txt", "w") as log:
        assert executor.run_step(spec, spec.steps[0], None, LineSink(log, None, keep=True)).exit_code == 0
    daemon = int(pid_file.read_text())
    time.sleep(0.3)
    assert psutil.pid_exists(daemon) and psutil.Process(daemon).status() != psutil.STATUS_ZOMBIE
    executor.stop(spec, keep_alive=False)
    assert not psutil.pid_exists(daemon) or psutil.Process(daemon).status() == psutil.STATUS_ZOMBIE


# -- torchrun's account of a failure -------------------------------------------------------------
TORCHRUN_FAILURE = """[default1]:[rank3]: Traceback (most recent call last):
[default1]:[rank3]:   File "/w/train.py", line 40, in <module>
[default1]:[rank3]: RuntimeError: rank 3 failed on purpose at step 3
E1125 18:26:48.460000 1350 api.py:1002] failed (exitcode: 1) local_rank: 1 (pid: 1583) of binary: python3
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-25_18:26:48
  host      : node1
  rank      : 2 (local_rank: 0)
  exitcode  : -15 (pid: 1582)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 1582
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-25_18:26:48
  host      : node1
  rank      : 3 (local_rank: 1)
  exitcode  : {code} (pid: 1583)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""


def _launch(tmp_path: Path, node_rank: int = 1):
    spec = DistributedSpec(launcher="torchrun", nnodes=2, nproc_per_node=2)
    return node_launch(spec, NodePlacement(node_rank=node_rank, master_addr="node0", hosts=("node0", "node1"),
                                           workspace=str(tmp_path)))


def _rank_file(tmp_path: Path, local: int, name: str, text: str, node: int = 1, attempt: int = 0) -> Path:
    path = tmp_path / f"madengine_ranks/node-{node}/abc_x1/attempt_{attempt}/{local}/{name}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_failed_rank_is_named_with_the_last_line_of_its_own_stderr(tmp_path):
    launch = _launch(tmp_path)
    _rank_file(tmp_path, 1, "stderr.log", "[rank3]: Traceback (most recent call last):\n[rank3]:   File \"x\"\n"
                                          "[rank3]: ValueError: the batch has NaNs\n")
    assert failed_rank(TORCHRUN_FAILURE.format(code=1), tmp_path, launch) == \
        "rank 3 (node 1, local rank 1) exited with code 1: ValueError: the batch has NaNs"
    # without its file, what the rank printed to the node's log
    other = tmp_path / "other"
    assert failed_rank(TORCHRUN_FAILURE.format(code=1), other, _launch(other)) == \
        "rank 3 (node 1, local rank 1) exited with code 1: RuntimeError: rank 3 failed on purpose at step 3"
    killed = tmp_path / "killed"
    assert failed_rank(TORCHRUN_FAILURE.format(code=-9).replace("[default1]", "[x]"), killed, _launch(killed)) == \
        "rank 3 (node 1, local rank 1) was killed by SIGKILL"
    assert failed_rank("Traceback ...\nRuntimeError: no launcher summary", tmp_path, launch) == ""


def test_the_tail_skips_frames_launcher_lines_figures_and_the_teardown():
    text = "[rank0]: RuntimeError: real error\n[rank0]:   File \"a.py\", line 3\n  traceback : To enable traceback " \
           "see: https://x\n============\nperformance: 3 x\nterminate called without an active exception\n"
    assert tail_line(text) == "RuntimeError: real error"
    thrown = "terminate called after throwing an instance of 'c10::Error'\n  what():  CUDA error: out of memory\n"
    assert tail_line(thrown) == "what():  CUDA error: out of memory"


def test_ranks_still_running_read_as_words(tmp_path):
    launch = _launch(tmp_path, node_rank=1)
    assert still_running((3,), launch) == "rank 3 (node 1, local rank 1) was still running"
    assert still_running((2, 3), launch).endswith("local rank 1) were still running")
    assert still_running((), launch) == ""


def test_rank_logs_are_kept_apart_by_global_rank_the_last_attempt_wins(tmp_path):
    launch = _launch(tmp_path / "work")
    work = tmp_path / "work"
    _rank_file(work, 0, "stdout.log", "first try", attempt=0)
    _rank_file(work, 0, "stdout.log", "second try", attempt=1)
    _rank_file(work, 1, "stderr.log", "oops", attempt=1)
    (work / "madengine_ranks/node-1/deepspeed.txt").write_text("the launcher's own file")
    copied = collect_rank_logs(work, tmp_path / "artifacts", launch)
    node = tmp_path / "artifacts" / "ranks" / "node-1"
    assert (node / "rank-2" / "stdout.log").read_text() == "second try"
    assert (node / "rank-3" / "stderr.log").read_text() == "oops"
    assert (node / "deepspeed.txt").is_file() and len(copied) == 3


# -- --parallel ---------------------------------------------------------------------------------
def _model(block: dict | None, **fields) -> Model:
    extra = {"distributed": block} if block is not None else {}
    return Model(name="m", source="models.json", n_gpus=fields.pop("n_gpus", "0"), extra={**extra, **fields})


@pytest.mark.parametrize("block, cpus, expected", [
    (None, 8, Need(cpus=4)),  # an equal share of 8 CPUs for 2 slots
    ({"nproc_per_node": 6}, 8, Need(cpus=6)),  # every rank a CPU of its own
    ({"nproc_per_node": 12}, 8, Need(cpus=8)),  # more ranks than CPUs: all of them, so it runs alone
    ({"nproc_per_node": 1}, 8, Need(cpus=4)),
])
def test_parallel_counts_a_jobs_ranks_on_a_cpu_host(block, cpus, expected):
    pool = ResourcePool([], list(range(cpus)))
    assert model_need(_model(block), Context({"gpu_vendor": "CPU"}), pool, 2) == expected


def test_parallel_gives_a_gpu_job_one_gpu_per_rank():
    pool = ResourcePool(list(range(8)), list(range(4)))
    context = Context({"gpu_vendor": "AMD", "system_ngpus": 8})
    assert model_need(_model({"nproc_per_node": 4}, n_gpus="1"), context, pool, 2) == Need(gpus=4)


def test_a_step_result_without_ranks_names_none():
    assert StepResult(0, 1.0).ranks_running == ()
