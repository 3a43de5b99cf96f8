"""The Python API: discover, run, bench and read_results take the repository and the output
locations as parameters, never write into the current folder unasked, and return typed results."""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path

import pytest

import madengine
from madengine.core.errors import InputError

SCRIPT = "#!/usr/bin/env bash\necho 'performance: 12.5 items/s'\n"


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "models"
    (root / "scripts").mkdir(parents=True)
    (root / "scripts" / "run.sh").write_text(SCRIPT)
    (root / "models.json").write_text(json.dumps([
        {"name": "api_one", "dockerfile": "docker/none", "scripts": "scripts/run.sh", "tags": ["api"]},
        {"name": "api_two", "dockerfile": "docker/none", "scripts": "scripts/run.sh", "tags": ["api", "two"]}]))
    return root


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """The current folder: the API must leave it alone."""
    folder = tmp_path / "cwd"
    folder.mkdir()
    monkeypatch.chdir(folder)
    monkeypatch.delenv("MODEL_DIR", raising=False)
    return folder


def test_import_madengine_stays_light():
    import subprocess
    import sys

    code = "import madengine, sys; print(sorted(m for m in sys.modules if m.startswith('madengine')))"
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                       check=True).stdout.replace("'", '"'))
    assert loaded == ["madengine", "madengine.core", "madengine.core.version"]  # the version, nothing else


def test_discover_reads_the_repository_it_is_given(repo, elsewhere):
    assert [m.name for m in madengine.discover(root=repo)] == ["api_one", "api_two"]
    assert [m.name for m in madengine.discover(["two"], root=repo)] == ["api_two"]
    with pytest.raises(InputError):
        madengine.discover(["nope"], root=repo)


def test_run_and_read_results_give_typed_records(repo, elsewhere, tmp_path):
    perf = tmp_path / "out" / "perf.csv"
    summary = madengine.run(["api"], root=repo, perf_csv=perf, executor="local", repeat=3)
    assert isinstance(summary, madengine.RunSummary) and summary.counts()["SUCCESS"] == 2
    assert os.listdir(elsewhere) == []  # nothing in the current folder
    assert (tmp_path / "out" / "madengine_runs").is_dir()
    results = madengine.read_results(perf)
    assert isinstance(results, madengine.Results) and [r.model for r in results] == ["api_one", "api_two"]
    first = results[0]
    assert isinstance(first, madengine.Result) and first.ok and first.performance == 12.5
    assert first.samples == [12.5, 12.5, 12.5] and first.metric == "items/s"
    assert isinstance(first.started_at, datetime.datetime) and first.identity.executor == "local"
    assert isinstance(first.test_duration, float) and first.trace_id
    frame = results.to_dataframe()
    assert list(frame["model"]) == ["api_one", "api_two"] and frame["performance"].dtype.kind == "f"


def test_a_failing_model_is_a_record_and_bad_input_an_exception(repo, elsewhere, tmp_path):
    (repo / "scripts" / "run.sh").write_text("#!/usr/bin/env bash\nexit 4\n")
    summary = madengine.run(["api_one"], root=repo, perf_csv=tmp_path / "p.csv", executor="local")
    assert summary.failed and "exited with code 4" in summary.failed[0].reason
    with pytest.raises(InputError):
        madengine.run(["nope"], root=repo, perf_csv=tmp_path / "p.csv", executor="local")
    with pytest.raises(InputError):
        madengine.read_results(tmp_path / "missing.csv")


def test_bench_through_the_api(elsewhere, tmp_path, monkeypatch):
    from test_bench_harness import build_mlp

    monkeypatch.setenv("MADENGINE_CACHE_DIR", str(tmp_path / "cache"))
    model = build_mlp(tmp_path / "mlp.onnx")
    summary = madengine.bench([model], perf_csv=tmp_path / "bench.csv", axes={"batch": 2}, warmup=1, iterations=5)
    assert not summary.failed and summary.outcomes[0].result["stats"]["n"] == 5
    assert os.listdir(elsewhere) == []
    (row,) = madengine.read_results(tmp_path / "bench.csv")
    assert row.identity.backend == "onnxruntime-cpu" and row.performance > 0
