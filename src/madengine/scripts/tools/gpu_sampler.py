#!/usr/bin/env python3
"""madengine GPU power/VRAM/utilisation sampler: polls the GPUs in the background and writes a CSV.

Usage:
  python3 gpu_sampler.py --check [--backend B]          print the backend that works, or exit 3
  python3 gpu_sampler.py --output FILE [--interval S] [--devices all|0,2] [--backend B]
                         [--stop-file F] [--max-seconds N]

Backends (``auto`` tries them in this order): ``amd-smi`` (``amd-smi metric --power --mem-usage
--usage --csv``), ``rocm-smi`` (``rocm-smi --showpower --showmeminfo vram --showuse --json``), ``nvml``
(the ``pynvml`` module of ``nvidia-ml-py``, when installed) and ``nvidia-smi``
(``--query-gpu=index,power.draw,memory.used,memory.total,utilization.gpu --format=csv,nounits``).

Standard library only: it runs inside model containers. One CSV row per device per sample:
``sample, timestamp, elapsed_s, device, power_w, vram_used_mb, vram_total_mb, backend, gpu_util_pct``
(MiB; utilisation in percent of the graphics engine's time busy; an empty cell where the device does
not report the value, e.g. the secondary die of an MI250X).
It stops when the stop file appears (the post-script creates it), on SIGTERM/SIGINT, when the
stop file's folder disappears (the run's work folder was removed) or after ``--max-seconds``.
"""

import argparse
import csv
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

CSV_FIELDS = ("sample", "timestamp", "elapsed_s", "device", "power_w", "vram_used_mb", "vram_total_mb", "backend",
              "gpu_util_pct")
BACKENDS = ("amd-smi", "rocm-smi", "nvml", "nvidia-smi")
MIB = 1024.0 * 1024.0
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_AMD_POWER_KEYS = ("socket_power", "current_socket_power", "average_socket_power")
_AMD_UTIL_KEYS = ("gfx_activity", "gfx_usage")
_ROCM_SMI_POWER_KEYS = ("Current Socket Graphics Package Power (W)", "Average Graphics Package Power (W)")
_ROCM_SMI_UTIL_KEY = "GPU use (%)"
_NVIDIA_SMI_QUERY = "index,power.draw,memory.used,memory.total,utilization.gpu"


class BackendError(Exception):
    """A backend cannot be used here (tool missing, driver not loaded, unparsable output)."""


def parse_number(text):
    """The number in a reading such as ``'139'``, ``'68.54 W'`` or ``'81559 MiB'``; None for N/A."""
    if text is None:
        return None
    if isinstance(text, (int, float)):
        return float(text)
    if isinstance(text, dict):  # amd-smi JSON style {"value": 139, "unit": "W"}
        return parse_number(text.get("value"))
    match = _NUMBER.search(str(text))
    if not match or "n/a" in str(text).lower() or "not supported" in str(text).lower():
        return None
    return float(match.group(0))


def _reading(device, power, used, total, util=None):
    return {"device": device, "power_w": power, "vram_used_mb": used, "vram_total_mb": total, "gpu_util_pct": util}


def parse_amd_smi_csv(text):
    """Readings from ``amd-smi metric --power --mem-usage [--usage] --csv`` (ROCm 6.0 through 7.x names)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip().lower().startswith("gpu,")), None)
    if start is None:
        raise BackendError("amd-smi printed no CSV header starting with 'gpu'")
    readings = []
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        row = {(k or "").strip().lower(): (v or "").strip() for k, v in row.items()}
        if not row.get("gpu", "").isdigit():
            continue
        power = next((parse_number(row[k]) for k in _AMD_POWER_KEYS if k in row), None)
        util = next((parse_number(row[k]) for k in _AMD_UTIL_KEYS if k in row), None)
        readings.append(_reading(int(row["gpu"]), power, parse_number(row.get("used_vram")),
                                 parse_number(row.get("total_vram")), util))
    return readings


def parse_rocm_smi_json(text):
    """Readings from ``rocm-smi --showpower --showmeminfo vram [--showuse] --json`` (values are strings, VRAM
    in bytes)."""
    brace = text.find("{")
    if brace < 0:
        raise BackendError("rocm-smi printed no JSON")
    try:
        data = json.loads(text[brace:])
    except ValueError as exc:
        raise BackendError("rocm-smi printed malformed JSON (%s)" % exc)
    readings = []
    for card, values in sorted(data.items(), key=lambda item: _card_index(item[0])):
        if not card.lower().startswith("card") or not isinstance(values, dict):
            continue
        power = next((parse_number(values[k]) for k in _ROCM_SMI_POWER_KEYS if k in values), None)
        used = parse_number(values.get("VRAM Total Used Memory (B)"))
        total = parse_number(values.get("VRAM Total Memory (B)"))
        readings.append(_reading(_card_index(card), power, None if used is None else used / MIB,
                                 None if total is None else total / MIB, parse_number(values.get(_ROCM_SMI_UTIL_KEY))))
    return readings


def _card_index(name):
    digits = re.sub(r"\D", "", name)
    return int(digits) if digits else -1


def parse_nvidia_smi_csv(text):
    """Readings from ``nvidia-smi --query-gpu=index,power.draw,memory.used,memory.total[,utilization.gpu]
    --format=csv`` with or without ``noheader``/``nounits`` (``[N/A]``/``[Not Supported]`` become empty)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise BackendError("nvidia-smi printed nothing")
    if lines[0].strip()[0].isdigit():
        fields = _NVIDIA_SMI_QUERY.split(",")
    else:
        fields = [cell.strip().split(" [", 1)[0] for cell in lines.pop(0).split(",")]
    readings = []
    for line in lines:
        cells = dict(zip(fields, (cell.strip() for cell in line.split(","))))
        if not cells.get("index", "").isdigit():
            continue
        readings.append(_reading(int(cells["index"]), parse_number(cells.get("power.draw")),
                                 parse_number(cells.get("memory.used")), parse_number(cells.get("memory.total")),
                                 parse_number(cells.get("utilization.gpu"))))
    return readings


def _run(argv, timeout=15):
    if not shutil.which(argv[0]):
        raise BackendError("%s is not on PATH" % argv[0])
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = proc.communicate(timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BackendError("%s failed: %s" % (argv[0], exc))
    if proc.returncode != 0:
        last = (err or out).decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
        raise BackendError("%s exited with %s: %s" % (argv[0], proc.returncode, last[0]))
    return out.decode("utf-8", "replace")


class CommandBackend:
    def __init__(self, name, argv, parser):
        self.name, self.argv, self.parser = name, argv, parser

    def read(self):
        return self.parser(_run(self.argv))

    def close(self):
        pass


class NvmlBackend:
    name = "nvml"

    def __init__(self):
        try:
            import pynvml  # nvidia-ml-py
        except ImportError:
            raise BackendError("pynvml (nvidia-ml-py) is not installed")
        self.nvml = pynvml
        try:
            pynvml.nvmlInit()
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception as exc:  # pynvml.NVMLError and driver problems
            raise BackendError("NVML cannot be initialised: %s" % exc)

    def read(self):
        readings = []
        for index, handle in enumerate(self.handles):
            power = used = total = util = None
            try:
                power = self.nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0  # milliwatts
            except Exception:
                pass
            try:
                util = float(self.nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            except Exception:
                pass
            try:
                memory = self.nvml.nvmlDeviceGetMemoryInfo(handle)
                used, total = memory.used / MIB, memory.total / MIB
            except Exception:
                pass
            readings.append(_reading(index, power, used, total, util))
        return readings

    def close(self):
        try:
            self.nvml.nvmlShutdown()
        except Exception:
            pass


def make_backend(name):
    if name == "amd-smi":
        return CommandBackend(name, ["amd-smi", "metric", "--power", "--mem-usage", "--usage", "--csv"],
                              parse_amd_smi_csv)
    if name == "rocm-smi":
        return CommandBackend(name, ["rocm-smi", "--showpower", "--showmeminfo", "vram", "--showuse", "--json"],
                              parse_rocm_smi_json)
    if name == "nvml":
        return NvmlBackend()
    if name == "nvidia-smi":
        return CommandBackend(name, ["nvidia-smi", "--query-gpu=" + _NVIDIA_SMI_QUERY, "--format=csv,nounits"],
                              parse_nvidia_smi_csv)
    raise BackendError("unknown backend '%s' (use auto, %s)" % (name, ", ".join(BACKENDS)))


def choose_backend(preferred="auto"):
    """The first backend that answers with at least one device, and its first readings."""
    names = BACKENDS if preferred in ("", "auto") else (preferred,)
    problems = []
    for name in names:
        try:
            backend = make_backend(name)
            readings = backend.read()
        except BackendError as exc:
            problems.append(str(exc))
            continue
        if readings:
            return backend, readings
        problems.append("%s reported no GPU" % name)
        backend.close()
    raise BackendError("no GPU monitoring backend works here: " + "; ".join(problems))


def parse_devices(text):
    """``'all'`` → None (every device), ``'0,2'`` → {0, 2}."""
    text = (text or "all").strip().lower()
    if text in ("all", ""):
        return None
    return {int(part) for part in text.replace(" ", "").split(",") if part}


def summarise(rows):
    """Power, VRAM and utilisation of a sampler CSV.

    ``power_mean_w`` / ``power_peak_w``: mean and peak of the power summed over the sampled devices
    at each sample; ``vram_peak_mb``: peak of the summed used VRAM (MiB); ``gpu_util_mean`` /
    ``gpu_util_peak``: mean and peak of the devices' mean utilisation at each sample (percent).
    Empty when no device reported the value.
    """
    power, vram, util, reporting = {}, {}, {}, {}
    for row in rows:
        sample = row.get("sample")
        for table, key in ((power, "power_w"), (vram, "vram_used_mb"), (util, "gpu_util_pct")):
            value = parse_number(row.get(key) or None)
            if value is not None:
                table[sample] = table.get(sample, 0.0) + value
                if key == "gpu_util_pct":
                    reporting[sample] = reporting.get(sample, 0) + 1
    util = {sample: total / reporting[sample] for sample, total in util.items()}
    return {
        "power_mean_w": round(sum(power.values()) / len(power), 2) if power else "",
        "power_peak_w": round(max(power.values()), 2) if power else "",
        "vram_peak_mb": round(max(vram.values()), 1) if vram else "",
        "gpu_util_mean": round(sum(util.values()) / len(util), 1) if util else "",
        "gpu_util_peak": round(max(util.values()), 1) if util else "",
        "gpu_samples": len(set(row.get("sample") for row in rows)),
    }


def read_rows(path):
    try:
        with open(path, newline="") as handle:
            return list(csv.DictReader(handle))
    except OSError:
        return []


def _cell(value, digits):
    return "" if value is None else round(value, digits)


class _Stop:
    requested = False


def _should_stop(args, started):
    if _Stop.requested:
        return True
    if args.stop_file and (os.path.exists(args.stop_file) or not os.path.isdir(os.path.dirname(
            os.path.abspath(args.stop_file)))):
        return True
    return bool(args.max_seconds) and time.monotonic() - started > args.max_seconds


def sample_loop(args, backend, first):
    devices = parse_devices(args.devices)
    started = time.monotonic()
    reported = False
    with open(args.output, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS)
        writer.writeheader()
        handle.flush()
        readings, sample = first, 0
        while True:
            now = time.time()
            for reading in readings:
                if devices is not None and reading["device"] not in devices:
                    continue
                writer.writerow({"sample": sample, "timestamp": round(now, 3),
                                 "elapsed_s": round(time.monotonic() - started, 3), "device": reading["device"],
                                 "power_w": _cell(reading["power_w"], 2),
                                 "vram_used_mb": _cell(reading["vram_used_mb"], 1),
                                 "vram_total_mb": _cell(reading["vram_total_mb"], 1), "backend": backend.name,
                                 "gpu_util_pct": _cell(reading.get("gpu_util_pct"), 1)})
            handle.flush()
            sample += 1
            deadline = time.monotonic() + args.interval
            while time.monotonic() < deadline and not _should_stop(args, started):
                time.sleep(min(0.05, args.interval))
            if _should_stop(args, started):
                break
            try:
                readings = backend.read()
            except BackendError as exc:
                if not reported:  # once: a flaky tool must not flood the log
                    sys.stderr.write("gpu_sampler: %s\n" % exc)
                    reported = True
                readings = []
    backend.close()


def main(argv=None):
    parser = argparse.ArgumentParser(prog="gpu_sampler.py")
    parser.add_argument("--check", action="store_true", help="print the working backend and exit")
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--output", default="gpu_sampler.csv")
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between samples")
    parser.add_argument("--devices", default="all")
    parser.add_argument("--stop-file", default="")
    parser.add_argument("--max-seconds", type=float, default=0)
    args = parser.parse_args(argv)
    args.interval = max(0.01, args.interval)
    try:
        backend, first = choose_backend(args.backend)
    except BackendError as exc:
        sys.stderr.write("gpu_sampler: %s\n" % exc)
        return 3
    if args.check:
        print(backend.name)
        backend.close()
        return 0

    def request_stop(_signum, _frame):
        _Stop.requested = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    sample_loop(args, backend, first)
    return 0


if __name__ == "__main__":
    sys.exit(main())
