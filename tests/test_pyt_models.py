"""The bundled PyTorch models (``--tags pyt``): ResNet training under DDP, BERT inference and GPT-2
generation, with random weights and data. Real torch, real Docker engine, the repository's own
catalog, Dockerfile and wheels (scripts/pyt-wheels.sh).

The images (``ci-pyt_*``) are kept: they are what a user's ``madengine run --tags pyt`` builds, and
the build is skipped while its inputs (the Dockerfile and the wheels) are unchanged, so only the first
run on a machine pays for it."""

from __future__ import annotations

import importlib.util
import math
import re
from pathlib import Path

import pytest

from conftest import REPO, require_service, run_process
from madengine.results import read_rows

PYT = ["pyt_resnet50_train", "pyt_bert_inference", "pyt_gpt2_generate"]


def _figure(row: dict) -> float:
    value = float(row["performance"])
    assert math.isfinite(value) and value > 0, row
    return value


def _by_model(perf: Path) -> dict[str, dict]:
    rows = read_rows(perf)
    return {row["model"]: row for row in rows}


def _pins(lock: Path) -> dict[str, str]:
    return dict(re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+) \\$", lock.read_text(), re.MULTILINE))


def test_the_image_lock_is_hashed_and_agrees_with_madengines_lock():
    """The image runs the torch and transformers the host's lock names (scripts/lock.sh makes both)."""
    lock = REPO / "wheels" / "pyt" / "requirements.txt"
    image, host = _pins(lock), _pins(REPO / "requirements" / "py311-linux-x86_64.txt")
    assert image["torch"] == "2.13.0+cpu" and "transformers" in image and "pip" in image
    assert {name: version for name, version in image.items() if host.get(name, version) != version} == {}
    assert lock.read_text().count("--hash=sha256:") >= len(image)


@pytest.mark.docker
@pytest.mark.slow
def test_run_tags_pyt_records_success_rows_for_the_three_models(tmp_path, docker_client, pyt_wheels):
    perf, runs = tmp_path / "perf.csv", tmp_path / "runs"
    done = run_process("run", "--tags", "pyt", "--perf-csv", str(perf), "--runs-dir", str(runs), "--no-html",
                       cwd=tmp_path, env={"MODEL_DIR": str(REPO)}, timeout=3000)
    assert done.returncode == 0, done.stderr[-4000:]
    rows = _by_model(perf)
    assert {row["status"] for row in rows.values()} == {"SUCCESS"}, rows
    assert all(row["executor"] == "docker" and row["training_precision"] == "fp32" for row in rows.values())
    _truthful(rows.values())

    resnet = rows["pyt_resnet50_train"]
    assert resnet["metric"] == "samples_per_second" and _figure(resnet)

    bert = {name[len("pyt_bert_inference_"):]: row for name, row in rows.items() if name.startswith("pyt_bert")}
    assert set(bert) == {"throughput", "latency_p50", "latency_p90", "latency_p99"}
    assert bert["throughput"]["metric"] == "samples_per_second" and _figure(bert["throughput"])
    p50, p90, p99 = (_figure(bert[f"latency_p{q}"]) for q in (50, 90, 99))
    assert p50 <= p90 <= p99 and {bert[f"latency_p{q}"]["metric"] for q in (50, 90, 99)} == {"ms"}

    gpt2 = {name[len("pyt_gpt2_generate_"):]: row for name, row in rows.items() if name.startswith("pyt_gpt2")}
    assert {k: r["metric"] for k, r in gpt2.items()} == {"tokens_per_second": "tokens_per_second",
                                                         "ttft_ms": "ms", "tpot_ms": "ms"}
    assert all(_figure(row) for row in gpt2.values())
    for row in [*bert.values(), *gpt2.values()]:  # what ran, beside each figure
        assert (row["device"], row["precision"]) == ("cpu", "fp32"), row

    built = next(runs.glob("*/ci-pyt_resnet50_train_pyt/build.log")).read_text()
    if "build skipped" not in built:  # built now: from the context's wheels alone
        # or the engine's layer cache had the install step, made from this same context (a machine
        # that built the image before, where madengine's own record of it was removed)
        cached = re.search(r"--find-links /tmp/wheels[^\n]*\n ---> Using cache\n", built)
        assert "Looking in links: /tmp/wheels" in built or cached, built[-2000:]
        assert "Looking in indexes" not in built and "Downloading" not in built, built[-2000:]

    # the next run finds the image up to date: no build (the CI run pays for the image once)
    again = run_process("run", "--tags", "pyt", "--skip-model-run", "--perf-csv", str(tmp_path / "again.csv"),
                        "--runs-dir", str(runs), "--no-html", cwd=tmp_path, env={"MODEL_DIR": str(REPO)})
    assert again.returncode == 0, again.stderr[-2000:]
    assert "ci-pyt_resnet50_train_pyt is up to date" in again.stderr, again.stderr[-2000:]


def _truthful(rows) -> None:
    """What every pyt_* row says about how it was made: the precision the model reported, the device,
    threads and torch version, and what each rank of the DDP job saw (torchrun gives each rank
    OMP_NUM_THREADS=1, and torch uses that one thread)."""
    import json

    for row in rows:
        assert row["precision_source"] == "reported", row
        assert row["device"] and row["threads"] and row["torch_version"], row
        assert json.loads(row["framework_versions"])["torch"] == row["torch_version"], row
    [resnet] = [row for row in rows if row["model"] == "pyt_resnet50_train"]
    ranks = json.loads(resnet["thread_settings"])["ranks"]
    assert [rank["rank"] for rank in ranks] == [0, 1], ranks
    assert all((rank["OMP_NUM_THREADS"], rank["threads"], rank["device"]) == ("1", 1, "cpu") for rank in ranks), ranks
    assert (resnet["device"], resnet["threads"]) == ("cpu", "1")
    # its "auto" block on a host without GPUs: cpu_nproc_per_node's 2 ranks over gloo, as the ranks said
    assert (resnet["launcher"], resnet["world_size"], resnet["nproc_per_node"], resnet["dist_backend"]) == \
        ("torchrun", "2", "2", "gloo"), resnet
    assert [rank["dist_backend"] for rank in ranks] == ["gloo", "gloo"], ranks


def _host_torch() -> None:
    found = all(importlib.util.find_spec(name) for name in ("torch", "transformers"))
    require_service("torch and transformers on the host (pip install '.[torch]')", found,
                    "scripts/test.sh installs madengine[all]")


TINY = ["pyt_resnet50_train:arch=resnet18:image-size=32:batch-size=2:steps=2:warmup-steps=1",
        "pyt_bert_inference:precision=bf16:layers=2:hidden=64:heads=2:seq-len=16:iterations=5:warmup=1",
        "pyt_gpt2_generate:layers=2:hidden=64:heads=2:new-tokens=6:runs=2"]


@pytest.mark.slow
def test_the_scripts_run_small_on_the_host_and_ddp_runs_two_ranks(tmp_path):
    """The same scripts, scaled down by tag configs, under the local executor; the ResNet one under
    ``torchrun --standalone --nproc_per_node=2`` (its block's CPU rank count) handed over as
    ``MAD_MULTI_NODE_RUNNER``."""
    _host_torch()
    perf, runs = tmp_path / "perf.csv", tmp_path / "runs"
    done = run_process("run", "--tags", *TINY, "--executor", "local", "--perf-csv", str(perf), "--runs-dir",
                       str(runs), "--no-html", cwd=tmp_path,
                       env={"MODEL_DIR": str(REPO)})
    assert done.returncode == 0, done.stderr[-4000:]
    rows = read_rows(perf)
    assert len(rows) == 1 + 4 + 3 and {row["status"] for row in rows} == {"SUCCESS"}
    assert all(_figure(row) for row in rows)
    logs = "".join(path.read_text(errors="replace") for path in runs.rglob("*.log"))
    assert "world size 2, 1 node(s)" in logs  # both ranks trained and reported
    # a bf16 run is recorded as bf16, as the model reported it (torch computes bf16 on any x86-64 CPU);
    # declared by its tag config, so no contradiction is noted
    bert = [row for row in rows if row["model"].startswith("pyt_bert_inference")]
    assert {(row["training_precision"], row["precision"], row["warnings"].count("declares")) for row in bert} == \
        {("bf16", "bf16", 0)}, bert
    assert {row["training_precision"] for row in rows if not row["model"].startswith("pyt_bert")} == {"fp32"}
    _truthful(rows)


@pytest.mark.slow
def test_a_bad_option_is_a_failure_row_saying_why(tmp_path):
    _host_torch()
    perf = tmp_path / "perf.csv"
    done = run_process("run", "--tags", "pyt_bert_inference:device=cpu:precision=fp16:layers=1:hidden=32:heads=2",
                       "--executor", "local", "--perf-csv", str(perf), "--runs-dir", str(tmp_path / "runs"),
                       "--no-html", cwd=tmp_path, env={"MODEL_DIR": str(REPO)})
    assert done.returncode == 1
    row = read_rows(perf)[0]
    assert row["status"] == "FAILURE" and "--precision fp16 needs a GPU" in row["reason"], row


@pytest.mark.docker
def test_a_clone_without_the_wheels_gets_a_failure_row_saying_to_fetch_them(tmp_path, docker_client):
    """A fresh clone that skipped scripts/pyt-wheels.sh: the image's RUN step stops at once, and the
    row's reason is that step's own words in one line, not the builder's truncated RUN line."""
    import json
    import shutil

    repo = tmp_path / "repo"
    (repo / "docker").mkdir(parents=True)
    shutil.copy2(REPO / "docker" / "pyt.Dockerfile", repo / "docker" / "pyt.Dockerfile")
    (repo / "wheels" / "pyt").mkdir(parents=True)
    shutil.copy2(REPO / "wheels" / "pyt" / "requirements.txt", repo / "wheels" / "pyt" / "requirements.txt")
    (repo / "scripts" / "pyt").mkdir(parents=True)
    (repo / "scripts" / "pyt" / "run.sh").write_text("#!/bin/bash\necho 'performance: 1 x'\n")
    (repo / "models.json").write_text(json.dumps([{"name": "pyt_nowheels", "dockerfile": "docker/pyt",
                                                   "dockercontext": "wheels/pyt", "scripts": "scripts/pyt/run.sh",
                                                   "tags": ["nowheels"]}]))
    perf = tmp_path / "perf.csv"
    done = run_process("run", "--tags", "nowheels", "--perf-csv", str(perf), "--runs-dir", str(tmp_path / "runs"),
                       "--no-html", cwd=repo, env={"MODEL_DIR": str(repo)}, timeout=600)
    assert done.returncode == 1, done.stderr[-3000:]
    [row] = read_rows(perf)
    assert row["status"] == "FAILURE" and "\n" not in row["reason"], row
    assert row["reason"].startswith("build of ci-pyt_nowheels_pyt failed: no wheels in the build context: run "
                                    "scripts/pyt-wheels.sh (a RUN step exited with code 1)"), row["reason"]
    assert "/bin/sh -c" not in row["reason"]
