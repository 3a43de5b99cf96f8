"""Inference backends (ONNX Runtime, OpenVINO, TVM Relax, onnx's reference evaluator) and the output
check, on small ONNX graphs built here (onnx.helper). Every backend is real; the only thing this
machine lacks is a GPU, so the GPU backends are checked for their UNSUPPORTED answer (no fallback)."""

from __future__ import annotations

import ast
import math
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import IN_CI, require_service
from test_bench_harness import build_mlp, save_model

from madengine.bench import backends
from madengine.bench.backends import BackendError, BackendUnsupported, get_backend, measure_backend
from madengine.bench.correctness import MISMATCH, PASS, Tolerance, compare_outputs

BACKENDS_DIR = Path(backends.__file__).resolve().parent


def _require(backend_id: str):
    backend = get_backend(backend_id)
    hint = backend.missing()
    require_service(backend_id, hint is None, f"{hint}; scripts/test.sh installs madengine[scorecard]")
    return backend


def _feeds(shape=(4, 16)):
    import numpy as np

    return {"x": np.random.default_rng(0).random(shape, dtype=np.float32)}


def _custom_op_model(path: Path, op_type="Frobnicate", domain="com.example") -> Path:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node(op_type, ["x"], ["y"], domain=domain)], "custom",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(domain, 1)])
    model.ir_version = 9
    onnx.save(model, str(path))
    return path


def _col2im_model(path: Path) -> Path:
    """Col2Im (opset 18): onnxruntime and OpenVINO run it, TVM's ONNX frontend has no converter."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Col2Im", ["x", "image", "block"], ["y"])], "col2im",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 9])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 4, 4])],
                              [helper.make_tensor("image", TensorProto.INT64, [2], [4, 4]),
                               helper.make_tensor("block", TensorProto.INT64, [2], [2, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.save(model, str(path))
    return path


# -- every CPU backend, measured by the harness's loop, agrees with the reference ------------------
@pytest.mark.parametrize("backend_id", backends.CPU_BACKENDS + ("onnx-reference",))
def test_backend_runs_and_matches_the_reference(tmp_path, backend_id):
    backend = _require(backend_id)
    model = build_mlp(tmp_path / "mlp.onnx")
    feeds = _feeds()
    reference = measure_backend(get_backend("onnxruntime-cpu-opt-disabled"), model, feeds, {"x": (4, 16)},
                                threads=1, warmup=1, iterations=3)
    run = measure_backend(backend, model, feeds, {"x": (4, 16)}, threads=1, warmup=2, iterations=5, batch_size=4)
    assert run.backend == backend_id and run.stats["n"] == 5 and len(run.latencies_ms) == 5
    assert run.prepare_ms > 0 and run.first_inference_ms > 0 and run.stats["batch_size"] == 4
    assert set(run.outputs) == {"y"} and run.outputs["y"].shape == (4, 16)
    verdict = compare_outputs(run.outputs, reference.outputs)
    assert verdict.status == PASS, verdict.reason()
    assert run.details  # what the backend prepared (providers, target, precision, ...)


def test_onnxruntime_levels_and_session_details(tmp_path):
    model = build_mlp(tmp_path / "mlp.onnx")
    for level in ("disabled", "all"):
        session = get_backend(f"onnxruntime-cpu-opt-{level}").prepare(model, {"x": (4, 16)}, threads=1)
        assert session.details["graph_optimization"] == level
        assert session.details["providers"] == ["CPUExecutionProvider"] and session.details["threads"] == 1
        assert session.bind(_feeds())()[0].shape == (4, 16)  # the bound call is session.run itself


def test_backends_leave_the_callers_cpus_alone(tmp_path):
    """TVM pins the thread that configures or first calls its thread pool; madengine undoes that,
    or a --parallel run later in the same process would see one CPU."""
    import os

    before = os.sched_getaffinity(0)
    session = _require("tvm-relax-llvm").prepare(build_mlp(tmp_path / "mlp.onnx"), {"x": (4, 16)}, threads=1)
    session.run(_feeds())
    assert os.sched_getaffinity(0) == before


def test_tvm_is_compiled_for_the_host_cpu(tmp_path):
    session = _require("tvm-relax-llvm").prepare(build_mlp(tmp_path / "mlp.onnx"), {"x": (4, 16)}, threads=1)
    assert session.details["target"].startswith("llvm") and session.details["tuning"] == "none"
    assert session.run(_feeds())["y"].shape == (4, 16)


# -- UNSUPPORTED, with the operator or the reason --------------------------------------------------
@pytest.mark.parametrize("backend_id, operator", [
    ("onnxruntime-cpu-opt-all", "com.example:Frobnicate"),
    ("openvino-cpu", "com.example.Frobnicate"),
    ("onnx-reference", "Frobnicate"),
])
def test_unknown_operator_is_unsupported_naming_it(tmp_path, backend_id, operator):
    backend = _require(backend_id)
    with pytest.raises(BackendUnsupported) as caught:
        measure_backend(backend, _custom_op_model(tmp_path / "custom.onnx"), {}, {"x": (2, 3)}, warmup=0, iterations=1)
    assert caught.value.operator == operator and operator in str(caught.value)


def test_tvm_lacks_col2im_and_says_so(tmp_path):
    model = _col2im_model(tmp_path / "col2im.onnx")
    feeds = _feeds((1, 4, 9))
    with pytest.raises(BackendUnsupported) as caught:
        measure_backend(_require("tvm-relax-llvm"), model, feeds, {"x": (1, 4, 9)}, warmup=0, iterations=1)
    assert caught.value.operator == "Col2Im"
    ran = measure_backend(get_backend("onnxruntime-cpu-opt-disabled"), model, feeds, {"x": (1, 4, 9)},
                          warmup=0, iterations=1)
    assert ran.outputs["y"].shape == (1, 1, 4, 4)


@pytest.mark.parametrize("backend_id", backends.GPU_BACKENDS)
def test_gpu_backend_without_a_gpu_is_unsupported_never_a_cpu_run(tmp_path, backend_id):
    """This machine (and CI's) has no GPU: each GPU backend must answer UNSUPPORTED with the reason
    (the provider this onnxruntime lacks, or the device OpenVINO does not list), not run on the CPU.
    On a machine with a working GPU stack the backend runs and reports its GPU provider/device."""
    backend = _require(backend_id)
    model = build_mlp(tmp_path / "mlp.onnx")
    try:
        run = measure_backend(backend, model, _feeds(), {"x": (4, 16)}, warmup=0, iterations=1)
    except BackendUnsupported as exc:
        assert ("does not offer" in str(exc) and "onnxruntime-gpu" in str(exc)) or "did not initialise" in str(exc) \
            or "has no GPU device" in str(exc)
        return
    assert run.details.get("providers", [run.details.get("device")])[0] != "CPUExecutionProvider"


def test_not_installed_backend_says_how_to_install(tmp_path):
    class Absent(backends.Backend):
        id, module, install_hint = "absent", "madengine_no_such_backend_module", "pip install absent-backend"

        def prepare(self, model, shapes, threads=None):
            raise AssertionError("a backend that is not installed is never prepared")

    assert Absent().missing() == "pip install absent-backend" and Absent().version() == ""
    with pytest.raises(BackendUnsupported, match="absent is not installed .pip install absent-backend."):
        measure_backend(Absent(), tmp_path / "m.onnx", {}, {})
    assert get_backend("onnxruntime-cpu-opt-all").missing() is None


def test_a_backend_that_fails_at_run_time_is_an_error_not_unsupported(tmp_path):
    from test_bench_harness import build_failing

    model = build_failing(tmp_path / "bad.onnx")
    with pytest.raises(BackendError) as caught:
        measure_backend(get_backend("onnxruntime-cpu-opt-disabled"), model, _feeds((4, 16)), {"x": (4, 16)},
                        warmup=0, iterations=1)
    assert not isinstance(caught.value, BackendUnsupported) and "inference failed" in str(caught.value)


def test_unknown_backend_id_lists_the_known_ones():
    with pytest.raises(ValueError, match="unknown backend 'tvm'.*tvm-relax-llvm"):
        get_backend("tvm")


def test_backends_import_only_the_harness_of_madengine():
    """The backends run inside containers too (copied with the harness): no other madengine import."""
    for path in BACKENDS_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("madengine"):
                pytest.fail(f"{path.name} imports {node.module}")
            if isinstance(node, ast.ImportFrom) and node.level == 2:
                assert (node.module or "").startswith("harness"), f"{path.name} imports ..{node.module}"


def test_importing_backends_loads_no_backend_library():
    code = ("import sys, madengine.bench.backends as b, madengine.bench.correctness; b.get_backend('openvino-cpu'); "
            "print(sorted(m for m in ('numpy', 'onnxruntime', 'onnx', 'openvino', 'tvm') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# -- the output check ------------------------------------------------------------------------------
def test_compare_pass_and_value_mismatch_names_the_output():
    import numpy as np

    reference = {"logits": np.array([[1.0, 2.0, 3.0]], np.float32), "aux": np.zeros(2, np.float32)}
    assert compare_outputs({k: v.copy() for k, v in reference.items()}, reference).status == PASS
    candidate = {"logits": np.array([[1.0, 2.5, 3.0]], np.float32), "aux": np.zeros(2, np.float32)}
    verdict = compare_outputs(candidate, reference)
    assert verdict.status == MISMATCH and verdict.output == "logits"
    assert verdict.max_abs_error == pytest.approx(0.5) and verdict.max_rel_error == pytest.approx(0.25)
    assert "output 'logits': max abs error 0.5, max rel error 0.25 at index [0, 1]" in verdict.reason()
    assert compare_outputs(candidate, reference, Tolerance(atol=0.6, rtol=0)).status == PASS
    assert compare_outputs(candidate, reference, Tolerance(atol=0, rtol=0.3)).status == PASS
    assert verdict.to_json()["output"] == "logits" and verdict.to_json()["status"] == MISMATCH


def test_compare_shape_dtype_and_missing_outputs():
    import numpy as np

    reference = {"y": np.ones((2, 3), np.float32)}
    shape = compare_outputs({"y": np.ones((3, 2), np.float32)}, reference)
    assert shape.status == MISMATCH and "shape [3, 2] differs from the reference's [2, 3]" in shape.reason()
    dtype = compare_outputs({"y": np.ones((2, 3), np.float16)}, reference)
    assert dtype.status == MISMATCH and "dtype float16 differs" in dtype.reason()
    missing = compare_outputs({}, reference)
    assert missing.status == MISMATCH and "missing" in missing.reason()
    extra = compare_outputs({"y": np.ones((2, 3), np.float32), "z": np.ones(1)}, reference)
    assert extra.status == MISMATCH and extra.output == "z"
    assert shape.to_json()["max_abs_error"] is None  # not comparable: no number, not infinity
    assert compare_outputs({}, {}).status == MISMATCH  # nothing compared is not a pass


def test_compare_nan_inf_integers_and_zero_tolerance():
    import numpy as np

    nan = np.array([np.nan, np.inf, -np.inf, 1.0])
    assert compare_outputs({"y": nan.copy()}, {"y": nan}).status == PASS
    assert compare_outputs({"y": np.array([0.0, np.inf, -np.inf, 1.0])}, {"y": nan}).status == MISMATCH
    assert compare_outputs({"y": np.array([np.nan, 1.0, -np.inf, 1.0])}, {"y": nan}).status == MISMATCH
    ints = {"ids": np.array([1, 2, 3], np.int64)}
    assert compare_outputs({"ids": np.array([1, 2, 4], np.int64)}, ints).status == MISMATCH
    assert compare_outputs({"b": np.array([True])}, {"b": np.array([False])}).status == MISMATCH
    exact = Tolerance(atol=0, rtol=0)
    value = np.float32(0.1)
    assert compare_outputs({"y": np.array([np.nextafter(value, 1)])}, {"y": np.array([value])}, exact).status == MISMATCH


@pytest.mark.parametrize("bad", [-1, math.inf, math.nan, "1e-3", True])
def test_tolerance_must_be_a_finite_non_negative_number(bad):
    with pytest.raises(ValueError):
        Tolerance(atol=bad)


def test_compare_properties():
    """Property: an output always matches itself; moving one element past atol + rtol·|r| is a
    MISMATCH naming that element; staying within the tolerance is a PASS."""
    import numpy as np
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp

    arrays = hnp.arrays(np.float32, hnp.array_shapes(max_dims=3, max_side=5),
                        elements=st.floats(-1e3, 1e3, width=32))

    @settings(max_examples=500 if IN_CI else 100, derandomize=True, deadline=None)
    @given(arrays, st.floats(0, 1e-2), st.floats(0, 1e-2), st.data())
    def check(array, atol, rtol, data):
        tolerance = Tolerance(atol=atol, rtol=rtol)
        assert compare_outputs({"y": array.copy()}, {"y": array}, tolerance).status == PASS
        index = data.draw(st.tuples(*[st.integers(0, side - 1) for side in array.shape]))
        bound = atol + rtol * abs(float(array[index]))
        moved = array.astype(np.float64)
        moved[index] += 2 * bound + 1.0
        verdict = compare_outputs({"y": moved}, {"y": array.astype(np.float64)}, tolerance)
        assert verdict.status == MISMATCH and verdict.worst.worst_index == tuple(index)
        within = array.astype(np.float64)
        within[index] += bound / 2
        assert compare_outputs({"y": within}, {"y": array.astype(np.float64)}, tolerance).status == PASS

    check()
