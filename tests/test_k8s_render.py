"""Kubernetes objects, validated offline (no cluster can run here): every object ``madengine k8s
render`` writes for the bundled catalog and for the launchers' examples (the blocks of
tests/golden/launchers) passes ``kubernetes-validate --strict`` for Kubernetes 1.33 to 1.37 and the
semantic checks the schema leaves out (madengine.k8s.checks); the checks themselves catch what
they promise to; a Hypothesis property renders arbitrary valid model entries and contexts and
validates every object.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from conftest import FIXTURES, REPO
from k8s_standin import expand
from madengine.core.errors import LaunchError
from madengine.k8s.checks import problems
from madengine.k8s.render import JobInputs, escape, render_job
from madengine.k8s.settings import K8sSettings, k8s_settings
from madengine.launch import LAUNCHERS, parse_distributed

VERSIONS = ("1.33", "1.34", "1.35", "1.36", "1.37")
GOLDEN = Path(__file__).resolve().parent / "golden" / "launchers"


def validator_versions() -> set[str]:
    """The minor versions whose --strict schemas the installed kubernetes-validate ships."""
    import kubernetes_validate

    folder = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    return {p.name[1:].split("-")[0].rsplit(".", 1)[0] for p in folder.iterdir() if p.name.endswith("-local-strict")}


def test_the_validator_ships_every_version_we_support():
    assert set(VERSIONS) <= validator_versions()


def kubernetes_validate(files: list[Path]) -> None:
    """``kubernetes-validate --strict`` of every file, for every supported version."""
    assert files
    documents = sum(1 for path in files for doc in yaml.safe_load_all(path.read_text()) if doc)
    for version in VERSIONS:
        result = subprocess.run([sys.executable, "-m", "kubernetes_validate", "--strict", "--kubernetes-version",
                                 version, *map(str, files)], capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, (version, result.stdout[-3000:], result.stderr[-3000:])
        assert result.stdout.count(" passed for resource ") == documents, (version, result.stdout[-2000:])


def load(files: list[Path]) -> dict[Path, list[dict]]:
    """Each job folder's objects."""
    jobs: dict[Path, list[dict]] = {}
    for path in files:
        jobs.setdefault(path.parent, []).extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return jobs


def golden_blocks() -> list[tuple[str, dict]]:
    """The launchers' examples: every block of the golden files a placement accepts."""
    out = []
    for launcher in LAUNCHERS:
        for case, data in json.loads((GOLDEN / f"{launcher}.json").read_text()).items():
            if "error" not in data:
                out.append((f"ex_{launcher}_{case}".replace("-", "_"), data["block"]))
    return out


@pytest.fixture
def examples_repo(tmp_path, monkeypatch):
    """tests/fixtures/distributed with one model per launcher example."""
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURES / "distributed", repo)
    entries = [{"name": name, "dockerfile": "docker/base", "scripts": "scripts/env/show.sh", "tags": ["examples"],
                "distributed": block} for name, block in golden_blocks()]
    (repo / "models.json").write_text(json.dumps(entries))
    monkeypatch.chdir(repo)
    monkeypatch.delenv("MODEL_DIR", raising=False)
    return repo


def render(cli, out: Path, *args: str) -> list[Path]:
    result = cli("k8s", "render", "--output-dir", str(out), *args)
    assert result.code == 0, result
    files = [Path(line) for line in result.stdout.split()]
    assert files and all(path.is_file() for path in files)
    return files


def test_bundled_catalog_and_launcher_examples_pass_validation_and_checks(cli, tmp_path, examples_repo, monkeypatch):
    files = render(cli, tmp_path / "examples", "--tags", "examples", "-c",
                   json.dumps({"k8s": {"gpu_resource_name": "amd.com/gpu", "gpu_count": 8, "memory": "64Gi",
                                       "namespace": "ml-perf"}}))
    assert len({p.parent for p in files}) == len(golden_blocks())
    monkeypatch.chdir(REPO)  # the bundled catalog: on a CPU cluster and on AMD GPUs
    files += render(cli, tmp_path / "cpu", "--tags", "all")
    files += render(cli, tmp_path / "amd", "--tags", "all", "-c", json.dumps({"gpu_vendor": "AMD"}))
    rbac = tmp_path / "rbac.yaml"
    assert cli("k8s", "rbac", "--namespace", "ml-perf", "--node-read", "--output", str(rbac)).code == 0
    kubernetes_validate([*files, rbac])
    for folder, objects in load(files).items():
        assert problems(objects) == [], folder
    kinds = {o["kind"] for objects in load(files).values() for o in objects}
    assert kinds == {"ConfigMap", "Service", "Job"}


def test_a_multi_node_job_is_an_indexed_job_behind_a_headless_service(cli, tmp_path, examples_repo):
    files = render(cli, tmp_path / "out", "--tags", "ex_torchrun_2_nodes_rank_1", "-c",
                   json.dumps({"k8s": {"namespace": "perf", "cluster_domain": "example.org"}}))
    objects = next(iter(load(files).values()))
    job = next(o for o in objects if o["kind"] == "Job")
    service = next(o for o in objects if o["kind"] == "Service")
    name = job["metadata"]["name"]
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 2, 2)
    assert spec["template"]["spec"]["subdomain"] == service["metadata"]["name"] == name
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    env = {e["name"]: e.get("value") for e in spec["template"]["spec"]["containers"][0]["env"]}
    assert env["MASTER_ADDR"] == f"{name}-0.{name}.perf.svc.example.org"
    assert env["NNODES"] == "2" and "NODE_RANK" not in env  # each node's own rank comes from its variables file
    config = next(o for o in objects if o["kind"] == "ConfigMap")
    assert "NODE_RANK=1\n" in config["data"]["node-1.env"] and "--node_rank=1 " in config["data"]["node-1.env"]


def test_secrets_are_written_only_when_asked_and_never_elsewhere(cli, tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURES / "k8s", repo)
    monkeypatch.chdir(repo)
    monkeypatch.setenv("K8S_TEST_CRED", json.dumps({"username": "bob", "password": "hunter2-k8s"}))
    result = cli("k8s", "render", "--tags", "secret", "--output-dir", str(tmp_path / "plain"))
    assert result.code == 0 and "not written (they hold credentials)" in result.stderr
    assert not [p for p in (tmp_path / "plain").rglob("??-secret-*.yaml")]
    files = render(cli, tmp_path / "with", "--tags", "secret", "--include-secrets")
    secret = next(p for p in files if p.name.split("-")[1] == "secret")
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    data = yaml.safe_load(secret.read_text())["data"]
    assert base64.b64decode(data["K8S_TEST_CRED_PASSWORD"]).decode() == "hunter2-k8s"
    for path in files:
        if path != secret:
            assert "hunter2-k8s" not in path.read_text() and "aHVudGVyMi1rOHM" not in path.read_text(), path
    assert "hunter2-k8s" not in result.stdout + result.stderr
    kubernetes_validate(files)
    assert problems(next(iter(load(files).values()))) == []


# -- the semantic checks catch what they promise to -------------------------------------------------
def _job(**more) -> list[dict]:
    spec = parse_distributed({"launcher": "torchrun", "nnodes": 2, "nproc_per_node": 2}, source="test")
    inputs = JobInputs(model_name="m", label="m", image_key="ci-m_base", image="reg.example/ci-m@sha256:" + "a" * 64,
                       argv=("bash", "run.sh"), files={"run.sh": b"echo hi\n"}, env={"A": "1"}, run_id="r1",
                       namespace="ns", spec=spec, gpu_count=2, gpu_resource="amd.com/gpu", timeout=60,
                       secret_env={"CRED_PASSWORD": "x"}, **more)
    return render_job(inputs, K8sSettings()).objects


@pytest.mark.parametrize("k8s, vendor, ranks, backend", [
    ({"gpu_count": 4}, "AMD", 4, "nccl"), ({"gpu_count": 1}, "NVIDIA", 1, "nccl"), ({}, "CPU", 2, "gloo")])
def test_an_auto_block_runs_a_rank_per_gpu_the_pod_asks_for(k8s, vendor, ranks, backend):
    """pyt_resnet50_train's block on a cluster: k8s.gpu_count GPUs per pod, a rank on each over nccl;
    a CPU pod runs cpu_nproc_per_node ranks over gloo."""
    from madengine.catalog.schema import model_from_entry
    from madengine.context.context import Context
    from madengine.k8s.plan import gpu_count, gpu_resource

    block = {"launcher": "torchrun", "nproc_per_node": "auto", "cpu_nproc_per_node": 2, "backend": "auto"}
    model = model_from_entry({"name": "m", "scripts": "run.sh", "n_gpus": "-1", "distributed": block}, source="t")
    spec, settings_ = parse_distributed(block, source="t"), k8s_settings(k8s)
    resource = gpu_resource(settings_, Context({"gpu_vendor": vendor}))
    inputs = JobInputs(model_name="m", label="m", image_key="ci-m_base", image="reg.example/ci-m:1",
                       argv=("bash", "run.sh"), files={"run.sh": b"echo hi\n"}, env={}, run_id="r1", namespace="ns",
                       spec=spec, gpu_count=gpu_count(model, spec, settings_, resource), gpu_resource=resource,
                       timeout=60, secret_env={})
    job = render_job(inputs, settings_)
    container = job.object("Job")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert (env["NPROC_PER_NODE"], env["MAD_DISTRIBUTED_BACKEND"]) == (str(ranks), backend)
    assert env["MAD_MULTI_NODE_RUNNER"] == f"torchrun --standalone --nproc_per_node={ranks}"
    asked = container["resources"].get("limits", {})
    assert (asked.get(resource) if resource else asked) == (str(ranks) if resource else {})


def _broken(change) -> list[str]:
    objects = copy.deepcopy(_job())
    change({o["kind"]: o for o in objects})
    return problems(objects)


def test_a_rendered_job_has_no_problems():
    assert problems(_job()) == []


@pytest.mark.parametrize("change,words", [
    (lambda o: o["Job"]["spec"].pop("completions"), "Indexed mode requires completions"),
    (lambda o: o["Job"]["spec"]["template"]["spec"].update(restartPolicy="Always"), "restartPolicy"),
    (lambda o: o["Job"]["metadata"]["labels"].update(big="x" * 64), "label big="),
    (lambda o: o["Job"]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"].update(
        {"amd.com/gpu": "4"}), "must equal its request"),
    (lambda o: o["Secret"]["data"].update(CRED_PASSWORD="not base64!"), "is not base64"),
    (lambda o: o["Job"]["spec"]["template"]["spec"]["containers"][0]["securityContext"].update(privileged=True),
     "unprivileged"),
    (lambda o: o["Job"]["spec"]["template"]["spec"].update(hostNetwork=True), "hostNetwork"),
    (lambda o: o["Job"]["spec"]["template"]["spec"]["volumes"][0]["configMap"]["items"].append(
        {"key": "missing", "path": "x"}), "item key 'missing'"),
    (lambda o: o["Job"]["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0].pop("readOnly"),
     "read-only"),
    (lambda o: o["Job"]["metadata"].update(name="Bad_Name"), "not a DNS-1123 subdomain"),
    (lambda o: o["Job"]["metadata"].update(name="m" * 62), "host names"),
    (lambda o: o["Service"]["spec"].update(clusterIP="10.0.0.1"), "not headless"),
    (lambda o: o["Job"]["spec"].update(parallelism=1), "parallelism 1 must equal completions 2"),
    (lambda o: o["Job"]["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"].pop("cpu"),
     "no cpu request"),
    (lambda o: o["Job"]["spec"]["template"]["spec"].pop("affinity"), "must be on different nodes"),
    (lambda o: o["Job"]["spec"]["template"]["spec"]["containers"][0]["env"].append(
        {"name": "HF_TOKEN", "value": "hf_x"}), "HF_TOKEN looks secret"),
    (lambda o: o["ConfigMap"]["data"].update({"node-0.env": "API_KEY=abc\n"}), "node-0.env sets API_KEY"),
    (lambda o: o["Job"]["spec"].pop("podFailurePolicy"), "must first ignore disruptions"),
    (lambda o: o["Job"]["spec"]["podFailurePolicy"]["rules"].pop(1), "fail the Job on the model's non-zero exit"),
    (lambda o: o["Job"]["spec"].pop("podReplacementPolicy"), "podReplacementPolicy must be Failed"),
    (lambda o: o["Job"]["spec"]["template"]["spec"]["containers"][0]["securityContext"]["capabilities"].update(
        add=["SYS_ADMIN"]), "not asked: SYS_ADMIN"),
    (lambda o: o["Job"]["spec"]["template"]["spec"]["containers"][0]["securityContext"].update(
        seccompProfile={"type": "Unconfined"}), "seccompProfile Unconfined was not asked"),
    (lambda o: o["Job"]["spec"]["template"]["spec"]["containers"][0]["volumeMounts"].pop(2), "no /dev/shm volume"),
    (lambda o: o["Job"]["spec"]["template"]["spec"]["containers"][0]["resources"].setdefault("limits", {}).update(
        memory="1Gi"), "/dev/shm 2Gi is more than the memory limit"),
])
def test_the_checks_find_what_the_schema_misses(change, words):
    found = _broken(change)
    assert any(words in problem for problem in found), found


# -- properties: arbitrary valid entries and contexts render valid objects ---------------------------
_NAME = st.from_regex(r"[A-Za-z][A-Za-z0-9_.-]{0,70}", fullmatch=True)
_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=30)
_QUANTITY = st.builds(lambda n, s: f"{n}{s}", st.integers(1, 10**6), st.sampled_from(["", "m", "k", "M", "G", "Ki",
                                                                                      "Mi", "Gi", "Ti"]))
_LABEL = st.from_regex(r"(([a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?\.)?[a-z]{1,10}/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,40}"
                       r"[A-Za-z0-9])?", fullmatch=True)
_VALUE = st.from_regex(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,40}[A-Za-z0-9])?)?", fullmatch=True)
_TOLERATION = st.one_of(
    st.fixed_dictionaries({"key": _LABEL, "operator": st.just("Exists")}, optional={
        "effect": st.sampled_from(["NoSchedule", "PreferNoSchedule"])}),
    st.fixed_dictionaries({"key": _LABEL, "value": _VALUE, "effect": st.just("NoExecute")},
                          optional={"tolerationSeconds": st.integers(0, 10**6)}))


_AFFINITY = st.sampled_from([
    {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "amd.com/gpu.product-name", "operator": "In", "values": ["MI300X"]}]}]}}},
    {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 50, "preference": {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}}]}},
    {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "podAffinityTerm": {
        "labelSelector": {"matchLabels": {"team": "perf"}}, "topologyKey": "topology.kubernetes.io/zone"}}]}},
    {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchExpressions": [{"key": "noisy", "operator": "DoesNotExist"}]},
         "topologyKey": "kubernetes.io/hostname"}]}},
])


@st.composite
def k8s_blocks(draw) -> dict:
    block = draw(st.fixed_dictionaries({}, optional={
        "cpu_per_gpu": _QUANTITY, "memory_per_gpu": _QUANTITY, "qos": st.sampled_from(["Burstable", "Guaranteed"]),
        "extended_resources": st.dictionaries(st.sampled_from(["rdma/hca_shared_devices_a", "example.com/fpga"]),
                                              st.integers(1, 4), max_size=2),
        "rdma_resource": st.just("rdma/hca_shared_devices_a"), "affinity": _AFFINITY,
        "one_pod_per_node": st.booleans(), "priority_class_name": st.just("benchmarks"),
        "scheduler_name": st.just("volcano"), "queue_name": _VALUE.filter(bool),
        "labels": st.dictionaries(_LABEL.filter(lambda k: not k.startswith(("app.kubernetes.io/", "madengine.io/"))),
                                  _VALUE, max_size=2),
        "annotations": st.dictionaries(_LABEL, _TEXT, max_size=2),
        "run_as_user": st.integers(1, 65535), "run_as_group": st.integers(0, 65535), "fs_group": st.integers(0, 65535),
        "capabilities": st.lists(st.sampled_from(["SYS_PTRACE", "IPC_LOCK", "SYS_NICE"]), max_size=2),
        "security_profile": st.sampled_from(["restricted", "root-compatible"]), "stop_grace": st.integers(0, 600),
        "env_from_secret": st.lists(st.from_regex(r"[a-z][a-z0-9-]{0,20}[a-z0-9]", fullmatch=True), max_size=2),
    }))
    block.update(draw(st.fixed_dictionaries({}, optional={
        "namespace": st.from_regex(r"[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?", fullmatch=True),
        "image_pull_policy": st.sampled_from(["Always", "IfNotPresent", "Never"]),
        "image_pull_secrets": st.lists(st.from_regex(r"[a-z][a-z0-9-]{0,20}[a-z0-9]", fullmatch=True), max_size=2),
        "gpu_resource_name": st.sampled_from(["amd.com/gpu", "nvidia.com/gpu", "example.com/accel"]),
        "gpu_count": st.integers(0, 16), "cpu": _QUANTITY, "memory": _QUANTITY, "shm_size": _QUANTITY,
        "node_selector": st.dictionaries(_LABEL, _VALUE, max_size=3),
        "tolerations": st.lists(_TOLERATION, max_size=2),
        "data_pvc": st.from_regex(r"[a-z][a-z0-9-]{0,30}[a-z0-9]", fullmatch=True),
        "results_pvc": st.from_regex(r"[a-z][a-z0-9-]{0,30}[a-z0-9]", fullmatch=True),
        "ttl_seconds_after_finished": st.one_of(st.none(), st.integers(0, 10**6)),
        "backoff_limit": st.integers(0, 5), "host_ipc": st.booleans(), "host_network": st.booleans(),
        "service_account": st.from_regex(r"[a-z][a-z0-9-]{0,20}[a-z0-9]", fullmatch=True),
    })))
    if block.get("run_as_user") and draw(st.booleans()):
        block["run_as_non_root"] = True
    if block.get("host_network") and draw(st.booleans()):
        block["socket_ifname"] = draw(st.sampled_from(["eth0", "ib0", "^lo,docker"]))
    if block.get("qos") == "Guaranteed":  # its memory limit is its request: /dev/shm fits in it by default only
        block.pop("shm_size", None)
        return block
    if "cpu" in block and draw(st.booleans()):
        block["cpu_limit"] = block["cpu"]
    if "memory" in block and draw(st.booleans()) and "shm_size" not in block:
        block["memory_limit"] = block["memory"]
    return block


_BLOCKS = st.one_of(
    st.none(),
    st.fixed_dictionaries({"launcher": st.sampled_from([l for l in LAUNCHERS if l != "sglang-disagg"]),
                           "nnodes": st.integers(1, 4)},
                          optional={"nproc_per_node": st.integers(1, 8) | st.just("auto"),
                                    "cpu_nproc_per_node": st.integers(1, 8), "master_port": st.integers(1024, 65535),
                                    "backend": st.sampled_from(["nccl", "gloo", "auto"])}),
    st.fixed_dictionaries({"launcher": st.just("sglang-disagg"), "nnodes": st.integers(3, 5)}))


@settings(max_examples=60 if os.environ.get("CI") else 25, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(name=_NAME, args=st.lists(_TEXT, max_size=4), env=st.dictionaries(
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True), _TEXT, max_size=4),
    block=k8s_blocks(), distributed=_BLOCKS, files=st.dictionaries(
        st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}(/[A-Za-z0-9_][A-Za-z0-9_.-]{0,20})?", fullmatch=True),
        st.binary(max_size=64), min_size=1, max_size=4),
    timeout=st.one_of(st.none(), st.integers(1, 10**6)), secret=st.dictionaries(
        st.from_regex(r"[A-Z][A-Z0-9_]{0,12}", fullmatch=True), st.from_regex(r"pw-[A-Za-z0-9]{12}", fullmatch=True),
        max_size=2))
def test_any_valid_entry_and_context_renders_objects_that_validate(name, args, env, block, distributed, files,
                                                                   timeout, secret):
    import kubernetes_validate

    assume(not any(part in ("", ".", "..") for path in files for part in path.split("/")))
    settings_ = k8s_settings(block)
    spec = parse_distributed(distributed, source="test") if distributed else None
    resource = settings_.gpu_resource_name
    gpus = settings_.gpu_count if settings_.gpu_count is not None else (spec.nproc_per_node or 1 if spec else 1)
    inputs = JobInputs(model_name=name, label=name, image_key=f"ci-{name}_base", image="registry.example/img:1",
                       argv=("bash", "run.sh", *args), files=files, env=env, run_id="20260101-000000-abcdef",
                       namespace=settings_.namespace or "default", spec=spec, gpu_count=gpus if resource else 0,
                       gpu_resource=resource, timeout=timeout, secret_env=secret,
                       registry_auth=("registry.example", "u", "p") if secret else None)
    try:
        job = render_job(inputs, settings_)
    except LaunchError:
        assume(False)  # a launcher refuses this placement (nproc above the GPUs asked for)
        return
    assert problems(job.objects, job.allowed) == []
    for obj in job.objects:
        plain = json.loads(json.dumps(obj))  # what goes over the wire
        for version in VERSIONS:
            kubernetes_validate.validate(plain, version, strict=True)
    container = job.object("Job")["spec"]["template"]["spec"]["containers"][0]
    assert [expand(a, {}) for a in container["args"]] == ["bash", "run.sh", *args]  # as the kubelet hands them over
    values = {e["name"]: expand(e["value"], {}) for e in container["env"] if "value" in e}
    assert all(values[k] == v for k, v in env.items())  # the model's variables win, as written
    others = json.dumps([o for o in job.objects if o["kind"] != "Secret"])
    for key, value in secret.items():  # by reference to the Secret only
        assert key not in values and value not in others


@given(st.text(max_size=40))
def test_escaped_values_reach_the_container_as_written(text):
    assert expand(escape(text), {"HOME": "/root", "A": "x"}) == text


def test_a_pushed_manifest_renders_its_digest_and_a_pull_secret(cli, tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURES / "k8s", repo)
    monkeypatch.chdir(repo)
    entry = json.loads((repo / "models.json").read_text())[0]
    digest = "sha256:" + "c" * 64
    (repo / "m.json").write_text(json.dumps({
        "format": "madengine-build-manifest", "format_version": 1, "build_id": "b", "tags": ["k8s_ok"], "context": {},
        "registry": "reg.example:5000/team", "images": [{
            "model": "k8s_ok", "image": "ci-k8s_ok_base", "image_id": digest, "dockerfile": "docker/base.Dockerfile",
            "registry_image": f"reg.example:5000/team/ci-k8s_ok_base@{digest}", "model_entry": entry}]}))
    monkeypatch.setenv("MADENGINE_REGISTRY_USER", "ci")
    monkeypatch.setenv("MADENGINE_REGISTRY_PASSWORD", "regpw-7f3e")
    files = render(cli, tmp_path / "out", "--manifest-file", "m.json", "--registry", "mirror.local:5000/x",
                   "--include-secrets")
    objects = {o["kind"]: o for o in next(iter(load(files).values()))}
    pod = objects["Job"]["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == f"mirror.local:5000/x/ci-k8s_ok_base@{digest}"
    assert pod["imagePullSecrets"] == [{"name": objects["Secret"]["metadata"]["name"]}]
    config = json.loads(base64.b64decode(objects["Secret"]["data"][".dockerconfigjson"]))
    assert config["auths"]["mirror.local:5000"]["auth"] == base64.b64encode(b"ci:regpw-7f3e").decode()
    assert objects["Secret"]["type"] == "kubernetes.io/dockerconfigjson"
    kubernetes_validate(files)


# -- what a real cluster needs ---------------------------------------------------------------------
PRODUCTION = {
    "distributed": {"nnodes": 2},
    "k8s": {"namespace": "ml-perf", "gpu_resource_name": "amd.com/gpu", "qos": "Guaranteed",
            "queue_name": "team-perf", "priority_class_name": "benchmark",
            "node_selector": {"amd.com/gpu.product-name": "MI300X"},
            "tolerations": [{"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "rdma_resource": "rdma/hca_shared_devices_a", "host_network": True,
            "results_pvc": "perf-results", "image_pull_secrets": ["team-registry"], "labels": {"team": "perf"},
            "annotations": {"perf.example.com/ticket": "PERF-1234"}, "stop_grace": 60, "backoff_limit": 1},
    "docker_env_vars": {"HF_TOKEN": "hf_prod7c2e9a41"},
}


@pytest.fixture
def k8s_fixture_repo(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURES / "k8s", repo)
    monkeypatch.chdir(repo)
    monkeypatch.delenv("MODEL_DIR", raising=False)
    entries = json.loads((repo / "models.json").read_text())
    entries.append({"name": "pyt_ddp_8", "dockerfile": "docker/base", "scripts": "scripts/ok", "tags": ["prod"],
                    "timeout": 3600, "distributed": {"launcher": "torchrun", "nproc_per_node": 8},
                    "additional_docker_run_options": "--shm-size 64G"})
    (repo / "models.json").write_text(json.dumps(entries))
    return repo


def _job_of(files: list[Path]) -> tuple[dict, dict]:
    objects = {o["kind"]: o for o in next(iter(load(files).values()))}
    return objects, objects["Job"]["spec"]["template"]["spec"]


def test_the_production_example_a_2_node_8_gpu_job_under_kueue(cli, tmp_path, k8s_fixture_repo):
    """docs/distributed.md's production checklist, rendered: every item in the objects."""
    from madengine.k8s.pod import Allowed

    files = render(cli, tmp_path / "out", "--tags", "prod", "--include-secrets", "-c", json.dumps(PRODUCTION))
    kubernetes_validate(files)
    objects, pod = _job_of(files)
    assert problems(list(objects.values()), Allowed(host_network=True, capabilities=("IPC_LOCK",))) == []
    job, container = objects["Job"], pod["containers"][0]
    name = job["metadata"]["name"]
    # placement: one pod per node, Kueue, priority, the team's labels
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-perf"
    assert pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == [
        {"labelSelector": {"matchLabels": {"madengine.io/job": name}}, "topologyKey": "kubernetes.io/hostname"}]
    assert pod["priorityClassName"] == "benchmark" and job["spec"]["template"]["metadata"]["labels"]["team"] == "perf"
    assert job["metadata"]["annotations"] == {"perf.example.com/ticket": "PERF-1234"}
    # resources: 8 GPUs at 4 CPUs and 16Gi each, Guaranteed; RDMA with IPC_LOCK
    assert container["resources"] == {
        "requests": {"cpu": "32", "memory": "128Gi", "rdma/hca_shared_devices_a": "1", "amd.com/gpu": "8"},
        "limits": {"cpu": "32", "memory": "128Gi", "rdma/hca_shared_devices_a": "1", "amd.com/gpu": "8"}}
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
    assert {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}} in pod["volumes"]  # --shm-size 64G
    # failure: disruptions ignored, the model's exit fatal, each node retried once on its own
    spec = job["spec"]
    assert spec["podFailurePolicy"]["rules"][0] == {"action": "Ignore", "onPodConditions": [
        {"type": "DisruptionTarget", "status": "True"}]}
    assert (spec["podReplacementPolicy"], spec["backoffLimitPerIndex"], spec["maxFailedIndexes"]) == ("Failed", 1, 0)
    assert pod["terminationGracePeriodSeconds"] == 90
    # network and secrets
    env = {e["name"]: e for e in container["env"]}
    assert env["MAD_SOCKET_IFNAME"]["value"] == "auto" and pod["hostNetwork"] is True
    assert env["HF_TOKEN"] == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": f"{name}-env",
                                                                                   "key": "HF_TOKEN"}}}
    assert base64.b64decode(objects["Secret"]["data"]["HF_TOKEN"]).decode() == "hf_prod7c2e9a41"
    assert all("hf_prod7c2e9a41" not in p.read_text() for p in files if "-secret-" not in p.name)
    assert "MAD_SYSTEM_GPU_ARCHITECTURE" not in env  # not known here: left out rather than empty


@pytest.mark.parametrize("options,words", [
    ("--privileged", "--privileged has no pod equivalent (a privileged pod is never rendered"),
    ("-v /data:/data", "--volume has no pod equivalent (mount data with k8s.data_pvc"),
    ("--cpuset-cpus 0-3", "--cpuset-cpus has no pod equivalent (k8s.qos Guaranteed"),
    ("--pids-limit 100", "--pids-limit has no pod equivalent"),
    ("--device /dev/fuse", "--device /dev/fuse: a pod gets a device through the extended resource"),
    ("--device /dev/infiniband/uverbs0", "k8s.rdma_resource"),
    ("--group-add video", "--group-add 'video' is not a group number"),
    ("--network container:other", "--network 'container:other' has no pod equivalent"),
    ("--cap-add ALL", "--cap-add ALL is a privileged pod"),
    ("--security-opt label=disable", "--security-opt 'label=disable' has no pod equivalent"),
    ("--bogus", "unsupported option '--bogus'"),
])
def test_a_docker_run_option_without_a_pod_equivalent_is_exit_2_naming_it(cli, tmp_path, k8s_fixture_repo, options,
                                                                          words):
    entries = json.loads((k8s_fixture_repo / "models.json").read_text())
    entries.append({"name": "k8s_opt", "dockerfile": "docker/base", "scripts": "scripts/ok", "tags": ["opt"],
                    "additional_docker_run_options": options})
    (k8s_fixture_repo / "models.json").write_text(json.dumps(entries))
    for command in (["k8s", "render", "--output-dir", str(tmp_path / "out")],
                    ["run", "--executor", "k8s", "--dry-run"]):
        result = cli(*command, "--tags", "opt")
        assert result.code == 2 and len(result.stderr.strip().splitlines()) == 1, result
        assert "k8s_opt.additional_docker_run_options: " in result.stderr and words in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()


def test_docker_run_options_map_onto_the_pod(cli, tmp_path, k8s_fixture_repo):
    """The issue's example (``--shm-size 16G --cap-add SYS_PTRACE --ipc host``) and the others that map."""
    entries = json.loads((k8s_fixture_repo / "models.json").read_text())
    entries.append({"name": "k8s_many", "dockerfile": "docker/base", "scripts": "scripts/ok", "tags": ["many"],
                    "additional_docker_run_options": "--network host --device /dev/kfd --device /dev/dri "
                                                     "--device /dev/infiniband --group-add 44 -u 1000:1000 -m 32g "
                                                     "--cpus 7.5 --tmpfs /scratch:size=1g --read-only --init "
                                                     "--security-opt seccomp=unconfined -e NCCL_DEBUG=INFO "
                                                     "-e WANDB_API_KEY=wb-secret-42 --cap-drop NET_RAW"})
    (k8s_fixture_repo / "models.json").write_text(json.dumps(entries))
    files = render(cli, tmp_path / "opts", "--tags", "opts")
    kubernetes_validate(files)
    _, pod = _job_of(files)
    container = pod["containers"][0]
    assert {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in pod["volumes"]
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["SYS_PTRACE"]}
    assert pod["hostIPC"] is True
    files = render(cli, tmp_path / "many", "--tags", "many", "-c", json.dumps(
        {"gpu_vendor": "AMD", "k8s": {"gpu_count": 2, "rdma_resource": "rdma/hca_shared_devices_a"}}))
    kubernetes_validate(files)
    _, pod = _job_of(files)
    container = pod["containers"][0]
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert pod["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}, "runAsUser": 1000,
                                      "runAsGroup": 1000, "supplementalGroups": [44]}
    assert container["securityContext"]["seccompProfile"] == {"type": "Unconfined"}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
    assert container["resources"]["limits"] == {"memory": "32Gi", "cpu": "7500m", "rdma/hca_shared_devices_a": "1",
                                                "amd.com/gpu": "2"}
    assert container["resources"]["requests"]["memory"] == "32Gi"  # 2 × 16Gi, within the model's -m 32g
    assert {"name": "tmpfs-0", "mountPath": "/scratch"} in container["volumeMounts"]
    env = {e["name"]: e for e in container["env"]}
    assert env["NCCL_DEBUG"]["value"] == "INFO" and "secretKeyRef" in env["WANDB_API_KEY"]["valueFrom"]
    assert env["MAD_SOCKET_IFNAME"]["value"] == "auto"


def test_failure_and_success_policies_and_the_entry_variables(cli, tmp_path, examples_repo):
    files = render(cli, tmp_path / "disagg", "--tags", "ex_sglang_disagg_4_nodes_proxy")
    kubernetes_validate(files)
    objects, pod = _job_of(files)
    spec = objects["Job"]["spec"]
    assert spec["successPolicy"] == {"rules": [{"succeededIndexes": "0"}]} and spec["completionMode"] == "Indexed"
    assert spec["podFailurePolicy"]["rules"][1]["onExitCodes"] == {"containerName": "model", "operator": "NotIn",
                                                                   "values": [0, 90]}
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["MAD_RESOLVE_ADDRESSES"] == "SGLANG_NODE_IPS" and env["MAD_STOP_GRACE"] == "30"
    assert problems(list(objects.values())) == []
    objects["Job"]["spec"].pop("successPolicy")
    assert any("successPolicy succeededIndexes 0" in p for p in problems(list(objects.values())))
    one = render(cli, tmp_path / "one", "--tags", "ex_torchrun_1_node", "-c", json.dumps(
        {"gpu_vendor": "AMD", "gpu_architecture": "gfx942", "k8s": {"one_pod_per_node": False, "backoff_limit": 2,
                                                                    "env_from_secret": "hf-token"}}))
    objects, pod = _job_of(one)
    assert "backoffLimitPerIndex" not in objects["Job"]["spec"] and objects["Job"]["spec"]["backoffLimit"] == 2
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["MAD_SYSTEM_GPU_ARCHITECTURE"] == "gfx942" and "MAD_SYSTEM_GPU_PRODUCT_NAME" not in env
    assert pod["containers"][0]["envFrom"] == [{"secretRef": {"name": "hf-token"}}]


_DOCKER_WORDS = st.sampled_from(["--shm-size", "8G", "--cap-add", "SYS_PTRACE", "ALL", "--ipc", "host", "--network",
                                 "bridge", "--device", "/dev/kfd", "/dev/fuse", "--gpus", "all", "-e", "A=1",
                                 "--security-opt", "seccomp=unconfined", "--group-add", "44", "video", "-u", "1000:10",
                                 "-m", "4g", "--cpus", "2.5", "--tmpfs", "/t:size=1m", "--read-only", "--init",
                                 "--privileged", "-v", "/a:/b", "--ulimit", "nofile=1", "'", "\"", "x", "-1"])


@given(words=st.lists(st.one_of(_DOCKER_WORDS, _TEXT), max_size=8), gpu=st.sampled_from(["", "amd.com/gpu"]))
def test_any_docker_run_options_map_onto_a_pod_or_are_one_input_error(words, gpu):
    """A model's options text, whatever it is: the pod's options, or an InputError naming the field."""
    from types import SimpleNamespace

    from madengine.core.errors import InputError
    from madengine.k8s.runopts import PodOptions, pod_options

    model = SimpleNamespace(name="m", source="models.json", additional_docker_run_options=" ".join(words))
    try:
        options = pod_options(model, K8sSettings(), gpu)
    except InputError as exc:
        assert "m.additional_docker_run_options" in str(exc) and "\n" not in str(exc)
        return
    assert isinstance(options, PodOptions)


@pytest.mark.parametrize("name,secret", [
    ("HF_TOKEN", True), ("AWS_SECRET_ACCESS_KEY", True), ("WANDB_API_KEY", True), ("APIKEY", True),
    ("DB_PASSWORD", True), ("HFTOKEN", True), ("GOOGLE_APPLICATION_CREDENTIALS", True), ("ssh-key", True),
    ("MONKEY_COUNT", False), ("KEYBOARD_LAYOUT", False), ("MAD_MODEL_NAME", False), ("NCCL_IB_HCA", False),
    ("TOKENIZERS_PARALLELISM", False),
])
def test_which_variable_names_look_secret(name, secret):
    from madengine.core.redact import looks_secret

    assert looks_secret(name) is secret
