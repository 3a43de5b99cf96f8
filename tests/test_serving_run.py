"""models.json ``serving`` blocks through ``madengine run``: the model's script starts a server,
madengine waits for it, runs the load points, records one row per point and ends the server.

The servers are real: tests/serving_server.py (standard library only) as the model's script, on the
local executor and in a container of the base image (real Docker engine); and the bundled
``serve_tiny`` example, ``transformers serve`` on a tiny GPT-2 made at run time.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from pathlib import Path

import psutil
import pytest

from conftest import BASE_IMAGE, REPO, require_module, require_service, run_process
from test_slurm_run import slurm_cluster  # noqa: F401 (the session's Slurm cluster: a fixture)
from madengine.results import read_rows

require_module("aiohttp")
pytestmark = pytest.mark.slow

SERVER = Path(__file__).resolve().parent / "serving_server.py"
FAST = "--ttft-ms 20 --itl-ms 2"


def _entry(name: str, serving: dict, args: str = FAST, **more) -> dict:
    return {"name": name, "dockerfile": "docker/serve", "scripts": "scripts/serve/run.sh", "args": args,
            "n_gpus": "0", "timeout": 120, "tags": [name], "serving": serving, **more}


@pytest.fixture
def serve_repo(tmp_path, monkeypatch):
    """A model repository whose models' script is the tests' own server, at the port madengine gives."""
    repo = tmp_path / "repo"
    (repo / "scripts" / "serve").mkdir(parents=True)
    (repo / "docker").mkdir()
    (repo / "docker" / "serve.Dockerfile").write_text(f"ARG BASE_DOCKER={BASE_IMAGE}\nFROM ${{BASE_DOCKER}}\n")
    shutil.copy2(SERVER, repo / "scripts" / "serve" / "serving_server.py")
    (repo / "scripts" / "serve" / "run.sh").write_text(
        "#!/usr/bin/env bash\nset -e\ncd \"$(dirname \"$0\")\"\n"
        "[ -z \"$CRASH\" ] || { echo 'server: cannot load the model' >&2; exit 3; }\n"
        "exec python3 serving_server.py --port \"$MAD_SERVING_PORT\" \"$@\"\n")
    points = {"concurrency": [1, 4], "requests": 8, "input_len": 4, "output_len": 5}
    models = [
        _entry("srv_ok", points),
        _entry("srv_failing", {"concurrency": "2", "requests": 10, "output_len": 3}, args=f"{FAST} --fail-every 2"),
        _entry("srv_never_ready", {"concurrency": [1], "ready_timeout": 2},
               args=f"{FAST} --never-ready --seed {uuid.uuid4().int % 10**9}"),
        _entry("srv_crash", {"concurrency": [1]}),
        _entry("srv_rates", {"request_rate": [50, "inf"], "requests": 6, "output_len": 4, "server": "testsrv"}),
    ]
    (repo / "models.json").write_text(json.dumps(models))
    monkeypatch.chdir(repo)
    monkeypatch.delenv("MODEL_DIR", raising=False)
    return repo


@pytest.fixture(params=["local", "docker"])
def executor(request):
    if request.param == "docker":
        request.getfixturevalue("docker_client")
        request.getfixturevalue("docker_cleanup").append("ci-srv_")
    return request.param


def _rows(repo: Path) -> list[dict]:
    return read_rows(repo / "perf.csv")


def test_a_serving_model_records_one_row_per_load_point(serve_repo, cli, executor):
    result = cli("run", "--tags", "srv_ok,srv_rates", "--executor", executor, "--no-html")
    assert result.code == 0, result
    rows = {(r["model"], r["tag_configs"]): r for r in _rows(serve_repo)}
    assert set(rows) == {("srv_ok", "concurrency=1:input_len=4:output_len=5"),
                         ("srv_ok", "concurrency=4:input_len=4:output_len=5"),
                         ("srv_rates", "input_len=32:output_len=4:rate=50"),
                         ("srv_rates", "input_len=32:output_len=4:rate=inf")}
    for row in rows.values():
        assert row["status"] == "SUCCESS" and row["executor"] == executor, row
        assert row["metric"] == "output_throughput_tok_per_s" and float(row["performance"]) > 0
        assert row["completed"] == row["requests"] and row["errors"] == "0"
        assert float(row["ttft_p50_ms"]) >= 20  # the server never answers sooner (its later tokens may share a read)
        assert Path(row["requests_file"]).is_file() and row["figures"]
    assert rows[("srv_rates", "input_len=32:output_len=4:rate=inf")]["server"] == "testsrv"
    log = Path(rows[("srv_ok", "concurrency=1:input_len=4:output_len=5")]["artifacts"].split(",")[0]).read_text()
    assert "benchmark done; the server was stopped" in log and "exit code 0" in log
    trace = json.loads(next(serve_repo.glob("madengine_runs/*/trace.json")).read_text())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    assert len([e for e in events if e.get("name") == "serving.request"]) == 8 + 8 + 6 + 6


def test_repeats_restart_the_server_and_give_each_load_point_its_samples(serve_repo, cli):
    result = cli("run", "--tags", "srv_ok", "--executor", "local", "--repeat", "2", "--no-html")
    assert result.code == 0, result
    rows = _rows(serve_repo)
    assert len(rows) == 2 and all(r["perf_n"] == "2" and len(json.loads(r["perf_samples"])) == 2 for r in rows)
    log = Path(rows[0]["artifacts"].split(",")[0]).read_text()
    assert log.count("benchmark done; the server was stopped") == 2


def test_run_db_url_records_every_figure_as_it_lands(serve_repo, cli):
    import sqlite3

    database = serve_repo / "results.db"
    result = cli("run", "--tags", "srv_ok", "--executor", "local", "--db-url", f"sqlite:///{database}", "--no-html")
    assert result.code == 0, result
    with sqlite3.connect(database) as connection:
        metrics = dict(connection.execute("SELECT metric, COUNT(*) FROM dlm_table GROUP BY metric").fetchall())
    assert metrics["output_throughput_tok_per_s"] == 2 and metrics["ttft_p99_ms"] == 2 and len(metrics) == 14


def test_errors_make_failure_rows_with_their_reason(serve_repo, cli):
    result = cli("run", "--tags", "srv_failing", "--executor", "local", "--no-html")
    assert result.code == 1, result
    row = _rows(serve_repo)[0]
    assert row["status"] == "FAILURE" and row["errors"] == "5" and row["completed"] == "5"
    assert "error rate 50.0%" in row["reason"] and "HTTP 500 ×5" in row["reason"]


def test_a_server_that_never_becomes_ready_fails_at_its_timeout_and_ends(serve_repo, cli, executor):
    seed = json.loads((serve_repo / "models.json").read_text())[2]["args"].split()[-1]
    started = time.monotonic()
    result = cli("run", "--tags", "srv_never_ready", "--executor", executor, "--no-html")
    assert result.code == 1, result
    assert time.monotonic() - started < 90  # the readiness limit (2 s), not the model's timeout (120 s)
    row = _rows(serve_repo)[0]
    assert row["status"] == "FAILURE" and "not ready after 2 s" in row["reason"] and "HTTP 503" in row["reason"]
    left = [p for p in psutil.process_iter(["cmdline"]) if seed in " ".join(p.info["cmdline"] or [])]
    assert not left, left


def test_a_server_that_exits_is_the_models_failure(serve_repo, cli, monkeypatch):
    monkeypatch.setenv("CRASH", "1")
    result = cli("run", "--tags", "srv_crash", "--executor", "local", "--no-html")
    assert result.code == 1, result
    row = _rows(serve_repo)[0]
    assert row["status"] == "FAILURE" and "exited with code 3" in row["reason"]


@pytest.mark.parametrize("block,field", [
    ({"concurrency": []}, "serving.concurrency"), ({"concurrency": "1,,2"}, "serving.concurrency"),
    ({"concurrency": [1], "output_len": 0}, "serving.output_len"), ({"concurrency": [1], "colour": 1}, "serving.colour"),
    ({}, "serving.concurrency"), ({"request_rate": [0]}, "serving.request_rate"),
    ({"concurrency": [1], "dataset": "nope.json"}, "serving.dataset"), ("fast", "serving"),
    ({"concurrency": [1], "slo": {"ttft": 3}}, "serving.slo"), ({"concurrency": [1], "port": 70000}, "serving.port"),
])
def test_a_bad_serving_block_exits_2_naming_the_field(serve_repo, cli, block, field):
    (serve_repo / "models.json").write_text(json.dumps([_entry("srv_bad", block)]))
    result = cli("run", "--tags", "srv_bad", "--executor", "local")
    assert result.code == 2, result
    assert "models.json" in result.stderr and "srv_bad" in result.stderr and field in result.stderr
    assert "Traceback" not in result.stderr and not (serve_repo / "perf.csv").exists()


@pytest.mark.parametrize("executor", ["k8s", "slurm"])
def test_serving_blocks_are_checked_before_a_job_or_a_pod(serve_repo, cli, executor):
    """The Kubernetes executor cannot run a client beside its pods: refused; a Slurm job is not
    submitted with a bad block (its tasks would fail on their nodes)."""
    if executor == "slurm":
        (serve_repo / "models.json").write_text(json.dumps([_entry("srv_bad", {"concurrency": "0"})]))
    result = cli("run", "--tags", "srv_ok" if executor == "k8s" else "srv_bad", "--executor", executor)
    assert result.code == 2, result
    said = "--executor" if executor == "k8s" else "serving.concurrency"
    assert said in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_serve_tiny_serves_transformers_on_the_local_executor(tmp_path):
    """The bundled example with the local executor: `transformers serve` (the serving-example extra)
    on a tiny GPT-2 made at run time, rows at concurrency 1 and 4. The docker run of the same model is
    test_serve_tiny_in_the_pyt_image."""
    import importlib.util

    require_service("transformers' serving extra", importlib.util.find_spec("fastapi") is not None,
                    "pip install 'madengine[serving-example]'")
    perf = tmp_path / "perf.csv"
    done = run_process("run", "--tags", "serve_tiny", "--executor", "local", "--perf-csv", str(perf),
                       "--runs-dir", str(tmp_path / "runs"), "--no-html", cwd=tmp_path, env={"MODEL_DIR": str(REPO)},
                       timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    _check_serve_tiny(read_rows(perf), "local")


@pytest.mark.docker
def test_serve_tiny_in_the_pyt_image(tmp_path, docker_client, pyt_wheels):
    """``madengine run --tags serve_tiny`` as a user runs it: the pyt image (torch and transformers'
    serving extra from wheels/pyt, nothing downloaded at run time), rows at concurrency 1 and 4."""
    perf = tmp_path / "perf.csv"
    done = run_process("run", "--tags", "serve_tiny", "--perf-csv", str(perf), "--runs-dir", str(tmp_path / "runs"),
                       "--no-html", cwd=tmp_path, env={"MODEL_DIR": str(REPO)}, timeout=2400)
    assert done.returncode == 0, done.stderr[-4000:]
    _check_serve_tiny(read_rows(perf), "docker")


def _check_serve_tiny(rows: list[dict], executor: str) -> None:
    assert [r["tag_configs"] for r in rows] == ["concurrency=1:input_len=16:output_len=16",
                                                "concurrency=4:input_len=16:output_len=16"]
    for row in rows:
        assert row["status"] == "SUCCESS" and row["model"] == "serve_tiny" and row["executor"] == executor, row
        assert row["server"] == "transformers" and row["served_model"] == "tiny-gpt2" and row["token_counts"] == "usage"
        assert row["completed"] == "8" and float(row["ttft_p50_ms"]) > 0 and float(row["performance"]) > 0


@pytest.mark.slurm
def test_a_serving_model_on_slurm_records_its_load_points(serve_repo, cli, request):
    """A Slurm task runs the same pipeline on its node (local executor there): the rows come back
    merged, one per load point."""
    from test_slurm_run import CONTEXT

    request.getfixturevalue("slurm_cluster")
    result = cli("run", "--tags", "srv_ok", "--executor", "slurm", "-c", CONTEXT, "--no-html")
    assert result.code == 0, result
    rows = _rows(serve_repo)
    assert [r["tag_configs"] for r in rows] == ["concurrency=1:input_len=4:output_len=5",
                                                "concurrency=4:input_len=4:output_len=5"]
    assert all(r["status"] == "SUCCESS" and r["executor"] == "slurm" and r["completed"] == "8" for r in rows)
