"""The portable ONNX harness: statistics, input shapes, profiles, timing; plus the small ONNX
models the other bench tests build in code (onnx.helper; nothing is downloaded)."""

from __future__ import annotations

import ast
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import require_service

from madengine.bench.harness import HarnessInputError
from madengine.bench.harness import engine, inputs, profiling, stats

HARNESS_DIR = Path(engine.__file__).resolve().parent
#: an IR version every onnxruntime since 1.15 loads (the newest onnx writes ones older ORT refuses)
IR_VERSION = 9
OPSET = 17


def _onnx():
    try:
        import onnx
        import onnxruntime  # noqa: F401
    except ImportError as exc:
        require_service("onnx and onnxruntime", False, f"pip install -e '.[onnx]' ({exc})")
    return onnx


def save_model(path: Path, nodes, inputs_, outputs, initializers=()) -> Path:
    onnx = _onnx()
    from onnx import helper

    graph = helper.make_graph(nodes, path.stem, inputs_, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    onnx.save(model, str(path))
    return path


def build_mlp(path: Path, batch_dim="batch", hidden: int = 16) -> Path:
    """x[batch_dim, hidden] → MatMul → Add → Relu → y (a named dynamic batch by default)."""
    _onnx()
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.random((hidden, hidden), dtype=np.float32), "w")
    bias = numpy_helper.from_array(rng.random((hidden,), dtype=np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="matmul"),
             helper.make_node("Add", ["m", "b"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["y"], name="relu")]
    return save_model(path, nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch_dim, hidden])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch_dim, hidden])], [weight, bias])


def build_two_inputs(path: Path) -> Path:
    """ids[batch, seq] (int64) → Gather from a table, + x[batch, seq, 8] → y: two named axes."""
    _onnx()
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    table = numpy_helper.from_array(np.arange(32, dtype=np.float32).reshape(4, 8), "table")
    nodes = [helper.make_node("Gather", ["table", "ids"], ["g"], name="gather"),
             helper.make_node("Add", ["g", "x"], ["s"], name="add"),
             helper.make_node("Sigmoid", ["s"], ["y"], name="sigmoid")]
    return save_model(path, nodes,
                      [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"]),
                       helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 8])], [table])


def build_failing(path: Path) -> Path:
    """Loads fine, fails in session.run: Reshape of x[batch, 16] to a fixed [7, 5]."""
    _onnx()
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    shape = numpy_helper.from_array(np.array([7, 5], dtype=np.int64), "shape")
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")]
    return save_model(path, nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [7, 5])], [shape])


# -- statistics ---------------------------------------------------------------------------------
def test_summarize_known_latencies():
    summary = stats.summarize([4.0, 1.0, 3.0, 2.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0], batch_size=4)
    assert summary["n"] == 10
    assert summary["mean_ms"] == pytest.approx(5.5)
    assert summary["stddev_ms"] == pytest.approx(math.sqrt(sum((v - 5.5) ** 2 for v in range(1, 11)) / 9))
    assert summary["cv"] == pytest.approx(summary["stddev_ms"] / 5.5)
    assert (summary["min_ms"], summary["max_ms"]) == (1.0, 10.0)
    # linear interpolation between closest ranks (numpy's default)
    assert summary["p50_ms"] == pytest.approx(5.5)
    assert summary["p90_ms"] == pytest.approx(9.1)
    assert summary["p95_ms"] == pytest.approx(9.55)
    assert summary["p99_ms"] == pytest.approx(9.91)
    assert summary["inferences_per_second"] == pytest.approx(1000 / 5.5)
    assert summary["samples_per_second"] == pytest.approx(4 * 1000 / 5.5)
    assert summary["outliers"] == 0


def test_summarize_single_run_and_outliers():
    one = stats.summarize([2.0])
    assert (one["stddev_ms"], one["cv"], one["p99_ms"], one["samples_per_second"]) == (0.0, 0.0, 2.0, 500.0)
    spiky = stats.summarize([1.0] * 20 + [50.0])
    assert spiky["outliers"] == 1
    notes = " ".join(stats.stability_warnings(spiky))
    assert "unstable" in notes and "21 timed runs" in notes and "outlier" in notes
    assert stats.stability_warnings(stats.summarize([1.0] * 200)) == []


def test_percentile_matches_numpy():
    import numpy
    values = sorted(numpy.random.default_rng(1).random(37).tolist())
    for q in (0, 12.5, 50, 90, 95, 99, 100):
        assert stats.percentile(values, q) == pytest.approx(float(numpy.percentile(values, q)))
    with pytest.raises(ValueError):
        stats.summarize([])


def test_metric_choice():
    summary = stats.summarize([2.0, 2.0], batch_size=8)
    assert engine.metric_value(summary, "throughput") == (pytest.approx(4000.0), "samples_per_second")
    # the headline is the median's: four 1 ms runs and one stalled for 400 ms (a busy host) make the
    # mean 80.8 ms, which would say 24.75 samples/s; the median says 2000 (the mean stays a column)
    stalled = stats.summarize([1.0, 1.0, 400.0, 1.0, 1.0], batch_size=2)
    assert engine.metric_value(stalled, "throughput") == (pytest.approx(2000.0), "samples_per_second")
    assert stalled["median_samples_per_second"] == pytest.approx(2000.0)
    assert stalled["samples_per_second"] == pytest.approx(2 * 1000 / 80.8)
    assert engine.metric_value(summary, "p50") == (pytest.approx(2.0), "p50_latency_ms")
    with pytest.raises(HarnessInputError):
        engine.metric_value(summary, "p42")


# -- input shapes -------------------------------------------------------------------------------
SIGNATURE = [inputs.InputSpec("ids", ("batch", "seq"), "tensor(int64)"),
             inputs.InputSpec("x", ("batch", "seq", 8), "tensor(float)")]


def test_resolve_named_axes_and_batch():
    assert inputs.resolve_shapes(SIGNATURE, axes={"batch": 2, "seq": 5}) == {"ids": (2, 5), "x": (2, 5, 8)}
    assert inputs.resolve_shapes(SIGNATURE, axes={"seq": 3}, batch_size=4) == {"ids": (4, 3), "x": (4, 3, 8)}
    resolved = inputs.resolve_shapes(SIGNATURE, shapes={"ids": (1, 7)}, axes={"batch": 1, "seq": 7})
    assert resolved["ids"] == (1, 7)
    assert inputs.batch_size_of(SIGNATURE, resolved, None) == 1
    assert inputs.batch_size_of(SIGNATURE, resolved, 3) == 3


@pytest.mark.parametrize("kwargs, words", [
    ({"axes": {"batch": 2}}, ["input 'ids'", "dimension 1 ('seq')", "--axes seq=N"]),
    ({"axes": {"seq": 2}}, ["dimension 0 ('batch')", "--batch-size N"]),
    ({"axes": {"batch": 1, "seq": 2, "sequence": 3}}, ["no dynamic axis named 'sequence'", "batch, seq"]),
    ({"shapes": {"y": (1,)}}, ["no input named 'y'", "ids, x"]),
    ({"shapes": {"x": (1, 2)}, "axes": {"batch": 1, "seq": 2}}, ["gives 2 dimension(s)"]),
    ({"shapes": {"x": (1, 2, 9)}, "axes": {"batch": 1, "seq": 2}}, ["fixed at 8"]),
    ({"axes": {"batch": 2, "seq": 2}, "batch_size": 4}, ["--batch-size is 4"]),
])
def test_resolve_errors_name_the_problem(kwargs, words):
    with pytest.raises(HarnessInputError) as caught:
        inputs.resolve_shapes(SIGNATURE, **kwargs)
    for word in words:
        assert word in str(caught.value)


def test_unnamed_dynamic_dimension_error():
    spec = [inputs.InputSpec("x", (None, 4), "tensor(float)")]
    with pytest.raises(HarnessInputError, match=r"dimension 0 \(unnamed\).*--shape x=\.\.\. or --batch-size N"):
        inputs.resolve_shapes(spec)
    assert inputs.resolve_shapes(spec, batch_size=3) == {"x": (3, 4)}


def test_parse_flags():
    assert inputs.parse_shapes(["x=1,3,224,224", "m=2x5"]) == {"x": (1, 3, 224, 224), "m": (2, 5)}
    assert inputs.parse_axes(["batch=8"]) == {"batch": 8}
    for bad in (["x"], ["x=a,b"], ["x=1", "x=2"], ["x=-1"]):
        with pytest.raises(HarnessInputError):
            inputs.parse_shapes(bad)
    with pytest.raises(HarnessInputError):
        inputs.parse_axes(["batch=1,2"])


def test_generated_inputs_are_seeded_and_typed():
    import numpy
    shapes = {"ids": (2, 3), "x": (2, 3, 8)}
    first, again, other = (inputs.generate(SIGNATURE, shapes, seed) for seed in (0, 0, 1))
    assert first["ids"].dtype == numpy.int64 and first["x"].dtype == numpy.float32
    assert first["x"].shape == (2, 3, 8) and set(numpy.unique(first["ids"])) <= {0, 1}
    assert numpy.array_equal(first["x"], again["x"]) and not numpy.array_equal(first["x"], other["x"])
    with pytest.raises(HarnessInputError, match="cannot be generated"):
        inputs.InputSpec("s", (1,), "tensor(string)").dtype


# -- profile ------------------------------------------------------------------------------------
def _event(cat, name, ts, dur, **args):
    return {"cat": cat, "name": name, "ts": ts, "dur": dur, "ph": "X", "args": args}


def test_operator_table_drops_warmup_runs(tmp_path):
    events = []
    for run, start in enumerate((0, 1000, 2000)):  # run 0 is warm-up
        scale = 100 if run == 0 else 1
        events += [_event("Node", "conv1_kernel_time", start + 1, 30 * scale, op_name="Conv", provider="CPUExecutionProvider"),
                   _event("Node", "conv1_fence_before", start + 1, 1, op_name="Conv"),
                   _event("Node", "relu1_kernel_time", start + 40, 10 * scale, op_name="Relu", provider="CPUExecutionProvider"),
                   _event("Node", "conv2_kernel_time", start + 60, 60 * scale, op_name="Conv", provider="CPUExecutionProvider"),
                   _event("Session", "model_run", start, 200 * scale)]
    table = profiling.operator_table(events, skip_runs=1)
    assert table["runs"] == 2 and table["total_ms"] == pytest.approx(0.2)
    assert [(r["node"], r["op_type"], r["calls"]) for r in table["nodes"]] == [
        ("conv2", "Conv", 2), ("conv1", "Conv", 2), ("relu1", "Relu", 2)]
    conv2 = table["nodes"][0]
    assert conv2["total_ms"] == pytest.approx(0.12) and conv2["mean_ms"] == pytest.approx(0.06)
    assert conv2["share"] == pytest.approx(0.6)
    assert [(r["op_type"], r["node"], r["share"]) for r in table["op_types"]] == [
        ("Conv", "(2 nodes)", pytest.approx(0.9)), ("Relu", "(1 node)", pytest.approx(0.1))]
    files = profiling.save(table, tmp_path / "p")
    assert [f.name for f in files] == ["profile_ops.csv", "profile_op_types.csv", "profile_ops.json"]
    assert (tmp_path / "p" / "profile_ops.csv").read_text().splitlines()[0] == ",".join(profiling.COLUMNS)
    assert json.loads(files[2].read_text())["runs"] == 2


# -- timing loop --------------------------------------------------------------------------------
def test_measure_counts_and_min_time():
    calls = []

    def run():
        calls.append("feeds")

    timing = engine.measure(run, warmup=3, iterations=7)
    assert len(calls) == 10 and len(timing.latencies_ms) == 7 and timing.first_inference_ms is not None
    calls.clear()
    timing = engine.measure(run, warmup=0, min_time=0.01, min_iterations=5)
    assert len(timing.latencies_ms) >= 5 and timing.wall_s >= 0.01 and len(calls) == len(timing.latencies_ms)


def test_providers_named_and_checked():
    assert engine.provider_name("CUDA") == "CUDAExecutionProvider"
    assert engine.provider_name("trt") == "TensorrtExecutionProvider"
    assert engine.provider_name("CPUExecutionProvider") == "CPUExecutionProvider"
    assert engine.provider_chain("TensorrtExecutionProvider",
                                 ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"],
                                 {"trt_engine_cache_enable": "True"}) == [
        ("TensorrtExecutionProvider", {"trt_engine_cache_enable": "True"}), "CUDAExecutionProvider",
        "CPUExecutionProvider"]
    with pytest.raises(HarnessInputError, match=r"not offered.*available: cpu"):
        engine.require_provider("CUDAExecutionProvider", ["CPUExecutionProvider"])
    with pytest.raises(HarnessInputError, match="unknown provider"):
        engine.provider_name("warp-drive")


def test_benchmark_a_real_model(tmp_path):
    model = build_mlp(tmp_path / "mlp.onnx")
    result = engine.benchmark(str(model), engine.BenchOptions(axes={"batch": 3}, warmup=1, iterations=4, threads=1,
                                                              profile=True, artifacts_dir=str(tmp_path / "art")))
    assert result["stats"]["n"] == 4 and result["batch_size"] == 3 and result["input_shapes"] == "x=3,16"
    assert result["session_providers"][0] == "CPUExecutionProvider" and result["threads"] == 1
    assert result["profile"]["runs"] == 4 and result["profile"]["nodes"]
    assert {Path(f).name for f in result["profile_files"]} >= {"ort_profile.json", "profile_ops.csv"}


# -- portability and import cost ----------------------------------------------------------------
def test_harness_imports_of_madengine_only_the_shared_statistics():
    """The one madengine import is the in-process fallback for madengine.stats.summary, a standard-library
    module that copy_harness puts beside the harness in containers."""
    for path in HARNESS_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""] if node.level == 0 else []
            else:
                continue
            names = [n for n in names if n.split(".")[0] == "madengine"]
            assert names in ([], ["madengine.stats"]), f"{path.name} imports {names}"


def test_copied_harness_computes_statistics_without_madengine(tmp_path):
    """A copied harness folder imports its statistics from the copies beside it: run with -S -I (no
    site-packages, no PYTHONPATH), where madengine cannot be imported at all."""
    from madengine.bench.models_json import HARNESS_FOLDER, copy_harness

    copy_harness(tmp_path / HARNESS_FOLDER)
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import madengine_onnx_harness.stats as s; "
            "r = s.summarize([1.0, 2.0, 3.0, 4.0]); assert 'madengine' not in sys.modules; "
            "print(r['n'], r['p50_ms'], s.shared.__name__)")
    out = subprocess.run([sys.executable, "-S", "-I", "-c", code, str(tmp_path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["4", "2.5", "madengine_onnx_harness.summary"]


def test_harness_statistics_are_the_shared_module():
    from madengine.stats import summary

    assert stats.shared is summary and stats.percentile is summary.percentile
    assert stats.UNSTABLE_CV == summary.UNSTABLE_CV


def test_cli_parser_does_not_import_numpy_or_onnxruntime():
    code = ("import sys, madengine.cli; madengine.cli.build_parser(); "
            "print(sorted(m for m in ('numpy', 'onnxruntime', 'onnx') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
