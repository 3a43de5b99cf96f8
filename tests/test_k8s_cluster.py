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

from conftest import FIXTURES
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


def test_a_rerun_replaces_what_an_earlier_run_left(standin, k8s_repo, cli, tmp_path):
    import yaml

    first = cli("k8s", "render", "--tags", "k8s_ok", "--output-dir", str(tmp_path / "old"))
    for path in sorted(Path(p) for p in first.stdout.split()):  # what a run that died left behind
        obj = yaml.safe_load(path.read_text())
        if obj["kind"] == "Job":
            obj["spec"]["template"]["spec"]["containers"][0]["args"] = ["sleep", "600"]
        standin.create(obj["kind"], "default", obj)
    name = standin.names("Job")[0]
    result = cli("run", "--tags", "k8s_ok", "--executor", "k8s", "-c", context(standin, tmp_path))
    assert result.code == 0, result
    assert [r["method"] for r in standin.requests if r["kind"] == "Job" and r["method"] != "GET"] == \
        ["DELETE", "POST", "DELETE"]  # replaced (the old one deleted, the new created), then cleaned up
    assert standin.seen("PUT", "ConfigMap", f"{name}-files")
    assert rows(k8s_repo)["k8s_ok"]["status"] == "SUCCESS"
    assert_nothing_left(standin)


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
    pytest.importorskip("torch")
    docker_cleanup.append("ci-tr_")
    repo = make_torch_repo(tmp_path / "repo")
    monkeypatch.chdir(repo)
    return repo


@pytest.mark.slow
def test_a_two_node_torchrun_job_is_one_row_equal_to_the_slurm_paths_for_the_same_logs(standin, torch_repo, tmp_path,
                                                                                        cli):
    """Two pods (an Indexed Job) meet at pod 0's DNS name through the headless Service and run 4
    gloo ranks; each pod's log has its node's figure; the row is what the Slurm path's merge
    (results.aggregate.job_rows of the rows its nodes would write from those logs) records."""
    from madengine.results.aggregate import JOB_COLUMNS, JobShape, job_rows
    from madengine.results.parsing import parse_performance

    repo = torch_repo
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
