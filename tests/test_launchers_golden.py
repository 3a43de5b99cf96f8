"""Golden tests of every launcher's command and environment on one node and on several
(tests/golden/launchers/<launcher>.json), and proofs that the commands are what the launchers
accept: torchrun's and DeepSpeed's own argument parsers read every generated runner (DeepSpeed's
node script on several nodes, and its fallback for releases without --no_ssh), and the two-node
forms of both really start a world of 2 ranks over gloo on this host (DeepSpeed's both ways).

vLLM, SGLang and Primus set no runner (their scripts start their own workers): their golden
environment is the whole contract; their runtimes are too heavy to install here.

Regenerate the golden files after an intended change with ``MADENGINE_UPDATE_GOLDEN=1``; review
the diff like code.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import string
import subprocess
from pathlib import Path
from unittest import mock

import pytest

from conftest import FIXTURES, require_service
from madengine.core.errors import LaunchError
from madengine.launch import COMMON_ENV, LAUNCHERS, NodePlacement, free_port, node_launch, parse_distributed
from madengine.launch.launchers import DEEPSPEED_NODE_SCRIPT

GOLDEN = Path(__file__).resolve().parent / "golden" / "launchers"
UPDATE = os.environ.get("MADENGINE_UPDATE_GOLDEN") == "1"
TRAIN = FIXTURES / "distributed" / "scripts" / "ddp" / "train.py"

ONE_NODE = NodePlacement(node_rank=0, master_addr="127.0.0.1", master_port=29511, devices=(0, 1, 2, 3),
                         workspace="/myworkspace")
ONE_NODE_CPU = NodePlacement(node_rank=0, master_addr="127.0.0.1", master_port=29511, workspace="/myworkspace")
HOSTS = ("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4")


def n_nodes(rank: int, nodes: int) -> NodePlacement:
    """Node ``rank`` of a job on ``nodes`` nodes whose executor found the interface to the rendezvous."""
    return NodePlacement(node_rank=rank, master_addr=HOSTS[0], master_port=29500, devices=tuple(range(8)),
                         hosts=HOSTS[:nodes], workspace="/myworkspace", socket_ifname="eth1")


#: per launcher: (case name, distributed block, placement[, model name]); at least one case on 1 node and one on N
CASES: dict[str, list[tuple[str, dict, NodePlacement]]] = {
    "torchrun": [
        ("1-node", {"launcher": "torchrun"}, ONE_NODE),
        ("1-node-cpu-port", {"launcher": "torchrun", "nproc_per_node": 2, "master_port": 29511}, ONE_NODE_CPU),
        ("2-nodes-rank-1", {"launcher": "torchrun", "nnodes": 2}, n_nodes(1, 2)),
    ],
    "torchtitan": [
        ("1-node", {"launcher": "torchtitan"}, ONE_NODE),
        ("2-nodes-rank-0", {"launcher": "torchtitan", "nnodes": 2}, n_nodes(0, 2)),
    ],
    "megatron-lm": [
        ("1-node", {"launcher": "megatron"}, ONE_NODE),
        ("2-nodes-rank-1", {"launcher": "megatron-lm", "nnodes": 2}, n_nodes(1, 2)),
        ("2-nodes-sizes", {"launcher": "megatron-lm", "nnodes": 2, "tensor_parallel_size": 4,
                           "pipeline_parallel_size": 2, "context_parallel_size": 2}, n_nodes(0, 2)),
    ],
    "deepspeed": [
        ("1-node", {"launcher": "deepspeed"}, ONE_NODE),
        ("2-nodes-rank-1", {"launcher": "deepspeed", "nnodes": 2}, n_nodes(1, 2)),
        ("2-nodes-own-hostfile", {"launcher": "deepspeed", "nnodes": 2,
                                  "deepspeed": {"hostfile": "/shared/hostfile"}}, n_nodes(0, 2)),
    ],
    "vllm": [
        ("1-node", {"launcher": "vllm"}, ONE_NODE),
        ("2-nodes-rank-1", {"launcher": "vllm", "nnodes": 2, "tensor_parallel_size": 4}, n_nodes(1, 2)),
    ],
    "sglang": [
        ("1-node", {"launcher": "sglang"}, ONE_NODE),
        ("2-nodes-rank-0", {"launcher": "sglang", "nnodes": 2}, n_nodes(0, 2)),
    ],
    "sglang-disagg": [
        ("1-node", {"launcher": "sglang-disagg"}, ONE_NODE),  # refused: a proxy, a prefill and a decode node
        ("4-nodes-proxy", {"launcher": "sglang-disagg", "nnodes": 4}, n_nodes(0, 4)),
        ("4-nodes-prefill", {"launcher": "sglang-disagg", "nnodes": 4}, n_nodes(1, 4)),
        ("4-nodes-decode", {"launcher": "sglang-disagg", "nnodes": 4}, n_nodes(3, 4)),
    ],
    "primus": [
        ("1-node", {"launcher": "primus"}, ONE_NODE),
        ("1-node-backend-from-name", {"launcher": "primus"}, ONE_NODE, "primus_pretrain/torchtitan_MI300X_qwen3_4B"),
        ("1-node-maxtext-from-name", {"launcher": "primus"}, ONE_NODE, "primus_pretrain/maxtext_MI300X_llama2_7B"),
        ("2-nodes-bridge-from-name", {"launcher": "primus", "nnodes": 2}, n_nodes(0, 2),
         "primus_pretrain/megatron_bridge_MI355X_llama3_8B"),
        ("2-nodes-given-backend-wins", {"launcher": "primus", "nnodes": 2, "primus": {"backend": "megatron"}},
         n_nodes(1, 2), "primus_pretrain/torchtitan_MI300X_qwen3_4B"),
        ("2-nodes-rank-1", {"launcher": "primus", "nnodes": 2,
                            "primus": {"config_path": "examples/megatron/llama3_8B.yaml",
                                       "cli_extra": "--train_iters 10", "backend": "megatron"}}, n_nodes(1, 2)),
    ],
    "none": [
        ("1-node", {"launcher": "none"}, ONE_NODE_CPU),
        ("2-nodes-rank-1", {"launcher": "none", "nnodes": 2, "nproc_per_node": 4}, n_nodes(1, 2)),
    ],
}


def outcome(block: dict, place: NodePlacement, model: str = "") -> dict:
    """What a case produces, as the golden file records it."""
    case = {"block": block, "placement": dataclasses.asdict(place), **({"model": model} if model else {})}
    try:
        launch = node_launch(parse_distributed(block, source="models.json", model_name=model), place)
    except LaunchError as exc:
        return {**case, "error": str(exc)}
    return {**case, "runner": list(launch.runner), "env": dict(sorted(launch.env.items())),
            "files": dict(launch.files), "world_size": launch.world_size, "role": launch.role}


def test_every_launcher_has_one_node_and_multi_node_cases():
    assert set(CASES) == set(LAUNCHERS)
    for launcher, cases in CASES.items():
        nodes = {case[1].get("nnodes", 1) > 1 for case in cases}
        assert nodes == {False, True}, launcher


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_command_and_environment_match_the_golden_file(launcher):
    produced = json.loads(json.dumps({name: outcome(*case) for name, *case in CASES[launcher]}))
    path = GOLDEN / f"{launcher}.json"
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(produced, indent=2) + "\n", encoding="utf-8")
    assert path.is_file(), f"no golden file {path}: run with MADENGINE_UPDATE_GOLDEN=1 and review it"
    assert produced == json.loads(path.read_text(encoding="utf-8"))


def _launches(prefix: str):
    for launcher, cases in CASES.items():
        for name, *case in cases:
            result = outcome(*case)
            if (result.get("runner") or [None])[0] == prefix:
                yield pytest.param(result, id=f"{launcher}-{name}")


@pytest.mark.parametrize("result", list(_launches("torchrun")))
def test_torchrun_reads_every_generated_runner(result, monkeypatch):
    parser = _torchrun_parser()
    env = result["env"]
    for name, value in env.items():  # torchrun reads PET_<OPTION> as that option's default
        monkeypatch.setenv(name, value)
    args = parser().parse_args([*result["runner"][1:], "train.py", "--steps", "5"])
    assert args.training_script == "train.py" and args.training_script_args == ["--steps", "5"]
    assert str(args.nproc_per_node) == env["NPROC_PER_NODE"]
    assert args.log_dir == env["MAD_RANK_LOG_DIR"] and args.tee == "3"
    if env["NNODES"] == "1" and "--standalone" in result["runner"]:
        assert args.standalone
    else:
        assert not args.standalone and args.nnodes == env["NNODES"] and args.node_rank == int(env["NODE_RANK"])
        assert args.master_addr == env["MASTER_ADDR"] and args.master_port == int(env["MASTER_PORT"])


def _torchrun_parser():
    try:
        from torch.distributed.run import get_args_parser
    except ImportError:
        require_service("torch (torchrun's parser)", False, "pip install torch==2.13.0")
    return get_args_parser


def _deepspeed_parser():
    try:
        from deepspeed.launcher.runner import parse_args
    except ImportError:
        require_service("deepspeed (its launcher's parser)", False, "pip install deepspeed==0.19.8 (the test extra)")
    return parse_args


def _deepspeed_cases(*, several_nodes: bool = False):
    for name, *case in CASES["deepspeed"]:
        result = outcome(*case)
        if "error" not in result and (not several_nodes or result["env"]["NNODES"] != "1"):
            yield pytest.param(result, id=name)


def _script_command(script: str, program: str, env: dict[str, str]) -> list[str]:
    """The words of a launch script's ``exec <program> ...`` command (continued lines joined), its
    variables filled in from ``env`` and the script's own assignments, ``"$@"`` left out."""
    text = script.replace("\\\n", " ")
    assigned = {name: shlex.split(value)[0] for name, value in re.findall(r"^(\w+)=(\S+)$", text, re.M)}
    line = next(line.strip() for line in text.splitlines() if line.strip().startswith(f"exec {program} "))
    words = [word for word in shlex.split(line)[1:] if word != "$@"]
    return [string.Template(word).substitute({**env, **assigned}) for word in words]


@pytest.mark.parametrize("result", list(_deepspeed_cases()))
def test_deepspeed_reads_every_generated_runner(result):
    env = result["env"]
    if result["runner"][0] == "deepspeed":
        argv = result["runner"][1:]
    else:  # several nodes: the node script's command for a DeepSpeed with --no_ssh
        assert result["runner"] == ["bash", f"/myworkspace/{DEEPSPEED_NODE_SCRIPT}"]
        argv = _script_command(result["files"][DEEPSPEED_NODE_SCRIPT], "deepspeed", env)[1:]
    args = _deepspeed_parser()([*argv, "train.py", "--steps", "5"])
    assert args.user_script == "train.py" and args.user_args == ["--steps", "5"]
    assert args.master_port == int(env["MASTER_PORT"])
    assert args.enable_each_rank_log == "None"  # its rank logs would take the output away from the run's log
    if env["NNODES"] == "1":
        assert args.num_gpus == int(env["NPROC_PER_NODE"]) and not args.no_ssh
    else:
        assert args.no_ssh and args.node_rank == int(env["NODE_RANK"]) and args.master_addr == env["MASTER_ADDR"]
        hostfile = args.hostfile.removeprefix("/myworkspace/")
        expected = result["files"].get(hostfile)
        assert expected is not None or args.hostfile == result["block"]["deepspeed"]["hostfile"]
        if expected:
            assert expected.splitlines() == [f"{h} slots={env['NPROC_PER_NODE']}" for h in env["MAD_NODE_HOSTS"]
                                             .split(",")]


@pytest.mark.parametrize("result", list(_deepspeed_cases(several_nodes=True)))
def test_the_fallback_for_a_deepspeed_without_no_ssh_is_its_per_node_launcher(result):
    _deepspeed_parser()
    from deepspeed.launcher.launch import parse_args

    env = result["env"]
    argv = _script_command(result["files"][DEEPSPEED_NODE_SCRIPT], "python3", {**env, "world_info": "e30="})
    assert argv[:3] == ["python3", "-u", "-m"] and argv[3] == "deepspeed.launcher.launch"
    with mock.patch("sys.argv", ["launch", *argv[4:], "train.py", "--steps", "5"]):
        args = parse_args()
    assert (args.node_rank, args.master_addr, args.master_port) == (int(env["NODE_RANK"]), env["MASTER_ADDR"],
                                                                   int(env["MASTER_PORT"]))
    assert args.world_info == "e30=" and args.training_script == "train.py"


def test_every_launch_sets_the_mad_contract():
    for cases in CASES.values():
        for _, *case in cases:
            result = outcome(*case)
            if "error" in result:
                continue
            assert set(COMMON_ENV) <= set(result["env"])
            assert result["env"]["MAD_MULTI_NODE_RUNNER"] == " ".join(result["runner"])
            assert int(result["env"]["WORLD_SIZE"]) == result["world_size"]


# -- real launches on this host: two "nodes" as two launchers that meet at one rendezvous ----------
def _two_nodes(block: dict, tmp_path: Path, hosts: tuple[str, ...] = (),
               path: str | None = None) -> list[subprocess.CompletedProcess]:
    spec = parse_distributed(block, source="test")
    port = free_port()
    procs = []
    for rank in range(2):
        workspace = tmp_path / f"node{rank}"
        workspace.mkdir()
        launch = node_launch(spec, NodePlacement(node_rank=rank, master_port=port, hosts=hosts,
                                                 workspace=str(workspace)))
        for relative, text in launch.files.items():
            (workspace / relative).parent.mkdir(parents=True, exist_ok=True)
            (workspace / relative).write_text(text)
        env = {**os.environ, **launch.env, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
               "PATH": path or os.environ["PATH"]}
        procs.append(subprocess.Popen([*launch.runner, str(TRAIN), "--steps", "2"], cwd=workspace, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      start_new_session=True))
    results = []
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=240)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
        results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out))
    return results


@pytest.mark.slow
def test_torchrun_two_nodes_really_meet(tmp_path):
    _torchrun_parser()
    results = _two_nodes({"launcher": "torchrun", "nnodes": 2, "nproc_per_node": 1}, tmp_path)
    assert [r.returncode for r in results] == [0, 0], [r.stdout[-2000:] for r in results]
    assert "world_size: 2" in results[0].stdout and "rank 1 of 2" in results[1].stdout
    logs = sorted(p.relative_to(tmp_path).parts[0] for p in tmp_path.glob("node*/madengine_ranks/node-*/*/attempt_0/0/"
                                                                           "stdout.log"))
    assert logs == ["node0", "node1"]  # each node's rank logs under its own MAD_RANK_LOG_DIR


@pytest.mark.slow
def test_deepspeed_two_nodes_really_meet(tmp_path):
    _deepspeed_parser()
    results = _two_nodes({"launcher": "deepspeed", "nnodes": 2, "nproc_per_node": 1}, tmp_path,
                         hosts=("127.0.0.1", "localhost"))
    assert [r.returncode for r in results] == [0, 0], [r.stdout[-2000:] for r in results]
    assert "world_size: 2" in results[0].stdout and "rank 1 of 2" in results[1].stdout
    assert "has no --no_ssh" not in results[0].stdout  # this release has it: its own launch


#: the command line of a DeepSpeed release before --no_ssh (it has --no_ssh_check, which must not
#: pass for it): an old release cannot be installed beside the test extra's, its CLI is all that differs
OLD_DEEPSPEED = """#!/bin/bash
if [ "${1:-}" = --help ]; then
  echo "usage: deepspeed [-h] [-H HOSTFILE] [-i INCLUDE] [-e EXCLUDE] [--num_nodes NUM_NODES] [--no_ssh_check]"
  echo "  --no_ssh_check        Do not perform ssh check in multi-node launcher model"
  exit 0
fi
echo "old deepspeed: would ssh into every host of the hostfile" >&2
exit 97
"""


@pytest.mark.slow
def test_a_deepspeed_without_no_ssh_starts_each_node_from_the_hostfile(tmp_path):
    _deepspeed_parser()
    bin_dir = tmp_path / "old-deepspeed"
    bin_dir.mkdir()
    (bin_dir / "deepspeed").write_text(OLD_DEEPSPEED)
    (bin_dir / "deepspeed").chmod(0o755)
    results = _two_nodes({"launcher": "deepspeed", "nnodes": 2, "nproc_per_node": 1}, tmp_path,
                         hosts=("127.0.0.1", "localhost"), path=f"{bin_dir}:{os.environ['PATH']}")
    assert [r.returncode for r in results] == [0, 0], [r.stdout[-2000:] for r in results]
    assert all("has no --no_ssh: node" in r.stdout and "would ssh" not in r.stdout for r in results)
    assert "world_size: 2" in results[0].stdout and "rank 1 of 2" in results[1].stdout


def test_runner_words_are_never_quoted():
    spec = parse_distributed({"launcher": "deepspeed", "nnodes": 2}, source="t")
    with pytest.raises(LaunchError, match="shell would split"):
        node_launch(spec, NodePlacement(node_rank=0, hosts=("a", "b"), workspace="/my runs/work"))
    # torchrun's log folder travels in PET_LOG_DIR, so a folder with a space is no problem there
    launch = node_launch(parse_distributed({"launcher": "torchrun"}, source="t"),
                         NodePlacement(workspace="/my runs/work"))
    assert launch.env["PET_LOG_DIR"] == "/my runs/work/madengine_ranks/node-0"
    with pytest.raises(LaunchError, match="not a host name"):
        node_launch(spec, NodePlacement(node_rank=0, master_addr="a;rm -rf /", hosts=("a", "b"), workspace="/w"))
