"""What tells two run rows apart (madengine.execution.provenance): framework versions from a light
probe (a real torch image built from the CPU wheel, and the host's interpreter), thread settings,
host load at start and end with a warning under real load, and the precision a model reported.

Real: Docker engine, torch (the CPU wheel in the image), busy processes loading the host. The load
of a quiet host cannot be arranged on a shared machine, so that case injects the load reader (the
CLI's Environment, as every in-process test injects streams)."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from importlib import metadata
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import BASE_IMAGE, require_service
from madengine.cli import main
from madengine.cli.env import Environment
from madengine.core.host import runnable_per_cpu
from madengine.execution.provenance import (ProbeCache, cpu_list_size, load_notes, parse_probe_output, probe_argv,
                                            probe_local, thread_settings)
from madengine.results import read_rows
from madengine.results.verdict import precision_columns, rank_columns, rank_settings, reported_precision

WHEELS = Path(os.environ.get("MADENGINE_WHEELS", "/opt/wheels"))


# --- pieces ---------------------------------------------------------------------------------------

def test_probe_of_the_host_interpreter_reports_what_is_installed(tmp_path):
    done = subprocess.run(probe_argv(sys.executable), capture_output=True, text=True, timeout=120)
    versions, paths = parse_probe_output(done.stdout)
    assert versions["python"] == ".".join(map(str, sys.version_info[:3]))
    for name in ("torch", "onnxruntime", "numpy"):
        try:
            assert versions[name] == metadata.version(name)
        except metadata.PackageNotFoundError:
            assert name not in versions
    assert any(Path(p).resolve() == Path(metadata.distribution("pytest").locate_file("")).resolve() for p in paths)


def test_local_probe_is_cached_while_the_package_folders_are_unchanged(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(site)}
    cache = ProbeCache(tmp_path / "probes")
    first = probe_local(sys.executable, env, 2, cache)
    assert not first.cached and first.frameworks["python"] and first.threads == {"cpus": 2}
    again = probe_local(sys.executable, env, 2, ProbeCache(tmp_path / "probes"))  # a later run: from disk
    assert again.cached and again.frameworks == first.frameworks
    (site / "numpy-0.0.1.dist-info").mkdir()  # an install changes the folder
    (site / "numpy-0.0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: numpy\nVersion: 0.0.1\n")
    later = probe_local(sys.executable, env, 2, ProbeCache(tmp_path / "probes"))
    assert not later.cached and later.frameworks["numpy"] == "0.0.1"


def test_thread_settings_and_cpu_lists():
    env = {"OMP_NUM_THREADS": "4", "MKL_NUM_THREADS": "2", "PATH": "/bin", "KMP_AFFINITY": "compact"}
    assert thread_settings(env, 8) == {"OMP_NUM_THREADS": "4", "MKL_NUM_THREADS": "2", "KMP_AFFINITY": "compact",
                                       "cpus": 8}
    assert (cpu_list_size("0-3,8"), cpu_list_size("5"), cpu_list_size("x")) == (5, 1, 0)


def test_precision_reported_by_the_model_wins_and_a_contradiction_is_noted():
    output = "precision: 0.93\ntraining_precision: bf16\nperformance: 3 x\ntraining_precision: fp32\n"
    assert reported_precision(output) == "fp32"  # the last line; an accuracy 'precision:' is not one
    assert reported_precision("precision: 0.93\n") == ""
    assert precision_columns("fp16", "fp32") == (
        {"training_precision": "fp32", "precision_source": "reported"},
        ["models.json declares training_precision fp16 but the model reported fp32"])
    assert precision_columns("fp32", "FP32")[1] == precision_columns("fp32", "float32")[1] == []
    assert precision_columns("bf16", "bfloat16")[1] == precision_columns("fp16", "half")[1] == []
    assert precision_columns("fp16", "") == ({"training_precision": "fp16", "precision_source": "declared"}, [])
    assert precision_columns("", "")[0] == {"training_precision": "", "precision_source": ""}


def test_load_notes_only_above_one_task_per_cpu():
    assert load_notes(0.5, 1.0) == [] and load_notes(None, None) == []
    (note,) = load_notes(2.5, 0.2)
    assert note.startswith("host busier than its CPUs: 2.50 at its start") and "; " not in note


@given(st.text(max_size=400))
def test_probe_output_parser_never_raises_and_keeps_only_short_version_strings(text):
    versions, paths = parse_probe_output(text)
    assert all(isinstance(v, str) and len(v) <= 80 for v in versions.values())
    assert all(isinstance(p, str) for p in paths)


@given(st.dictionaries(st.text(max_size=10), st.one_of(st.text(max_size=100), st.integers(), st.none()),
                       max_size=6))
def test_probe_output_parser_drops_what_is_not_a_version(versions):
    parsed, _ = parse_probe_output(json.dumps({"versions": versions, "paths": [1, "/x"]}))
    assert set(parsed) <= set(versions)
    assert all(versions[k] == v for k, v in parsed.items())


# --- runs --------------------------------------------------------------------------------------------

def _cli(*argv: str, load=None):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), Environment(stdout=out, stderr=err, environ=dict(os.environ), load=load))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def local_repo(tmp_path, monkeypatch):
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    (root / "scripts" / "run.sh").write_text('#!/bin/bash\necho "training_precision: fp32"\n'
                                             'echo "performance: 10 items/s"\n')
    (root / "scripts" / "spread.sh").write_text(
        '#!/bin/bash\nn=$(cat n 2>/dev/null || echo 0); n=$((n + 1)); echo $n > n\n'
        'echo "performance: $((n * n * n)) items/s"\n')
    (root / "models.json").write_text(json.dumps([
        {"name": "prov_local", "dockerfile": "docker/none", "scripts": "scripts/run.sh", "tags": ["prov"],
         "training_precision": "fp16"},
        {"name": "prov_spread", "dockerfile": "docker/none", "scripts": "scripts/spread.sh", "tags": ["spread"]}]))
    monkeypatch.chdir(root)
    monkeypatch.delenv("MODEL_DIR", raising=False)
    return root


def test_a_local_row_records_versions_threads_load_and_reported_precision(local_repo):
    code, _, err = _cli("run", "--tags", "prov_local", "--executor", "local", "--no-html", load=lambda: 0.25)
    assert code == 0, err
    row = read_rows(local_repo / "perf.csv")[-1]
    versions = json.loads(row["framework_versions"])
    assert versions["python"] == ".".join(map(str, sys.version_info[:3]))
    assert json.loads(row["thread_settings"])["cpus"] == len(os.sched_getaffinity(0))
    assert row["host_load_start"] == row["host_load_end"] == "0.25"
    assert row["training_precision"] == "fp32" and row["precision_source"] == "reported"
    assert row["warnings"] == "models.json declares training_precision fp16 but the model reported fp32"
    assert "1 row(s) with warnings" in err and "host busier" not in err


def test_a_precision_tag_config_is_the_declaration_the_model_is_held_to(local_repo):
    """precision=bf16 declares the run at bf16 (the model gets --precision bf16); the model reports fp32:
    the row says what it reported and why that is suspect, on the row and on stderr. A value that is no
    precision is bad input: exit 2 naming it and the valid ones, nothing run."""
    code, _, err = _cli("run", "--tags", "prov_local:precision=bfloat16", "--executor", "local", "--no-html",
                        load=lambda: 0.0)
    assert code == 0, err
    row = read_rows(local_repo / "perf.csv")[-1]
    assert (row["training_precision"], row["precision_source"]) == ("fp32", "reported")
    assert row["warnings"] == "the tag config declares training_precision bfloat16 but the model reported fp32"
    assert "prov_local: the tag config declares training_precision bfloat16" in err
    for bad in ("prov_local:precision=fp33", "prov_local:precision"):
        code, _, err = _cli("run", "--tags", bad, "--executor", "local", "--no-html")
        assert code == 2 and err.count("\n") == 1, err
        assert "is not a precision" in err and "valid: fp64, fp32, tf32, bf16, fp16" in err and "Traceback" not in err
    assert len(read_rows(local_repo / "perf.csv")) == 1


def test_rank_reports_are_read_from_a_launchers_output():
    output = ('[default1]:rank_settings: {"rank": 1, "device": "cuda:1", "threads": 4, "OMP_NUM_THREADS": "4"}\n'
              '[default0]:rank_settings: {"rank": 0, "device": "cuda:0", "threads": 4, "OMP_NUM_THREADS": "4", '
              '"torch_version": "2.13.0"}\n[default0]:training_precision: bf16\nrank_settings: {"rank": "x"}\n'
              'rank_settings: [1]\nrank_settings: {not json}\n')
    ranks = rank_settings(output)
    assert [r["rank"] for r in ranks] == [0, 1] and ranks[1]["OMP_NUM_THREADS"] == "4"
    assert rank_columns(ranks) == {"device": "cuda:0,cuda:1", "threads": "4", "torch_version": "2.13.0"}
    assert reported_precision(output) == "bf16"  # behind the launcher's prefix
    assert rank_settings("") == [] and rank_columns([]) == {}


@given(st.text(max_size=300))
def test_rank_report_parser_never_raises(text):
    for report in rank_settings(f"rank_settings: {text}\n{text}"):
        assert isinstance(report["rank"], int) and len(report) <= 32
    rank_columns(rank_settings(text))


def test_a_wide_spread_of_repeats_is_a_row_warning(local_repo):
    code, out, err = _cli("run", "--tags", "spread", "--executor", "local", "--repeat", "3", "--no-html", "--json",
                          load=lambda: 0.0)
    row = read_rows(local_repo / "perf.csv")[-1]
    assert code == 0 and json.loads(row["perf_samples"]) == [1.0, 8.0, 27.0]
    assert 0 < float(row["perf_ci95_low"]) < float(row["perf_ci95_high"])
    assert "unstable: the standard deviation" in row["warnings"] and row["precision_source"] == ""
    assert any("unstable" in w for w in json.loads(out)["results"][0]["warnings"])
    assert "prov_spread: unstable" in err


@pytest.fixture
def busy_host():
    """Busy processes, more than twice the machine's CPUs, all niced and pinned to one CPU: the run
    queue is longer than the CPUs (what the warning is about) while the work of the tests goes on."""
    cpu = min(os.sched_getaffinity(0))

    def pin_and_nice() -> None:
        os.sched_setaffinity(0, {cpu})
        os.nice(19)

    loops = [subprocess.Popen(["sh", "-c", "while :; do :; done"], preexec_fn=pin_and_nice)
             for _ in range(2 * (os.cpu_count() or 1) + 2)]
    try:
        deadline = time.monotonic() + 30
        while (runnable_per_cpu() or 0) <= 1.0 and time.monotonic() < deadline:
            time.sleep(0.1)
        yield len(loops)
    finally:
        for loop in loops:
            loop.kill()
        for loop in loops:
            loop.wait()


def test_a_host_busier_than_its_cpus_is_said_in_the_row_and_the_summary(local_repo, busy_host):
    code, out, err = _cli("run", "--tags", "prov_local", "--executor", "local", "--no-html", "--json")
    assert code == 0, err
    row = read_rows(local_repo / "perf.csv")[-1]
    assert float(row["host_load_start"]) > 1.0 and float(row["host_load_end"]) > 1.0
    assert "host busier than its CPUs" in row["warnings"]
    assert "row(s) with warnings" in err and "prov_local: host busier than its CPUs" in err
    assert any("host busier" in w for w in json.loads(out)["results"][0]["warnings"])



def test_bench_and_scorecard_rows_record_the_load_and_its_warning_like_run_rows(tmp_path, monkeypatch, busy_host):
    """The same columns and note as a run row's, on rows of `bench` (an ONNX model) and `scorecard`
    (onnxruntime-cpu-opt-disabled, the reference): real load, the real reader."""
    from test_bench_harness import build_mlp

    monkeypatch.chdir(tmp_path)
    build_mlp(tmp_path / "mlp.onnx")
    (tmp_path / "suite.yaml").write_text("models:\n  - {name: mlp, path: mlp.onnx, $axes: {batch: 2}}\n")
    fast = ("--warmup", "1", "--iterations", "3", "--threads", "1", "--no-trace")
    for argv in (("bench", "mlp.onnx", "--axes", "batch=2", "-o", "bench.csv"),
                 ("scorecard", "suite.yaml", "--backends", "onnxruntime-cpu-opt-disabled", "-o", "scorecard.csv")):
        code, _, err = _cli(*argv, *fast, "--runs-dir", "runs")
        assert code == 0, err
        [row] = read_rows(tmp_path / argv[-1])
        assert float(row["host_load_start"]) > 1.0 and float(row["host_load_end"]) > 1.0, row
        assert row["warnings"].startswith("host busier than its CPUs: "), row["warnings"]
        assert "madengine: warning: mlp" in err and "host busier than its CPUs" in err


def test_bench_rows_of_a_quiet_host_record_its_load_without_a_note(tmp_path, monkeypatch):
    from conftest import run_cli
    from test_bench_harness import build_mlp

    monkeypatch.chdir(tmp_path)
    build_mlp(tmp_path / "mlp.onnx")
    result = run_cli("bench", "mlp.onnx", "--axes", "batch=2", "--warmup", "1", "--iterations", "3", "--no-trace",
                     load=lambda: 0.25)
    assert result.code == 0, result
    [row] = read_rows(tmp_path / "perf.csv")
    assert (row["host_load_start"], row["host_load_end"], row["warnings"]) == ("0.25", "0.25", "")

# --- a real torch image --------------------------------------------------------------------------------

@pytest.fixture
def torch_repo(tmp_path, monkeypatch, docker_client, docker_cleanup):
    """A model whose image has torch installed from the CPU wheel (unpacked as pip would: the
    package and its dist-info) and typing_extensions, the one module ``import torch`` needs."""
    wheels = sorted(WHEELS.glob("torch-*-cp311-*.whl"))
    require_service("the torch CPU wheel", bool(wheels), f"put torch-2.13.0+cpu's wheel in {WHEELS}")
    import typing_extensions

    unique = uuid.uuid4().hex[:8]
    root = tmp_path / "repo"
    (root / "docker").mkdir(parents=True)
    (root / "scripts").mkdir()
    shutil.copy2(wheels[-1], root / "docker" / wheels[-1].name)
    shutil.copy2(typing_extensions.__file__, root / "docker" / "typing_extensions.py")
    site = "/usr/local/lib/python3.11/dist-packages"
    (root / "docker" / "torch.Dockerfile").write_text(
        f"FROM {BASE_IMAGE}\nLABEL madengine.test=i24-torch-{unique}\n"
        f"COPY {wheels[-1].name} typing_extensions.py /tmp/\n"
        f"RUN python3 -m zipfile -e /tmp/{wheels[-1].name} {site}/ && mv /tmp/typing_extensions.py {site}/ "
        f"&& rm /tmp/*.whl\nENV OMP_NUM_THREADS=1\n")
    (root / "scripts" / "run.py").write_text(
        "import torch\nprint('torch', torch.__version__, 'threads', torch.get_num_threads())\n"
        "print('training_precision:', str(torch.ones(1).dtype).split('.')[-1])\n"
        "print('performance:', float((torch.ones(64, 64) @ torch.ones(64, 64)).sum()), 'flops')\n")
    name = f"torch{unique}"
    (root / "models.json").write_text(json.dumps([{"name": name, "dockerfile": "docker/torch",
                                                   "scripts": "scripts/run.py", "tags": ["t"],
                                                   "training_precision": "fp32"}]))
    monkeypatch.chdir(root)
    monkeypatch.delenv("MODEL_DIR", raising=False)
    docker_cleanup.append(f"ci-{name}")
    yield root, name
    for image in docker_client.images.list(all=True, filters={"label": f"madengine.test=i24-torch-{unique}"}):
        try:
            docker_client.images.remove(image.id, force=True)
        except Exception:
            pass


@pytest.mark.slow
def test_a_torch_image_row_shows_the_containers_torch_version(torch_repo, tmp_path):
    root, name = torch_repo
    context = json.dumps({"docker_env_vars": {"MKL_NUM_THREADS": "1"}})
    env = {"MADENGINE_CACHE_DIR": str(tmp_path / "cache")}
    for _ in range(2):
        out, err = io.StringIO(), io.StringIO()
        code = main(["run", "--tags", name, "--additional-context", context, "--no-html", "--live-output"],
                    Environment(stdout=out, stderr=err, environ={**os.environ, **env}, load=lambda: 0.1))
        assert code == 0, err.getvalue()[-3000:]
    first, second = read_rows(root / "perf.csv")
    assert "torch 2.13.0+cpu threads 1" in err.getvalue()  # what the model itself saw
    for row in (first, second):
        versions = json.loads(row["framework_versions"])
        assert versions["torch"].startswith("2.13.0") and versions["python"].startswith("3.11")
        assert "torch_cuda" not in versions and "torch_hip" not in versions  # the CPU build
        assert json.loads(row["thread_settings"]) == {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                                                      "cpus": os.cpu_count()}
        assert row["training_precision"] == "float32" and row["precision_source"] == "reported"
        assert row["warnings"] == ""  # float32 is the fp32 models.json declares, in torch's words
    logs = [Path(next(a for a in r["artifacts"].split(",") if a.endswith("run.log"))).read_text()
            for r in (first, second)]
    assert "probed in" in logs[0] and "(cached)" in logs[1]  # one probe per image id
