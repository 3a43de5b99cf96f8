"""Tools end to end through ``madengine run``: with the local executor and in containers.

Test models and tools live in tests/fixtures/repo/scripts/tooltests (tools.json there defines
tooltest_a/b, whose scripts and wrappers append markers to markers.txt). No GPU, ROCm or
Nsight tool exists on this machine: the GPU and profiler tests put small stand-in programs
(replaying recorded nvidia-smi output, or faking nsys/rocprofv3's command line) on PATH; the
CPU monitor and every wrapper/script path run for real.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest

from madengine.results import read_rows
from madengine.tools.summaries import script_module

TEST_TOOLS = "scripts/tooltests/tools.json"
STACK_CONTEXT = ("{'tools': [{'name': 'tooltest_a'}, {'name': 'tooltest_b', 'env_vars': {'TOOLTEST_B': 'ctx_beta'}}],"
                 " 'pre_scripts': [{'path': 'scripts/tooltests/marker.sh', 'args': 'ctx_pre'}],"
                 " 'post_scripts': [{'path': 'scripts/tooltests/marker.sh', 'args': 'ctx_post'}]}")
STACK_MARKERS = ["pre_B", "pre_A", "ctx_pre", "cmd_B", "cmd_A", "model A=alpha B=ctx_beta SHARED=from_b",
                 "ctx_post", "post_A", "post_B"]
FAKE_NVIDIA_SMI = """
echo "index, power.draw [W], memory.used [MiB], memory.total [MiB], utilization.gpu [%]"
echo "0, 300.50, 1024, 81559, 97"
echo "1, 100.25, 2048, 81559, 3"
"""
FAKE_PROFILER = """
# Stand-in for nsys / rocprofv3: takes the options they are given, runs the app, writes a report.
name=$(basename "$0")
[ "$1" = profile ] && shift
out=report; dir=.
while [ $# -gt 0 ]; do
  case "$1" in
    --) shift; break ;;
    -o) out="$2"; shift 2 ;;
    -d) dir="$2"; shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
"$@"
status=$?
mkdir -p "$dir"
if [ "$name" = nsys ]; then echo report > "$out.nsys-rep"; else echo "Kernel_Name,Calls" > "$dir/$$_kernel_stats.csv"; fi
exit $status
"""


def fake_tool(bin_dir: Path, name: str, script: str) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / name).write_text("#!/usr/bin/env bash\n" + script)
    (bin_dir / name).chmod(0o755)


def run(cli, tags: list[str], context: str, executor: str = "local", tools_json: str | None = None):
    argv = ["run", "--tags", *tags, "--executor", executor, "--additional-context", context]
    if tools_json:
        argv += ["--tools-json-file-name", tools_json]
    result = cli(*argv)
    rows = {row["model"]: row for row in read_rows(Path("perf.csv"))} if Path("perf.csv").exists() else {}
    return result, rows


def artifacts(row: dict) -> dict[str, Path]:
    return {Path(p).name: Path(p) for p in re.split(r"[;,]", row["artifacts"]) if p}


def markers(row: dict) -> list[str]:
    return artifacts(row)["markers.txt"].read_text().splitlines()


def assert_cpu_columns(row: dict, *, busy: bool) -> None:
    samples = read_rows(artifacts(row)["cpu_monitor.csv"]) if busy else []
    assert float(row["rss_peak_mb"]) > 0 and float(row["cpu_util_mean"]) >= 0
    if busy:  # busy.py spins in itself and one child for 1.5 s while holding 64 MiB
        assert len(samples) >= 3 and max(int(s["processes"]) for s in samples) >= 2
        # utilisation depends on what else the (shared, 2-core) machine runs: only "it was measured"
        assert float(row["cpu_util_mean"]) > 5 and float(row["cpu_util_peak"]) >= float(row["cpu_util_mean"])
        assert max(float(s["cpu_percent"]) for s in samples) > 5 and float(row["rss_peak_mb"]) >= 64
    if script_module("cpu_monitor").read_cpu_freq_mhz() is not None:
        assert float(row["cpu_freq_mean_mhz"]) > 0
    assert "cpu_monitor_summary.json" in artifacts(row)


def sampler_processes(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if "gpu_sampler.py" in cmdline and marker in cmdline and state != "Z":
                found.append(int(entry.name))
    return found


# -- local executor -------------------------------------------------------------------------
def test_local_stacked_tools_from_the_repository_tools_json(model_repo, cli):
    shutil.copy(model_repo / TEST_TOOLS, model_repo / "tools.json")  # the default place
    result, rows = run(cli, ["tooltests"], STACK_CONTEXT)
    assert result.code == 0, result
    row = rows["tooltests/marker"]
    assert row["status"] == "SUCCESS" and row["performance"] == "10"
    assert markers(row) == STACK_MARKERS
    assert row["tools"] == "tooltest_a,tooltest_b"


def test_local_cpu_monitor(model_repo, cli):
    context = "{'tools': [{'name': 'cpu_monitor', 'env_vars': {'CPU_MONITOR_SAMPLING_RATE': '0.2'}}]}"
    result, rows = run(cli, ["tooltests_busy"], context)
    assert result.code == 0, result
    row = rows["tooltests/busy"]
    assert row["status"] == "SUCCESS" and row["performance"] == "1.5"
    assert_cpu_columns(row, busy=True)


def test_local_failing_pre_script_fails_the_row_and_stops_started_samplers(model_repo, cli, monkeypatch):
    fake_tool(model_repo / "bin", "nvidia-smi", FAKE_NVIDIA_SMI)
    monkeypatch.setenv("PATH", f"{model_repo / 'bin'}:{os.environ['PATH']}")
    # tools [failpre, power]: the power sampler's pre-script runs first, then failpre fails
    context = "{'tools': [{'name': 'tooltest_failpre'}, {'name': 'gpu_info_power_profiler'}]}"
    result, rows = run(cli, ["tooltests"], context, tools_json=TEST_TOOLS)
    assert result.code == 1
    row = rows["tooltests/marker"]
    assert row["status"] == "FAILURE"
    assert row["reason"] == "pre-script tooltest_failpre: fail.sh failed with exit code 5"
    log = artifacts(row)["run.log"].read_text()
    assert "gpu_profiler_start: sampling GPU power" in log and "=== madengine step: model" not in log
    deadline = time.monotonic() + 30  # stopped at once; a loaded machine may take a moment to reap it
    while sampler_processes(str(model_repo)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sampler_processes(str(model_repo)) == []


def test_local_failing_post_script(model_repo, cli):
    result, rows = run(cli, ["tooltests"], "{'tools': ['tooltest_failpost']}", tools_json=TEST_TOOLS)
    row = rows["tooltests/marker"]
    assert result.code == 1 and row["status"] == "FAILURE"
    assert row["reason"] == "post-script tooltest_failpost: fail.sh failed with exit code 6"


def test_local_wrappers_keep_the_model_exit_code(model_repo, cli):
    context = "{'tools': ['cpu_monitor', 'rocblas_trace', 'tooltest_a']}"
    result, rows = run(cli, ["tooltests_exit"], context, tools_json=TEST_TOOLS)
    row = rows["tooltests/exit7"]
    assert result.code == 1 and row["status"] == "FAILURE"
    assert row["reason"] == "model script exited with code 7"
    assert {"cpu_monitor.csv", "library_trace.csv", "markers.txt"} <= set(artifacts(row))
    assert_cpu_columns(row, busy=False)


def test_local_gpu_profilers_with_a_stand_in_nvidia_smi(model_repo, cli, monkeypatch):
    fake_tool(model_repo / "bin", "nvidia-smi", FAKE_NVIDIA_SMI)  # no GPU here: replays a recording
    monkeypatch.setenv("PATH", f"{model_repo / 'bin'}:{os.environ['PATH']}")
    context = "{'tools': ['gpu_info_power_profiler', 'gpu_info_vram_profiler']}"
    result, rows = run(cli, ["tooltests_busy"], context)
    assert result.code == 0, result
    row = rows["tooltests/busy"]
    assert float(row["power_mean_w"]) == 400.75 and float(row["power_peak_w"]) == 400.75
    assert float(row["vram_peak_mb"]) == 3072.0
    assert float(row["gpu_util_mean"]) == 50.0 and float(row["gpu_util_peak"]) == 50.0
    files = artifacts(row)
    samples = read_rows(files["gpu_info_power_profiler_output.csv"])
    assert len(samples) >= 4 and {s["device"] for s in samples} == {"0", "1"}
    assert {s["backend"] for s in samples} == {"nvidia-smi"}
    assert "gpu_info_vram_profiler_output.csv" in files


def test_local_library_traces(model_repo, cli):
    logs = model_repo / "scripts" / "tooltests" / "trace_logs"
    logs.mkdir()
    for log in (Path(__file__).resolve().parent / "fixtures" / "tools_outputs").glob("*.log"):
        shutil.copy(log, logs / log.name)
    context = ("{'tools': ['rocblas_trace', 'hipblaslt_trace', 'miopen_trace', 'tensile_trace', 'rccl_trace']}")
    result, rows = run(cli, ["tooltests_trace"], context)
    assert result.code == 0, result
    row = rows["tooltests/trace_log"]
    assert row["status"] == "SUCCESS" and row["performance"] == "3"
    files = artifacts(row)
    calls = read_rows(files["library_trace.csv"])
    assert {c["library"] for c in calls} == {"rocblas", "rocblas_function", "hipblaslt", "miopen", "tensile", "rccl"}
    assert int(row["library_trace_calls"]) == sum(int(c["calls"]) for c in calls) == 25
    assert int(row["library_trace_configs"]) == len(calls) == 15
    log = files["run.log"].read_text()
    assert "MIOpenDriver" not in log and "epoch 0 iter 10" in log


def test_local_profilers_with_stand_in_nsys_and_rocprofv3(model_repo, cli, monkeypatch):
    for name in ("nsys", "rocprofv3"):
        fake_tool(model_repo / "bin", name, FAKE_PROFILER)
    monkeypatch.setenv("PATH", f"{model_repo / 'bin'}:{os.environ['PATH']}")
    result, rows = run(cli, ["tooltests"], "{'tools': ['nsys', 'rocprof']}")
    assert result.code == 0, result
    row = rows["tooltests/marker"]
    files = artifacts(row)
    assert "nsys_report.nsys-rep" in files
    assert any(name.endswith("_kernel_stats.csv") for name in files)
    log = files["run.log"].read_text()
    assert "rocprofv3 -d rocprof_output --hip-trace --" in log or "profile_wrapper.sh rocprof" in log


def test_unknown_tool_is_refused(model_repo, cli):
    result, rows = run(cli, ["tooltests"], "{'tools': [{'name': 'cpu_monitr'}]}")
    assert result.code in (1, 2)
    text = result.stderr + "".join(row.get("reason", "") for row in rows.values())
    assert "unknown tool 'cpu_monitr'" in text and "cpu_monitor" in text


# -- docker executor ------------------------------------------------------------------------
@pytest.mark.docker
def test_docker_stacked_tools_and_cpu_monitor(model_repo, cli, docker_cleanup):
    docker_cleanup.append("ci-tooltests_")
    context = STACK_CONTEXT.replace(
        "'tools': [", "'tools': [{'name': 'cpu_monitor', 'env_vars': {'CPU_MONITOR_SAMPLING_RATE': '0.2'}}, ")
    result, rows = run(cli, ["tooltests", "tooltests_busy"], context, executor="docker", tools_json=TEST_TOOLS)
    assert result.code == 0, result
    marker, busy = rows["tooltests/marker"], rows["tooltests/busy"]
    assert marker["docker_image"] == "ci-tooltests_marker_dummy" and marker["status"] == "SUCCESS"
    assert markers(marker) == STACK_MARKERS
    assert marker["tools"] == "cpu_monitor,tooltest_a,tooltest_b"
    assert_cpu_columns(marker, busy=False)
    assert busy["status"] == "SUCCESS"
    assert_cpu_columns(busy, busy=True)


@pytest.mark.docker
def test_docker_failing_pre_script(model_repo, cli, docker_cleanup):
    docker_cleanup.append("ci-tooltests_")
    result, rows = run(cli, ["tooltests"], "{'tools': ['tooltest_a', 'tooltest_failpre']}", executor="docker",
                       tools_json=TEST_TOOLS)
    row = rows["tooltests/marker"]
    assert result.code == 1 and row["status"] == "FAILURE"
    assert row["reason"] == "pre-script tooltest_failpre: fail.sh failed with exit code 5"
    assert "markers.txt" not in artifacts(row)  # failpre (listed last) runs first: nothing after it ran


@pytest.mark.docker
def test_docker_wrappers_keep_the_model_exit_code(model_repo, cli, docker_cleanup):
    docker_cleanup.append("ci-tooltests_")
    result, rows = run(cli, ["tooltests_exit"], "{'tools': ['cpu_monitor', 'rocblas_trace', 'tooltest_a']}",
                       executor="docker", tools_json=TEST_TOOLS)
    row = rows["tooltests/exit7"]
    assert result.code == 1 and row["reason"] == "model script exited with code 7"
    assert markers(row) == ["pre_A", "cmd_A", "post_A"]
    assert_cpu_columns(row, busy=False)
