"""``madengine run --executor slurm`` and ``madengine report collect`` against a real Slurm:
munged, slurmctld and slurmd (as root) on this host, started once for the session.

The cluster lives in a temporary folder with its own munge key, ports, state and logs; clients
find it through ``SLURM_CONF``. Two node names on this one host (two slurmd daemons) make a
two-node partition for the multi-node job. Under ``CI=true`` a missing Slurm is a failure:
``scripts/ci.d/40-slurm.sh`` installs it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import FIXTURES, REPO, require_module, require_service, run_process
from job_helpers import assert_no_marked_process, marked_context, new_mark, wait_for
from madengine.results import read_rows

pytestmark = pytest.mark.slurm

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "sinfo")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LocalSlurm:
    """munged + slurmctld + one slurmd per node name, all on this host, all in ``root``."""

    def __init__(self, root: Path, nodes: int = 2) -> None:
        self.root = root
        self.host = socket.gethostname().split(".")[0]
        self.names = [f"mad{i}" for i in range(1, nodes + 1)]
        self.conf = root / "slurm.conf"
        self.socket = root / "munge" / "munge.sock"
        self.procs: list[subprocess.Popen] = []
        self.cpus = os.cpu_count() or 1
        self.env = {"SLURM_CONF": str(self.conf)}

    def _spawn(self, argv: list[str], log: str) -> subprocess.Popen:
        handle = open(self.root / "log" / log, "ab")
        proc = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, **self.env}, start_new_session=True)
        handle.close()
        self.procs.append(proc)
        return proc

    def _write_conf(self) -> None:
        ctld, first_slurmd = _free_port(), _free_port()
        nodes = "\n".join(
            f"NodeName={name} NodeHostname={self.host} NodeAddr=127.0.0.1 Port={first_slurmd + i} "
            f"CPUs={self.cpus} RealMemory=1000 State=UNKNOWN" for i, name in enumerate(self.names))
        r = self.root
        self.conf.write_text(f"""ClusterName=madtest
SlurmctldHost={self.host}(127.0.0.1)
SlurmctldPort={ctld}
AuthType=auth/munge
AuthInfo=socket={self.socket}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool/%n
SlurmctldPidFile={r}/run/slurmctld.pid
SlurmdPidFile={r}/run/slurmd-%n.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
MaxArraySize=1001
KillWait=2
MinJobAge=600
InactiveLimit=0
{nodes}
PartitionName=debug Nodes={self.names[0]} Default=YES MaxTime=INFINITE State=UP
PartitionName=multi Nodes={','.join(self.names)} MaxTime=INFINITE State=UP
PartitionName=slow Nodes={self.names[-1]} MaxTime=INFINITE State=UP
""")

    def start(self) -> None:
        for sub in ("munge", "state", "run", "log", *(f"spool/{n}" for n in self.names)):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o755)
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        os.chmod(self.root / "munge", 0o700)
        self._spawn(["munged", "-F", "-f", f"--socket={self.socket}", f"--key-file={key}",
                     f"--log-file={self.root}/log/munged.log", f"--pid-file={self.root}/munge/munged.pid",
                     f"--seed-file={self.root}/munge/seed"], "munged.out")
        self._wait(lambda: self.socket.exists(), "munged socket")
        self._write_conf()
        self._spawn(["slurmctld", "-D", "-i", "-f", str(self.conf)], "slurmctld.out")
        for name in self.names:
            self._spawn(["slurmd", "-D", "-N", name, "-f", str(self.conf)], f"slurmd-{name}.out")
        self._wait(self._idle, "idle Slurm nodes", timeout=120)

    def _idle(self) -> bool:
        result = self.run("sinfo", "-h", "-N", "-o", "%N %T")
        states = dict(line.split() for line in result.stdout.splitlines() if len(line.split()) == 2)
        return all(states.get(name) == "idle" for name in self.names)

    def _wait(self, ready, what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.procs):
                break
            if ready():
                return
            time.sleep(0.2)
        logs = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-1500:]}"
                         for p in sorted((self.root / "log").glob("*")) if p.is_file())
        self.stop()
        raise RuntimeError(f"local Slurm: no {what} after {timeout} s\n{logs}")

    def run(self, *argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=60,
                              env={**os.environ, **self.env})

    def stop(self) -> None:
        if len(self.procs) > 1 and self.procs[1].poll() is None:  # slurmctld still up: end every job first
            self.run("scancel", "--user", "root")
            time.sleep(1)
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        self.procs.clear()


def slurm_available() -> tuple[bool, str]:
    missing = [name for name in DAEMONS if shutil.which(name) is None]
    if missing:
        return False, "missing " + ", ".join(missing) + " (apt-get install slurm-wlm munge; scripts/ci.d/40-slurm.sh)"
    if os.geteuid() != 0:
        return False, "slurmd must run as root"
    return True, ""


@pytest.fixture(scope="session")
def slurm_cluster():
    available, how = slurm_available()
    require_service("Slurm (slurm-wlm + munge)", available, how)
    root = Path(tempfile.mkdtemp(prefix="madengine-slurm-"))
    cluster = LocalSlurm(root)
    cluster.start()
    old = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(cluster.conf)  # sbatch/squeue of madengine (and of the tasks) find it
    try:
        yield cluster
    finally:
        cluster.stop()
        if old is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old
        shutil.rmtree(root, ignore_errors=True)


def test_local_cluster_runs_a_job(slurm_cluster):
    result = slurm_cluster.run("sinfo", "-h", "-o", "%R %D")
    assert "debug 1" in result.stdout and "multi 2" in result.stdout, result
    job = slurm_cluster.run("sbatch", "--parsable", "--wrap", "true", "--output", "/dev/null")
    assert job.returncode == 0 and job.stdout.strip().isdigit(), job


# -- madengine on the cluster ------------------------------------------------------------------
MODELS = [
    {"name": "sl_pass", "dockerfile": "docker/none", "scripts": "scripts/sl/pass.sh", "args": "--value 3.5",
     "n_gpus": "0", "tags": ["array"]},
    {"name": "sl_pass2", "dockerfile": "docker/none", "scripts": "scripts/sl/pass.sh", "args": "--value 7",
     "n_gpus": "0", "tags": ["array"]},
    {"name": "sl_fail", "dockerfile": "docker/none", "scripts": "scripts/sl/fail.sh", "n_gpus": "0", "tags": ["array"]},
    {"name": "sl_sleep", "dockerfile": "docker/none", "scripts": "scripts/sl/sleep.sh", "n_gpus": "0",
     "tags": ["sleepy"]},
    {"name": "sl_multi", "dockerfile": "docker/none", "scripts": "scripts/sl/ranks.sh", "n_gpus": "0",
     "distributed": {"nnodes": 2}, "tags": ["multinode"]},
    # torchrun over gloo on 2 nodes of one rank each (tests/fixtures/torchrun/scripts/ddp)
    {"name": "sl_torch", "dockerfile": "docker/none", "scripts": "scripts/ddp", "args": "--steps 6", "n_gpus": "0",
     "distributed": {"launcher": "torchrun", "nnodes": 2, "nproc_per_node": 1}, "tags": ["torchjob"]},
    {"name": "sl_torch_hang", "dockerfile": "docker/none", "scripts": "scripts/ddp", "args": "--steps 4 --hang-rank 1",
     "n_gpus": "0", "distributed": {"launcher": "torchrun", "nnodes": 2, "nproc_per_node": 1}, "tags": ["torchhang"]},
    {"name": "sl_torch_kill", "dockerfile": "docker/none", "scripts": "scripts/ddp",
     "args": "--steps 6 --kill-rank 1 --deaf-rank 0",
     "n_gpus": "0", "distributed": {"launcher": "torchrun", "nnodes": 2, "nproc_per_node": 1}, "tags": ["torchkill"]},
]
SCRIPTS = {
    "pass.sh": 'echo "pass on $(hostname): $*"\necho "performance: $2 items/s"\n',
    "fail.sh": 'echo "about to fail"\nexit 3\n',
    "sleep.sh": 'echo "sleeping"\nsleep 600\necho "performance: 1 s"\n',
    # node 1 starts its model step late: node 0's timeout comes first, and Slurm ends node 1
    "late.sh": 'if [ "${NODE_RANK:-0}" = 1 ]; then sleep 15; fi\n',
    "ranks.sh": 'echo "rank $NODE_RANK of $NNODES via $MASTER_ADDR:$MASTER_PORT collect=${MAD_COLLECT_METRICS:-true}"\n'
                'echo "interfaces nccl=${NCCL_SOCKET_IFNAME:-} gloo=${GLOO_SOCKET_IFNAME:-}"\n'
                'echo "performance: $((NODE_RANK + 10)) nodes"\n',
}
CONTEXT = json.dumps({"slurm": {"executor": "local", "poll_interval": 0.3}})


def _write_repo(root: Path) -> Path:
    (root / "scripts" / "sl").mkdir(parents=True)
    shutil.copytree(FIXTURES / "torchrun" / "scripts" / "ddp", root / "scripts" / "ddp")
    (root / "models.json").write_text(json.dumps(MODELS))
    for name, body in SCRIPTS.items():
        (root / "scripts" / "sl" / name).write_text("#!/usr/bin/env bash\n" + body)
    return root


@pytest.fixture
def slurm_repo(slurm_cluster, tmp_path, monkeypatch):
    repo = _write_repo(tmp_path / "repo")
    monkeypatch.chdir(repo)
    monkeypatch.delenv("MODEL_DIR", raising=False)
    return repo


def _rows(path: Path) -> dict[str, dict[str, str]]:
    return {r["model"]: r for r in read_rows(path)}


@pytest.fixture(scope="module")
def timeout_job(slurm_cluster, tmp_path_factory):
    """A model that outlives its 1-minute Slurm limit, submitted without waiting as early as possible:
    Slurm enforces limits in whole minutes, so the other tests run while it times out."""
    repo = _write_repo(tmp_path_factory.mktemp("timeout") / "repo")
    result = run_process("run", "--tags", "sl_sleep", "--executor", "slurm", "--partition", "slow", "--time", "1",
                         "--no-wait", "-c", CONTEXT, cwd=repo, env={"SLURM_CONF": str(slurm_cluster.conf)})
    job_ids = re.findall(r"submitted Slurm job (\d+)", result.stderr)
    return repo, result, job_ids


def test_no_wait_submits_and_says_how_to_collect(timeout_job):
    repo, result, job_ids = timeout_job
    assert result.returncode == 0, result.stderr
    assert len(job_ids) == 1 and job_ids[0] in result.stdout + result.stderr
    assert f"madengine report collect --job {job_ids[0]}" in result.stderr
    assert not (repo / "perf.csv").exists()  # nothing merged yet
    job = json.loads(next((repo / "slurm_results").glob("*/job.json")).read_text())
    assert job["job_ids"] == job_ids and job["tasks"][0]["model"] == "sl_sleep"


def test_array_runs_every_model_and_merges_rows(slurm_repo, cli):
    result = cli("run", "--tags", "array", "--executor", "slurm", "-c", CONTEXT, "--live-output", "--json")
    assert result.code == 1, result  # sl_fail failed
    rows = _rows(slurm_repo / "perf.csv")
    assert set(rows) == {"sl_pass", "sl_pass2", "sl_fail"}
    assert (rows["sl_pass"]["status"], rows["sl_pass"]["performance"]) == ("SUCCESS", "3.5")
    assert rows["sl_pass2"]["status"] == "SUCCESS" and float(rows["sl_pass2"]["performance"]) == 7.0
    assert rows["sl_fail"]["status"] == "FAILURE" and "exited with code 3" in rows["sl_fail"]["reason"]
    job_ids = {r["slurm_job_id"].split("_")[0] for r in rows.values()}
    assert len(job_ids) == 1  # one job array ...
    assert sorted(r["slurm_job_id"].split("_")[1] for r in rows.values()) == ["0", "1", "2"]  # ... one task per model
    summary = json.loads(result.stdout)
    assert all(r["executor"] == "slurm" and r["run_id"] == summary["run_id"] for r in rows.values())
    assert summary["counts"] == {"SUCCESS": 2, "FAILURE": 1, "SKIPPED": 0}
    assert summary["slurm"]["job_ids"] == sorted(job_ids)
    assert "[sl_pass]" in result.stderr and "pass on" in result.stderr  # --live-output streamed the task logs
    assert "[sl_pass] [" not in result.stderr  # one prefix per line, not the task's and the submitter's


def test_multi_node_model_gets_its_own_job_with_rendezvous_env(slurm_repo, cli):
    result = cli("run", "--tags", "multinode", "--executor", "slurm", "--partition", "multi", "-c", CONTEXT)
    assert result.code == 0, result
    rows = read_rows(slurm_repo / "perf.csv")
    # one row of the job: the nodes' figures (10 and 11 'nodes', a name no rule knows) summed
    assert [(r["model"], r["status"], r["performance"]) for r in rows] == [("sl_multi", "SUCCESS", "21.0")]
    assert (rows[0]["nnodes"], rows[0]["node_n"], rows[0]["node_performance"]) == ("2", "2", "[10.0, 11.0]")
    log = Path(rows[0]["artifacts"].split(",")[-1]).read_text()
    assert "rank 0 of 2 via 127.0.0.1:29500 collect=true" in log
    assert "rank 1 of 2 via 127.0.0.1:29500 collect=false" in log
    assert log.count("interfaces nccl=lo gloo=lo") == 2  # each node's interface to the rendezvous (127.0.0.1)
    for node in (0, 1):  # each node's own log, apart from the job's
        node_log = next((slurm_repo / "slurm_results").glob(f"*/tasks/*-sl_multi/node-{node}/runs/*/*/run.log"))
        assert f"rank {node} of 2" in node_log.read_text()


def test_cancelled_job_is_a_failure_row_and_merges_once(slurm_repo, slurm_cluster, cli):
    submitted = cli("run", "--tags", "sl_sleep", "sl_pass", "--executor", "slurm", "--no-wait", "-c", CONTEXT)
    assert submitted.code == 0, submitted
    job_id = re.search(r"submitted Slurm job (\d+)", submitted.stderr).group(1)
    wait_for(lambda: "RUNNING" in slurm_cluster.run("squeue", "-h", "-j", f"{job_id}_1", "-o", "%T").stdout)
    # sl_pass (task 0) done first: a loaded host can still be ending its task when scancel comes, and
    # what a cancel in that moment leaves is not what this test is about
    wait_for(lambda: "JobState=COMPLETED" in slurm_cluster.run("scontrol", "show", "job", f"{job_id}_0").stdout)
    slurm_cluster.run("scancel", job_id)
    result = cli("report", "collect", "--job", job_id, "--poll-interval", "0.3")
    assert result.code == 1, result
    rows = _rows(slurm_repo / "perf.csv")
    assert rows["sl_sleep"]["status"] == "FAILURE" and rows["sl_sleep"]["reason"].startswith("cancelled")
    assert rows["sl_sleep"]["slurm_job_id"] == f"{job_id}_1"  # catalog order: sl_pass is task 0
    assert rows["sl_pass"]["status"] == "SUCCESS"  # the task that ended before the cancel keeps its row
    again = cli("report", "collect", "--job", job_id)
    assert again.code == 2 and "already merged" in again.stderr
    assert len(read_rows(slurm_repo / "perf.csv")) == 2


def test_unknown_partition_is_refused_before_submission(slurm_repo, slurm_cluster, cli):
    result = cli("run", "--tags", "sl_pass", "--executor", "slurm", "--partition", "nope", "-c", CONTEXT)
    assert result.code == 2, result
    assert "no partition 'nope'" in result.stderr and "debug" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert not (slurm_repo / "perf.csv").exists()


def test_refused_submission_is_a_failure_never_a_success(slurm_repo, cli):
    result = cli("run", "--tags", "sl_pass", "--executor", "slurm", "--slurm-args=--partition=nope", "-c", CONTEXT)
    assert result.code == 1, result
    row = read_rows(slurm_repo / "perf.csv")[0]
    assert row["status"] == "FAILURE" and row["reason"].startswith("not submitted: sbatch refused the job")
    assert "invalid partition" in row["reason"].lower()


def test_job_slurm_can_never_start_is_cancelled_not_awaited(slurm_repo, slurm_cluster, cli):
    too_many = slurm_cluster.cpus + 1  # the nodes declare this machine's CPUs, however many it has
    result = cli("run", "--tags", "sl_pass", "--executor", "slurm", f"--slurm-args=--cpus-per-task={too_many}",
                 "-c", CONTEXT)
    assert result.code == 1, result
    row = read_rows(slurm_repo / "perf.csv")[0]
    assert row["status"] == "FAILURE" and "never started" in row["reason"] and "PartitionConfig" in row["reason"]
    job_id = row["slurm_job_id"].split("_")[0]
    assert slurm_cluster.run("squeue", "-h", "-j", job_id).stdout.strip() == ""  # cancelled, not left pending


def test_task_over_its_time_limit_is_a_timeout_row(timeout_job, cli, monkeypatch):
    repo, _, job_ids = timeout_job
    monkeypatch.chdir(repo)
    result = cli("report", "collect", "--job", job_ids[0], "--poll-interval", "1")
    assert result.code == 1, result
    row = read_rows(repo / "perf.csv")[0]
    assert row["model"] == "sl_sleep" and row["status"] == "FAILURE"
    assert row["reason"].startswith("timeout: the Slurm time limit (00:01:00) was reached"), row["reason"]


# -- torchrun on two nodes ---------------------------------------------------------------------------
def _torch_context(mark: str, executor: str = "local", **more) -> str:
    return json.dumps(marked_context(mark, slurm={"executor": executor, "poll_interval": 0.3,
                                                  "master_port": _free_port()}, **more))


def _job_left(slurm_cluster, row: dict[str, str]) -> str:
    return slurm_cluster.run("squeue", "-h", "-j", row["slurm_job_id"]).stdout.strip()


def test_torchrun_on_two_nodes_is_one_row_with_world_size_two(slurm_repo, slurm_cluster, cli):
    require_module("torch")
    mark = new_mark()
    result = cli("run", "--tags", "torchjob", "--executor", "slurm", "--partition", "multi",
                 "-c", _torch_context(mark))
    assert result.code == 0, result
    [row] = read_rows(slurm_repo / "perf.csv")
    assert (row["model"], row["status"], row["metric"]) == ("sl_torch", "SUCCESS", "samples_per_second")
    assert (row["launcher"], row["world_size"], row["nnodes"], row["nproc_per_node"]) == ("torchrun", "2", "2", "1")
    nodes = json.loads(row["node_performance"])
    assert row["node_aggregation"] == "sum" and row["node_n"] == "2" and float(row["node_cv"]) >= 0
    assert len(nodes) == 2 and float(row["performance"]) == pytest.approx(sum(nodes), rel=1e-12)
    task = next((slurm_repo / "slurm_results").glob("*/tasks/*-sl_torch"))
    for node in (0, 1):  # each node's log and its rank's own files, kept apart
        [rank_out] = task.glob(f"node-{node}/runs/*/*/ranks/node-{node}/rank-{node}/stdout.log")
        assert f"rank {node} of 2: 6 steps" in rank_out.read_text()
    assert_no_marked_process(mark)
    assert _job_left(slurm_cluster, row) == ""


@pytest.mark.docker
def test_torchrun_on_two_nodes_in_docker_is_one_container_per_node(slurm_repo, slurm_cluster, cli, docker_client):
    """Each node's madengine runs its rank in a container of its own, on the host's network (the
    other node reaches its rendezvous), in the repository's torch image."""
    done = subprocess.run(["bash", str(REPO / "scripts" / "pyt-wheels.sh")], capture_output=True, text=True,
                          timeout=900)
    require_service("the pyt image's wheels", done.returncode == 0, done.stderr[-400:])
    models = json.loads((slurm_repo / "models.json").read_text())
    torch_model = next(m for m in models if m["name"] == "sl_torch")
    models.append(dict(torch_model, name="tr_sl_docker", tags=["torchdocker"], dockerfile="docker/pyt",
                       dockercontext=str(REPO / "wheels" / "pyt")))
    (slurm_repo / "models.json").write_text(json.dumps(models))
    (slurm_repo / "docker").mkdir(exist_ok=True)
    shutil.copy2(REPO / "docker" / "pyt.Dockerfile", slurm_repo / "docker" / "pyt.Dockerfile")
    mark = new_mark()
    try:
        # built once here: the nodes then find the image up to date instead of building it at once
        assert cli("build", "--tags", "torchdocker").code == 0
        result = cli("run", "--tags", "torchdocker", "--executor", "slurm", "--partition", "multi",
                     "-c", _torch_context(mark, executor="docker"))
        assert result.code == 0, result
        [row] = read_rows(slurm_repo / "perf.csv")
        assert (row["status"], row["world_size"], row["nnodes"], row["node_n"]) == ("SUCCESS", "2", "2", "2"), row
        assert row["image_id"].startswith("sha256:")
        assert_no_marked_process(mark)
        assert not [c.name for c in docker_client.containers.list(all=True) if "tr_sl_docker" in c.name]
    finally:
        for image in docker_client.images.list():
            for tag in image.tags:
                if tag.startswith("ci-tr_sl_docker"):
                    docker_client.images.remove(tag, force=True)


def _failed_two_node_torch_job(cli, repo: Path, tag: str, timeout: str, mark: str, **context) -> dict:
    """The one row of ``run --tags TAG`` on the 2-node partition, which must exit 1."""
    require_module("torch")
    result = cli("run", "--tags", tag, "--executor", "slurm", "--partition", "multi", "--timeout", timeout,
                 "-c", _torch_context(mark, **context))
    assert result.code == 1, result
    [row] = read_rows(repo / "perf.csv")
    return row


def test_a_hung_rank_on_one_node_is_ended_on_every_node_at_the_timeout(slurm_repo, slurm_cluster, cli):
    """Node 1 starts its model step 15 s late (a pre-script), so node 0's timeout comes first (its
    rank had finished: it names none) and Slurm ends node 1 with SIGTERM to every process of its
    step, the hung rank too. Node 1's reason names that rank all the same, and comes first."""
    mark = new_mark()
    # 90 s: both nodes' ranks must have started before the timeout, which on a loaded host (the
    # second node's madengine, its torchrun and the rendezvous starting late) took more than 40 s,
    # and node 1 starts 15 s later still
    row = _failed_two_node_torch_job(cli, slurm_repo, "torchhang", "90", mark,
                                     pre_scripts=[{"path": "scripts/sl/late.sh"}])
    assert row["status"] == "FAILURE" and row["world_size"] == "2"
    first, _, also = row["reason"].partition(" (also ")
    assert first.startswith("node 1: interrupted by SIGTERM during model; ") and \
        "rank 1 (node 1, local rank 0) was still running" in first, row["reason"]
    assert also.startswith("node 0: timeout: model ran longer than 90 s"), row["reason"]
    assert_no_marked_process(mark)
    assert _job_left(slurm_cluster, row) == ""


def test_a_killed_rank_is_named_first_and_no_node_leaves_its_work_folder(slurm_repo, slurm_cluster, cli):
    """Issue 34: rank 1 (node 1) is SIGKILLed halfway; node 1's torchrun fails, srun then ends node 0
    (--kill-on-bad-exit). Node 0's rank ignores SIGTERM, so its madengine (which gives a rank 5 s
    after SIGTERM) is SIGKILLed by Slurm (KillWait 2 s) before it writes its row: the race node 0
    sometimes lost, now every time. The reason names the killed rank first (before: "node 0: wrote no
    result row" came first), and node 0's work folder is not left on disk (before: it was)."""
    mark = new_mark()
    row = _failed_two_node_torch_job(cli, slurm_repo, "torchkill", "120", mark)
    assert row["status"] == "FAILURE" and row["model"] == "sl_torch_kill", row
    assert row["reason"].startswith("rank 1 (node 1, local rank 0) was killed by SIGKILL"), row["reason"]
    assert not list(slurm_repo.glob("slurm_results/*/tasks/*/node-*/runs/*/*/work")), \
        list(slurm_repo.glob("slurm_results/*/tasks/*/node-*/runs/*/*/work"))
    assert_no_marked_process(mark)
    assert _job_left(slurm_cluster, row) == ""


def test_cancelling_a_multi_node_job_leaves_no_rank_and_no_step_behind(slurm_repo, slurm_cluster, cli):
    """What Ctrl-C of the submitting madengine does (scancel) while a rank hangs on the second node."""
    require_module("torch")
    mark = new_mark()
    submitted = cli("run", "--tags", "torchhang", "--executor", "slurm", "--partition", "multi", "--no-wait",
                    "-c", _torch_context(mark))
    assert submitted.code == 0, submitted
    job_id = re.search(r"submitted Slurm job (\d+)", submitted.stderr).group(1)
    pattern = "slurm_results/*/tasks/*/node-1/runs/*/*/work/madengine_ranks/node-1/*/attempt_0/0/stdout.log"
    wait_for(lambda: any("rank 1 hangs" in log.read_text() for log in slurm_repo.glob(pattern)), timeout=180)
    slurm_cluster.run("scancel", job_id)
    wait_for(lambda: slurm_cluster.run("squeue", "-h", "-j", job_id).stdout.strip() == "", timeout=60)
    assert_no_marked_process(mark)
    result = cli("report", "collect", "--job", job_id, "--poll-interval", "0.3")
    assert result.code == 1, result
    [row] = read_rows(slurm_repo / "perf.csv")
    assert row["status"] == "FAILURE" and row["model"] == "sl_torch_hang"
    assert "interrupted by SIGTERM" in row["reason"] or row["reason"].startswith("cancelled"), row["reason"]


def test_doctor_asks_the_cluster(slurm_cluster):
    """``madengine doctor --executor slurm``: sinfo of this cluster, partitions and node states."""
    done = run_process("doctor", "--json", "--no-collective", "--executor", "slurm", env=slurm_cluster.env)
    assert "Traceback" not in done.stderr
    slurm = next(check for check in json.loads(done.stdout)["checks"] if check["name"] == "slurm")
    assert slurm["status"] == "PASS", slurm
    assert {"debug*", "multi", "slow"} == set(slurm["data"]["partitions"])
    assert sum(slurm["data"]["partitions"]["multi"].values()) == 2 and slurm["summary"].startswith("sinfo answers: ")
