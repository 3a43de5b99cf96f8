"""``madengine run`` of models with a ``distributed`` block (tests/fixtures/distributed): the launcher's
environment reaches the script on the local and docker executors, torchrun starts 2 gloo ranks on
CPU, and every bad block or request is exit 2 with one line and nothing recorded."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest

from conftest import FIXTURES, require_module, run_record
from madengine.launch import LAUNCHERS
from madengine.results import read_rows

IMAGE_PREFIXES = ["ci-dist_"]


@pytest.fixture
def dist_repo(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURES / "distributed", repo)
    monkeypatch.chdir(repo)
    monkeypatch.delenv("MODEL_DIR", raising=False)
    for name in ("NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "MAD_MULTI_NODE_RUNNER"):
        monkeypatch.delenv(name, raising=False)
    return repo


@pytest.fixture(params=["local", "docker"])
def executor(request):
    if request.param == "docker":
        request.getfixturevalue("docker_client")
        request.getfixturevalue("docker_cleanup").extend(IMAGE_PREFIXES)
    return request.param


def _env_lines(row: dict) -> dict[str, str]:
    log = next(a for a in row["artifacts"].split(",") if a.endswith("run.log"))
    lines = [line.split("env: ", 1)[1] for line in Path(log).read_text().splitlines() if "env: " in line]
    return dict(line.split("=", 1) for line in lines)


@pytest.mark.slow
def test_the_launcher_environment_reaches_the_script(dist_repo, cli, executor):
    result = cli("run", "--tags", "envcheck", "plain", "--executor", executor)
    assert result.code == 0, result
    rows = {r["model"]: r for r in read_rows(dist_repo / "perf.csv")}
    env = _env_lines(rows["dist_env"])
    workspace = "/myworkspace" if executor == "docker" else env["MAD_RANK_LOG_DIR"].split("/madengine_ranks/")[0]
    assert env == {"MAD_LAUNCHER_TYPE": "none", "MAD_MULTI_NODE_RUNNER": "", "MASTER_ADDR": "127.0.0.1",
                   "MASTER_PORT": env["MASTER_PORT"], "WORLD_SIZE": "3", "NNODES": "1", "NODE_RANK": "0",
                   "NPROC_PER_NODE": "3", "MAD_DISTRIBUTED_BACKEND": "gloo",
                   "MAD_RANK_LOG_DIR": f"{workspace}/madengine_ranks/node-0"}
    assert 0 < int(env["MASTER_PORT"]) < 65536 and Path(workspace).is_absolute()
    assert rows["dist_env"]["performance"] == "3"
    # a model without a block sees none of it
    assert set(_env_lines(rows["dist_plain"]).values()) == {"<unset>"}


@pytest.mark.slow
def test_the_context_block_wins_key_by_key(dist_repo, cli):
    context = json.dumps({"distributed": {"nproc_per_node": 5, "backend": "nccl"}})
    result = cli("run", "--tags", "envcheck", "plain", "--executor", "local", "--additional-context", context)
    assert result.code == 0, result
    rows = {r["model"]: r for r in read_rows(dist_repo / "perf.csv")}
    env = _env_lines(rows["dist_env"])
    assert (env["MAD_LAUNCHER_TYPE"], env["NPROC_PER_NODE"], env["WORLD_SIZE"], env["MAD_DISTRIBUTED_BACKEND"]) == \
        ("none", "5", "5", "nccl")  # the launcher from models.json, the counts from the context
    plain = _env_lines(rows["dist_plain"])  # the context's block applies to every model of the run
    assert (plain["MAD_LAUNCHER_TYPE"], plain["WORLD_SIZE"]) == ("torchrun", "5")
    assert plain["MAD_MULTI_NODE_RUNNER"] == "torchrun --standalone --nproc_per_node=5"


@pytest.mark.slow
def test_torchrun_runs_two_gloo_ranks_on_the_local_executor(dist_repo, cli):
    require_module("torch")
    result = cli("run", "--tags", "ddp", "--executor", "local", "--keep-model-dir")
    assert result.code == 0, f"{result}\n{run_record(dist_repo)}"
    [row] = read_rows(dist_repo / "perf.csv")
    assert row["status"] == "SUCCESS" and row["metric"] == "samples_per_second" and float(row["performance"]) > 0
    log = Path(next(a for a in row["artifacts"].split(",") if a.endswith("run.log"))).read_text()
    assert "runner: torchrun --standalone --nproc_per_node=2" in log
    assert "[default0]:world_size: 2" in log and "[default1]:rank 1 of 2" in log
    # each rank's output also went to its own files under MAD_RANK_LOG_DIR
    work = Path(row["artifacts"].split(",")[0]).parent / "work"
    ranks = sorted(p.parent.name for p in work.glob("madengine_ranks/node-0/*/attempt_0/*/stdout.log"))
    assert ranks == ["0", "1"]


# -- bad input: exit 2, one line, nothing recorded -------------------------------------------------
def _set_block(repo: Path, model: str, block) -> None:
    path = repo / "models.json"
    models = json.loads(path.read_text())
    for entry in models:
        if entry["name"] == model:
            entry["distributed"] = block
    path.write_text(json.dumps(models))


def _refused(result, repo: Path, *words: str) -> None:
    assert result.code == 2, result
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])
    assert not (repo / "perf.csv").exists()


def test_an_unknown_launcher_lists_the_valid_ones(dist_repo, cli):
    _set_block(dist_repo, "dist_env", {"launcher": "horovod"})
    _refused(cli("run", "--tags", "envcheck", "--executor", "local"), dist_repo,
             "models.json", "distributed.launcher", "horovod", *LAUNCHERS)


@pytest.mark.parametrize("nnodes", [0, -1, "two", 1.5])
def test_nnodes_below_one_or_not_whole_is_refused(dist_repo, cli, nnodes):
    _refused(cli("run", "--tags", "envcheck", "--executor", "local", "--additional-context",
                 json.dumps({"distributed": {"nnodes": nnodes}})), dist_repo, "distributed.nnodes")


def test_more_ranks_than_visible_gpus_is_refused(dist_repo, cli):
    context = {"gpu_vendor": "NVIDIA", "system_ngpus": 2, "distributed": {"nproc_per_node": 4}}
    _refused(cli("run", "--tags", "envcheck", "--executor", "local", "--additional-context", json.dumps(context)),
             dist_repo, "nproc_per_node 4 is more than the 2 visible GPU(s)")


def test_sglang_disagg_needs_three_nodes(dist_repo, cli):
    _set_block(dist_repo, "dist_env", {"launcher": "sglang-disagg", "nnodes": 2})
    _refused(cli("run", "--tags", "envcheck", "--executor", "local"), dist_repo, "distributed.nnodes",
             "3 or more nodes")


def test_a_multi_node_job_on_the_local_executor_is_refused(dist_repo, cli):
    _refused(cli("run", "--tags", "envcheck", "--executor", "local", "--additional-context",
                 '{"distributed": {"nnodes": 2}}'), dist_repo, "nnodes 2 needs a multi-node executor",
             "--executor slurm")


def test_a_taken_port_is_refused_before_anything_runs(dist_repo, cli):
    with socket.socket() as listener:
        listener.bind(("", 0))
        listener.listen()
        port = listener.getsockname()[1]
        _refused(cli("run", "--tags", "envcheck", "--executor", "local", "--additional-context",
                     json.dumps({"distributed": {"master_port": port}})), dist_repo,
                 f"master_port {port} is taken")
