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

from conftest import IN_CI, require_module, require_service
from test_bench_harness import build_mlp, save_model

from madengine.bench import backends
from madengine.bench.backends import BackendError, BackendUnsupported, get_backend, measure_backend
from madengine.bench.correctness import INCONCLUSIVE, MISMATCH, PASS, Tolerance, compare_outputs, degenerate, rms

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
    assert run.precision == run.details["precision"] == "f32"  # whatever this CPU offers: f32 unless asked


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


# -- precision: f32 unless asked, reduced precision opt-in, never emulated or a silent fallback ------
def _fp16_model(path: Path) -> Path:
    """x[4, 16] fp16 → MatMul (fp16 weights) → Relu: a model whose own types are fp16."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.random.default_rng(0).random((16, 16)).astype(np.float16), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
                              "fp16", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [4, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [4, 16])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.fixture
def bf16_by_default(monkeypatch):
    """OpenVINO made to pick bf16 by default on this machine, as it does on any CPU with bf16: every
    ``openvino.Core`` gets the CPU's INFERENCE_PRECISION_HINT set to bf16 before madengine compiles.
    (On a CPU without bf16 instructions OpenVINO keeps f32 here; the test's assertion is the same.)"""
    openvino = require_module("openvino")

    class Bf16Core(openvino.Core):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.set_property("CPU", {"INFERENCE_PRECISION_HINT": "bf16"})

    monkeypatch.setattr(openvino, "Core", Bf16Core)
    return Bf16Core


def test_openvino_computes_f32_even_where_its_default_is_bf16(tmp_path, bf16_by_default):
    """The failure this suite once had on bf16 CPUs: OpenVINO's default precision. madengine's explicit
    hint wins over the runtime's default, the compiled model reports f32, and the default tolerance holds."""
    from madengine.bench.harness.precision import normalise

    backend = _require("openvino-cpu")
    default = normalise(bf16_by_default().get_property("CPU", "INFERENCE_PRECISION_HINT"))
    assert default in ("bf16", "f32")  # bf16 wherever OpenVINO runs bf16 at all (natively or emulated)
    model = build_mlp(tmp_path / "mlp.onnx")
    reference = measure_backend(get_backend("onnxruntime-cpu-opt-disabled"), model, _feeds(), {"x": (4, 16)},
                                warmup=0, iterations=1)
    run = measure_backend(backend, model, _feeds(), {"x": (4, 16)}, threads=1, warmup=0, iterations=2)
    assert run.precision == "f32" and run.details["precision"] == "f32"
    assert compare_outputs(run.outputs, reference.outputs).status == PASS


def test_openvino_bf16_is_opt_in_checked_with_its_own_tolerance(tmp_path):
    """Asked for bf16: where the CPU computes bf16 natively the run reports bf16, differs from the f32
    reference by more than f32's tolerance (it really is bf16) and within bf16's; elsewhere it is
    UNSUPPORTED naming the CPU flags it lacks (never an emulation)."""
    from madengine.bench.correctness import tolerance_for
    from madengine.bench.harness.precision import cpu_lacks

    backend = _require("openvino-cpu")
    model = build_mlp(tmp_path / "mlp.onnx", hidden=64)
    feeds = {"x": _feeds((8, 64))["x"]}
    reference = measure_backend(get_backend("onnxruntime-cpu-opt-disabled"), model, feeds, {"x": (8, 64)},
                                warmup=0, iterations=1)
    lacks = cpu_lacks("bf16")
    if lacks:
        with pytest.raises(BackendUnsupported, match="avx512_bf16, amx_bf16"):
            measure_backend(backend, model, feeds, {"x": (8, 64)}, warmup=0, iterations=1, precision="bf16")
        return
    run = measure_backend(backend, model, feeds, {"x": (8, 64)}, warmup=0, iterations=2, precision="bf16")
    assert run.precision == "bf16"
    assert compare_outputs(run.outputs, reference.outputs).status == MISMATCH  # f32's 1e-4: it is bf16
    assert compare_outputs(run.outputs, reference.outputs, tolerance_for("bf16")).status == PASS


def test_a_cpu_without_bf16_instructions_gives_unsupported_not_an_emulation(tmp_path, monkeypatch):
    """An AVX-512 CPU without avx512_bf16/AMX (OpenVINO would emulate bf16 there): the flags decide,
    so the answer is the same on every machine: UNSUPPORTED, before anything is compiled."""
    from madengine.bench.harness import precision

    monkeypatch.setattr(precision, "cpu_flags", lambda cpuinfo="/proc/cpuinfo": ["avx2", "fma", "avx512f"])
    backend = _require("openvino-cpu")
    with pytest.raises(BackendUnsupported) as caught:
        measure_backend(backend, build_mlp(tmp_path / "mlp.onnx"), _feeds(), {"x": (4, 16)}, warmup=0, iterations=1,
                        precision="bf16")
    assert "openvino-cpu cannot run bf16 on this CPU: bf16 needs one of the CPU flags avx512_bf16" in str(caught.value)
    assert "it would be emulated" in str(caught.value)


@pytest.mark.parametrize("backend_id", ["onnxruntime-cpu-opt-all", "tvm-relax-llvm", "onnx-reference"])
def test_a_backend_without_that_mode_is_unsupported_naming_what_it_computes(tmp_path, backend_id):
    backend = _require(backend_id)
    with pytest.raises(BackendUnsupported) as caught:
        measure_backend(backend, build_mlp(tmp_path / "mlp.onnx"), _feeds(), {"x": (4, 16)}, warmup=0, iterations=1,
                        precision="bf16")
    assert f"{backend_id} cannot run bf16: it computes in the model's own types (f32) and has no reduced-precision " \
           "mode" in str(caught.value)


def test_the_models_own_reduced_type_runs_and_is_reported(tmp_path):
    """A model converted to fp16 runs at fp16 on a backend without a precision mode of its own (it
    computes the model's types): by default, and when fp16 is asked; OpenVINO's f32 hint computes it in f32."""
    import numpy as np

    model = _fp16_model(tmp_path / "fp16.onnx")
    feeds = {"x": np.ones((4, 16), np.float16)}
    ort = get_backend("onnxruntime-cpu-opt-all")
    for precision in ("f32", "fp16"):
        run = measure_backend(ort, model, feeds, {"x": (4, 16)}, warmup=0, iterations=1, precision=precision)
        assert run.precision == "fp16" and run.outputs["y"].dtype == np.float16
    run = measure_backend(_require("openvino-cpu"), model, feeds, {"x": (4, 16)}, warmup=0, iterations=1)
    assert run.precision == "f32"


def test_a_runtime_that_ignores_the_precision_asked_is_unsupported():
    """A backend that takes bf16 but whose runtime reports it compiled f32 (a silent fallback): UNSUPPORTED."""
    class Ignoring(backends.Backend):
        id, module, reduced_precisions = "ignoring", "numpy", ("bf16",)

        def prepare(self, model, shapes, threads=None, precision="f32"):
            class Quiet(backends.Session):
                details = {"precision": "f32"}

                def run(self, feeds):
                    return {}

                def bind(self, feeds):
                    return lambda: None

            return Quiet()

    with pytest.raises(BackendUnsupported, match="ignoring was asked for bf16 but reports f32: .*never a silent"):
        measure_backend(Ignoring(), None, {}, {}, warmup=0, iterations=1, precision="bf16")
    assert measure_backend(Ignoring(), None, {}, {}, warmup=0, iterations=1).precision == "f32"


def test_torch_eager_computes_ieee_f32_whatever_the_script_set():
    """A script's torch.set_float32_matmul_precision('medium') lets oneDNN compute float32 matmuls in
    bf16 on a CPU that has it; the eager backend's session computes what IEEE float32 computes (the
    same numbers as before the script's setting, on every CPU) and puts the script's setting back."""
    try:
        import torch
    except ImportError:
        require_service("torch", False, "pip install 'madengine[torch]'")
    from madengine.bench.backends.torch_eager import TorchEagerBackend

    torch.manual_seed(0)
    module = torch.nn.Linear(1024, 256)
    x = torch.rand(64, 1024)
    with torch.inference_mode():
        ieee = module(x)
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium")
    try:
        backend = TorchEagerBackend(module, (x,), {}, ["input_0"])
        run = measure_backend(backend, None, {"input_0": x.numpy()}, {}, warmup=0, iterations=1)
        assert run.precision == "f32" and run.details["fp32_math"] == "ieee"
        assert torch.equal(torch.from_numpy(run.outputs["output_0"]), ieee)
        assert torch.get_float32_matmul_precision() == "medium"  # the script's own setting, back
    finally:
        torch.set_float32_matmul_precision(before)
    # a module of another type computes in its own type, reported as such; no other is made up
    half = TorchEagerBackend(torch.nn.Linear(8, 8).half(), (torch.ones(2, 8).half(),), {}, ["input_0"])
    feeds = {"input_0": torch.ones(2, 8).half().numpy()}
    for precision in ("f32", "fp16"):
        assert measure_backend(half, None, feeds, {}, warmup=0, iterations=1, precision=precision).precision == "fp16"
    with pytest.raises(BackendUnsupported, match="torch-eager cannot run bf16: it computes in the model's own types"):
        measure_backend(half, None, feeds, {}, warmup=0, iterations=1, precision="bf16")


def test_precision_names_parse_property():
    """Property: every alias of a known precision, in any case and padding, parses to its one name (and
    normalise is idempotent on the names); any other text is a HarnessInputError listing the valid ones;
    a cell name splits back into its backend and precision."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from madengine.bench.backends import BACKEND_IDS, cell_name, split_cell
    from madengine.bench.harness import HarnessInputError
    from madengine.bench.harness import precision

    aliases = {"f32": ["f32", "fp32", "float32", "float", "<Type: 'float32'>", "tensor(float)", "torch.float32"],
               "bf16": ["bf16", "bfloat16", "<Type: 'bfloat16'>", "torch.bfloat16"],
               "fp16": ["fp16", "f16", "float16", "half", "tensor(float16)", "<Type: 'float16'>"],
               "tf32": ["tf32"], "int8": ["int8", "i8", "u8", "uint8"]}
    known = {alias.lower() for names in aliases.values() for alias in names}

    @settings(max_examples=500 if IN_CI else 100, derandomize=True, deadline=None)
    @given(st.sampled_from(sorted(aliases)), st.data(), st.booleans(), st.text(" \t", max_size=2),
           st.text(max_size=12), st.sampled_from(BACKEND_IDS))
    def check(name, data, upper, pad, junk, backend):
        alias = data.draw(st.sampled_from(aliases[name]))
        text = pad + (alias.upper() if upper else alias) + pad
        assert precision.parse(text) == name and precision.normalise(name) == name
        assert split_cell(cell_name(backend, name)) == (backend, None if name == "f32" else name)
        if junk.strip().lower() not in known and precision.normalise(junk) not in precision.PRECISIONS:
            with pytest.raises(HarnessInputError, match="valid: f32, tf32, bf16, fp16, int8"):
                precision.parse(junk)

    check()


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    from madengine.bench.harness.precision import cpu_flags, cpu_lacks

    info = tmp_path / "cpuinfo"
    info.write_text("processor : 0\nmodel name : Some CPU\nflags : fpu avx2 amx_tile avx512_bf16 fma sse\n")
    assert cpu_flags(str(info)) == ["avx2", "fma", "avx512_bf16", "amx_tile"]
    assert cpu_flags(str(tmp_path / "none")) == []
    assert cpu_lacks("bf16", ["avx512_bf16"]) is None and cpu_lacks("f32", []) is None
    assert "fp16 needs one of the CPU flags avx512_fp16" in cpu_lacks("fp16", ["avx512_bf16"])


# -- the output check ------------------------------------------------------------------------------
def test_compare_pass_and_value_mismatch_names_the_output():
    import numpy as np

    reference = {"logits": np.array([[1.0, 2.0, 3.0]], np.float32), "aux": np.array([0.5, -1.0], np.float32)}
    assert compare_outputs({k: v.copy() for k, v in reference.items()}, reference).status == PASS
    candidate = {"logits": np.array([[1.0, 2.5, 3.0]], np.float32), "aux": np.array([0.5, -1.0], np.float32)}
    verdict = compare_outputs(candidate, reference)
    assert verdict.status == MISMATCH and verdict.output == "logits"
    assert verdict.max_abs_error == pytest.approx(0.5) and verdict.max_rel_error == pytest.approx(0.25)
    assert "output 'logits': max abs error 0.5, max rel error 0.25 at index [0, 1]" in verdict.reason()
    # atol is a fraction of the output's RMS (2.16 here): 0.25 × 2.16 = 0.54 covers the 0.5, 0.2 does not
    assert compare_outputs(candidate, reference, Tolerance(atol=0.25, rtol=0)).status == PASS
    assert compare_outputs(candidate, reference, Tolerance(atol=0.2, rtol=0)).status == MISMATCH
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
    # a reference with NaN or infinity cannot tell: matching it is INCONCLUSIVE, differing a MISMATCH
    same = compare_outputs({"y": nan.copy()}, {"y": nan})
    assert same.status == INCONCLUSIVE and "the reference holds NaN or infinity" in same.reason()
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


def test_a_wrong_output_that_a_plain_absolute_tolerance_would_pass_fails():
    """Outputs of 1e-5 (a model whose logits are small): a naive |c - r| <= 1e-4 + 1e-4·|r| passes
    an answer that is all zeros, or twice the right one; the check at the reference's scale fails both."""
    import numpy as np

    reference = (np.random.default_rng(7).standard_normal((4, 10)) * 1e-5).astype(np.float32)
    for wrong in (np.zeros_like(reference), 2 * reference):
        assert np.allclose(wrong, reference, atol=1e-4, rtol=1e-4)  # the naive rule: PASS
        verdict = compare_outputs({"logits": wrong}, {"logits": reference})
        assert verdict.status == MISMATCH, verdict.reason()
        assert "output 'logits': max abs error" in verdict.reason() and "atol 0.0001×rms" in verdict.reason()
    near = reference * (1 + 1e-6)  # float32 rounding of the same answer
    assert compare_outputs({"logits": near}, {"logits": reference}).status == PASS
    assert rms(reference) == pytest.approx(float(np.sqrt(np.mean(reference.astype(np.float64) ** 2))))


def test_a_degenerate_reference_is_inconclusive_never_a_pass():
    """~0, constant, NaN or infinity in the reference: a matching answer is INCONCLUSIVE (a status of
    its own), a differing one still a MISMATCH; integer outputs are answers and never degenerate."""
    import numpy as np

    cases = {"~0": np.full((1, 1000), 1e-22, np.float32) * np.linspace(0.5, 1.5, 1000, dtype=np.float32),
             "constant": np.full((2, 8), 0.125, np.float32), "NaN or infinity": np.array([1.0, np.inf], np.float32)}
    for words, reference in cases.items():
        assert words in degenerate(reference)
        verdict = compare_outputs({"y": reference.copy()}, {"y": reference})
        assert verdict.status == INCONCLUSIVE and not verdict.ok, words
        assert f"output 'y': the reference is {words}" in verdict.reason() or words in verdict.reason()
        assert "a wrong answer could match it" in verdict.reason()
        assert verdict.to_json()["outputs"][0]["degenerate"] == degenerate(reference)
    assert compare_outputs({"y": np.zeros((1, 1000), np.float32)}, {"y": cases["~0"]}).status == MISMATCH
    assert compare_outputs({"y": np.full((2, 8), 0.5, np.float32)}, {"y": cases["constant"]}).status == MISMATCH
    # one degenerate output among good ones: the verdict cannot be a PASS; a differing one wins
    good = np.array([1.0, 2.0, 3.0], np.float32)
    both = {"logits": good, "mask": cases["constant"]}
    assert compare_outputs({k: v.copy() for k, v in both.items()}, both).status == INCONCLUSIVE
    assert compare_outputs({"logits": good + 1, "mask": cases["constant"].copy()}, both).status == MISMATCH
    assert degenerate(np.zeros(5, np.int64)) == "" and degenerate(np.array([3.0], np.float32)) == ""
    assert compare_outputs({"ids": np.zeros(5, np.int64)}, {"ids": np.zeros(5, np.int64)}).status == PASS


def test_compare_properties():
    """Property: an output matches itself (PASS, or INCONCLUSIVE when it is degenerate); moving one
    element past atol·rms + rtol·|r| is a MISMATCH naming that element; staying within is not."""
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
        itself = PASS if not degenerate(array) else INCONCLUSIVE
        assert compare_outputs({"y": array.copy()}, {"y": array}, tolerance).status == itself
        index = data.draw(st.tuples(*[st.integers(0, side - 1) for side in array.shape]))
        bound = atol * rms(array) + rtol * abs(float(array[index]))
        moved = array.astype(np.float64)
        moved[index] += 2 * bound + 1.0
        verdict = compare_outputs({"y": moved}, {"y": array.astype(np.float64)}, tolerance)
        assert verdict.status == MISMATCH and verdict.worst.worst_index == tuple(index)
        within = array.astype(np.float64)
        within[index] += bound / 2
        assert compare_outputs({"y": within}, {"y": array.astype(np.float64)}, tolerance).status in (PASS, INCONCLUSIVE)

    check()
