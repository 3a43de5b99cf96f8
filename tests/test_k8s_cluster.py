"""``madengine run --executor k8s`` against a local stand-in for a cluster (tests/k8s_standin.py):
a real HTTP server speaking the Kubernetes API to the official client, whose pods run as real
containers of the Docker engine with the environment, files and limits the pod spec gives them.
Kubernetes itself cannot run here; nothing in these tests pretends a pod ran.

Each test says what the stand-in saw (created, watched, logs read, deleted with Foreground
propagation) and what madengine recorded.
"""

from __future__ import annotations

import json
import os
import re
import signal
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import FIXTURES, require_module, run_record
from job_helpers import make_torch_repo
from k8s_standin import StandIn
from madengine.results import read_rows

pytestmark = pytest.mark.docker
IMAGES = ["ci-k8s_"]


@pytest.fixture
def standin_factory(docker_client, docker_cleanup):
    docker_cleanup.extend(IMAGES)
    made: list[StandIn] = []

    def make(**options) -> StandIn:
        made.append(StandIn(docker_client, **options).start())
        return made[-1]
    yield make
    for standin in made:
        standin.close()


@pytest.fixture
def standin(standin_factory):
    return standin_factory()


@pytest.fixture
def k8s_repo(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURES / "k8s", repo)
    monkeypatch.chdir(repo)
    monkeypatch.delenv("MODEL_DIR", raising=False)
    return repo


def context(standin: StandIn, folder: Path, **k8s) -> str:
    block = {"kubeconfig": str(standin.kubeconfig(folder / "kubeconfig")), "image_pull_policy": "Never",
             "pending_timeout": 0, **k8s}
    return json.dumps({"k8s": block})


def rows(repo: Path) -> dict[str, dict]:
    return {row["model"]: row for row in read_rows(repo / "perf.csv")}


def assert_nothing_left(standin: StandIn) -> None:
    deadline = time.monotonic() + 30
    while (standin.names("Job") or standin.names("Pod")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert standin.names("Job") == standin.names("Pod") == standin.names("ConfigMap") == \
        standin.names("Secret") == standin.names("Service") == []
    left = standin.docker.containers.list(all=True, filters={"label": f"k8s-standin={standin.id}"})
    assert left == []


def test_two_models_are_created_watched_logged_recorded_and_deleted(standin, k8s_repo, cli, tmp_path):
    result = cli("run", "--tags", "k8s_ok", "k8s_sweep", "--executor", "k8s", "-c", context(standin, tmp_path))
    assert result.code == 0, result
    found = rows(k8s_repo)
    assert [found[m]["status"] for m in ("k8s_ok", "k8s_sweep_b1", "k8s_sweep_b8")] == ["SUCCESS"] * 3
    ok = found["k8s_ok"]
    assert (ok["performance"], ok["metric"], ok["executor"], ok["training_precision"]) == \
        ("123.5", "samples_per_second", "k8s", "fp32")
    assert ok["docker_image"] == "ci-k8s_ok_base" and ok["machine_name"] == standin.node
    pods = json.loads(ok["k8s_pods"])
    assert len(pods) == 1 and pods[0].startswith(ok["k8s_job"]) and json.loads(ok["k8s_nodes"]) == [standin.node]
    assert (found["k8s_sweep_b1"]["performance"], found["k8s_sweep_b8"]["batch"]) == ("10.5", "8")
    jobs = [r["body"]["metadata"]["name"] for r in standin.seen("POST", "Job")]
    assert sorted(jobs) == sorted({ok["k8s_job"], found["k8s_sweep_b1"]["k8s_job"]})
    assert len(standin.seen("POST", "ConfigMap")) == 2
    assert [r for r in standin.seen("GET", "Pod") if r["query"].get("watch", "").lower() == "true"]
    assert {r["name"] for r in standin.seen("GET", "Pod", sub="log")} >= {pods[0]}
    deleted = standin.seen("DELETE", "Job")
    assert sorted(r["name"] for r in deleted) == sorted(jobs)
    assert all(r["body"]["propagationPolicy"] == "Foreground" for r in deleted)
    log = Path(ok["artifacts"].split(",")[0]).read_text()
    # the arguments reach the script exactly as models.json has them ($(HOME) is not the kubelet's to expand)
    assert "arg: [two words]\narg: [--price]\narg: [$(HOME)]" in log
    assert "workspace writable" in log and "configmap read-only" in log and "CapEff:\t0000000000000000" in log
    assert "helper ran from the scripts folder" in log
    assert_nothing_left(standin)


def _wait_for(standin: StandIn, jobs: int, running: int, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pods = standin.pods()
        if len(standin.names("Job")) >= jobs and sum(p["status"].get("phase") == "Running" for p in pods) >= running:
            return
        time.sleep(0.2)
    raise AssertionError(f"jobs {standin.names('Job')}, pods {[p['status'] for p in standin.pods()]}")


@pytest.mark.parametrize("stop,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stop_mid_run_deletes_both_jobs(standin, k8s_repo, tmp_path, stop, code):
    process = subprocess.Popen([sys.executable, "-m", "madengine", "run", "--tags", "pair", "--executor", "k8s", "-c",
                                context(standin, tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        _wait_for(standin, jobs=2, running=2)
        jobs = standin.names("Job")
        process.send_signal(stop)
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == code, err
    deleted = standin.seen("DELETE", "Job")
    assert sorted(r["name"] for r in deleted) == jobs and len(jobs) == 2
    assert all(r["body"]["propagationPolicy"] == "Foreground" for r in deleted)
    found = rows(k8s_repo)
    assert {m: (found[m]["status"], found[m]["reason"]) for m in ("k8s_slow", "k8s_slow_too")} == {
        m: ("FAILURE", "interrupted" if stop == signal.SIGINT else "interrupted by SIGTERM")
        for m in ("k8s_slow", "k8s_slow_too")}
    assert_nothing_left(standin)


@pytest.mark.parametrize("left", ["Running", "Pending"])
def test_a_rerun_replaces_what_an_earlier_run_left(standin, k8s_repo, cli, tmp_path, left):
    """``left``: the earlier run's pod still runs (its image is there), or waits for its image
    (it goes at once, and the new Job follows within a poll)."""
    import yaml

    if left == "Running":
        assert cli("build", "--tags", "k8s_ok").code == 0
    first = cli("k8s", "render", "--tags", "k8s_ok", "--output-dir", str(tmp_path / "old"))
    for path in sorted(Path(p) for p in first.stdout.split()):  # what a run that died left behind
        obj = yaml.safe_load(path.read_text())
        if obj["kind"] == "Job":
            obj["spec"]["template"]["spec"]["containers"][0]["args"] = ["sleep", "600"]
            obj["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 3  # sleep ignores SIGTERM
        standin.create(obj["kind"], "default", obj)
    name = standin.names("Job")[0]
    deadline = time.monotonic() + 60
    while not any(p["status"]["phase"] == left and p["status"].get("containerStatuses") for p in standin.pods()) \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [p["status"]["phase"] for p in standin.pods()] == [left]
    result = cli("run", "--tags", "k8s_ok", "--executor", "k8s", "-c", context(standin, tmp_path))
    assert result.code == 0, (result, run_record(k8s_repo))
    assert [r["method"] for r in standin.requests if r["kind"] == "Job" and r["method"] != "GET"] == \
        ["DELETE", "POST", "DELETE"]  # replaced (the old one deleted, the new created), then cleaned up
    assert standin.seen("PUT", "ConfigMap", f"{name}-files")
    assert rows(k8s_repo)["k8s_ok"]["status"] == "SUCCESS"
    assert_nothing_left(standin)


def delete_and_wait(standin: StandIn, job: str) -> None:
    """Delete a Job as madengine does (Foreground) and wait until it is gone (its pods first)."""
    standin.delete("Job", "default", job, {"propagationPolicy": "Foreground"})
    deadline = time.monotonic() + 30
    while standin.get("Job", "default", job) is not None:
        assert time.monotonic() < deadline, f"the Job {job} was not gone within 30 s"
        time.sleep(0.001)


def test_a_job_made_again_under_its_name_is_not_run_by_the_controller_of_the_one_before(standin):
    """The stand-in's own job controller: one per Job uid. (Before, the controller of a deleted
    Job, waking after its successor was made, counted its own vanished pod against the new Job
    and failed it: a rerun's FAILURE that Kubernetes would never give.)"""
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "again", "namespace": "default"},
           "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": {}}, "spec": {"containers": [
               {"name": "model", "image": "madengine-test-absent:1", "args": ["true"]}]}}}}
    failed = 0
    for attempt in range(20):
        standin.create("Job", "default", job)
        time.sleep(0.05 + attempt % 7 * 0.01)
        delete_and_wait(standin, "again")
        standin.create("Job", "default", job)
        time.sleep(0.3)
        conditions = (standin.get("Job", "default", "again") or {}).get("status", {}).get("conditions") or []
        failed += any(c["type"] == "Failed" for c in conditions)
        delete_and_wait(standin, "again")
    assert failed == 0
    assert standin.names("Pod") == []


def test_failures_say_what_kubernetes_and_the_model_said(standin, k8s_repo, cli, tmp_path):
    result = cli("run", "--tags", "fail", "oom", "--executor", "k8s", "-c",
                 context(standin, tmp_path, memory_limit="128Mi"))
    assert result.code == 1, result
    found = rows(k8s_repo)
    assert found["k8s_fail"]["reason"].startswith("model script exited with code 3 (pod mad-k8s-fail-")
    assert found["k8s_fail"]["reason"].endswith(f"on node {standin.node}): boom: the fixture failed on purpose")
    assert found["k8s_oom"]["reason"].startswith("OOMKilled: pod mad-k8s-oom-")
    assert found["k8s_oom"]["reason"].endswith("went over its memory limit (128Mi)")
    assert_nothing_left(standin)


def test_a_job_past_its_deadline_is_a_timeout(standin, k8s_repo, cli, tmp_path):
    result = cli("run", "--tags", "k8s_slow", "--executor", "k8s", "--timeout", "3", "-c", context(standin, tmp_path))
    assert result.code == 1, result
    reason = rows(k8s_repo)["k8s_slow"]["reason"]
    assert reason == "timeout: the job ran longer than 3 s (activeDeadlineSeconds); Kubernetes stopped its pods"
    assert_nothing_left(standin)


def _manifest(repo: Path, reference: str, image_id: str) -> Path:
    entry = json.loads((repo / "models.json").read_text())[0]
    manifest = {"format": "madengine-build-manifest", "format_version": 1, "build_id": "b", "tags": ["k8s_ok"],
                "context": {}, "registry": "registry.invalid:5000",
                "images": [{"model": "k8s_ok", "image": "ci-k8s_ok_base", "image_id": image_id,
                            "dockerfile": "docker/base.Dockerfile", "registry_image": reference,
                            "model_entry": entry}]}
    path = repo / "pushed_manifest.json"
    path.write_text(json.dumps(manifest))
    return path


def test_an_image_the_cluster_cannot_pull_is_a_failure_row(standin, k8s_repo, cli, tmp_path):
    manifest = _manifest(k8s_repo, "registry.invalid:5000/ci-k8s_ok_base@sha256:" + "b" * 64, "sha256:" + "b" * 64)
    result = cli("run", "--manifest-file", str(manifest), "--executor", "k8s", "-c",
                 context(standin, tmp_path, image_pull_policy="IfNotPresent"))
    assert result.code == 1, result
    reason = rows(k8s_repo)["k8s_ok"]["reason"]
    assert reason.startswith("pod mad-k8s-ok-") and re.search(r"image pull failed \((ErrImagePull|ImagePullBackOff)\)",
                                                             reason), reason
    assert "registry.invalid:5000/ci-k8s_ok_base@sha256:" in reason and "k8s.pending_timeout" in reason
    assert_nothing_left(standin)


def test_a_pod_no_node_can_take_is_a_failure_row(standin_factory, k8s_repo, cli, tmp_path):
    standin = standin_factory(allocatable={"amd.com/gpu": "1"}, nodes_forbidden=True)  # the check cannot tell
    result = cli("run", "--tags", "k8s_ok", "--executor", "k8s", "-c",
                 context(standin, tmp_path, gpu_resource_name="amd.com/gpu", gpu_count=2))
    assert result.code == 1, result
    reason = rows(k8s_repo)["k8s_ok"]["reason"]
    assert "unschedulable: 0/1 nodes are available: 1 Insufficient amd.com/gpu." in reason, reason
    assert_nothing_left(standin)


def test_more_gpus_than_a_node_has_is_bad_input_when_the_cluster_tells(standin_factory, k8s_repo, cli, tmp_path):
    standin = standin_factory(allocatable={"amd.com/gpu": "1"})
    result = cli("run", "--tags", "k8s_ok", "--executor", "k8s", "-c",
                 context(standin, tmp_path, gpu_resource_name="amd.com/gpu", gpu_count=2))
    assert result.code == 2 and len(result.stderr.strip().splitlines()) == 1, result
    assert "k8s.gpu_count: model 'k8s_ok' asks 2 amd.com/gpu per pod; the most a node can give is 1" in result.stderr
    assert not [r for r in standin.requests if r["method"] != "GET"]


def test_credentials_reach_the_pod_through_a_secret_only(standin, k8s_repo, cli, tmp_path, monkeypatch):
    password = "k8s-pw-5d2c9e"
    monkeypatch.setenv("K8S_TEST_CRED", json.dumps({"username": "bob", "password": password}))
    result = cli("run", "--tags", "secret", "--executor", "k8s", "--live-output", "-c", context(standin, tmp_path))
    assert result.code == 0, result
    secret = standin.seen("POST", "Secret")[0]["body"]
    assert secret["type"] == "Opaque" and set(secret["data"]) == {"K8S_TEST_CRED_USERNAME", "K8S_TEST_CRED_PASSWORD"}
    for request in standin.requests:
        if request["kind"] != "Secret":
            assert password not in json.dumps(request["body"]), request["kind"]
    row = rows(k8s_repo)["k8s_secret"]
    log = Path(row["artifacts"]).read_text()
    assert "user: bob password: ******" in log  # the pod printed it; madengine's copy is redacted
    assert password not in (k8s_repo / "perf.csv").read_text() + result.stdout + result.stderr
    assert_nothing_left(standin)


def test_build_then_run_the_manifest(standin, k8s_repo, cli, tmp_path):
    built = cli("build", "--tags", "k8s_ok")
    assert built.code == 0, built
    refused = cli("run", "--manifest-file", "build_manifest.json", "--executor", "k8s", "-c",
                  context(standin, tmp_path, image_pull_policy="Always"))
    assert refused.code == 2 and "madengine build --registry" in refused.stderr, refused
    result = cli("run", "--manifest-file", "build_manifest.json", "--executor", "k8s", "-c",
                 context(standin, tmp_path))
    assert result.code == 0, result
    row = rows(k8s_repo)["k8s_ok"]
    manifest = json.loads((k8s_repo / "build_manifest.json").read_text())
    assert row["status"] == "SUCCESS" and row["image_id"] == manifest["images"][0]["image_id"]
    assert_nothing_left(standin)


def test_dry_run_writes_the_objects_and_submits_nothing(standin, k8s_repo, cli, tmp_path):
    result = cli("run", "--tags", "pair", "--executor", "k8s", "--dry-run", "-c", context(standin, tmp_path))
    assert result.code == 0, result
    files = [Path(line) for line in result.stdout.split()]
    assert len(files) == 4 and all(p.is_file() and "/k8s/mad-k8s-" in str(p) for p in files)
    assert standin.requests == [] and not (k8s_repo / "perf.csv").exists()


# -- a real 2-node torchrun job ---------------------------------------------------------------------
@pytest.fixture
def torch_repo(tmp_path, monkeypatch, docker_cleanup, pyt_wheels):
    """tests/fixtures/torchrun in the repository's torch image, as tests/test_torchrun_jobs.py runs it."""
    require_module("torch")
    docker_cleanup.append("ci-tr_")
    repo = make_torch_repo(tmp_path / "repo")
    monkeypatch.chdir(repo)
    return repo


@pytest.mark.slow
def test_a_two_node_torchrun_job_is_one_row_equal_to_the_slurm_paths_for_the_same_logs(standin_factory, torch_repo,
                                                                                        tmp_path, cli):
    """Two pods (an Indexed Job, on two nodes) meet at pod 0's DNS name through the headless Service
    and run 4 gloo ranks; each pod's log has its node's figure; the row is what the Slurm path's merge
    (results.aggregate.job_rows of the rows its nodes would write from those logs) records."""
    from madengine.results.aggregate import JOB_COLUMNS, JobShape, job_rows
    from madengine.results.parsing import parse_performance

    repo = torch_repo
    standin = standin_factory(nodes=2)  # one pod per node
    ctx = json.loads(context(standin, tmp_path))
    ctx["distributed"] = {"nnodes": 2}
    result = cli("run", "--tags", "tr_ddp", "--executor", "k8s", "-c", json.dumps(ctx))
    assert result.code == 0, result
    row = rows(repo)["tr_ddp"]
    assert (row["status"], row["launcher"], row["world_size"], row["nnodes"], row["nproc_per_node"], row["node_n"],
            row["node_aggregation"]) == ("SUCCESS", "torchrun", "4", "2", "2", "2", "sum")
    job = row["k8s_job"]
    hosts = [r["body"] for r in standin.seen("POST", "Service")]
    assert [h["metadata"]["name"] for h in hosts] == [job]
    files = standin.seen("POST", "ConfigMap")[0]["body"]["data"]
    assert all(f"--node_rank={n} --master_addr={job}-0.{job}.default.svc.cluster.local " in files[f"node-{n}.env"]
               for n in (0, 1))
    texts = [Path(p).read_text() for p in row["artifacts"].split(",")]
    assert sorted(rank for t in texts for rank in re.findall(r"\brank (\d) of 4: 6 steps", t)) == ["0", "1", "2", "3"]
    node_rows = {}
    for node, text in enumerate(texts):  # what each Slurm node's `madengine run` writes from this log
        figure = parse_performance(text)
        node_rows[node] = [{"model": "tr_ddp", "status": "SUCCESS", "performance": repr(float(figure.value)),
                            "metric": figure.metric}]
    slurm = job_rows(node_rows, JobShape("torchrun", 2, 2))[0]
    assert (float(row["performance"]), row["metric"]) == (float(slurm["performance"]), slurm["metric"])
    assert {c: row[c] for c in JOB_COLUMNS} == {c: slurm[c] for c in JOB_COLUMNS}
    assert_nothing_left(standin)


def test_a_job_the_api_server_refuses_is_a_failure_row_and_the_others_run(standin_factory, k8s_repo, cli, tmp_path):
    message = 'jobs.batch "x" is forbidden: violates PodSecurity "restricted:latest": runAsNonRoot != true'
    standin = standin_factory(refuse={("POST", "Job"): (403, message)})
    result = cli("run", "--tags", "k8s_ok", "--executor", "k8s", "-c", context(standin, tmp_path))
    assert result.code == 1, result
    reason = rows(k8s_repo)["k8s_ok"]["reason"]
    assert reason.startswith("not submitted: ") and "answered 403: " + message in reason, reason
    assert_nothing_left(standin)  # its ConfigMap, created first, is deleted


@pytest.mark.parametrize("refuse,words", [
    ({("GET", "Pod"): (403, 'pods is forbidden: User "tester" cannot list resource "pods"')},
     "k8s.namespace: namespace default: list pods: the API server answered 403: pods is forbidden"),
    (None, "cannot reach the API server"),
])
def test_a_cluster_that_cannot_be_used_is_bad_input_before_anything_is_sent(standin_factory, k8s_repo, cli, tmp_path,
                                                                            refuse, words):
    standin = standin_factory(refuse=refuse or {})
    ctx = context(standin, tmp_path)
    if refuse is None:  # nothing listens at that address any more
        standin.server.shutdown()
        standin.server.server_close()
    result = cli("run", "--tags", "k8s_ok", "--executor", "k8s", "-c", ctx)
    assert result.code == 2 and words in result.stderr and len(result.stderr.strip().splitlines()) == 1, result
    assert not [r for r in standin.requests if r["method"] != "GET"] and not (k8s_repo / "perf.csv").exists()


def test_a_pod_that_ended_between_two_events_has_its_whole_log_read(standin, k8s_repo, cli, tmp_path):
    """The log of a pod madengine never saw running is read once, whole, and redacted."""
    from madengine.core.redact import register_secret
    from madengine.k8s.client import KubeApi
    from madengine.k8s.kubeconfig import resolve_cluster
    from madengine.k8s.session import LogTap
    from madengine.k8s.settings import K8sSettings
    import yaml

    assert cli("build", "--tags", "k8s_ok").code == 0
    files = cli("k8s", "render", "--tags", "k8s_ok", "--output-dir", str(tmp_path / "objects")).stdout.split()
    for path in files:
        obj = yaml.safe_load(Path(path).read_text())
        standin.create(obj["kind"], "default", obj)
    deadline = time.monotonic() + 120
    while not [p for p in standin.pods() if p["status"].get("phase") == "Succeeded"]:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    pod = standin.pods()[0]["metadata"]["name"]
    api = KubeApi(resolve_cluster(K8sSettings(kubeconfig=str(standin.kubeconfig(tmp_path / "kc"))), {}))
    register_secret("two words")
    tap = LogTap(api, "default", pod, tmp_path / "pod.log", None)
    tap.finish()
    text = (tmp_path / "pod.log").read_text()
    assert "arg: [******]" in text and "performance: 123.5 samples_per_second" in text
    assert text.endswith("=== madengine: the model step ended with exit code 0\n")


# -- a cluster's way of stopping, failing and succeeding ---------------------------------------------
def _pod_saying(standin: StandIn, text: bytes, seconds: float = 120) -> str:
    """The name of the first pod whose container has printed ``text``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for name, container in list(standin.containers.items()):
            try:
                if text in container.logs():
                    return name
            except Exception:
                continue
        time.sleep(0.2)
    raise AssertionError(f"no pod printed {text!r}")


def test_a_stop_gives_the_model_its_grace_period_its_trap_runs_and_its_results_are_kept(standin, k8s_repo, tmp_path):
    """SIGTERM to madengine deletes the Job; the stand-in stops its pod as the kubelet does
    (SIGTERM, SIGKILL only after terminationGracePeriodSeconds); the entry script forwards the
    signal to the model, whose trap saves its partial results, and copies them to the results
    volume and into the log before the pod ends."""
    process = subprocess.Popen([sys.executable, "-m", "madengine", "run", "--tags", "trap", "--executor", "k8s", "-c",
                                context(standin, tmp_path, results_pvc="perf-results", stop_grace=20)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        _pod_saying(standin, b"trap: started")
        job = standin.seen("POST", "Job")[0]["body"]
        assert job["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 50  # 20 for the model, 30 to copy
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=180)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 143, err
    row = rows(k8s_repo)["k8s_trap"]
    assert (row["status"], row["reason"]) == ("FAILURE", "interrupted by SIGTERM")
    log = Path(row["artifacts"].split(",")[0]).read_text()
    assert "=== madengine: SIGTERM received: stopping the step (20 s to end)" in log
    assert "trap ran: partial results saved" in log and "the model step ended with exit code 0" in log
    assert "partial,42.5,samples_per_second" in log and "did not end within" not in log
    kept = list((standin.folder / "pvc" / "perf-results").rglob("results.csv"))
    assert len(kept) == 1 and "partial,42.5" in kept[0].read_text()
    assert_nothing_left(standin)


def test_the_pod_entry_forwards_sigterm_in_docker_and_kills_a_model_that_ignores_it_after_its_grace(
        docker_client, tmp_path):
    """The entry script alone, as the kubelet runs it: ``docker stop`` sends SIGTERM and waits 60 s
    before SIGKILL. The model's trap runs and the container ends 143 (not 137: nothing was
    SIGKILLed by the engine); a model that ignores SIGTERM is killed by the entry after
    MAD_STOP_GRACE, and the results are still copied."""
    from madengine.k8s.render import ENTRY_SCRIPT

    files = tmp_path / "madengine"
    (files / "files").mkdir(parents=True)
    (files / "entry.sh").write_text(ENTRY_SCRIPT.read_text())
    (files / "files" / "trap.sh").write_text(
        "trap 'echo model trap ran; echo saved > results.csv; exit 0' TERM\necho started\n"
        "while true; do sleep 1; done\n")
    (files / "files" / "deaf.sh").write_text(  # says "started" once SIGTERM is ignored
        "exec python3 -c 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "open(\"results.csv\", \"w\").write(\"early\\n\"); print(\"started\", flush=True); time.sleep(600)'\n")
    (files / "files.list").write_text("trap.sh\ndeaf.sh\n")
    results = tmp_path / "results"
    results.mkdir()
    os.chmod(results, 0o777)
    for path in files.rglob("*"):
        os.chmod(path, 0o755)
    for script, said in (("trap.sh", "model trap ran"), ("deaf.sh", "the step did not end within 2 s: killed")):
        container = docker_client.containers.run(
            "madengine-base:bookworm", ["sh", "/madengine/entry.sh", "bash", script], detach=True,
            environment={"MAD_STOP_GRACE": "2", "MAD_OUTPUT_CSV": "results.csv", "MAD_RUN_ID": "r",
                         "MAD_POD_NAME": script.split(".")[0]},
            volumes={str(files): {"bind": "/madengine", "mode": "ro"}, str(results): {"bind": "/results",
                                                                                      "mode": "rw"}},
            labels={"madengine-test": "k8s-entry"})
        try:
            deadline = time.monotonic() + 60
            while b"started" not in container.logs() and time.monotonic() < deadline:
                time.sleep(0.2)
            container.stop(timeout=60)
            container.reload()
            log = container.logs().decode()
            assert container.attrs["State"]["ExitCode"] == 143, log
            assert said in log and "=== madengine: multiple_results begin" in log, log
            assert (results / "r" / script.split(".")[0] / "results.csv").is_file()
        finally:
            container.remove(force=True)


def test_a_disruption_is_not_a_model_failure_its_pod_is_made_again(standin, k8s_repo, cli, tmp_path):
    """An eviction (the Eviction API) marks the pod DisruptionTarget and stops it; the Job's
    podFailurePolicy ignores it and makes the pod again, which measures: a SUCCESS row with a note."""
    import threading
    import urllib.request

    evicted: list[str] = []

    def evict() -> None:
        name = _pod_saying(standin, b"first attempt: waiting")
        request = urllib.request.Request(f"{standin.url}/api/v1/namespaces/default/pods/{name}/eviction",
                                         method="POST", data=json.dumps({
                                             "apiVersion": "policy/v1", "kind": "Eviction",
                                             "metadata": {"name": name, "namespace": "default"}}).encode(),
                                         headers={"Content-Type": "application/json"})
        urllib.request.urlopen(request).close()
        evicted.append(name)

    thread = threading.Thread(target=evict, daemon=True)
    thread.start()
    result = cli("run", "--tags", "evictable", "--executor", "k8s", "-c",
                 context(standin, tmp_path, results_pvc="shared", stop_grace=5))
    thread.join(10)
    assert result.code == 0, result
    row = rows(k8s_repo)["k8s_evictable"]
    assert (row["status"], row["performance"]) == ("SUCCESS", "77")
    assert f"node rank 0: pod {evicted[0]} on node {standin.node} was stopped by Kubernetes (EvictionByEvictionAPI) " \
           "and made again" in row["warnings"]
    made = {e[2]["metadata"]["name"] for e in standin.events if e[1] == "ADDED"}
    assert len(made) == 2 and evicted[0] in made
    assert_nothing_left(standin)


def test_a_disagg_job_succeeds_when_its_benchmark_pod_does_and_its_servers_are_stopped(standin_factory, k8s_repo,
                                                                                       cli, tmp_path):
    """sglang-disagg on 3 nodes: the proxy (index 0) benchmarks and ends; the servers never end by
    themselves. The successPolicy makes the Job Complete and stops them; SGLANG_NODE_IPS holds the
    pods' addresses (the reference's definition), resolved from their DNS names."""
    standin = standin_factory(nodes=3)
    result = cli("run", "--tags", "disagg", "--executor", "k8s", "-c", context(standin, tmp_path, stop_grace=5))
    assert result.code == 0, result
    row = rows(k8s_repo)["k8s_disagg"]
    assert (row["status"], row["performance"], row["nnodes"]) == ("SUCCESS", "321", "3")
    assert sorted(json.loads(row["k8s_nodes"])) == sorted(standin.node_names)  # one pod per node
    job = standin.seen("POST", "Job")[0]["body"]
    assert job["spec"]["successPolicy"] == {"rules": [{"succeededIndexes": "0"}]}
    texts = [Path(p).read_text() for p in row["artifacts"].split(",")]
    ips = re.search(r"role: proxy rank: 0 ips: (\S+)", texts[0]).group(1).split(",")
    assert len(ips) == 3 and all(re.fullmatch(r"\d+\.\d+\.\d+\.\d+", ip) for ip in ips), ips
    assert all("server stopped" in text for text in texts[1:])
    assert_nothing_left(standin)


@pytest.mark.parametrize("nodes", [1, 2])
def test_the_nodes_of_a_job_land_on_different_kubernetes_nodes(standin_factory, k8s_repo, cli, tmp_path, nodes):
    standin = standin_factory(nodes=nodes)
    ctx = json.loads(context(standin, tmp_path))
    ctx["distributed"] = {"launcher": "torchrun", "nnodes": 2}
    result = cli("run", "--tags", "k8s_ok", "--executor", "k8s", "-c", json.dumps(ctx))
    row = rows(k8s_repo)["k8s_ok"]
    if nodes == 1:  # a "2-node" job on one node would be a one-node measurement
        assert result.code == 1 and "node rank 1 (pod mad-k8s-ok-" in row["reason"], row["reason"]
        assert "unschedulable: 0/1 nodes are available: 1 node(s) didn't match pod anti-affinity rules" in \
            row["reason"]
    else:
        assert result.code == 0, result
        assert (row["status"], row["performance"]) == ("SUCCESS", "247.0")  # each node's 123.5, summed
        assert sorted(json.loads(row["k8s_nodes"])) == sorted(standin.node_names)
    assert_nothing_left(standin)


def test_a_job_waits_in_its_kueue_queue_and_runs_once_admitted(standin_factory, k8s_repo, cli, tmp_path):
    standin = standin_factory(kueue_admit_after=3)
    result = cli("run", "--tags", "k8s_ok", "--executor", "k8s", "-c", context(standin, tmp_path, queue_name="team-a"))
    assert result.code == 0, result
    job = standin.seen("POST", "Job")[0]["body"]
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert ": queued" in result.stderr and rows(k8s_repo)["k8s_ok"]["status"] == "SUCCESS"
    assert_nothing_left(standin)


def test_least_privilege_by_default_root_compatible_and_non_root_by_key(standin, k8s_repo, cli, tmp_path):
    assert cli("build", "--tags", "root").code == 0
    log = {}
    for profile, k8s in (("restricted", {}), ("root-compatible", {"security_profile": "root-compatible"}),
                         ("user", {"run_as_user": 1000, "run_as_non_root": True})):
        result = cli("run", "--tags", "root", "--executor", "k8s", "-c", context(standin, tmp_path, **k8s))
        assert result.code == 0, (profile, result)
        log[profile] = Path(rows(k8s_repo)["k8s_root"]["artifacts"].split(",")[0]).read_text()
    assert "chown: refused" in log["restricted"] and "CapEff:\t0000000000000000" in log["restricted"]
    assert "chown: ok" in log["root-compatible"]
    assert "uid: 1000" in log["user"] and "chown: refused" in log["user"]
    refused = cli("run", "--tags", "root", "--executor", "k8s", "-c", context(standin, tmp_path, run_as_non_root=True))
    assert refused.code == 2 and len(refused.stderr.strip().splitlines()) == 1, refused
    assert "k8s.run_as_non_root: image ci-k8s_root_base of model 'k8s_root' runs as root" in refused.stderr
    assert_nothing_left(standin)


def test_tools_run_in_the_pod_with_sys_ptrace_and_their_summaries_reach_the_row(standin, k8s_repo, cli, tmp_path):
    ctx = json.loads(context(standin, tmp_path))
    ctx["tools"] = [{"name": "cpu_monitor"}]
    result = cli("run", "--tags", "k8s_ok", "--executor", "k8s", "-c", json.dumps(ctx))
    assert result.code == 0, result
    row = rows(k8s_repo)["k8s_ok"]
    assert row["status"] == "SUCCESS" and row["tools"] == "cpu_monitor"
    assert float(row["cpu_util_peak"]) >= 0 and row["rss_peak_mb"] != ""
    log = Path(row["artifacts"].split(",")[0]).read_text()
    assert "CapEff:\t0000000000080000" in log  # SYS_PTRACE (bit 19) and nothing else
    assert any(a.endswith("outputs/cpu_monitor.csv") for a in row["artifacts"].split(","))
    assert_nothing_left(standin)


def test_a_failed_pre_script_is_the_reason_and_the_model_does_not_run(standin, k8s_repo, cli, tmp_path):
    ctx = json.loads(context(standin, tmp_path))
    ctx["pre_scripts"] = [{"path": "scripts/fail/run.sh"}]
    result = cli("run", "--tags", "k8s_ok", "--executor", "k8s", "-c", json.dumps(ctx))
    assert result.code == 1, result
    row = rows(k8s_repo)["k8s_ok"]
    assert row["reason"].startswith("pod mad-k8s-ok-") and \
        row["reason"].endswith(": pre-script context: run.sh failed with exit code 3"), row["reason"]
    assert "helper ran" not in Path(row["artifacts"].split(",")[0]).read_text()
    assert_nothing_left(standin)
