"""The bundled tool scripts: parsers on recorded outputs, samplers, and exit-status propagation.

The GPU tools' outputs (nvidia-smi, amd-smi, rocm-smi) and the ROCm libraries' trace logs are
recorded examples in tests/fixtures/tools_outputs (no GPU on this machine); the GPU command line
tools are stood in for by small scripts on PATH that print those recordings.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from madengine.tools.summaries import script_module

OUTPUTS = Path(__file__).resolve().parent / "fixtures" / "tools_outputs"
SCRIPTS = Path(__file__).resolve().parents[1] / "src" / "madengine" / "scripts" / "tools"

gpu = script_module("gpu_sampler")
cpu = script_module("cpu_monitor")
trace = script_module("library_trace")


def recorded(name: str) -> str:
    return (OUTPUTS / name).read_text()


def fake_tool(bin_dir: Path, name: str, script: str) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / name
    path.write_text("#!/usr/bin/env bash\n" + script)
    path.chmod(0o755)


# -- GPU readings ---------------------------------------------------------------------------
def test_nvidia_smi_csv_nounits():
    readings = gpu.parse_nvidia_smi_csv(recorded("nvidia_smi_h100_nounits.csv"))
    assert len(readings) == 8
    assert readings[0] == {"device": 0, "power_w": 698.41, "vram_used_mb": 70913.0, "vram_total_mb": 81559.0,
                           "gpu_util_pct": None}
    assert readings[7]["power_w"] == 112.47


def test_nvidia_smi_csv_with_units_and_not_available():
    first, second = gpu.parse_nvidia_smi_csv(recorded("nvidia_smi_h100_units.csv"))
    assert first["power_w"] == 698.41 and first["vram_used_mb"] == 70913.0
    assert second["power_w"] is None and second["vram_used_mb"] == 4.0


def test_nvidia_smi_csv_without_header():
    (reading,) = gpu.parse_nvidia_smi_csv(recorded("nvidia_smi_noheader.csv"))
    assert reading == {"device": 0, "power_w": 74.21, "vram_used_mb": 0.0, "vram_total_mb": 143771.0,
                       "gpu_util_pct": None}


def test_amd_smi_csv_current_names():
    readings = gpu.parse_amd_smi_csv(recorded("amd_smi_metric_mi300x.csv"))
    assert [r["device"] for r in readings] == [0, 1, 2, 3]
    assert readings[0] == {"device": 0, "power_w": 712.0, "vram_used_mb": 151231.0, "vram_total_mb": 196592.0,
                           "gpu_util_pct": None}


def test_amd_smi_csv_rocm61_names_and_secondary_die():
    primary, secondary = gpu.parse_amd_smi_csv(recorded("amd_smi_metric_mi250x_rocm61.csv"))
    assert primary["power_w"] == 302.0 and primary["vram_used_mb"] == 40122.0
    assert secondary["power_w"] is None and secondary["vram_used_mb"] == 39870.0


def test_rocm_smi_json():
    mi250x = gpu.parse_rocm_smi_json(recorded("rocm_smi_mi250x.json"))
    assert [r["power_w"] for r in mi250x] == [302.0, None, None]
    assert round(mi250x[0]["vram_used_mb"]) == 40122 and round(mi250x[0]["vram_total_mb"]) == 65520
    mi300x = gpu.parse_rocm_smi_json("WARNING: something first\n" + recorded("rocm_smi_mi300x.json"))
    assert mi300x[0]["power_w"] == 712.0 and round(mi300x[1]["vram_used_mb"]) == 283


@pytest.mark.parametrize("parser, text", [(gpu.parse_amd_smi_csv, "no gpus\n"),
                                          (gpu.parse_rocm_smi_json, "ERROR: no devices"),
                                          (gpu.parse_rocm_smi_json, "{broken"),
                                          (gpu.parse_nvidia_smi_csv, "\n")])
def test_unusable_gpu_tool_output(parser, text):
    with pytest.raises(gpu.BackendError):
        parser(text)


def test_gpu_summary_sums_devices_per_sample():
    rows = [{"sample": "0", "power_w": "300", "vram_used_mb": "1000"},
            {"sample": "0", "power_w": "100", "vram_used_mb": "500"},
            {"sample": "1", "power_w": "500", "vram_used_mb": "2000"},
            {"sample": "1", "power_w": "", "vram_used_mb": "1000"}]
    assert gpu.summarise(rows) == {"power_mean_w": 450.0, "power_peak_w": 500.0, "vram_peak_mb": 3000.0,
                                   "gpu_util_mean": "", "gpu_util_peak": "", "gpu_samples": 2}
    assert gpu.summarise([])["power_mean_w"] == ""


def test_utilisation_of_each_backend():
    nvidia = gpu.parse_nvidia_smi_csv(recorded("nvidia_smi_h100_util.csv"))
    assert [r["gpu_util_pct"] for r in nvidia] == [98.0, 0.0] and nvidia[0]["vram_used_mb"] == 70913.0
    amd = gpu.parse_amd_smi_csv(recorded("amd_smi_metric_usage_mi300x.csv"))
    assert [(r["gpu_util_pct"], r["power_w"], r["vram_used_mb"]) for r in amd] == [(97.0, 712.0, 151231.0),
                                                                                  (3.0, 140.0, 283.0)]
    rocm = gpu.parse_rocm_smi_json(recorded("rocm_smi_use_mi300x.json"))
    assert [r["gpu_util_pct"] for r in rocm] == [97.0, 0.0]


def test_utilisation_summary_is_the_devices_mean_per_sample():
    rows = [{"sample": "0", "gpu_util_pct": "100"}, {"sample": "0", "gpu_util_pct": "0"},
            {"sample": "1", "gpu_util_pct": "90"}, {"sample": "1", "gpu_util_pct": ""}]
    summary = gpu.summarise(rows)
    assert (summary["gpu_util_mean"], summary["gpu_util_peak"]) == (70.0, 90.0)


def test_backend_choice_and_sampling_loop(tmp_path):
    bin_dir = tmp_path / "bin"
    fake_tool(bin_dir, "amd-smi", "exit 1\n")  # installed but broken: the next backend is tried
    fake_tool(bin_dir, "rocm-smi", f"cat {OUTPUTS / 'rocm_smi_mi300x.json'}\n")
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}
    check = subprocess.run([sys.executable, str(SCRIPTS / "gpu_sampler.py"), "--check"], env=env,
                           capture_output=True, text=True, timeout=30)
    assert check.returncode == 0 and check.stdout.strip() == "rocm-smi"
    out, stop = tmp_path / "gpu.csv", tmp_path / "gpu.stop"
    sampler = subprocess.Popen([sys.executable, str(SCRIPTS / "gpu_sampler.py"), "--output", str(out),
                                "--interval", "0.05", "--devices", "1", "--stop-file", str(stop)], env=env)
    deadline = time.monotonic() + 20
    while len(gpu.read_rows(str(out))) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.touch()
    assert sampler.wait(timeout=10) == 0
    rows = gpu.read_rows(str(out))
    assert len(rows) >= 3 and {row["device"] for row in rows} == {"1"}
    assert rows[0]["power_w"] == "139.0" and rows[0]["backend"] == "rocm-smi"


def test_no_backend_fails_the_check(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path)}
    result = subprocess.run([sys.executable, str(SCRIPTS / "gpu_sampler.py"), "--check"], env=env,
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 3 and "no GPU monitoring backend works here" in result.stderr


# -- CPU monitor ----------------------------------------------------------------------------
def test_proc_stat_with_awkward_command_name():
    fields = " ".join(str(n) for n in range(4, 53))  # each field holds its own number (man 5 proc)
    ppid, ticks, rss = cpu.parse_stat(f"4242 (python3 (a) b) S {fields}")
    assert ppid == 4 and ticks == 14 + 15 + 16 + 17 and rss == 24


def test_proc_readers():
    assert cpu.parse_proc_stat_cpu("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3\n") == (150, 1000)
    assert cpu.parse_meminfo_used_mb("MemTotal: 2048000 kB\nMemFree: 100 kB\nMemAvailable: 1024000 kB\n") == 1000.0
    assert cpu.parse_cpuinfo_mhz("cpu MHz\t\t: 2000.000\ncpu MHz\t\t: 3000.000\n") == 2500.0
    assert cpu.parse_cpuinfo_mhz("processor: 0\n") is None


def test_process_tree():
    table = {1: (0, 0, 0), 10: (1, 5, 1), 11: (10, 5, 1), 12: (11, 5, 1), 20: (1, 5, 1)}
    assert cpu.process_tree(10, table) == {10, 11, 12}


def test_cpu_summary():
    rows = [{"cpu_percent": "50", "rss_mb": "100", "cpu_freq_mhz": "2000"},
            {"cpu_percent": "150", "rss_mb": "300", "cpu_freq_mhz": "3000"}]
    summary = cpu.summarise(rows, cpu_seconds=2.0, wall_seconds=2.0, maxrss_mb=400.0)
    assert summary["cpu_util_mean"] == 100.0 and summary["cpu_util_peak"] == 150.0
    assert summary["rss_peak_mb"] == 400.0 and summary["cpu_freq_mean_mhz"] == 2500.0
    assert cpu.summarise(rows)["cpu_util_mean"] == 100.0  # no wait4 figures: the samples' mean
    assert cpu.summarise([])["cpu_util_mean"] == ""


def run_wrapper(script: str, argv: list[str], cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPTS / script), *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=60, env={**os.environ, **(env or {})})


def test_cpu_monitor_keeps_exit_status_and_samples(tmp_path):
    child = "import time\nx = bytearray(40 << 20)\nend = time.time() + 0.8\nwhile time.time() < end: pass\n" \
            "print('performance: 1 x')\nraise SystemExit(7)\n"
    result = run_wrapper("cpu_monitor.py", ["--interval", "0.1", "--", sys.executable, "-c", child], tmp_path)
    assert result.returncode == 7 and "performance: 1 x" in result.stdout
    rows = cpu.read_rows(str(tmp_path / "cpu_monitor.csv"))
    assert len(rows) >= 3 and all(row["processes"] == "1" for row in rows)
    summary = (tmp_path / "cpu_monitor_summary.json").read_text()
    assert '"exit_code": 7' in summary and '"rss_peak_mb"' in summary


def test_cpu_monitor_reports_a_signal_like_a_shell(tmp_path):
    result = run_wrapper("cpu_monitor.py", ["--", "bash", "-c", "kill -TERM $$"], tmp_path)
    assert result.returncode == 128 + signal.SIGTERM


def children_of(pid: int) -> list[int]:
    return [child for child, (ppid, _, _) in cpu.read_processes().items() if ppid == pid]


def test_cpu_monitor_forwards_sigterm(tmp_path):
    proc = subprocess.Popen([sys.executable, str(SCRIPTS / "cpu_monitor.py"), "--", "sleep", "30"], cwd=tmp_path)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not children_of(proc.pid):  # then its signal handlers are set
        time.sleep(0.05)
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 128 + signal.SIGTERM


def test_cpu_monitor_command_not_found(tmp_path):
    assert run_wrapper("cpu_monitor.py", ["--", "no-such-command-here"], tmp_path).returncode == 127


# -- library traces -------------------------------------------------------------------------
def test_rocblas_bench_and_profile_lines():
    counter = trace.count_file(OUTPUTS / "rocblas_layer2.log")
    calls = {(library, config.split(" --transposeA")[0]): n for (library, config), n in counter.calls.items()}
    assert calls[("rocblas", "rocblas-bench -f gemm_ex")] == 3
    assert calls[("rocblas", "rocblas-bench -f gemm -r f32_r")] == 1
    assert calls[("rocblas", "rocblas-bench -f gemm_strided_batched_ex")] == 1
    profile = {config: n for (library, config), n in counter.calls.items() if library == "rocblas_function"}
    assert len(profile) == 2 and sorted(profile.values()) == [1, 3]
    assert all("call_count" not in config and config.startswith("rocblas_function:") for config in profile)


def test_hipblaslt_lines_normalised_and_counted():
    counter = trace.count_file(OUTPUTS / "hipblaslt_mask32.log")
    assert sorted(counter.calls.values()) == [1, 2]
    config = next(config for (_, config), n in counter.calls.items() if n == 2)
    assert config.startswith("hipblaslt-bench --api_method c -m 4096 -n 512 -k 4096") and "  " not in config


def test_miopen_repeated_calls_are_accumulated():
    counter = trace.count_file(OUTPUTS / "miopen_logging_cmd.log")
    calls = {config.split(" -n ")[0] + (" 7x7" if "-y 7" in config else ""): n
             for (_, config), n in counter.calls.items()}
    assert calls == {"MIOpenDriver conv 7x7": 3, "MIOpenDriver bnorm": 1, "MIOpenDriver convfp16": 1}


def test_tensile_kernels_counted():
    counter = trace.count_file(OUTPUTS / "tensile_db_0x8000.log")
    assert sorted(counter.calls.values()) == [1, 2] and all(lib == "tensile" for lib, _ in counter.calls)


def test_rccl_collectives_counted_per_configuration():
    counter = trace.count_file(OUTPUTS / "rccl_nccl_debug_info.log")
    assert counter.calls == {
        ("rccl", "AllReduce count 268435456 datatype 6 op 0 root 0 nranks 2"): 3,
        ("rccl", "Broadcast count 1024 datatype 7 op 0 root 0 nranks 2"): 1,
        ("rccl", "AllGather count 4194304 datatype 9 op 0 root 0 nranks 2"): 1,
    }


def test_ordinary_lines_are_not_calls():
    for line in ("performance: 12 samples_per_second", "rocblas initialised", "NCCL INFO Init COMPLETE",
                 "MIOpen(HIP): Warning [IsEnoughWorkspace] ..."):
        assert trace.parse_line(line) is None


def test_library_trace_wrapper(tmp_path):
    log = OUTPUTS / "miopen_logging_cmd.log"
    result = run_wrapper("library_trace.py", ["--", "bash", "-c", f"cat {log} >&2; echo performance: 2 x; exit 4"],
                         tmp_path, {"MAD_MODEL_NAME": "m1", "JENKINS_BUILD_NUMBER": "77"})
    assert result.returncode == 4
    assert "performance: 2 x" in result.stdout and "epoch 0 iter 10" in result.stdout
    assert "MIOpenDriver" not in result.stdout  # counted, not echoed
    rows = trace.read_rows(str(tmp_path / "library_trace.csv"))
    assert {row["library"] for row in rows} == {"miopen"} and rows[0]["model"] == "m1" and rows[0]["jobid"] == "77"
    assert trace.summarise(rows) == {"library_trace_calls": 5, "library_trace_configs": 3}
    echoed = run_wrapper("library_trace.py", ["--", "cat", str(log)], tmp_path, {"LIBRARY_TRACE_ECHO": "1"})
    assert echoed.returncode == 0 and echoed.stdout.count("MIOpenDriver") == 5


# -- profiler wrapper -----------------------------------------------------------------------
FAKE_NSYS = """
# Fake nsys: 'nsys profile [options] app...' writes <-o>.nsys-rep, runs app, exits FAKE_STATUS
[ "$1" = profile ] && shift
out=report
while [ $# -gt 0 ]; do
  case "$1" in
    -o) out="$2"; shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
"$@"
echo "fake report" > "$out.nsys-rep"
exit "${FAKE_STATUS:-0}"
"""


@pytest.mark.parametrize("app_status, profiler_status, expected", [(0, 0, 0), (3, 0, 3), (0, 9, 9), (3, 9, 3)])
def test_profile_wrapper_never_hides_a_failure(tmp_path, app_status, profiler_status, expected):
    fake_tool(tmp_path / "bin", "nsys", FAKE_NSYS)
    result = subprocess.run(["bash", str(SCRIPTS / "profile_wrapper.sh"), "nsys", "--trace=cuda", "--", "bash", "-c",
                             f"echo performance: 1 x; exit {app_status}"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=60,
                            env={**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}",
                                 "FAKE_STATUS": str(profiler_status)})
    assert result.returncode == expected, result.stderr
    assert "performance: 1 x" in result.stdout and (tmp_path / "nsys_report.nsys-rep").is_file()


def test_profile_wrapper_missing_profiler(tmp_path):
    result = subprocess.run(["bash", str(SCRIPTS / "profile_wrapper.sh"), "ncu", "--", "true"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60, env={**os.environ, "PATH": "/usr/bin:/bin"})
    assert result.returncode == 127 and "ncu is not installed" in result.stderr


def test_shell_scripts_parse():
    for script in SCRIPTS.glob("*.sh"):
        assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0, script
