"""Slurm without a cluster: the rendered scripts (``--dry-run``), settings checks, and the parsing of
``squeue``/``scontrol`` output recorded from Slurm 22.05."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from madengine.distributed.slurm_commands import (parse_index_list, parse_job_id, parse_scontrol_jobs,
                                                  parse_squeue, split_queue_id)
from madengine.distributed.slurm_jobs import SlurmTask, state_reason

EVIL = "evil$(touch pwned)`id`;x"
MODELS = [
    {"name": "one", "dockerfile": "docker/x", "scripts": "scripts/s/run.sh", "tags": ["grp"]},
    {"name": EVIL, "dockerfile": "docker/x", "scripts": "scripts/s/run.sh", "tags": ["grp"]},
    {"name": "big", "dockerfile": "docker/x", "scripts": "scripts/s/run.sh", "nnodes": 4, "tags": ["multi"]},
]


@pytest.fixture
def repo(tmp_path, monkeypatch):
    root = tmp_path / "repo"
    (root / "scripts" / "s").mkdir(parents=True)
    (root / "scripts" / "s" / "run.sh").write_text("echo 'performance: 1 x'\n")
    (root / "models.json").write_text(json.dumps(MODELS))
    monkeypatch.chdir(root)
    monkeypatch.delenv("MODEL_DIR", raising=False)
    return root


def _scripts(text: str) -> dict[str, str]:
    """The dry run's output split into {file name: script}."""
    out, name = {}, None
    for line in text.splitlines(keepends=True):
        if line.startswith("# ---- "):
            name = Path(line.split()[2]).name
            out[name] = ""
        elif name:
            out[name] += line
    return out


def test_dry_run_prints_scripts_and_submits_nothing(repo, cli):
    result = cli("run", "--tags", "grp", "multi", "--executor", "slurm", "--dry-run", "--partition", "gpu",
                 "--time", "02:00:00", "--gpus-per-node", "8", "--timeout", "0",
                 "-c", json.dumps({"slurm": {"env": {"NCCL_DEBUG": "INFO"}, "array_limit": 2}}))
    assert result.code == 0, result
    scripts = _scripts(result.stdout + result.stderr)
    array, multi, node = scripts["array.sbatch"], scripts["002-big.sbatch"], scripts["002-big.node.sh"]
    for directive in ("--partition=gpu", "--time=02:00:00", "--gpus-per-node=8", "--array=0-1%2"):
        assert f"#SBATCH {directive}\n" in array
    assert "#SBATCH --nodes=4\n" in multi and "#SBATCH --partition=gpu\n" in multi
    assert "export MASTER_PORT=29500" in multi and "export NNODES=$SLURM_JOB_NUM_NODES" in multi
    assert "MASTER_ADDR" in multi and "srun --nodes=" in multi and "export NPROC_PER_NODE=8" in multi
    assert "export NODE_RANK=${SLURM_NODEID" in node and "MAD_COLLECT_METRICS=false" in node
    assert "--timeout 0 " in array  # 'never' is passed on, not dropped or rendered as None
    assert "export NCCL_DEBUG=INFO" in array
    for text in (array, multi, node):
        assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0
    assert not (repo / "slurm_results").exists() and not (repo / "perf.csv").exists()


def test_model_names_reach_the_task_as_data_never_as_shell(repo, cli, tmp_path):
    # the task command is 'echo' here, so running the rendered script shows what madengine would get
    context = json.dumps({"slurm": {"madengine_command": ["echo", "MADENGINE"]}})
    result = cli("run", "--tags", "grp", "--executor", "slurm", "--dry-run", "-c", context)
    array = _scripts(result.stdout + result.stderr)["array.sbatch"]
    work = tmp_path / "work"
    work.mkdir()
    ran = subprocess.run(["bash", "-c", array.replace(f"cd {repo}", f"cd {work}")], capture_output=True, text=True,
                         env={**os.environ, "SLURM_ARRAY_TASK_ID": "1"}, cwd=work)
    assert ran.returncode == 0, ran.stderr
    assert f"--tags {EVIL} --output" in ran.stdout
    assert not list(work.rglob("pwned")) and not list(repo.rglob("pwned"))


def test_multi_node_scripts_keep_model_names_as_data(repo, cli, tmp_path):
    evil = "many$(touch pwned)"
    models = [{"name": evil, "dockerfile": "docker/x", "scripts": "scripts/s/run.sh", "nnodes": 2}]
    (repo / "models.json").write_text(json.dumps(models))
    context = json.dumps({"slurm": {"madengine_command": ["echo", "MADENGINE"]}})
    result = cli("run", "--tags", evil, "--executor", "slurm", "--dry-run", "-c", context)
    assert result.code == 0, result
    scripts = _scripts(result.stdout + result.stderr)
    node = next(text for name, text in scripts.items() if name.endswith(".node.sh"))
    job = next(text for name, text in scripts.items() if name.endswith(".sbatch"))
    work = tmp_path / "work"
    work.mkdir()
    ran = subprocess.run(["bash", "-c", node.replace(str(repo), str(work))], capture_output=True, text=True,
                         env={**os.environ, "SLURM_NODEID": "1"}, cwd=work)
    assert ran.returncode == 0, ran.stderr
    assert f"madengine: {evil}: node rank 1" in ran.stdout and f"--tags {evil} --runs-dir" in ran.stdout
    assert "pwned" not in job.replace(f"'{evil}'", "").replace("many__touch_pwned_", "")
    assert not list(work.rglob("pwned")) and not list(repo.rglob("pwned"))


def _entry(name: str, **fields) -> dict:
    model = {"name": name, "dockerfile": "docker/x", "scripts": "scripts/s/run.sh", "tags": ["m"], **fields}
    return {"model": name, "image": f"ci-{name}_x", "image_id": f"sha256:{name:0<64}"[:71],
            "dockerfile": "docker/x.Dockerfile", "model_entry": model}


def test_every_model_of_a_manifest_is_submitted_not_just_the_first(repo, cli):
    distributed = {"launcher": "torchrun", "nnodes": 2, "nproc_per_node": 4, "master_port": 29555}
    manifest = {"format": "madengine-build-manifest", "format_version": 1, "tags": ["m"], "failed": [],
                "images": [_entry("a_dist", distributed=distributed), _entry("b_single"),
                           _entry("c_dist", distributed={"launcher": "deepspeed", "nnodes": 3})]}
    (repo / "manifest.json").write_text(json.dumps(manifest))
    result = cli("run", "--manifest-file", "manifest.json", "--executor", "slurm", "--dry-run")
    assert result.code == 0, result
    scripts = _scripts(result.stdout + result.stderr)
    assert sorted(scripts) == ["000-a_dist.node.sh", "000-a_dist.sbatch", "002-c_dist.node.sh", "002-c_dist.sbatch",
                               "array.sbatch"]
    assert "--array=0-0" in scripts["array.sbatch"] and "b_single" in scripts["array.sbatch"]
    a, c = scripts["000-a_dist.sbatch"], scripts["002-c_dist.sbatch"]
    assert "#SBATCH --nodes=2\n" in a and "#SBATCH --nodes=3\n" in c
    assert "export MASTER_PORT=29555" in a and "export MASTER_PORT=29500" in c  # the model's port, else Slurm's
    assert "export MAD_NODE_HOSTS=$NODE_HOSTS" in a and "--kill-on-bad-exit=1" in a
    node = scripts["000-a_dist.node.sh"]
    assert '--runs-dir "$NODE_DIR/runs" --output "$NODE_DIR/perf.csv"' in node and "--manifest-file" in node
    for text in scripts.values():
        assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0


def test_nodes_flag_becomes_the_jobs_nnodes_on_every_node(repo, cli):
    models = [{"name": "d", "dockerfile": "docker/x", "scripts": "scripts/s/run.sh", "tags": ["d"],
               "distributed": {"launcher": "torchrun", "nnodes": 2}}]
    (repo / "models.json").write_text(json.dumps(models))
    result = cli("run", "--tags", "d", "--executor", "slurm", "--dry-run", "--nodes", "4")
    assert result.code == 0, result
    scripts = _scripts(result.stdout + result.stderr)
    assert "#SBATCH --nodes=4\n" in scripts["000-d.sbatch"]
    assert "--additional-context '{\"distributed\": {\"nnodes\": 4}}'" in scripts["000-d.node.sh"]


def test_network_interface_is_every_tasks_nccl_and_gloo_interface(repo, cli):
    context = {"slurm": {"network_interface": "ib0", "env": {"GLOO_SOCKET_IFNAME": "eth2"}}}
    result = cli("run", "--tags", "one", "big", "--executor", "slurm", "--dry-run", "-c", json.dumps(context))
    assert result.code == 0, result
    scripts = _scripts(result.stdout + result.stderr)
    assert sorted(scripts) == ["001-big.node.sh", "001-big.sbatch", "array.sbatch"]
    for name in ("array.sbatch", "001-big.sbatch"):  # the reference's key; the user's own env wins after it
        text = scripts[name]
        assert "export NCCL_SOCKET_IFNAME=ib0 GLOO_SOCKET_IFNAME=ib0\n" in text
        assert text.index("GLOO_SOCKET_IFNAME=ib0") < text.index("export GLOO_SOCKET_IFNAME=eth2")
    plain = _scripts(cli("run", "--tags", "big", "--executor", "slurm", "--dry-run").stdout)
    assert "SOCKET_IFNAME" not in plain["000-big.sbatch"]  # each node finds its own (madengine.launch.network)
    bad = cli("run", "--tags", "one", "--executor", "slurm", "--dry-run", "-c",
              json.dumps({"slurm": {"network_interface": "eth0; reboot"}}))
    assert bad.code == 2 and "slurm: network_interface" in bad.stderr and "one word" in bad.stderr, bad


@pytest.mark.parametrize("context, message", [
    ({"slurm": {"partitions": "x"}}, "unknown Slurm setting"),
    ({"slurm": {"time": "soon"}}, "is not a Slurm time limit"),
    ({"slurm": {"partition": "gpu\n#SBATCH --uid=0"}}, "must be one word"),
    ({"slurm": {"nodes": 0}}, "must be 1 or more"),
    ({"slurm": {"executor": "slurm"}}, "cannot run a task"),
])
def test_bad_settings_are_bad_input(repo, cli, context, message):
    result = cli("run", "--tags", "one", "--executor", "slurm", "--dry-run", "-c", json.dumps(context))
    assert result.code == 2 and message in result.stderr, result


def test_a_model_name_that_is_another_models_tag_is_refused(repo, cli):
    models = MODELS + [{"name": "clash", "dockerfile": "docker/x", "scripts": "scripts/s/run.sh", "tags": ["one"]}]
    (repo / "models.json").write_text(json.dumps(models))
    result = cli("run", "--tags", "one", "--executor", "slurm", "--dry-run")
    assert result.code == 2 and "also a tag of clash" in result.stderr, result


# -- parsing recorded output -------------------------------------------------------------------
SCONTROL = (
    "JobId=12 ArrayJobId=10 ArrayTaskId=2 JobName=madengine UserId=root(0) JobState=TIMEOUT Reason=TimeLimit "
    "ExitCode=0:15 RunTime=00:01:16 TimeLimit=00:01:00 StartTime=2026-11-21T23:25:17 NodeList=mad1 BatchHost=mad1\n"
    "JobId=11 ArrayJobId=10 ArrayTaskId=1 JobName=madengine JobState=FAILED Reason=NonZeroExitCode ExitCode=3:0 "
    "TimeLimit=UNLIMITED NodeList=mad2 BatchHost=mad2\n"
    "JobId=10 ArrayJobId=10 ArrayTaskId=3-5 JobName=madengine JobState=CANCELLED Reason=None ExitCode=0:0 "
    "TimeLimit=UNLIMITED NodeList=(null) BatchHost=(null)\n"
)


def test_scontrol_records_of_an_array():
    records = parse_scontrol_jobs(SCONTROL)
    assert [(r.job_id, r.array_tasks, r.state, r.node) for r in records] == [
        ("12", [2], "TIMEOUT", "mad1"), ("11", [1], "FAILED", "mad2"), ("10", [3, 4, 5], "CANCELLED", "")]
    assert records[0].time_limit == "00:01:00" and records[1].exit_code == "3:0" and all(r.ended for r in records)


def test_squeue_lines_and_ids():
    entries = parse_squeue("10_[3-5%2]|PENDING|Resources\n10_1|RUNNING|None\n")
    assert [(e.job_id, e.state, e.reason) for e in entries] == [("10_[3-5%2]", "PENDING", "Resources"),
                                                                 ("10_1", "RUNNING", "None")]
    assert split_queue_id("10_[3-5%2]") == ("10", [3, 4, 5]) and split_queue_id("11") == ("11", None)
    assert parse_index_list("0-6:3,9") == [0, 3, 6, 9]
    assert parse_job_id("123;cluster\n") == "123"


def test_final_states_become_reasons():
    task = SlurmTask(index=0, model="m", tag="m", result_dir="/x", model_entry={}, job_id="10", array_index=2)
    timeout, failed, cancelled = parse_scontrol_jobs(SCONTROL)
    assert state_reason(timeout, task).startswith("timeout: the Slurm time limit (00:01:00)")
    assert state_reason(failed, task) == "task exited with code 3"
    assert state_reason(cancelled, task).startswith("cancelled")
    assert state_reason(None, task).startswith("final Slurm state unknown")
    task.unrunnable = "PartitionConfig"
    assert "never started" in state_reason(None, task)


def test_the_work_folders_nodes_left_are_removed_keeping_their_rank_logs(tmp_path):
    """A node's madengine that Slurm SIGKILLed left its work folder (issue 34): merging the task's
    rows removes it; the rank logs in it stay beside the node's run.log."""
    from madengine.distributed.slurm_jobs import SlurmTask, remove_left_work

    task = SlurmTask(index=0, model="m", tag="m", result_dir=str(tmp_path / "task"), model_entry={}, nodes=2)
    left = tmp_path / "task" / "node-0" / "runs" / "r1" / "ci-m" / "work"
    (left / "madengine_ranks" / "node-0" / "x" / "attempt_0" / "0").mkdir(parents=True)
    (left / "madengine_ranks" / "node-0" / "x" / "attempt_0" / "0" / "stderr.log").write_text("said\n")
    (left / "train.py").write_text("")
    done = tmp_path / "task" / "node-1" / "runs" / "r1" / "ci-m"
    done.mkdir(parents=True)
    (done / "run.log").write_text("")
    assert remove_left_work(task) == [left]
    assert not left.exists() and done.is_dir()
    kept = left.parent / "ranks" / "node-0" / "x" / "attempt_0" / "0" / "stderr.log"
    assert kept.read_text() == "said\n"
