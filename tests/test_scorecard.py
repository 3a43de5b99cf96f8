"""madengine scorecard: real models (ResNet-18, MobileNetV2, BERT built with torch + transformers
from configs, random weights) on real backends (ONNX Runtime, OpenVINO, TVM Relax), the output check,
perf.csv / database / HTML / JSON, URLs through the S3 provider (moto), and cells inside containers
(the real Docker engine). This machine has no GPU: GPU backends are checked for their UNSUPPORTED cell."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from conftest import BASE_IMAGE, IN_CI, REPO, require_service
from test_bench_harness import build_mlp
from test_data_servers import s3_server  # noqa: F401  (fixture)

from madengine.results import read_rows
from madengine.bench.backends import get_backend
from madengine.bench.harness.precision import cpu_flags, cpu_lacks

FAST = ("--warmup", "1", "--iterations", "3", "--threads", "1")
CPU = "onnxruntime-cpu-opt-disabled,onnxruntime-cpu-opt-all,openvino-cpu,tvm-relax-llvm"


def _require_backends(*ids: str) -> None:
    for backend in ids:
        hint = get_backend(backend).missing()
        require_service(backend, hint is None, f"{hint}; scripts/test.sh installs madengine[all]")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Real architectures exported to ONNX here (small images: an untuned TVM build stays quick)."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        require_service("torch and transformers", False, f"pip install 'madengine[torch]' ({exc})")
    from madengine.bench.scorecard import examples

    folder = tmp_path_factory.mktemp("scorecard_models")
    return {
        "resnet18": examples.build_resnet18(folder / "resnet18.onnx", image_size=32),
        "mobilenet_tf": examples.build_mobilenet_v2(folder / "mobilenet_tf.onnx", image_size=32, tf_padding=True),
        "bert": examples.build_bert(folder / "bert.onnx", sequence=16),
    }


def write_suite(path: Path, models: list[dict]) -> Path:
    path.write_text(yaml.safe_dump({"models": models}, sort_keys=False))
    return path


def rows_of(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def cells_of(document: dict) -> dict[tuple[str, str], dict]:
    return {(m["model"], c["backend"]): c for m in document["models"] for c in m["cells"]}


# -- the real models on every CPU backend ----------------------------------------------------------
def test_real_models_on_every_cpu_backend(cli, models, tmp_path):
    _require_backends(*CPU.split(","))
    suite = write_suite(tmp_path / "suite.yaml", [
        {"set": "vision", "name": "resnet18", "version": 1, "path": str(models["resnet18"])},
        {"set": "vision", "name": "mobilenet_tf", "path": str(models["mobilenet_tf"]),
         "backends": ["onnxruntime-cpu-opt-all", "tvm-relax-llvm"], "tolerance": {"atol": 1e-3, "rtol": 1e-3}},
        {"set": "nlp", "name": "bert", "path": str(models["bert"]), "$axes": {"batch": 2, "sequence": 16},
         "backends": ["onnxruntime-cpu-opt-all", "openvino-cpu", "tvm-relax-llvm"],
         "tolerance": {"atol": 1e-4, "rtol": 1e-3}},
    ])
    perf, page = tmp_path / "perf.csv", tmp_path / "scorecard.html"
    db = tmp_path / "results.db"
    result = cli("scorecard", str(suite), *FAST, "-o", str(perf), "--html", str(page), "--json",
                 "--runs-dir", str(tmp_path / "runs"), "--db-url", f"sqlite:///{db}")
    assert result.code == 0, result
    document = json.loads(result.stdout)
    cells = cells_of(document)
    # every backend computed ResNet-18 within the default tolerance, timed by the harness, at f32 as the
    # runtime reports it (OpenVINO's own default is bf16 on CPUs that have it: madengine asks for f32)
    for backend in CPU.split(","):
        cell = cells[("vision/resnet18@1", backend)]
        assert cell["status"] == "PASS", cell
        assert cell["stats"]["n"] == 3 and cell["prepare_ms"] > 0 and cell["first_inference_ms"] > 0
        assert cell["ratio"] > 0 and cell["version"]
        assert (cell["precision"], cell["precision_requested"]) == ("f32", "f32")
        assert cell["environment"]["cpu_flags"] == cpu_flags() and cell["environment"]["versions"]["numpy"]
    reference = cells[("vision/resnet18@1", "onnxruntime-cpu-opt-disabled")]
    assert reference["reference"] and reference["ratio"] == pytest.approx(1.0)
    assert cells[("vision/resnet18@1", "onnxruntime-cpu-opt-all")]["check"]["output"] == "logits"
    # TensorFlow-style padding: a Pad with dynamic pads, which TVM's ONNX frontend lacks
    tvm = cells[("vision/mobilenet_tf", "tvm-relax-llvm")]
    assert tvm["status"] == "UNSUPPORTED" and tvm["operator"] == "Pad" and "Dynamic pads" in tvm["reason"]
    assert cells[("vision/mobilenet_tf", "onnxruntime-cpu-opt-all")]["status"] == "PASS"
    # per-model backends (the reference always runs first); $axes filled the dynamic axes
    bert = [m for m in document["models"] if m["model"] == "nlp/bert"][0]
    assert [c["backend"] for c in bert["cells"]] == ["onnxruntime-cpu-opt-disabled", "onnxruntime-cpu-opt-all",
                                                     "openvino-cpu", "tvm-relax-llvm"]
    assert bert["input_shapes"] == "input_ids=2,16;attention_mask=2,16" and bert["rtol"] == 1e-3
    assert all(c["status"] == "PASS" for c in bert["cells"]), bert["cells"]  # TVM's too (BERT's additive mask)
    # the terminal grid (stderr with --json)
    assert "vision/resnet18@1" in result.stderr and "PASS R f32" in result.stderr and "UNSUPPORTED" in result.stderr
    assert "the precision the runtime computed in" in result.stderr
    assert "vision/mobilenet_tf × tvm-relax-llvm: UNSUPPORTED: operator Pad" in result.stderr
    # perf.csv: one row per model × backend, the backend in each row
    rows = rows_of(perf)
    assert len(rows) == 4 + 3 + 4
    assert {(r["model"], r["backend"]) for r in rows} == set(cells)
    resnet_all = [r for r in rows if r["model"] == "vision/resnet18@1" and r["backend"] == "onnxruntime-cpu-opt-all"][0]
    assert (resnet_all["status"], resnet_all["metric"], resnet_all["scorecard_status"]) == \
        ("SUCCESS", "samples_per_second", "PASS")
    assert float(resnet_all["latency_ratio"]) > 0 and resnet_all["reference_backend"] == "onnxruntime-cpu-opt-disabled"
    assert resnet_all["executor"] == "scorecard" and resnet_all["gpu_vendor"] == "CPU"
    skipped = [r for r in rows if r["backend"] == "tvm-relax-llvm" and r["model"] == "vision/mobilenet_tf"][0]
    assert skipped["status"] == "SKIPPED" and skipped["reason"].startswith("UNSUPPORTED: operator Pad")
    # the precision each cell computed in (perf.csv's precision column), the CPU and the runtimes
    assert {r["training_precision"] for r in rows if r["status"] == "SUCCESS"} == {"f32"}
    assert skipped["training_precision"] == ""  # it never ran
    import openvino

    openvino_row = [r for r in rows if r["backend"] == "openvino-cpu" and r["model"] == "vision/resnet18@1"][0]
    assert json.loads(openvino_row["framework_versions"])["openvino"] == openvino.__version__
    assert openvino_row["precision_source"] == "reported" and skipped["precision_source"] == ""
    assert openvino_row["cpu_flags"].split() == cpu_flags() and openvino_row["cpu_model"]
    # the same rows in the results database
    from madengine.database import fetch_run

    stored = fetch_run(f"sqlite:///{db}", document["run_id"])
    assert sorted((r["model"], r["backend"]) for r in stored) == sorted((r["model"], r["backend"]) for r in rows)
    # the HTML page: self-contained, coloured by status
    html = page.read_text()
    assert 'class="cell pass"' in html and 'class="cell unsupported"' in html and "tvm-relax-llvm" in html
    assert '<span class="precision">f32</span>' in html and "<th>precision</th>" in html
    assert "<script" not in html and "http://" not in html and "https://" not in html


# -- precision: f32 unless asked, reduced precision as cells of its own -------------------------------
def test_opt_in_bf16_cells_on_real_models_pass_with_their_own_tolerance(cli, models, tmp_path):
    """ResNet-18 and a BERT encoder: every f32 cell within the f32 tolerance; openvino-cpu:bf16, a cell
    of its own, computes bf16 (its errors exceed f32's tolerance) and passes bf16's, or, on a CPU without
    bf16 instructions, is UNSUPPORTED naming the flags (the f32 cells run all the same)."""
    _require_backends("onnxruntime-cpu-opt-all", "openvino-cpu")
    suite = write_suite(tmp_path / "suite.yaml", [
        {"set": "vision", "name": "resnet18", "path": str(models["resnet18"])},
        {"set": "nlp", "name": "bert", "path": str(models["bert"]), "$axes": {"batch": 2, "sequence": 16},
         "tolerance": {"atol": 1e-4, "rtol": 1e-3}}])
    perf, page = tmp_path / "perf.csv", tmp_path / "page.html"
    result = cli("scorecard", str(suite), *FAST, "-o", str(perf), "--runs-dir", str(tmp_path / "runs"), "--json",
                 "--html", str(page), "--backends", "onnxruntime-cpu-opt-all,openvino-cpu,openvino-cpu:bf16")
    assert result.code == 0, result
    document = json.loads(result.stdout)
    assert document["backends"] == ["onnxruntime-cpu-opt-disabled", "onnxruntime-cpu-opt-all", "openvino-cpu",
                                    "openvino-cpu:bf16"]
    cells, rows = cells_of(document), {(r["model"], r["backend"]): r for r in rows_of(perf)}
    lacks = cpu_lacks("bf16")
    for model in ("vision/resnet18", "nlp/bert"):
        for backend in ("onnxruntime-cpu-opt-disabled", "onnxruntime-cpu-opt-all", "openvino-cpu"):
            assert (cells[(model, backend)]["status"], cells[(model, backend)]["precision"]) == ("PASS", "f32")
            assert rows[(model, backend)]["training_precision"] == "f32"
        bf16, row = cells[(model, "openvino-cpu:bf16")], rows[(model, "openvino-cpu:bf16")]
        assert bf16["precision_requested"] == "bf16"
        if lacks:
            assert bf16["status"] == "UNSUPPORTED" and "needs one of the CPU flags avx512_bf16" in bf16["reason"]
            assert row["status"] == "SKIPPED"
            continue
        assert (bf16["status"], bf16["precision"], bf16["atol"], bf16["rtol"]) == ("PASS", "bf16", 2e-2, 2e-2), bf16
        assert bf16["check"]["max_abs_error"] > 1e-4  # past f32's tolerance: it really computed bf16
        assert (row["status"], row["training_precision"], row["atol"], row["rtol"]) == ("SUCCESS", "bf16", "0.02",
                                                                                      "0.02")
        assert "--backend openvino-cpu:bf16" in row["args"] and "--atol 0.02" in row["args"]
    if not lacks:
        assert "PASS bf16" in result.stderr and '<span class="precision">bf16</span>' in page.read_text()


def test_precision_flag_makes_cells_and_what_no_backend_mode_can_run_is_exit_2(cli, tmp_path):
    """--precision bf16 makes a cell per backend at bf16 (the reference stays f32). ONNX Runtime's CPU
    provider and TVM have no bf16 mode on any machine: asking them is bad input, exit 2 naming the cell
    and what its backend runs, nothing run. OpenVINO has one: its cell runs, or on a CPU without bf16
    instructions is UNSUPPORTED (a fact about the host, not the request); exit 0 either way."""
    _require_backends(*CPU.split(","))
    build_mlp(tmp_path / "mlp.onnx")
    suite = write_suite(tmp_path / "suite.yaml", [{"name": "mlp", "path": "mlp.onnx", "$axes": {"batch": 4}}])
    perf = tmp_path / "perf.csv"
    for backends, cell in ((CPU, "onnxruntime-cpu-opt-disabled:bf16"), ("tvm-relax-llvm", "tvm-relax-llvm:bf16")):
        result = cli("scorecard", str(suite), *FAST, "-o", str(perf), "--runs-dir", str(tmp_path / "runs"),
                     "--backends", backends, "--precision", "bfloat16")
        assert result.code == 2, result
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
        assert f"--precision: model 'mlp': cell {cell}: " in result.stderr, result.stderr
        assert "cannot run bf16: it computes in the model's own types (f32)" in result.stderr
        assert "(valid for it: f32)" in result.stderr and not perf.exists()
    named = cli("scorecard", str(suite), *FAST, "-o", str(perf), "--runs-dir", str(tmp_path / "runs"),
                "--backends", "openvino-cpu,onnxruntime-cpu-opt-all:fp16")
    assert named.code == 2 and "--backends: model 'mlp': cell onnxruntime-cpu-opt-all:fp16: " in named.stderr, named
    result = cli("scorecard", str(suite), *FAST, "-o", str(perf), "--runs-dir", str(tmp_path / "runs"), "--json",
                 "--backends", "openvino-cpu", "--precision", "f32,bfloat16")
    assert result.code == 0, result
    document = json.loads(result.stdout)
    assert document["backends"] == ["onnxruntime-cpu-opt-disabled", "openvino-cpu", "openvino-cpu:bf16"]
    cells = cells_of(document)
    assert (cells[("mlp", "onnxruntime-cpu-opt-disabled")]["status"],
            cells[("mlp", "onnxruntime-cpu-opt-disabled")]["precision"]) == ("PASS", "f32")
    openvino = cells[("mlp", "openvino-cpu:bf16")]
    assert openvino["status"] == ("UNSUPPORTED" if cpu_lacks("bf16") else "PASS"), openvino


def test_a_cpu_without_bf16_gets_an_unsupported_cell_and_the_rest_runs(cli, tmp_path, monkeypatch):
    """The same answer on every machine: with the CPU's flags those of an AVX-512 CPU without bf16
    (where OpenVINO would emulate it), openvino-cpu:bf16 is UNSUPPORTED with the reason, the f32 cells PASS."""
    _require_backends("openvino-cpu")
    from madengine.bench.harness import precision

    monkeypatch.setattr(precision, "cpu_flags", lambda cpuinfo="/proc/cpuinfo": ["avx2", "fma", "avx512f"])
    build_mlp(tmp_path / "mlp.onnx")
    suite = write_suite(tmp_path / "suite.yaml", [
        {"name": "mlp", "path": "mlp.onnx", "$axes": {"batch": 4}, "backends": ["openvino-cpu", "openvino-cpu:bf16"]}])
    perf = tmp_path / "perf.csv"
    result = cli("scorecard", str(suite), *FAST, "-o", str(perf), "--runs-dir", str(tmp_path / "runs"))
    assert result.code == 0, result
    rows = {r["backend"]: r for r in rows_of(perf)}
    assert rows["openvino-cpu"]["scorecard_status"] == "PASS" and rows["openvino-cpu"]["training_precision"] == "f32"
    skipped = rows["openvino-cpu:bf16"]
    assert (skipped["status"], skipped["scorecard_status"], skipped["cpu_flags"]) == ("SKIPPED", "UNSUPPORTED",
                                                                                      "avx2 fma avx512f")
    assert skipped["reason"] == ("UNSUPPORTED: openvino-cpu cannot run bf16 on this CPU: bf16 needs one of the CPU "
                                 "flags avx512_bf16, amx_bf16, avx_ne_convert, bf16 (this CPU has none: it would be "
                                 "emulated)")
    assert "mlp × openvino-cpu:bf16: UNSUPPORTED: openvino-cpu cannot run bf16" in result.stdout


def test_zero_tolerance_on_a_float_model_is_a_mismatch_and_exit_1(cli, models, tmp_path):
    """onnxruntime's graph optimisations change float arithmetic (fused convolutions): with
    atol = rtol = 0 the answer differs from the unoptimised reference, and it must never look green."""
    suite = write_suite(tmp_path / "suite.yaml", [
        {"name": "resnet18", "path": str(models["resnet18"]), "tolerance": {"atol": 0, "rtol": 0},
         "backends": ["onnxruntime-cpu-opt-all"]}])
    perf, page = tmp_path / "perf.csv", tmp_path / "page.html"
    result = cli("scorecard", str(suite), *FAST, "-o", str(perf), "--html", str(page), "--runs-dir",
                 str(tmp_path / "runs"))
    assert result.code == 1, result
    row = [r for r in rows_of(perf) if r["backend"] == "onnxruntime-cpu-opt-all"][0]
    assert (row["status"], row["scorecard_status"], row["performance"]) == ("FAILURE", "MISMATCH", "")
    assert row["reason"].startswith("MISMATCH: output 'logits': max abs error ")
    assert row["check_output"] == "logits" and float(row["max_abs_error"]) > 0 and row["atol"] == "0.0"
    assert "MISMATCH" in result.stdout and "1 MISMATCH" in result.stderr
    assert 'class="cell mismatch"' in page.read_text()


def test_perturbed_graph_is_a_mismatch_with_the_output_named(cli, tmp_path, monkeypatch):
    """A backend given a deliberately different graph: the suite's --atol/--rtol flags apply, the
    onnx reference evaluator is the reference, and the cell names the output and the errors."""
    import onnx
    from onnx import numpy_helper

    model = build_mlp(tmp_path / "mlp.onnx")
    graph = onnx.load(str(model))
    bias = numpy_helper.to_array(graph.graph.initializer[1]).copy()
    bias[3] += 0.5  # one output column off by 0.5
    graph.graph.initializer[1].CopyFrom(numpy_helper.from_array(bias, "b"))
    onnx.save(graph, str(tmp_path / "perturbed.onnx"))
    # the reference evaluator computes the original file; the backend runs the perturbed one under the same name
    suite = write_suite(tmp_path / "suite.yaml", [
        {"name": "mlp", "path": "mlp.onnx", "$axes": {"batch": 2}, "reference": "onnx-reference",
         "backends": ["onnxruntime-cpu-opt-all"]}])
    perf = tmp_path / "perf.csv"
    ok = cli("scorecard", str(suite), *FAST, "-o", str(perf), "--runs-dir", str(tmp_path / "runs"), "--json")
    assert ok.code == 0, ok
    cells = cells_of(json.loads(ok.stdout))
    assert list(cells) == [("mlp", "onnxruntime-cpu-opt-all")]  # the oracle is not a timed cell
    assert cells[("mlp", "onnxruntime-cpu-opt-all")]["status"] == "PASS"
    # the command line recorded is the one this (in-process) command ran, not the test runner's
    [row] = read_rows(perf)
    assert row["command_line"].startswith("madengine scorecard ") and str(suite) in row["command_line"]
    from madengine.bench.backends import cell as cell_module

    original = cell_module.run_cell

    def run_perturbed(backend, model_path, *args, **kwargs):
        swapped = tmp_path / "perturbed.onnx" if backend == "onnxruntime-cpu-opt-all" else model_path
        return original(backend, swapped, *args, **kwargs)

    from madengine.bench.scorecard import runner

    monkeypatch.setattr(runner, "run_cell", run_perturbed)
    bad = cli("scorecard", str(suite), *FAST, "-o", str(perf), "--runs-dir", str(tmp_path / "runs"), "--json",
              "--atol", "0.1", "--rtol", "0")
    assert bad.code == 1, bad
    cell = cells_of(json.loads(bad.stdout))[("mlp", "onnxruntime-cpu-opt-all")]
    assert cell["status"] == "MISMATCH" and cell["check"]["output"] == "y"
    assert cell["check"]["max_abs_error"] == pytest.approx(0.5, rel=1e-5) and cell["check"]["atol"] == 0.1
    assert "output 'y': max abs error 0.5" in cell["reason"] and "at index [0, 3]" in cell["reason"]


# -- checks that can fail ----------------------------------------------------------------------------
def test_a_reference_that_cannot_tell_is_inconclusive_and_a_planted_wrong_answer_fails(cli, tmp_path, monkeypatch):
    """MobileNetV2 with its initial BatchNorm statistics: logits of about 1e-22. Matching them proves
    nothing, so the reference cell and the cell that matches it are INCONCLUSIVE (SUCCESS rows with
    their figure and a warning, never PASS); an all-zero answer planted in a cell, which a fixed
    atol of 1e-4 would pass, is a MISMATCH at the reference's scale (exit 1)."""
    import numpy as np

    from madengine.bench.scorecard import examples

    _require_backends("onnxruntime-cpu-opt-all")
    model = examples.build_mobilenet_v2(tmp_path / "mobilenet_raw.onnx", image_size=32, calibrate=False)
    suite = write_suite(tmp_path / "suite.yaml", [{"name": "mobilenet_raw", "path": str(model),
                                                  "backends": ["onnxruntime-cpu-opt-all"]}])
    perf, page = tmp_path / "perf.csv", tmp_path / "page.html"
    result = cli("scorecard", str(suite), *FAST, "-o", str(perf), "--runs-dir", str(tmp_path / "runs"), "--json",
                 "--html", str(page))
    assert result.code == 0, result
    cells = cells_of(json.loads(result.stdout))
    reference, cell = cells[("mobilenet_raw", "onnxruntime-cpu-opt-disabled")], cells[("mobilenet_raw",
                                                                                          "onnxruntime-cpu-opt-all")]
    assert reference["status"] == "INCONCLUSIVE" and "output 'logits': the reference is ~0" in reference["reason"]
    assert cell["status"] == "INCONCLUSIVE" and "a wrong answer could match it" in cell["reason"], cell
    rows = {r["backend"]: r for r in rows_of(perf)}
    for row in rows.values():
        assert (row["status"], row["scorecard_status"]) == ("SUCCESS", "INCONCLUSIVE") and float(row["performance"]) > 0
        assert "output check INCONCLUSIVE: output 'logits': the reference is ~0" in row["warnings"]
    assert "INCONCLUSIVE" in result.stderr and "mobilenet_raw × onnxruntime-cpu-opt-all: INCONCLUSIVE:" in result.stderr
    assert 'class="cell inconclusive"' in page.read_text()

    from madengine.bench.scorecard import runner

    original, seen = runner.run_cell, {}

    def zeros_from_opt_all(backend, *args, **kwargs):
        answer, outputs = original(backend, *args, **kwargs)
        seen[backend] = outputs
        if backend == "onnxruntime-cpu-opt-all":
            outputs = {name: np.zeros_like(value) for name, value in outputs.items()}
        return answer, outputs

    monkeypatch.setattr(runner, "run_cell", zeros_from_opt_all)
    planted = cli("scorecard", str(suite), *FAST, "-o", str(tmp_path / "planted.csv"), "--runs-dir",
                  str(tmp_path / "runs"), "--json")
    assert planted.code == 1, planted
    logits = seen["onnxruntime-cpu-opt-disabled"]["logits"]
    assert np.allclose(np.zeros_like(logits), logits, atol=1e-4, rtol=1e-4)  # a fixed atol would pass it
    wrong = cells_of(json.loads(planted.stdout))[("mobilenet_raw", "onnxruntime-cpu-opt-all")]
    assert wrong["status"] == "MISMATCH" and "output 'logits': max abs error" in wrong["reason"], wrong


@pytest.mark.slow
def test_the_readme_demo_passes_every_cell(cli, tmp_path):
    """The suite of `python -m madengine.bench.scorecard.examples` on every CPU backend: every cell
    PASS, TVM's BERT included, and every model's outputs mean something (RMS well above ~0, not
    constant): the check could have failed."""
    import numpy as np

    from madengine.bench.correctness import degenerate
    from madengine.bench.scorecard import examples

    _require_backends(*CPU.split(","))
    suite = examples.build_example_suite(tmp_path / "demo")
    result = cli("scorecard", str(suite), *FAST, "--backends", CPU, "-o", str(tmp_path / "perf.csv"), "--runs-dir",
                 str(tmp_path / "runs"), "--json")
    assert result.code == 0, result
    document = json.loads(result.stdout)
    assert document["counts"] == {"PASS": 12, "MISMATCH": 0, "INCONCLUSIVE": 0, "UNSUPPORTED": 0, "ERROR": 0}, \
        [(c["backend"], c["status"], c["reason"]) for m in document["models"] for c in m["cells"]]
    from madengine.bench.backends.cell import run_cell
    from madengine.bench.harness.inputs import generate, resolve_shapes
    from madengine.bench.runner import declared_signature

    for model in document["models"]:
        signature = declared_signature(Path(model["path"]))
        shapes = {name: tuple(int(d) for d in dims.split(",")) for name, dims in
                  (part.split("=") for part in model["input_shapes"].split(";"))}
        feeds = generate(signature, resolve_shapes(signature, shapes, {}, None), 0)
        _, outputs = run_cell("onnxruntime-cpu-opt-disabled", Path(model["path"]), feeds, shapes, timed=False,
                              batch_size=1)
        for name, value in outputs.items():
            assert degenerate(value) == "" and float(np.sqrt(np.mean(np.square(value)))) > 0.05, (model["model"], name)


# -- problems: sha256, GPU, not installed, bad input -------------------------------------------------
def test_sha256_mismatch_stops_that_model_only(cli, tmp_path):
    build_mlp(tmp_path / "mlp.onnx")
    suite = write_suite(tmp_path / "suite.yaml", [
        {"name": "tampered", "path": "mlp.onnx", "sha256": "0" * 64, "$axes": {"batch": 2}},
        {"name": "fine", "path": "mlp.onnx", "$axes": {"batch": 2}, "backends": ["onnxruntime-cpu-opt-all"]}])
    perf = tmp_path / "perf.csv"
    result = cli("scorecard", str(suite), *FAST, "-o", str(perf), "--runs-dir", str(tmp_path / "runs"),
                 "--backends", "onnxruntime-cpu-opt-all")
    assert result.code == 1, result
    rows = rows_of(perf)
    tampered = [r for r in rows if r["model"] == "tampered"]
    assert tampered and all(r["status"] == "FAILURE" and "sha256 mismatch" in r["reason"] and r["latency_n"] == ""
                            for r in tampered)
    assert {r["scorecard_status"] for r in rows if r["model"] == "fine"} == {"PASS"}


def test_gpu_backends_without_a_gpu_are_unsupported_cells(cli, tmp_path):
    """No GPU on this machine (nor CI's): each GPU backend is an UNSUPPORTED cell (SKIPPED row) with the
    reason, the CPU cells still run, and the command succeeds."""
    build_mlp(tmp_path / "mlp.onnx")
    suite = write_suite(tmp_path / "suite.yaml", [{"name": "mlp", "path": "mlp.onnx", "$axes": {"batch": 2}}])
    perf = tmp_path / "perf.csv"
    result = cli("scorecard", str(suite), *FAST, "-o", str(perf), "--runs-dir", str(tmp_path / "runs"),
                 "--backends", "onnxruntime-cuda,onnxruntime-tensorrt,openvino-gpu", "--json")
    cells = cells_of(json.loads(result.stdout))
    gpu = [cells[("mlp", b)] for b in ("onnxruntime-cuda", "onnxruntime-tensorrt", "openvino-gpu")]
    if all(c["status"] == "PASS" for c in gpu):
        pytest.skip("this machine has a working GPU stack (CI has none: there this test checks UNSUPPORTED)")
    assert result.code == 0, result
    for cell in gpu:
        assert cell["status"] == "UNSUPPORTED" and ("does not offer" in cell["reason"] or "no GPU" in cell["reason"]
                                                     or "not installed" in cell["reason"]), cell
    assert {r["status"] for r in rows_of(perf) if r["backend"] != "onnxruntime-cpu-opt-disabled"} == {"SKIPPED"}


def test_a_backend_that_is_not_installed_is_one_clear_cell(tmp_path):
    """A real process whose Python cannot import openvino (blocked in sys.modules)."""
    build_mlp(tmp_path / "mlp.onnx")
    suite = write_suite(tmp_path / "suite.yaml", [{"name": "mlp", "path": "mlp.onnx", "$axes": {"batch": 2}}])
    code = ("import sys; sys.modules['openvino'] = None; from madengine.cli import main; "
            "sys.exit(main(sys.argv[1:]))")
    done = subprocess.run([sys.executable, "-c", code, "scorecard", str(suite), *FAST, "--backends", "openvino-cpu",
                           "-o", str(tmp_path / "perf.csv"), "--runs-dir", str(tmp_path / "runs")],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    assert done.returncode == 0, done.stderr
    assert "UNSUPPORTED (not installed)" in done.stdout
    assert "openvino-cpu is not installed (pip install openvino)" in done.stdout
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("args, entry, words", [
    (["--backends", "tvm"], {}, "--backends: unknown backend 'tvm'"),
    (["--backends", "onnx-reference"], {}, "onnx-reference is a correctness oracle"),
    ([], {"backends": ["openvino"]}, "unknown backend(s) openvino"),
    ([], {"tolerance": {"atol": -1}}, "tolerance.atol must be a finite number of 0 or more"),
    ([], {"tolerance": {"abs": 1}}, "'tolerance' must map atol and/or rtol"),
    ([], {"reference": "tvm-relax-llvm"}, "reference must be one of"),
    ([], {"url": "https://example.invalid/m.onnx", "path": None}, "is not fetchable"),
    ([], {"$axes": {}}, "dimension 0 ('batch') is dynamic and has no value"),
    (["--image", "madengine-no-such-image-x1:none"], {}, "image madengine-no-such-image-x1:none is not present"),
    (["--precision", "fp8"], {}, "--precision: unknown precision 'fp8' (valid: f32, tf32, bf16, fp16, int8)"),
    (["--backends", "openvino-cpu:q4"], {}, "--backends: unknown precision 'q4' in 'openvino-cpu:q4' (valid: f32"),
    ([], {"backends": ["openvino-cpu:fp64"]}, "unknown precision 'fp64' in 'openvino-cpu:fp64'"),
])
def test_bad_input_is_one_line_and_exit_2(cli, tmp_path, args, entry, words):
    build_mlp(tmp_path / "mlp.onnx")
    item = {"name": "mlp", "path": "mlp.onnx", "$axes": {"batch": 2}, **entry}
    item = {k: v for k, v in item.items() if v is not None}
    if args[:1] == ["--image"]:
        from conftest import docker_engine_available

        require_service("Docker engine", docker_engine_available(), "run scripts/docker-up.sh")
    suite = write_suite(tmp_path / "suite.yaml", [item])
    perf = tmp_path / "perf.csv"
    result = cli("scorecard", str(suite), *FAST, "-o", str(perf), "--runs-dir", str(tmp_path / "runs"), *args)
    assert result.code == 2, result
    assert words in result.stderr and len(result.stderr.strip().splitlines()) == 1 and not perf.exists()


def test_suite_tolerance_and_backends_parse_property():
    """Property: any finite non-negative atol/rtol (numbers or numeric text) round-trips; anything
    negative, infinite or non-numeric is a one-line ConfigError naming the model; a backend with or
    without a precision (by any alias) comes back as its canonical cell name."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from madengine.bench.backends import BACKEND_IDS
    from madengine.bench.suite import backends_from, tolerance_from
    from madengine.core.errors import ConfigError

    good = st.floats(0, 1e6, allow_nan=False)
    aliases = {"": "", "f32": "f32", "FP32": "f32", "bfloat16": "bf16", "bf16": "bf16", "f16": "fp16", "i8": "int8"}
    cell = st.tuples(st.sampled_from(BACKEND_IDS), st.sampled_from(sorted(aliases)))

    @settings(max_examples=500 if IN_CI else 100, derandomize=True, deadline=None)
    @given(st.dictionaries(st.sampled_from(["atol", "rtol"]), st.one_of(good, good.map(repr)), min_size=1),
           st.lists(cell, max_size=4), st.one_of(st.floats(max_value=-1e-9), st.just("x"),
                                                 st.just(float("inf")), st.none()))
    def check(tolerance, cells, bad):
        parsed = tolerance_from(tolerance, "suite.yaml", "model 'm'")
        assert parsed == {k: float(v) for k, v in tolerance.items()}
        names = [f"{b}:{p}" if p else b for b, p in cells]
        assert backends_from(names, "suite.yaml", "model 'm'") == [f"{b}:{aliases[p]}" if p else b for b, p in cells]
        with pytest.raises(ConfigError, match="model 'm'"):
            tolerance_from({"atol": bad}, "suite.yaml", "model 'm'")
        with pytest.raises(ConfigError, match="unknown precision"):
            backends_from([f"{BACKEND_IDS[0]}:fp8"], "suite.yaml", "model 'm'")

    check()


# -- a model named by URL, fetched through the S3 provider ----------------------------------------
def test_url_model_is_fetched_through_the_s3_provider_and_checked(cli, tmp_path, s3_server, monkeypatch):  # noqa: F811
    model = build_mlp(tmp_path / "mlp.onnx")
    bucket = f"scorecard-{uuid.uuid4().hex[:8]}"
    s3_server.put_tree(bucket, {"models/mlp.onnx": model.read_bytes()})
    monkeypatch.setenv("MAD_AWS_S3", json.dumps({"USERNAME": "AKIDTEST", "PASSWORD": "s3-secret-value",
                                                 "AWS_ENDPOINT_URL_S3": s3_server.endpoint, "REGION": "us-east-1"}))
    monkeypatch.setenv("MADENGINE_CACHE_DIR", str(tmp_path / "cache"))
    import hashlib

    digest = hashlib.sha256(model.read_bytes()).hexdigest()
    suite = write_suite(tmp_path / "suite.yaml", [
        {"name": "remote", "url": f"s3://{bucket}/models/mlp.onnx", "sha256": digest, "$axes": {"batch": 2},
         "backends": ["onnxruntime-cpu-opt-all"]},
        {"name": "remote_bad", "url": f"s3://{bucket}/models/mlp.onnx", "sha256": "f" * 64, "$axes": {"batch": 2},
         "backends": ["onnxruntime-cpu-opt-all"]}])
    perf = tmp_path / "perf.csv"
    result = cli("scorecard", str(suite), *FAST, "-o", str(perf), "--runs-dir", str(tmp_path / "runs"), "--json")
    assert result.code == 1, result  # remote_bad's sha256 does not match: its cells are ERROR
    document = json.loads(result.stdout)
    remote = [m for m in document["models"] if m["model"] == "remote"][0]
    assert remote["sha256"] == digest and Path(remote["path"]).is_relative_to(tmp_path / "cache" / "models")
    assert {c["status"] for c in remote["cells"]} == {"PASS"}
    bad = [m for m in document["models"] if m["model"] == "remote_bad"][0]
    assert "sha256 mismatch" in bad["problem"] and {c["status"] for c in bad["cells"]} == {"ERROR"}
    assert "s3-secret-value" not in result.stderr + result.stdout + perf.read_text()


# -- --image: every cell in a container through the docker executor ----------------------------------
IMAGE_DOCKERFILE = """\
FROM {base}
# The base image has python3 + numpy but no pip: a wheel is a zip file, so the stdlib unpacks it.
COPY wheels/ /tmp/wheels/
RUN site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') \\
 && for wheel in /tmp/wheels/*.whl; do python3 -m zipfile -e "$wheel" "$site"; done \\
 && rm -rf /tmp/wheels
"""


def _download_wheels(target: Path, python_version: str, requirements: list[str]) -> None:
    import platform

    arch = platform.machine()
    platforms = [f"--platform=manylinux_2_{minor}_{arch}" for minor in range(17, 37)] + \
        [f"--platform=manylinux2014_{arch}"]
    done = subprocess.run([sys.executable, "-m", "pip", "download", "-q", *requirements, "--no-deps",
                           "--only-binary=:all:", f"--python-version={python_version}", "--implementation=cp",
                           *platforms, "-d", str(target)], capture_output=True, text=True, timeout=600)
    require_service("PyPI (wheels for the test image)", done.returncode == 0,
                    f"pip download failed: {done.stderr.strip()[-300:]}")


@pytest.mark.docker
@pytest.mark.slow
def test_image_runs_every_cell_in_a_container(cli, tmp_path, docker_client, docker_cleanup):
    import onnxruntime
    import openvino

    image = f"madengine-scorecard-test-{uuid.uuid4().hex[:8]}"
    docker_cleanup += [image, "scorecard_"]
    python_version = docker_client.containers.run(
        BASE_IMAGE, ["python3", "-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"],
        remove=True).decode().strip()
    context = tmp_path / "image"
    version = openvino.__version__.split("-")[0]
    _download_wheels(context / "wheels", python_version,
                     [f"onnxruntime=={onnxruntime.__version__}", f"openvino=={version}", "openvino-telemetry"])
    (context / "Dockerfile").write_text(IMAGE_DOCKERFILE.format(base=BASE_IMAGE))
    docker_client.images.build(path=str(context), tag=image, rm=True, pull=False)
    build_mlp(tmp_path / "mlp.onnx", hidden=64)
    suite = write_suite(tmp_path / "suite.yaml", [{"name": "mlp", "path": "mlp.onnx", "$axes": {"batch": 4}}])
    perf = tmp_path / "perf.csv"
    result = cli("scorecard", str(suite), *FAST, "-o", str(perf), "--runs-dir", str(tmp_path / "runs"), "--json",
                 "--image", image, "--backends", CPU)
    assert result.code == 0, result
    document = json.loads(result.stdout)
    assert document["image"] == image
    cells = cells_of(document)
    for backend in ("onnxruntime-cpu-opt-disabled", "onnxruntime-cpu-opt-all", "openvino-cpu"):
        assert cells[("mlp", backend)]["status"] == "PASS", cells[("mlp", backend)]
        assert cells[("mlp", backend)]["stats"]["n"] == 3
        # f32 inside the container too, and the versions are the container's (its Python)
        assert cells[("mlp", backend)]["precision"] == "f32"
        assert cells[("mlp", backend)]["environment"]["versions"]["python"].startswith(python_version + ".")
    tvm = cells[("mlp", "tvm-relax-llvm")]  # not installed in the image: one clear cell
    assert tvm["status"] == "UNSUPPORTED" and f"not installed (pip install apache-tvm) in image {image}" in tvm["reason"]
    rows = rows_of(perf)
    assert {r["executor"] for r in rows} == {"docker"} and {r["docker_image"] for r in rows} == {image}
    assert cells[("mlp", "onnxruntime-cpu-opt-all")]["version"] == onnxruntime.__version__
    trace = json.loads(Path(document["trace"]).read_text())  # each cell's span: the container, then its step
    spans = {e["args"]["span.id"]: e for e in trace["traceEvents"] if e["ph"] == "X"}
    for cell in (e for e in spans.values() if e["name"] == "model"):
        phases = [e["name"] for e in spans.values() if e["args"]["span.parent_id"] == cell["args"]["span.id"]]
        assert {"container_start", "model_step"} <= set(phases), (cell["args"], phases)
    leftover = [c.name for c in docker_client.containers.list(all=True) if c.name.startswith("container_scorecard_")]
    assert not leftover  # every cell's container is removed
