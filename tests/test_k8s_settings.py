"""The ``k8s`` block and the cluster it names: every key checked with a one-line error naming it
(exit 2, nothing recorded), before anything is built or sent; Hypothesis properties of the parser
(any JSON is settings or a ContextError, never another exception) and of resource quantities.
"""

from __future__ import annotations

import decimal
import json
import shutil

import pytest
from hypothesis import given, strategies as st

from conftest import FIXTURES
from madengine.core.errors import ConfigError, ContextError
from madengine.k8s.kubeconfig import resolve_cluster
from madengine.k8s.names import dns_label, is_dns_label, is_label_value, label_value, parse_quantity
from madengine.k8s.settings import K8sSettings, block_of, k8s_settings

_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner,
                                                                                 max_size=3), max_leaves=12)
_KEYS = st.sampled_from(["kubeconfig", "context", "namespace", "image_pull_policy", "image_pull_secrets",
                         "gpu_resource_name", "gpu_count", "cpu", "cpu_limit", "memory", "memory_limit", "shm_size",
                         "node_selector", "tolerations", "data_pvc", "results_pvc", "ttl_seconds_after_finished",
                         "backoff_limit", "host_ipc", "host_network", "service_account", "cluster_domain",
                         "pending_timeout", "cpu_per_gpu", "memory_per_gpu", "qos", "extended_resources",
                         "rdma_resource", "device_resources", "affinity", "one_pod_per_node", "priority_class_name",
                         "scheduler_name", "queue_name", "labels", "annotations", "socket_ifname", "run_as_user",
                         "run_as_group", "fs_group", "run_as_non_root", "capabilities", "security_profile",
                         "env_from_secret", "stop_grace", "bogus"])


@given(st.dictionaries(_KEYS, _JSON, max_size=6))
def test_any_block_is_settings_or_one_context_error(block):
    try:
        settings = k8s_settings(block)
    except ContextError as exc:
        assert str(exc).startswith("context: k8s.") and "\n" not in str(exc)
        return
    assert isinstance(settings, K8sSettings)


_SUFFIXES = {"": 1, "m": decimal.Decimal("0.001"), "k": 1000, "M": 10**6, "G": 10**9, "T": 10**12, "Ki": 1024,
             "Mi": 1024**2, "Gi": 1024**3, "Ti": 1024**4}


@given(st.integers(0, 10**12), st.sampled_from(sorted(_SUFFIXES)))
def test_quantities_read_as_kubernetes_reads_them(number, suffix):
    assert parse_quantity(f"{number}{suffix}") == number * _SUFFIXES[suffix]


@given(st.text(max_size=12))
def test_a_quantity_is_refused_or_a_finite_number(text):
    value = parse_quantity(text)
    assert value is None or value.is_finite()


@pytest.mark.parametrize("text", ["12XB", "1.5.5Gi", "Gi", "-", "1 Gi", "1e", "inf", "NaN", "0x10", "1iB", "١٢"])
def test_what_kubernetes_refuses_is_no_quantity(text):
    assert parse_quantity(text) is None


@given(st.text(max_size=120))
def test_label_values_and_dns_labels_made_from_any_text_are_valid(text):
    assert is_label_value(label_value(text))
    made = dns_label(text)
    assert made == "" or is_dns_label(made)


def test_kubernetes_is_another_name_of_the_block():
    assert block_of({"kubernetes": {"namespace": "a"}}) == {"namespace": "a"}
    with pytest.raises(ContextError, match="both 'k8s' and 'kubernetes'"):
        block_of({"k8s": {}, "kubernetes": {}})


# -- the cluster -----------------------------------------------------------------------------------
KUBECONFIG = """apiVersion: v1
kind: Config
current-context: dev
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts:
- {name: dev, context: {cluster: c, user: u, namespace: team}}
- {name: prod, context: {cluster: c, user: u}}
"""


def test_the_cluster_is_the_kubeconfig_context_and_its_namespace(tmp_path):
    path = tmp_path / "config"
    path.write_text(KUBECONFIG)
    target = resolve_cluster(K8sSettings(kubeconfig=str(path)), {})
    assert (target.context, target.namespace) == ("dev", "team")
    target = resolve_cluster(K8sSettings(kubeconfig=str(path), context="prod", namespace="perf"), {})
    assert (target.context, target.namespace) == ("prod", "perf")
    assert resolve_cluster(K8sSettings(), {"KUBECONFIG": f"/nope:{path}"}).context == "dev"
    assert resolve_cluster(K8sSettings(), {"HOME": str(tmp_path / "none"),
                                           "KUBERNETES_SERVICE_HOST": "10.0.0.1"}).in_cluster


@pytest.mark.parametrize("settings,words", [
    (K8sSettings(kubeconfig="/nope/config"), "k8s.kubeconfig: kubeconfig /nope/config not found"),
    (K8sSettings(context="staging"), "k8s.context: kubeconfig"),
])
def test_a_missing_kubeconfig_or_context_names_the_key(tmp_path, settings, words):
    path = tmp_path / "config"
    path.write_text(KUBECONFIG)
    with pytest.raises(ConfigError) as error:
        resolve_cluster(settings, {"KUBECONFIG": str(path)})
    assert words in str(error.value) and "\n" not in str(error.value)


# -- bad input through the command line: one line, exit 2, nothing written ----------------------------
@pytest.fixture
def k8s_repo(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURES / "k8s", repo)
    monkeypatch.chdir(repo)
    monkeypatch.delenv("MODEL_DIR", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    (repo / "kubeconfig").write_text(KUBECONFIG)
    return repo


@pytest.mark.parametrize("context,flags,words", [
    ({"k8s": {"memory": "12XB"}}, [], "k8s.memory: '12XB' is not a Kubernetes resource quantity"),
    ({"k8s": {"cpu": "2", "cpu_limit": "500m"}}, [], "k8s.cpu: the request 2 is more than the limit 500m"),
    ({"k8s": {"kubeconfig": "/nope/kubeconfig"}}, [], "k8s.kubeconfig: kubeconfig /nope/kubeconfig not found"),
    ({"k8s": {"kubeconfig": "kubeconfig", "context": "nope"}}, [], "k8s.context: kubeconfig kubeconfig has no "
                                                                   "context 'nope' (its contexts: dev, prod)"),
    ({"distributed": {"launcher": "mpirun"}, "k8s": {}}, [], "distributed.launcher: unknown launcher 'mpirun'"),
    ({"k8s": {"kubeconfig": "kubeconfig"}}, [], "image ci-k8s_ok_base of model 'k8s_ok' is only on this host"),
    ({"k8s": {"namespacee": "x"}}, [], "k8s.namespacee: unknown key"),
    ({"k8s": {"node_selector": {"gpu": "x" * 64}}}, [], "k8s.node_selector.gpu"),
    ({"k8s": {"tolerations": [{"operator": "Equal"}]}}, [], "k8s.tolerations[0].key"),
    ({"k8s": {"backoff_limit": -1}}, [], "k8s.backoff_limit: must be a whole number from 0 to 100"),
    ({"k8s": {}, "docker_mounts": {"/data": "/tmp"}}, [], "docker_mounts: does not apply to --executor k8s"),
    ({"k8s": {"tolerations": ["gpu"]}}, [], "k8s.tolerations[0]: must be an object, got 'gpu'"),
    ({"k8s": {"affinity": "spread"}}, [], "k8s.affinity: must be an object, got 'spread'"),
    ({"k8s": {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"a": "b"}}}]}}}}, [],
     "k8s.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey: is required"),
    ({"k8s": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpu", "operator": "In"}]}]}}}}}, [], "operator In needs values"),
    ({"k8s": {"affinity": {"nodeAfinity": {}}}}, [], "k8s.affinity.nodeAfinity: unknown field"),
    ({"k8s": {"queue_name": "team a!"}}, [], "k8s.queue_name: 'team a!' is not a label value"),
    ({"k8s": {"queue_name": "q" * 64}}, [], "k8s.queue_name: "),
    ({"k8s": {"labels": {"madengine.io/job": "x"}}}, [], "k8s.labels.madengine.io/job: is madengine's own label"),
    ({"k8s": {"labels": {"team": "a b"}}}, [], "k8s.labels.team: 'a b' is not a label value"),
    ({"k8s": {"qos": "Guaranteed", "memory_limit": "64Gi"}}, [], "k8s.memory_limit: qos Guaranteed sets the limits"),
    ({"k8s": {"qos": "BestEffort"}}, [], "k8s.qos: unknown value 'BestEffort'"),
    ({"k8s": {"capabilities": ["SYS_SUPERPOWER"]}}, [], "k8s.capabilities[0]: 'SYS_SUPERPOWER' is not a Linux"),
    ({"k8s": {"socket_ifname": "ib0"}}, [], "k8s.socket_ifname: applies to host_network pods only"),
    ({"k8s": {"run_as_non_root": True, "run_as_user": 0}}, [], "k8s.run_as_non_root: contradicts run_as_user 0"),
    ({"k8s": {"extended_resources": {"rdma/hca": 0}}}, [], "k8s.extended_resources.rdma/hca: must be a whole"),
    ({"k8s": {"device_resources": {"/opt/x": "a.com/x"}}}, [], "k8s.device_resources: '/opt/x' is not a device"),
    ({"k8s": {"env_from_secret": ["Bad_Name"]}}, [], "k8s.env_from_secret[0]: 'Bad_Name' is not a DNS-1123"),
    ({"k8s": {"stop_grace": -5}}, [], "k8s.stop_grace: must be a whole number from 0 to 3600"),
    ({"k8s": {}}, ["--repeat", "3"], "--repeat: --repeat and --warmup-runs do not apply to --executor k8s"),
    ({"k8s": {}}, ["--parallel", "2"], "--parallel applies to docker and local runs"),
])
def test_bad_input_is_one_line_and_exit_2(k8s_repo, cli, context, flags, words):
    result = cli("run", "--tags", "k8s_ok", "--executor", "k8s", "-c", json.dumps(context), *flags)
    assert result.code == 2, result
    assert words in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    runs = k8s_repo / "madengine_runs"
    assert not (k8s_repo / "perf.csv").exists() and not (runs.exists() and any(runs.iterdir()))
    if "only on this host" in words:
        assert "madengine build --registry" in result.stderr


def test_the_local_only_image_is_refused_for_a_manifest_without_a_registry(k8s_repo, cli):
    manifest = {"format": "madengine-build-manifest", "format_version": 1, "build_id": "b", "tags": ["k8s_ok"],
                "context": {}, "images": [{"model": "k8s_ok", "image": "ci-k8s_ok_base", "image_id": "sha256:" + "a" * 64,
                                           "dockerfile": "docker/base.Dockerfile",
                                           "model_entry": {"name": "k8s_ok", "dockerfile": "docker/base",
                                                           "scripts": "scripts/ok"}}]}
    (k8s_repo / "build_manifest.json").write_text(json.dumps(manifest))
    result = cli("run", "--manifest-file", "build_manifest.json", "--executor", "k8s", "-c",
                 json.dumps({"k8s": {"kubeconfig": "kubeconfig", "image_pull_policy": "Always"}}))
    assert result.code == 2 and "only on this host" in result.stderr and "build --registry" in result.stderr, result


def test_k8s_blocks_do_not_leak_into_other_executors_and_help_loads_no_client(cli):
    import subprocess
    import sys

    code = ("import sys, io; from madengine.cli import main; from madengine.cli.env import Environment;"
            "main(['--help'], Environment(stdout=io.StringIO(), stderr=io.StringIO()));"
            "main(['k8s', 'rbac'], Environment(stdout=io.StringIO(), stderr=io.StringIO()));"
            "print('kubernetes' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


def test_without_the_kubernetes_client_a_run_says_which_extra_to_install(k8s_repo, cli, monkeypatch):
    """The client hidden (as on an install without the k8s extra): exit 2, one line, nothing sent or written."""
    import sys

    monkeypatch.setitem(sys.modules, "kubernetes", None)  # import kubernetes → ImportError
    result = cli("run", "--tags", "k8s_ok", "--executor", "k8s", "-c",
                 json.dumps({"k8s": {"kubeconfig": "kubeconfig", "image_pull_policy": "Never"}}))
    assert result.code == 2 and len(result.stderr.strip().splitlines()) == 1, result
    assert "pip install 'madengine[k8s]'" in result.stderr and "Traceback" not in result.stderr
    assert not (k8s_repo / "perf.csv").exists()
