"""`madengine bench`: real onnxruntime on small models built in code; short iteration counts."""

from __future__ import annotations

import csv
import hashlib
import json
import re
from pathlib import Path

import pytest

from test_bench_harness import build_failing, build_mlp, build_two_inputs

from madengine.bench import BENCH_COLUMNS
from madengine.results.columns import ALL_COLUMNS

FAST = ("--warmup", "1", "--iterations", "5")


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    """Results, runs and the prepared-model cache all under tmp_path."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MADENGINE_CACHE_DIR", str(tmp_path / "cache"))


def rows(path: str = "perf.csv") -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_bench_one_model_table_row_and_artifacts(cli, tmp_path):
    model = build_mlp(tmp_path / "mlp.onnx")
    result = cli("bench", str(model), "--axes", "batch=4", "--threads", "1", *FAST)
    assert result.code == 0, result
    header = result.stdout.splitlines()[0].split()
    assert header[:5] == ["model", "provider", "precision", "batch", "n"] and "p99_ms" in header \
        and "samples/s" in header
    assert result.stdout.splitlines()[2].split()[:3] == ["mlp", "cpu", "f32"]
    assert "mlp" in result.stdout and "SUCCESS" in result.stdout
    [row] = rows()
    assert list(row)[: len(ALL_COLUMNS)] == list(ALL_COLUMNS)
    assert list(row)[len(ALL_COLUMNS):] == list(BENCH_COLUMNS)
    assert (row["model"], row["status"], row["executor"], row["metric"]) == ("mlp", "SUCCESS", "bench",
                                                                            "samples_per_second")
    assert row["backend"] == "onnxruntime-cpu"  # part of the result identity (docs/statistics.md)
    assert (row["ort_provider"], row["threads"], row["batch_size"], row["input_shapes"], row["latency_n"]) == (
        "cpu", "1", "4", "x=4,16", "5")
    assert row["model_sha256"] == sha256(model) and row["ort_version"] and row["cpu_model"]
    # the precision ONNX Runtime computed in (perf.csv's own precision column), and where it ran
    import onnxruntime

    from madengine.bench.harness.precision import cpu_flags

    assert (row["training_precision"], row["precision_source"]) == ("f32", "reported")
    assert json.loads(row["framework_versions"])["onnxruntime"] == onnxruntime.__version__
    assert row["cpu_flags"].split() == cpu_flags()
    # the headline is the median's: samples/s at the p50 latency; the mean's throughput stays a column
    assert float(row["performance"]) == pytest.approx(float(row["median_samples_per_second"]))
    assert float(row["median_samples_per_second"]) == pytest.approx(4 * 1000 / float(row["latency_p50_ms"]), rel=1e-4)
    assert re.search(r"madengine: mlp \[cpu\]: SUCCESS \S+ samples_per_second \(p50 \S+ ms, mean \S+ ms\)",
                     result.stderr), result.stderr
    assert header[5:7] == ["p50_ms", "samples/s"] and header.index("p50_ms") < header.index("mean_ms")
    assert float(row["samples_per_second"]) == pytest.approx(4 * float(row["inferences_per_second"]), rel=1e-4)
    assert float(row["latency_min_ms"]) <= float(row["latency_p50_ms"]) <= float(row["latency_max_ms"])
    assert row["gpu_vendor"] == "CPU" and row["n_gpus"] == "0"
    assert "--provider cpu" in row["args"] and "--axes batch=4" in row["args"] and "--iterations 5" in row["args"]
    stats_file = Path(row["artifacts"].split(",")[0])
    assert stats_file.name == "bench_result.json"
    assert len(json.loads(stats_file.read_text())["latencies_ms"]) == 5


def test_metric_p50_and_json_output(cli, tmp_path):
    model = build_mlp(tmp_path / "mlp.onnx", batch_dim=2)
    result = cli("bench", str(model), "--metric", "p50", "--json", "-o", "out/perf.csv", *FAST)
    assert result.code == 0, result
    data = json.loads(result.stdout)
    [entry] = data["results"]
    assert entry["metric"] == "p50_latency_ms" and entry["status"] == "SUCCESS"
    assert entry["performance"] == pytest.approx(entry["stats"]["p50_ms"], rel=1e-5)
    assert entry["stats"]["batch_size"] == 2  # dimension 0 of the first input, fixed in the model
    assert set(entry["stats"]) >= {"n", "mean_ms", "stddev_ms", "cv", "min_ms", "p50_ms", "p90_ms", "p95_ms",
                                   "p99_ms", "max_ms", "inferences_per_second", "samples_per_second"}
    assert entry["environment"]["ort_version"] and entry["columns"]["model_sha256"] == sha256(model)
    assert "p50_ms" in result.stderr  # the table goes to stderr when stdout carries JSON
    assert rows("out/perf.csv")[0]["metric"] == "p50_latency_ms"


def test_dynamic_axes_shapes_and_batch_size(cli, tmp_path):
    model = build_two_inputs(tmp_path / "two.onnx")
    result = cli("bench", str(model), "--axes", "seq=6", "--batch-size", "3", "--json", *FAST)
    assert result.code == 0, result
    entry = json.loads(result.stdout)["results"][0]
    assert entry["inputs"]["ids"] == {"declared": ["batch", "seq"], "shape": [3, 6], "dtype": "int64"}
    assert entry["inputs"]["x"]["shape"] == [3, 6, 8]
    assert entry["stats"]["samples_per_second"] == pytest.approx(3 * entry["stats"]["inferences_per_second"])
    result = cli("bench", str(model), "--shape", "ids=2,5", "--shape", "x=2,5,8", *FAST)
    assert result.code == 0, result
    assert rows()[-1]["input_shapes"] == "ids=2,5;x=2,5,8"


@pytest.mark.parametrize("extra, message", [
    ((), "input 'ids': dimension 0 ('batch') is dynamic and has no value (give --axes batch=N or --batch-size N"),
    (("--batch-size", "2"), "dimension 1 ('seq') is dynamic and has no value (give --axes seq=N"),
    (("--axes", "batch=2", "--axes", "seqlen=4"), "no dynamic axis named 'seqlen'"),
    (("--axes", "seq=2", "--shape", "nope=1"), "no input named 'nope'"),
])
def test_unresolved_or_unknown_dimensions_exit_2_before_running(cli, tmp_path, extra, message):
    model = build_two_inputs(tmp_path / "two.onnx")
    result = cli("bench", str(model), *extra, *FAST)
    assert result.code == 2, result
    assert message in result.stderr and result.stderr.count("\n") == 1
    assert not Path("perf.csv").exists()


@pytest.mark.parametrize("argv, message", [
    (("missing.onnx",), "missing.onnx: model file not found"),
    (("MODEL", "--provider", "cuda"), "cuda (CUDAExecutionProvider) is not offered by this onnxruntime (available: "),
    (("MODEL", "--provider", "nonsense"), "unknown provider 'nonsense'"),
    (("MODEL", "--iterations", "0"), "must be 1 or more"),
    (("MODEL", "--iterations", "3", "--min-time", "1"), "not allowed with argument"),
    (("MODEL", "--shape", "x"), "'x' is not NAME=VALUE"),
    (("MODEL", "--metric", "fastest"), "invalid choice"),
    ((), "no model to benchmark"),
    (("NOTONNX",), "not a readable ONNX model"),
])
def test_bad_input_exits_2_with_one_line(cli, tmp_path, capsys, argv, message):
    model = build_mlp(tmp_path / "mlp.onnx", batch_dim=1)
    (tmp_path / "notonnx.onnx").write_text("this is not protobuf")
    argv = [str(model) if a == "MODEL" else str(tmp_path / "notonnx.onnx") if a == "NOTONNX" else a for a in argv]
    result = cli("bench", *argv)
    assert result.code == 2, result
    stderr = result.stderr + capsys.readouterr().err  # argparse's usage errors go to the real stderr
    assert message in stderr and "Traceback" not in stderr and stderr.count("\n") == 1
    assert not Path("perf.csv").exists()


def test_cpu_provider_listed_in_the_provider_error(cli, tmp_path):
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this onnxruntime offers CUDA (a GPU build; CI's CPU build never does, so CI runs this)")
    result = cli("bench", str(build_mlp(tmp_path / "m.onnx", batch_dim=1)), "--provider", "tensorrt")
    assert result.code == 2 and "cpu" in result.stderr.split("available:")[1]


def test_failing_model_gets_a_failure_row_and_others_still_run(cli, tmp_path):
    bad = build_failing(tmp_path / "bad.onnx")
    good = build_mlp(tmp_path / "good.onnx", batch_dim=1)
    result = cli("bench", str(bad), str(good), "--batch-size", "1", *FAST)
    assert result.code == 1, result
    by_model = {row["model"]: row for row in rows()}
    assert by_model["bad"]["status"] == "FAILURE" and "session.run failed" in by_model["bad"]["reason"]
    assert by_model["good"]["status"] == "SUCCESS"


def test_profile_prints_and_saves_the_operator_table(cli, tmp_path):
    model = build_mlp(tmp_path / "mlp.onnx", batch_dim=1)
    result = cli("bench", str(model), "--profile", "--no-cache", *FAST)
    assert result.code == 0, result
    assert "per-operator profile: mlp [cpu], 5 profiled run(s)" in result.stdout
    table_header = [line for line in result.stdout.splitlines() if line.startswith("op_type")][0].split()
    assert table_header == ["op_type", "node", "calls", "total_ms", "mean_ms", "share"]
    artifacts = {Path(p).name: Path(p) for p in rows()[0]["artifacts"].split(",")}
    assert set(artifacts) == {"bench_result.json", "ort_profile.json", "profile_ops.csv", "profile_op_types.csv",
                              "profile_ops.json"}
    with open(artifacts["profile_ops.csv"], newline="") as handle:
        ops = list(csv.DictReader(handle))
    assert ops and all(int(op["calls"]) == 5 for op in ops)
    assert sum(float(op["share"]) for op in ops) == pytest.approx(1.0)
    assert {op["op_type"] for op in ops} <= {"MatMul", "Add", "Relu", "FusedGemm", "FusedMatMul", "Gemm"}


def test_prepared_model_cache_is_reused_and_keyed(cli, tmp_path):
    model = build_mlp(tmp_path / "mlp.onnx", batch_dim=1)
    first = cli("bench", str(model), *FAST)
    second = cli("bench", str(model), *FAST)
    off = cli("bench", str(model), "--no-cache", *FAST)
    assert (first.code, second.code, off.code) == (0, 0, 0)
    assert [row["prepared_cache"] for row in rows()] == ["miss", "hit", "off"]
    cached = sorted((tmp_path / "cache" / "onnx").iterdir())
    assert [p.suffix for p in cached] == [".json", ".onnx"]
    assert json.loads(cached[0].read_text())["model_sha256"] == sha256(model)
    build_mlp(model, batch_dim=1, hidden=8)  # the content changes: a new key, a new copy
    assert cli("bench", str(model), *FAST).code == 0
    assert rows()[-1]["prepared_cache"] == "miss"
    assert len(list((tmp_path / "cache" / "onnx").glob("*.onnx"))) == 2


def test_a_broken_cached_copy_is_dropped_not_fatal(cli, tmp_path):
    model = build_mlp(tmp_path / "mlp.onnx", batch_dim=1)
    assert cli("bench", str(model), *FAST).code == 0
    [copy] = (tmp_path / "cache" / "onnx").glob("*.onnx")
    copy.write_bytes(b"garbage")
    result = cli("bench", str(model), *FAST)
    assert result.code == 0, result
    assert rows()[-1]["prepared_cache"] == "off" and not copy.exists()


SUITE_YAML = """\
models:
  - set: toy
    name: mlp
    version: 2
    path: models/mlp.onnx
    sha256: {mlp_sha}
    $axes: {{batch: 2}}
    providers: [cpu]
  - name: two
    path: models/two.onnx
    shapes:
      $axes: {{batch: 1, seq: 4}}
    batch_size: 1
    configs: [onnx-trt]   # a Relax scorecard key: accepted and ignored
"""


def test_suite_yaml_runs_every_entry(cli, tmp_path):
    (tmp_path / "models").mkdir()
    mlp = build_mlp(tmp_path / "models" / "mlp.onnx")
    build_two_inputs(tmp_path / "models" / "two.onnx")
    suite = tmp_path / "suite.yaml"
    suite.write_text(SUITE_YAML.format(mlp_sha=sha256(mlp)))
    result = cli("bench", "--suite", str(suite), "--json", *FAST)
    assert result.code == 0, result
    results = json.loads(result.stdout)["results"]
    assert [(r["model"], r["status"]) for r in results] == [("toy/mlp@2", "SUCCESS"), ("two", "SUCCESS")]
    assert results[0]["inputs"]["x"]["shape"] == [2, 16] and results[1]["inputs"]["x"]["shape"] == [1, 4, 8]
    assert [row["tags"] for row in rows()] == ["toy", ""]


def test_suite_json_sha256_mismatch_stops_everything(cli, tmp_path):
    mlp = build_mlp(tmp_path / "mlp.onnx", batch_dim=1)
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps([{"name": "ok", "path": "mlp.onnx", "sha256": sha256(mlp)},
                                 {"name": "tampered", "path": "mlp.onnx", "sha256": "0" * 64}]))
    result = cli("bench", "--suite", str(suite), *FAST)
    assert result.code == 2, result
    assert f"suite.json: model 'tampered': sha256 mismatch for {mlp}: expected {'0' * 64}, file has {sha256(mlp)}" \
        in result.stderr
    assert not Path("perf.csv").exists()  # not even the good entry ran


@pytest.mark.parametrize("text, message", [
    ("[{\"path\": \"m.onnx\", \"shape\": {}}]", "entry 0: unknown key(s) shape"),
    ("[{\"name\": \"a\"}]", "'path' is required"),
    ("{\"models\": []}", "non-empty list"),
    ("[{\"path\": \"m.onnx\", \"$axes\": {\"batch\": \"x\"}}]", "$axes.batch must be a whole number"),
    ("[{\"path\": \"m.onnx\", \"shapes\": {\"x\": [1, \"a\"]}}]", "shapes.x: must be a list of whole numbers"),
    ("[{\"path\": \"m.onnx\", \"providers\": \"warp\"}]", "unknown provider 'warp'"),
    ("[{\"path\": \"absent.onnx\"}]", "model file"),
    ("{not json", "malformed JSON"),
])
def test_bad_suite_files_exit_2(cli, tmp_path, text, message):
    build_mlp(tmp_path / "m.onnx", batch_dim=1)
    suite = tmp_path / "suite.json"
    suite.write_text(text)
    result = cli("bench", "--suite", str(suite))
    assert result.code == 2, result
    assert message in result.stderr and str(suite) in result.stderr


def test_same_model_twice_keeps_both_results(cli, tmp_path):
    model = build_mlp(tmp_path / "mlp.onnx", batch_dim=1)
    result = cli("bench", str(model), str(model), *FAST)
    assert result.code == 0, result
    first, second = (row["artifacts"] for row in rows())
    assert first != second and Path(first).is_file() and Path(second).is_file()


# -- GPU providers: no GPU here, so onnxruntime is simulated (the only mock in these tests) -------
class SimulatedGpuOnnxruntime:
    """The real CPU onnxruntime, claiming to offer CUDA: sessions run on the CPU but report the
    providers a GPU build would. ``initialises`` False mimics a CUDA EP whose libraries are missing."""

    def __init__(self, initialises: bool = True) -> None:
        import onnxruntime

        self.real, self.initialises = onnxruntime, initialises
        self.__version__ = onnxruntime.__version__
        self.SessionOptions = onnxruntime.SessionOptions
        self.GraphOptimizationLevel = onnxruntime.GraphOptimizationLevel
        self.ExecutionMode = onnxruntime.ExecutionMode
        self.sessions: list[dict] = []
        self.preloaded = 0

    def get_available_providers(self):
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]

    def preload_dlls(self):
        self.preloaded += 1
        print("preload notice that must not reach stdout")

    def InferenceSession(self, path, sess_options, providers, **kwargs):
        self.sessions.append({"providers": providers, **kwargs})
        session = self.real.InferenceSession(path, sess_options, providers=["CPUExecutionProvider"])
        used = ["CUDAExecutionProvider", "CPUExecutionProvider"] if self.initialises else ["CPUExecutionProvider"]
        session.get_providers = lambda: used
        # a GPU build reads its provider options back, the precision switches among them
        options = {name: dict(opts) for name, opts in (p for p in providers if isinstance(p, tuple))}
        session.get_provider_options = lambda: {"CPUExecutionProvider": {}, **options}
        return session


def test_cuda_provider_json_path_simulated(cli, tmp_path, monkeypatch):
    from madengine.bench.harness import engine

    fake = SimulatedGpuOnnxruntime()
    monkeypatch.setattr(engine, "import_onnxruntime", lambda: fake)
    model = build_mlp(tmp_path / "mlp.onnx", batch_dim=1)
    result = cli("bench", str(model), "--provider", "cuda", "--json", *FAST)
    assert result.code == 0, result
    entry = json.loads(result.stdout)["results"][0]  # stdout is pure JSON despite preload's print
    assert (entry["provider"], entry["status"], entry["session_providers"][0]) == ("cuda", "SUCCESS",
                                                                                 "CUDAExecutionProvider")
    assert fake.preloaded >= 1
    # CUDA's TF32 math (on by default in onnxruntime-gpu) is turned off: f32 means f32
    assert fake.sessions[0]["providers"] == [("CUDAExecutionProvider", {"use_tf32": "0"}), "CPUExecutionProvider"]
    assert fake.sessions[0]["enable_fallback"] == 0  # ORT's silent retry on the next provider is off
    [row] = rows()
    assert (row["gpu_vendor"], row["n_gpus"], row["ort_provider"], row["prepared_cache"]) == ("NVIDIA", "1", "cuda",
                                                                                             "off")
    assert (row["backend"], row["training_precision"], entry["precision"]) == ("onnxruntime-cuda", "f32", "f32")


def test_precision_is_opt_in_per_row_and_what_a_provider_cannot_run_is_exit_2(cli, tmp_path, monkeypatch):
    """--precision f32,tf32 on a (simulated) CUDA provider: one row per precision; tf32 is CUDA's own mode
    (read back from the session). bf16 is none of its modes and not the model's own type: bad input,
    exit 2 naming it and what the provider runs, before anything runs. The backend names the precision,
    so the rows never share a result identity."""
    from madengine.bench.harness import engine

    fake = SimulatedGpuOnnxruntime()
    monkeypatch.setattr(engine, "import_onnxruntime", lambda: fake)
    model = build_mlp(tmp_path / "mlp.onnx", batch_dim=1)
    bad = cli("bench", str(model), "--provider", "cuda", "--precision", "fp32,tf32,bfloat16", *FAST)
    assert bad.code == 2 and not Path("perf.csv").exists() and fake.sessions == [], bad
    assert len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr
    assert "--precision: model 'mlp': bf16 on cuda: onnxruntime's CUDAExecutionProvider cannot run bf16" in bad.stderr
    assert "model's own types (f32)" in bad.stderr and "(valid for it: f32, tf32)" in bad.stderr
    result = cli("bench", str(model), "--provider", "cuda", "--precision", "fp32,tf32", "--json", *FAST)
    assert result.code == 0, result
    by_backend = {row["backend"]: row for row in rows()}
    assert list(by_backend) == ["onnxruntime-cuda", "onnxruntime-cuda:tf32"]
    assert [s["providers"][0] for s in fake.sessions] == [("CUDAExecutionProvider", {"use_tf32": "0"}),
                                                          ("CUDAExecutionProvider", {"use_tf32": "1"})]
    assert by_backend["onnxruntime-cuda"]["training_precision"] == "f32"
    tf32 = by_backend["onnxruntime-cuda:tf32"]
    assert (tf32["status"], tf32["training_precision"]) == ("SUCCESS", "tf32") and "--precision tf32" in tf32["args"]
    assert [e["precision"] for e in json.loads(result.stdout)["results"]] == ["f32", "tf32"]


def test_bf16_on_onnx_runtimes_cpu_provider_is_exit_2_naming_what_it_runs(cli, tmp_path):
    """The real CPU provider has no reduced-precision mode: --precision bf16 on a float32 model is bad
    input on every machine (never a silent f32 run, never a row)."""
    model = build_mlp(tmp_path / "mlp.onnx", batch_dim=1)
    result = cli("bench", str(model), "--precision", "bf16", *FAST)
    assert result.code == 2, result
    assert result.stderr.strip() == (
        "madengine: error: --precision: model 'mlp': bf16 on cpu: onnxruntime's CPUExecutionProvider cannot run "
        "bf16: it computes in the model's own types (f32) and has no reduced-precision mode (valid for it: f32) "
        "(give it a model converted to that precision, e.g. bench SCRIPT.py --fp16)")
    assert not Path("perf.csv").exists()


@pytest.mark.parametrize("args, words", [
    (["--precision", "fp8"], "--precision: unknown precision 'fp8' (valid: f32, tf32, bf16, fp16, int8)"),
    (["--precision", "f32,,double"], "--precision: unknown precision 'double'"),
    (["--precision", ","], "names no precision"),
])
def test_unknown_precision_is_one_line_and_exit_2(cli, tmp_path, args, words):
    model = build_mlp(tmp_path / "mlp.onnx", batch_dim=1)
    result = cli("bench", str(model), *args, *FAST)
    assert result.code == 2, result
    assert words in result.stderr and len(result.stderr.strip().splitlines()) == 1 and not Path("perf.csv").exists()


def test_provider_that_does_not_initialise_is_a_failure_row(cli, tmp_path, monkeypatch):
    from madengine.bench.harness import engine

    monkeypatch.setattr(engine, "import_onnxruntime", lambda: SimulatedGpuOnnxruntime(initialises=False))
    result = cli("bench", str(build_mlp(tmp_path / "mlp.onnx", batch_dim=1)), "--provider", "cuda", *FAST)
    assert result.code == 1, result
    [row] = rows()
    assert row["status"] == "FAILURE"
    assert "CUDAExecutionProvider is offered by this onnxruntime but did not initialise" in row["reason"]
    assert "would run on CPUExecutionProvider" in row["reason"]
