"""``madengine bench SCRIPT.py``, ``madengine cache`` and the Python API, with a real torch,
torch.onnx.export and onnxruntime (CI installs the torch extra; these tests import torch, they do
not skip). Scripts are tests/fixtures/scripts/*.py or written by the tests; every model has
random weights and nothing is downloaded."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch  # noqa: F401  (the torch extra is a test dependency: a missing one fails here, loudly)

from conftest import FIXTURES, run_cli

SCRIPTS = FIXTURES / "scripts"
FAST = ("--iterations", "3", "--warmup", "1", "--threads", "1")


def bench(*argv: str, cache: Path, csv_path: Path | None = None):
    """``madengine bench`` with every output under the cache's folder (never the current one)."""
    csv_path = csv_path or cache.parent / "perf.csv"
    return run_cli("bench", *argv, "--cache-dir", str(cache), "-o", str(csv_path), "--runs-dir",
                   str(cache.parent / "runs"))


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def analyze(script: Path, *extra: str, cache: Path) -> dict:
    result = bench(str(script), "--analyze-only", "--json", *extra, cache=cache)
    assert result.code == 0, result
    return json.loads(result.stdout)


def hashes_by_name(tree: list[dict]) -> dict[str, str]:
    found = {}
    for node in tree:
        found[node["name"]] = node["hash"]
        found.update(hashes_by_name(node["children"]))
    return found


@pytest.fixture
def script(tmp_path) -> Path:
    """An editable copy of two_models.py."""
    copy = tmp_path / "two_models.py"
    shutil.copy(SCRIPTS / "two_models.py", copy)
    return copy


@pytest.fixture(scope="module")
def benchmarked(tmp_path_factory):
    """two_models.py benchmarked once with --max-depth 1 (5 models: 2 at depth 0, 3 sub-modules)."""
    folder = tmp_path_factory.mktemp("benchmarked")
    copy = folder / "two_models.py"
    shutil.copy(SCRIPTS / "two_models.py", copy)
    cache, perf = folder / "cache", folder / "perf.csv"
    result = bench(str(copy), "--max-depth", "1", "--json", *FAST, cache=cache, csv_path=perf)
    return {"result": result, "json": json.loads(result.stdout) if result.stdout else {}, "cache": cache,
            "perf": perf, "script": copy}


# -- analysis ---------------------------------------------------------------------------------------
def test_analyze_only_prints_the_models_as_a_tree_and_as_json(script, tmp_path, capsys):
    result = bench(str(script), "--analyze-only", "--max-depth", "1", cache=tmp_path / "cache")
    assert result.code == 0, result
    assert "├── net  __main__.Net  hash " in result.stdout
    assert "│   ├── block  __main__.Block" in result.stdout and "│   └── head  torch.nn.modules.linear.Linear" in result.stdout
    assert "└── other  torch.nn.modules.container.Sequential" in result.stdout
    assert "inputs: x: float32[2, 16]" in result.stdout and "3 call(s)" in result.stdout
    assert "two_models done" in capsys.readouterr().err  # the script's own output goes to stderr, never stdout
    data = analyze(script, "--max-depth", "1", cache=tmp_path / "cache")
    (info,) = data["scripts"]
    assert info["labels"] == {"name": ["two_models"], "author": ["madengine"], "test_group": ["daily", "monthly"]}
    net, other = info["models"]
    assert (net["name"], net["class"], net["depth"], net["calls"], net["parameters"]) == ("net", "__main__.Net", 0, 3, 340)
    assert net["built_at"].endswith("two_models.py:39")  # the line `net = Net()`
    assert net["inputs"] == [{"name": "x", "dtype": "float32", "shape": [2, 16]}]
    assert [c["name"] for c in net["children"]] == ["block", "head"]
    assert all(c["parent"] == net["hash"] and c["depth"] == 1 for c in net["children"])
    assert net["children"][0]["built_at"].endswith("two_models.py:32")  # `self.block = Block()`
    assert (other["name"], other["calls"], [c["name"] for c in other["children"]]) == ("other", 1, ["0"])
    assert not (tmp_path / "perf.csv").exists() and not (tmp_path / "runs").exists()
    depth0 = analyze(script, cache=tmp_path / "cache")["scripts"][0]["models"]
    assert [m["name"] for m in depth0] == ["net", "other"] and all(not m["children"] for m in depth0)


def test_the_hash_depends_on_architecture_and_shapes_not_on_weights(script, tmp_path):
    cache = tmp_path / "cache"
    first = hashes_by_name(analyze(script, cache=cache)["scripts"][0]["models"])
    reseeded = hashes_by_name(analyze(script, "--script-args", "--seed 7", cache=cache)["scripts"][0]["models"])
    wider = hashes_by_name(analyze(script, "--script-args", "--batch 3", cache=cache)["scripts"][0]["models"])
    assert first == reseeded  # random weights: same hash on every run
    assert wider["net"] != first["net"] and wider["other"] == first["other"]  # only net's input shape changed
    script.write_text(script.read_text().replace("torch.nn.Linear(16, 4)", "torch.nn.Linear(16, 5)"))
    changed = hashes_by_name(analyze(script, cache=cache)["scripts"][0]["models"])
    assert changed["net"] != first["net"] and changed["other"] == first["other"]


def test_a_script_without_models_exits_1_with_a_clear_message(tmp_path):
    empty = tmp_path / "no_models.py"
    empty.write_text("import torch\nprint(torch.relu(torch.ones(2)))\n")
    result = bench(str(empty), *FAST, cache=tmp_path / "cache", csv_path=tmp_path / "perf.csv")
    assert result.code == 1, result
    assert "no PyTorch model (torch.nn.Module with parameters) was called by the script" in result.stderr
    (row,) = rows(tmp_path / "perf.csv")
    assert (row["model"], row["status"]) == ("no_models", "FAILURE")
    assert bench(str(empty), "--analyze-only", cache=tmp_path / "cache").code == 1


def test_a_script_that_raises_before_any_model_gets_a_failure_row_with_its_message(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\n\nraise ValueError('no data set here')\n")
    result = bench(str(broken), *FAST, cache=tmp_path / "cache", csv_path=tmp_path / "perf.csv")
    assert result.code == 1, result
    (row,) = rows(tmp_path / "perf.csv")
    assert row["model"] == "broken" and row["status"] == "FAILURE"
    assert row["reason"] == "the script raised before any PyTorch model ran: broken.py:3: ValueError: no data set here"


def test_a_model_whose_call_raises_fails_and_the_others_go_on(tmp_path):
    mixed = tmp_path / "mixed.py"
    mixed.write_text(
        "import torch\n"
        "torch.manual_seed(0)\n"
        "good = torch.nn.Linear(4, 2)\n"
        "bad = torch.nn.Linear(8, 2)\n"
        "good(torch.rand(1, 4))\n"
        "bad(torch.rand(1, 4))  # wrong width: raises\n"
        "print('never reached')\n")
    result = bench(str(mixed), *FAST, cache=tmp_path / "cache", csv_path=tmp_path / "perf.csv")
    assert result.code == 1, result
    by_key = {(r["model"].split("::")[0], r["model_name"], r["backend"]): r for r in rows(tmp_path / "perf.csv")}
    assert by_key[("mixed", "good", "torch-eager")]["status"] == "SUCCESS"
    assert by_key[("mixed", "good", "onnxruntime-cpu")]["status"] == "SUCCESS"
    failed = by_key[("mixed", "bad", "torch-eager")]
    assert failed["status"] == "FAILURE" and "RuntimeError: mat1 and mat2 shapes cannot be multiplied" in failed["reason"]
    assert len(by_key) == 3  # no extra script-level row: the exception is the bad model's
    assert "never reached" not in result.stderr


def test_export_failures_and_mismatches_are_failure_rows_and_other_models_go_on(tmp_path):
    models = tmp_path / "models.py"
    models.write_text(
        "import numpy, torch\n"
        "torch.manual_seed(0)\n"
        "class UsesNumpy(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = torch.nn.Linear(4, 4)\n"
        "    def forward(self, x):\n"
        "        return self.fc(torch.from_numpy(numpy.tanh(x.numpy())))  # torch.export cannot trace numpy\n"
        "class Noisy(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = torch.nn.Linear(4, 4)\n"
        "    def forward(self, x):\n"
        "        return torch.nn.functional.dropout(self.fc(x), p=0.5, training=True)  # random: never matches\n"
        "numpy_model, noisy, fine = UsesNumpy(), Noisy(), torch.nn.Linear(4, 2)\n"
        "x = torch.rand(3, 4)\n"
        "numpy_model(x), noisy(x), fine(x)\n")
    result = bench(str(models), "--json", *FAST, cache=tmp_path / "cache", csv_path=tmp_path / "perf.csv")
    assert result.code == 1, result
    by_key = {(r["model_name"], r["backend"]): r for r in rows(tmp_path / "perf.csv")}
    export_failure = by_key[("numpy_model", "onnxruntime-cpu")]
    assert export_failure["status"] == "FAILURE"
    assert export_failure["reason"].startswith("torch.onnx.export failed: TorchExportError: Failed to export the model "
                                               "with torch.export. Cause: RuntimeError: .numpy()")
    assert by_key[("numpy_model", "torch-eager")]["status"] == "SUCCESS"  # eager still runs
    mismatch = by_key[("noisy", "onnxruntime-cpu")]
    assert mismatch["status"] == "FAILURE" and mismatch["correctness"] == "MISMATCH"
    assert mismatch["reason"].startswith("MISMATCH vs torch-eager: output 'output_0': max abs error")
    assert mismatch["performance"] == "" and float(mismatch["latency_p50_ms"]) > 0
    assert (by_key[("fine", "onnxruntime-cpu")]["status"], by_key[("fine", "onnxruntime-cpu")]["correctness"]) == \
        ("SUCCESS", "PASS")
    data = json.loads(result.stdout)
    builds = {m["name"]: m["build"] for m in data["scripts"][0]["results"]}
    assert builds["numpy_model"]["status"] == "failed" and builds["fine"]["status"] == "built"
    state = json.loads((Path(builds["numpy_model"]["folder"]) / "state.json").read_text())
    assert state["status"] == "failed" and "TorchExportError" in state["error"]
    log = (Path(builds["numpy_model"]["folder"]) / "log_export.txt").read_text()
    assert log.startswith("Traceback") and "x.numpy()" in log  # the exporter's whole failure, to the script's line


# -- benchmark rows -----------------------------------------------------------------------------------
def test_every_model_and_sub_module_gets_an_eager_and_an_ort_row(benchmarked):
    result = benchmarked["result"]
    assert result.code == 0, result
    table = rows(benchmarked["perf"])
    assert len(table) == 10  # net, block, head, other, other.0 × (torch-eager, onnxruntime-cpu)
    names = {r["model_name"] for r in table}
    assert names == {"net", "block", "head", "other", "0"}
    for row in table:
        assert row["model"] == f"two_models::{row['model_hash']}"
        assert row["backend"] in ("torch-eager", "onnxruntime-cpu") and row["status"] == "SUCCESS"
        assert row["tags"] == "author::madengine name::two_models test_group::daily,monthly"
        assert row["executor"] == "bench" and row["metric"] == "samples_per_second" and float(row["performance"]) > 0
        assert row["latency_n"] == "3" and row["build_name"] == f"two_models_{row['model_hash']}"
        assert row["host_load_start"] and row["host_load_end"]  # the host's load, as on a run row
        assert float(row["performance"]) == pytest.approx(float(row["median_samples_per_second"]))
        assert row["args"] == "--provider cpu --warmup 1 --iterations 3 --threads 1 --opset 18 --max-depth 1"
    ort = [r for r in table if r["backend"] == "onnxruntime-cpu"]
    assert all(r["correctness"] == "PASS" and float(r["max_abs_error"]) < 1e-5 for r in ort)
    assert all(r["ort_provider"] == "cpu" and len(r["model_sha256"]) == 64 for r in ort)
    net = next(r for r in table if r["model_name"] == "net")
    assert (net["batch_size"], net["input_shapes"], net["parameters"]) == ("2", "x=2x16", "340")


def test_the_json_holds_the_tree_builds_and_results(benchmarked):
    (script,) = benchmarked["json"]["scripts"]
    assert [m["name"] for m in script["models"]] == ["net", "other"]
    results = {m["name"]: m for m in script["results"]}
    assert set(results) == {"net", "block", "head", "other", "0"}
    net = results["net"]
    assert net["build"]["status"] == "built" and Path(net["build"]["onnx"]).is_file()
    assert [r["backend"] for r in net["results"]] == ["torch-eager", "onnxruntime-cpu"]
    assert net["results"][1]["correctness"]["status"] == "PASS"
    assert net["results"][0]["stats"]["n"] == 3


# -- build cache --------------------------------------------------------------------------------------
def _net_run(script: Path, cache: Path, *extra: str):
    """Benchmark the script's ``net`` only (one export); its build's JSON and the CLI result."""
    script_args = extra[extra.index("--script-args"):][:2] if "--script-args" in extra else ()
    net = hashes_by_name(analyze(script, *script_args, cache=cache)["scripts"][0]["models"])["net"]
    result = bench(f"{script}::{net}", "--json", *FAST, *extra, cache=cache)
    assert result.code == 0, result
    (model,) = json.loads(result.stdout)["scripts"][0]["results"]
    return model["build"], result


def test_a_build_is_reused_while_up_to_date_and_rebuilt_by_each_staleness_rule(script, tmp_path):
    """One build of ``net`` through every rule (in one test: each step costs an export)."""
    cache = tmp_path / "cache"
    first, _ = _net_run(script, cache)
    assert (first["status"], first["reasons"]) == ("built", [])
    second, result = _net_run(script, cache)
    assert second["status"] == "hit" and second["onnx"] == first["onnx"]
    assert "up-to-date build in the cache" in result.stderr and "building" not in result.stderr

    def rebuilt_because(*extra: str) -> list[str]:
        build, result = _net_run(script, cache, *extra)
        assert build["status"] == "rebuilt" and build["name"] == first["name"], build
        assert f"building {first['name']} ({'; '.join(build['reasons'])})" in result.stderr
        return build["reasons"]

    source = script.read_text()
    reseeded = source.replace("torch.manual_seed(options.seed)", "torch.manual_seed(options.seed + 1)")
    script.write_text(reseeded)
    assert rebuilt_because() == ["the model changed (weights)"]
    script.write_text(reseeded.replace("return self.head(self.block(x))", "return self.head(self.block(x)) * 2"))
    assert rebuilt_because() == ["the model changed (forward code)"]
    script.write_text(source)  # back to the original
    assert rebuilt_because() == ["the model changed (forward code)", "the model changed (weights)"]
    assert rebuilt_because("--script-args", "--calls 2") == ["the script's arguments changed"]
    assert rebuilt_because("--fp16") == ["the export settings changed (fp16)", "the script's arguments changed"]
    assert rebuilt_because("--opset", "17") == ["the export settings changed (fp16, opset)"]  # fp16 off again
    assert rebuilt_because() == ["the export settings changed (opset)"]

    state_path = Path(first["folder"]) / "state.json"
    state = json.loads(state_path.read_text())
    current = state["key"]["versions"]["torch"]
    state["key"]["versions"]["torch"] = "2.12.0+cpu"  # as if the build was made before an upgrade
    state_path.write_text(json.dumps(state))
    assert rebuilt_because() == [f"torch version changed (2.12.0+cpu → {current})"]

    stale, result = _net_run(script, cache, "--script-args", "--calls 2", "--rebuild", "never")
    assert (stale["status"], stale["reasons"]) == ("stale", ["the script's arguments changed"])
    assert "is stale (the script's arguments changed); used anyway (--rebuild never)" in result.stderr
    assert rebuilt_because("--rebuild", "always") == ["--rebuild always"]
    state_path.write_text("{not json")
    assert rebuilt_because() == ["no readable build state"]


def test_changed_shapes_make_a_new_build(script, tmp_path):
    cache = tmp_path / "cache"
    old, _ = _net_run(script, cache)
    new, _ = _net_run(script, cache, "--script-args", "--batch 5")
    assert new["status"] == "built" and new["name"] != old["name"]  # the hash covers the shapes
    assert {p.name for p in (cache / "builds").iterdir() if p.is_dir()} == {old["name"], new["name"]}


def test_staleness_compares_every_part_of_the_key():
    from madengine.bench.cache import builds

    key = builds.BuildKey(model_hash="1a2b3c4d", structure_sha256="s", code_sha256="c", weights_sha256="w",
                          inputs="x: float32[2, 16]", settings={"opset": 18, "fp16": False}, script_args=("--a",),
                          versions={"torch": "2.13.0", "onnxruntime": "1.32.0"})
    state = {"status": "success", "key": key.to_json()}
    assert builds.decide("if_needed", state, key) == ("use", [])
    changes = {"inputs": "x: float32[3, 16]", "structure_sha256": "t", "model_hash": "00000000"}
    for field, value in changes.items():
        other = dict(key.to_json(), **{field: value})
        reasons = builds.stale_reasons({"status": "success", "key": other}, key)
        assert reasons == [builds._KEY_MEANING[field]]
    assert builds.decide("if_needed", {"status": "building", "key": key.to_json()}, key) == (
        "rebuild", ["the last build did not finish (building)"])
    assert builds.decide("never", {"status": "failed", "key": key.to_json()}, key)[0] == "rebuild"
    assert builds.decide("always", None, key) == ("build", ["--rebuild always"])


def test_build_only_builds_and_records_no_rows(script, tmp_path):
    result = bench(str(script), "--build-only", "--json", cache=tmp_path / "cache", csv_path=tmp_path / "perf.csv")
    assert result.code == 0, result
    builds = [m["build"] for m in json.loads(result.stdout)["scripts"][0]["results"]]
    assert [b["status"] for b in builds] == ["built", "built"] and all(Path(b["onnx"]).is_file() for b in builds)
    assert not (tmp_path / "perf.csv").exists()


# -- selection ----------------------------------------------------------------------------------------
def test_hashes_select_models_and_an_unknown_hash_is_a_failure_row(script, tmp_path):
    cache = tmp_path / "cache"
    other = hashes_by_name(analyze(script, cache=cache)["scripts"][0]["models"])["other"]
    result = bench(f"{script}::{other.upper()},0badc0de", *FAST, cache=cache, csv_path=tmp_path / "perf.csv")
    assert result.code == 1, result
    table = rows(tmp_path / "perf.csv")
    assert {(r["model"], r["status"]) for r in table} == {
        (f"two_models::{other}", "SUCCESS"), ("two_models::0badc0de", "FAILURE")}
    failure = next(r for r in table if r["status"] == "FAILURE")
    assert failure["reason"].startswith("no model with hash 0badc0de in the script (found: ")


def test_all_scripts_of_a_folder_filtered_by_labels(tmp_path):
    folder = tmp_path / "scripts"
    folder.mkdir()
    shutil.copy(SCRIPTS / "two_models.py", folder / "daily.py")
    (folder / "weekly.py").write_text("# labels: test_group::weekly\nimport torch\ntorch.nn.Linear(2, 2)(torch.ones(2))\n")
    (folder / "plain.py").write_text("import torch\ntorch.nn.Linear(3, 3)(torch.ones(3))\n")
    (folder / "_helper.py").write_text("raise SystemExit('not a script to run')\n")
    every = run_cli("bench", "--all", "--search-dir", str(folder), "--analyze-only", "--json")
    assert every.code == 0, every
    assert [Path(s["script"]).name for s in json.loads(every.stdout)["scripts"]] == ["daily.py", "plain.py", "weekly.py"]
    daily = run_cli("bench", "--all", "--search-dir", str(folder), "--labels", "test_group::monthly,yearly",
                    "--analyze-only", "--json")
    assert [Path(s["script"]).name for s in json.loads(daily.stdout)["scripts"]] == ["daily.py"]
    assert "plain.py: skipped (its labels do not match --labels)" in daily.stderr
    both = run_cli("bench", "--all", "--search-dir", str(folder), "--labels", "test_group::weekly",
                   "--labels", "author::madengine", "--analyze-only")
    assert both.code == 2 and "--labels: no script has the asked labels" in both.stderr
    relative = run_cli("bench", "weekly.py", "--search-dir", str(folder), "--analyze-only", "--json")
    assert relative.code == 0 and json.loads(relative.stdout)["scripts"][0]["labels"] == {"test_group": ["weekly"]}


@pytest.mark.parametrize("argv, message", [
    (("missing.py",), "missing.py: script not found"),
    (("{script}::xyz",), "'xyz' is not a model hash (8 hex digits)"),
    (("{script}", "--script-args", "--name 'open"), "--script-args: cannot split"),
    (("{script}", "--rebuild", "sometimes"), "argument --rebuild: unknown rebuild policy 'sometimes'"),
    (("{script}", "model.onnx"), "give either .onnx models or .py scripts, not both"),
    (("{script}", "--shape", "x=1,2"), "--shape: applies to .onnx models only"),
    (("{script}", "--seed=3"), "--seed: applies to .onnx models only"),
    (("{script}", "--labels", "noseparator"), "--labels: 'noseparator' is not KEY::VALUE[,VALUE...]"),
    (("{script}", "--provider", "cuda"), "--provider: cuda (CUDAExecutionProvider) is not offered"),
    (("model.onnx", "--fp16"), "--fp16: applies to Python scripts only"),
    (("{script}", "--analyze-only", "--build-only"), "not allowed with argument"),
])
def test_bad_input_is_one_line_and_exit_2_before_any_script_runs(script, tmp_path, argv, message):
    result = bench(*[a.format(script=script) for a in argv], cache=tmp_path / "cache")
    assert result.code == 2, result
    assert message in result.stderr and "Traceback" not in result.stderr


def test_without_torch_the_install_hint_and_exit_2(script, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # what `import torch` sees when torch is not installed
    result = bench(str(script), cache=tmp_path / "cache")
    assert result.code == 2, result
    assert "madengine: error: torch: PyTorch is not installed" in result.stderr
    assert "pip install 'madengine[torch]'" in result.stderr


# -- cache commands -----------------------------------------------------------------------------------
def test_cache_list_stats_report_and_delete(benchmarked):
    cache = str(benchmarked["cache"])
    listing = run_cli("cache", "list", "--cache-dir", cache, "--json")
    builds = {b["name"]: b for b in json.loads(listing.stdout)}
    assert len(builds) == 5 and all(b["status"] == "success" for b in builds.values())
    net = next(name for name, b in builds.items() if b["model"]["name"] == "net")
    assert net in run_cli("cache", "list", "--cache-dir", cache).stdout
    stats = run_cli("cache", "stats", net, "--cache-dir", cache)
    assert stats.code == 0, stats
    for text in ("status     success", "versions   madengine ", "torch ", "onnxruntime ", "hashes     model_hash ",
                 "weights_sha256", "timings    export_s ", f"onnx/{net}-op18-opt.onnx", "inputs.npz",
                 "result     onnxruntime-cpu: SUCCESS"):
        assert text in stats.stdout, text
    state = json.loads(run_cli("cache", "stats", net, "--cache-dir", cache, "--json").stdout)
    assert state["key"]["settings"] == {"exporter": "torch.onnx.export(dynamo=True)", "opset": 18,
                                        "optimization": "ORT_ENABLE_EXTENDED", "provider": "CPUExecutionProvider",
                                        "fp16": False}
    report = run_cli("cache", "report", "--cache-dir", cache)
    table = list(csv.DictReader(report.stdout.splitlines()))
    assert len(table) == 5
    row = next(r for r in table if r["build"] == net)
    assert (row["model"], row["class"], row["parameters"], row["status"]) == ("net", "__main__.Net", "340", "success")
    assert row["onnxruntime-cpu_status"] == "SUCCESS" and row["onnxruntime-cpu_correctness"] == "PASS"
    assert float(row["torch-eager_p50_ms"]) > 0 and float(row["onnxruntime-cpu_samples_per_second"]) > 0
    assert run_cli("cache", "stats", "nothing_here", "--cache-dir", cache).code == 2
    assert run_cli("cache", "delete", "nothing_here", net, "--cache-dir", cache).code == 2  # deletes nothing
    deleted = run_cli("cache", "delete", net, "--cache-dir", cache)
    assert deleted.code == 0 and not (benchmarked["cache"] / "builds" / net).exists()
    assert len(json.loads(run_cli("cache", "list", "--cache-dir", cache, "--json").stdout)) == 4
    assert run_cli("cache", "delete", "--all", "--cache-dir", cache).code == 0
    assert json.loads(run_cli("cache", "list", "--cache-dir", cache, "--json").stdout) == []


# -- Python API ---------------------------------------------------------------------------------------
def test_benchmark_model_returns_typed_results_and_can_write_perf_csv(tmp_path):
    import madengine

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    result = madengine.benchmark_model(model, torch.rand(4, 8), name="mlp", iterations=5, warmup=1, threads=1,
                                       cache_dir=tmp_path / "cache", output=tmp_path / "perf.csv",
                                       runs_dir=tmp_path / "runs")
    assert isinstance(result, madengine.ModelResult) and result.ok
    assert result.perf_model == f"mlp::{result.info.hash}" and result.info.parameters == 178
    assert [r.backend for r in result.results] == ["torch-eager", "onnxruntime-cpu"]
    ort = result.result("onnxruntime-cpu")
    assert ort.correctness["status"] == "PASS" and ort.stats["n"] == 5 and ort.performance > 0
    assert result.build.status == "built"
    assert [r["backend"] for r in rows(tmp_path / "perf.csv")] == ["torch-eager", "onnxruntime-cpu"]
    again = madengine.benchmark_model(model, (torch.rand(4, 8),), name="mlp", iterations=5, warmup=1,
                                      cache_dir=tmp_path / "cache", runs_dir=tmp_path / "runs")
    assert again.build.status == "hit" and again.info.hash == result.info.hash
    assert json.dumps(again.to_json())


def test_benchmark_script_analyze_only_and_selection(tmp_path):
    import madengine

    analysis = madengine.benchmark_script(SCRIPTS / "two_models.py", analyze_only=True, max_depth=1,
                                          script_args=["--batch", "3"], cache_dir=tmp_path / "cache")
    assert isinstance(analysis, madengine.ScriptResult) and analysis.ok and not analysis.models
    assert [m.name for m in analysis.found] == ["net", "block", "head", "other", "0"]
    net = analysis.found[0]
    assert net.inputs[0].shape == (3, 16) and net.calls == 3
    built = madengine.benchmark_script(SCRIPTS / "two_models.py", models=[net.hash], build_only=True,
                                       script_args="--batch 3", cache_dir=tmp_path / "cache")
    assert [m.info.name for m in built.models] == ["net"] and built.models[0].build.ok


def test_import_madengine_loads_neither_torch_nor_the_api():
    code = ("import sys, madengine; assert 'torch' not in sys.modules and 'madengine.api' not in sys.modules; "
            "madengine.ScriptResult; assert 'madengine.api' in sys.modules and 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ})
