"""models.json entries with "onnx": `madengine run` benchmarks them through the same harness,
on the host (local executor) and inside a container (docker executor, one real test).

The entries are written into the test's copy of the fixture repository (scripts/onnxtests/), not
into tests/fixtures, so other tests' `--tags all` runs never meet them.
"""

from __future__ import annotations

import csv
import hashlib
import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BASE_IMAGE, require_service
from test_bench_harness import build_mlp

from madengine.bench import BENCH_COLUMNS

FAST_ARGS = "--warmup 1 --iterations 5"


def write_entries(repo: Path, entries: list[dict]) -> Path:
    folder = repo / "scripts" / "onnxtests"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "models.json").write_text(json.dumps(entries))
    return folder


def rows(path: Path) -> dict[str, dict[str, str]]:
    with open(path, newline="") as handle:
        return {row["model"]: row for row in csv.DictReader(handle)}


def test_onnx_entries_run_locally_through_the_harness(cli, model_repo, tmp_path):
    folder = write_entries(model_repo, [
        {"name": "mlp", "onnx": "mlp.onnx", "onnx_shapes": {"$axes": {"batch": 4}}, "args": FAST_ARGS,
         "tags": ["onnxbench"]},
        {"name": "mlp_p50", "onnx": "mlp.onnx", "onnx_axes": {"batch": 2}, "args": f"{FAST_ARGS} --metric p50",
         "tags": ["onnxbench"]},
        {"name": "mlp_tagbatch", "onnx": "mlp.onnx", "args": FAST_ARGS, "tags": ["onnxbatch"]},
    ])
    model = build_mlp(folder / "mlp.onnx")
    perf = tmp_path / "perf.csv"
    result = cli("run", "--tags", "onnxbench", "onnxtests/mlp_tagbatch:batch-size=3", "--executor", "local",
                 "-o", str(perf), "--no-html")
    assert result.code == 0, result
    got = rows(perf)
    mlp = got["onnxtests/mlp"]
    assert (mlp["status"], mlp["executor"], mlp["metric"]) == ("SUCCESS", "local", "samples_per_second")
    assert set(BENCH_COLUMNS) <= set(mlp)
    assert (mlp["batch_size"], mlp["input_shapes"], mlp["latency_n"], mlp["ort_provider"]) == ("4", "x=4,16", "5", "cpu")
    assert mlp["model_sha256"] == hashlib.sha256(model.read_bytes()).hexdigest()
    # the figure the runner parsed from the harness's output is the one the statistics hold
    assert float(mlp["performance"]) == pytest.approx(float(mlp["median_samples_per_second"]), rel=1e-5)
    assert {Path(a).name for a in mlp["artifacts"].split(",")} >= {"run.log", "onnx_bench.json"}
    p50 = got["onnxtests/mlp_p50"]
    assert p50["metric"] == "p50_latency_ms" and float(p50["performance"]) == pytest.approx(float(p50["latency_p50_ms"]))
    assert got["onnxtests/mlp_tagbatch"]["batch_size"] == "3"  # the tag config arrived as --batch-size 3


def test_onnx_entry_problems_are_failure_rows(cli, model_repo, tmp_path):
    folder = write_entries(model_repo, [
        {"name": "absent", "onnx": "absent.onnx", "tags": ["onnxbad"]},
        {"name": "tampered", "onnx": "mlp.onnx", "onnx_sha256": "0" * 64, "args": FAST_ARGS, "tags": ["onnxbad"]},
        {"name": "unresolved", "onnx": "mlp.onnx", "args": FAST_ARGS, "tags": ["onnxbad"]},
        {"name": "badshape", "onnx": "mlp.onnx", "onnx_shapes": {"x": "a,b"}, "tags": ["onnxbad"]},
    ])
    build_mlp(folder / "mlp.onnx")
    perf = tmp_path / "perf.csv"
    result = cli("run", "--tags", "onnxbad", "--executor", "local", "-o", str(perf), "--no-html")
    assert result.code == 1, result
    got = rows(perf)
    assert all(row["status"] == "FAILURE" for row in got.values())
    assert "onnx file scripts/onnxtests/absent.onnx not found" in got["onnxtests/absent"]["reason"]
    assert "sha256 mismatch" in got["onnxtests/tampered"]["reason"]
    assert "exited with code 2" in got["onnxtests/unresolved"]["reason"]  # the harness's bad-input status
    assert "shapes.x" in got["onnxtests/badshape"]["reason"]
    run_log = Path(got["onnxtests/unresolved"]["artifacts"].split(",")[0]).read_text()
    assert "dimension 0 ('batch') is dynamic and has no value" in run_log


# -- docker -------------------------------------------------------------------------------------
DOCKERFILE = """\
ARG BASE_DOCKER={base}
FROM ${{BASE_DOCKER}}
# The base image has python3 + numpy but no pip: a wheel is a zip file, so the stdlib unpacks it.
COPY wheels/ /tmp/wheels/
RUN site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') \\
 && for wheel in /tmp/wheels/*.whl; do python3 -m zipfile -e "$wheel" "$site"; done \\
 && rm -rf /tmp/wheels
"""


def download_onnxruntime_wheel(target: Path, python_version: str) -> None:
    """The host's onnxruntime version, as a wheel for the container's Python (no dependencies:
    numpy is already in the image and onnxruntime needs nothing else to run a session)."""
    import onnxruntime

    arch = platform.machine()
    platforms = [f"--platform=manylinux_2_{minor}_{arch}" for minor in range(17, 37)] + [f"--platform=manylinux2014_{arch}"]
    done = subprocess.run([sys.executable, "-m", "pip", "download", "-q", f"onnxruntime=={onnxruntime.__version__}",
                           "--no-deps", "--only-binary=:all:", f"--python-version={python_version}",
                           "--implementation=cp", *platforms, "-d", str(target)],
                          capture_output=True, text=True, timeout=300)
    require_service("PyPI (an onnxruntime wheel for the test image)", done.returncode == 0 and any(target.glob("*.whl")),
                    f"pip download failed: {done.stderr.strip()[-300:]}")


@pytest.mark.docker
@pytest.mark.slow
def test_onnx_entry_runs_in_a_container(cli, model_repo, tmp_path, docker_client, docker_cleanup):
    folder = write_entries(model_repo, [
        {"name": "mlp", "onnx": "mlp.onnx", "dockerfile": "onnx", "onnx_shapes": {"$axes": {"batch": 2}},
         "args": f"{FAST_ARGS} --threads 1", "tags": ["onnxdocker"]}])
    build_mlp(folder / "mlp.onnx")
    docker_cleanup.append("ci-onnxtests_mlp")
    python_version = docker_client.containers.run(
        BASE_IMAGE, ["python3", "-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"],
        remove=True).decode().strip()
    download_onnxruntime_wheel(folder / "wheels", python_version)
    (folder / "onnx.Dockerfile").write_text(DOCKERFILE.format(base=BASE_IMAGE))
    perf = tmp_path / "perf.csv"
    result = cli("run", "--tags", "onnxdocker", "--executor", "docker", "-o", str(perf), "--no-html")
    assert result.code == 0, result
    row = rows(perf)["onnxtests/mlp"]
    assert (row["status"], row["executor"], row["docker_image"]) == ("SUCCESS", "docker", "ci-onnxtests_mlp_onnx")
    assert (row["input_shapes"], row["threads"], row["latency_n"]) == ("x=2,16", "1", "5")
    import onnxruntime

    assert row["ort_version"] == onnxruntime.__version__
    assert float(row["performance"]) == pytest.approx(float(row["median_samples_per_second"]), rel=1e-5)
