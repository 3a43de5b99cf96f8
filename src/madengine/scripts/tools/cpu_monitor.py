#!/usr/bin/env python3
"""madengine CPU/system monitor: runs a command, samples its process tree, keeps its exit status.

Usage: python3 cpu_monitor.py [--output FILE] [--summary FILE] [--interval SECONDS] -- COMMAND...

It runs inside model containers that may have nothing but ``python3``, so it uses the standard
library only and reads ``/proc`` and ``/sys`` directly (no psutil). Every sample is one CSV row,
written and flushed at once: a run killed on timeout still leaves the samples taken so far. The
summary (JSON) is written when the command ends. The exit status is the command's (128+N when
signal N ended it), so wrapping a model never hides its failure.

The interval defaults to ``$CPU_MONITOR_SAMPLING_RATE`` (seconds between samples, 0.5).
"""

import argparse
import csv
import json
import os
import signal
import subprocess
import sys
import threading
import time

CSV_FIELDS = ("timestamp", "elapsed_s", "processes", "cpu_percent", "rss_mb", "system_cpu_percent",
              "system_mem_used_mb", "cpu_freq_mhz")
SUMMARY_COLUMNS = ("cpu_util_mean", "cpu_util_peak", "rss_peak_mb", "cpu_freq_mean_mhz")
DEFAULT_INTERVAL = 0.5
MIB = 1024.0 * 1024.0


def parse_stat(text):
    """``(ppid, cpu_ticks, rss_pages)`` from the text of ``/proc/<pid>/stat``.

    The command name is in parentheses and may itself hold spaces and parentheses, so the
    fields are counted from the last ``)``. CPU ticks include the children the process waited
    for (cutime/cstime), so the time of finished helpers stays in the tree's total.
    """
    rest = text[text.rindex(")") + 2:].split()
    ppid = int(rest[1])
    utime, stime, cutime, cstime = (int(v) for v in rest[11:15])
    rss_pages = int(rest[21])
    return ppid, utime + stime + cutime + cstime, rss_pages


def read_processes(proc="/proc"):
    """``{pid: (ppid, cpu_ticks, rss_pages)}`` of every process that can be read now."""
    table = {}
    try:
        names = os.listdir(proc)
    except OSError:
        return table
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(os.path.join(proc, name, "stat")) as handle:
                table[int(name)] = parse_stat(handle.read())
        except (OSError, ValueError, IndexError):
            continue  # the process ended while we looked
    return table


def process_tree(root, table):
    """The pids of ``root`` and all its descendants present in ``table``."""
    children = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in tree or pid not in table:
            continue
        tree.add(pid)
        todo.extend(children.get(pid, ()))
    return tree


def parse_proc_stat_cpu(text):
    """``(busy_ticks, total_ticks)`` from the first line of ``/proc/stat``."""
    for line in text.splitlines():
        if line.startswith("cpu "):
            values = [int(v) for v in line.split()[1:]]
            idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
            total = sum(values[:8])  # guest time is already inside user/nice
            return total - idle, total
    return None


def parse_meminfo_used_mb(text):
    """Used memory (MemTotal - MemAvailable) in MiB from ``/proc/meminfo``."""
    values = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts:
            values[key.strip()] = int(parts[0])  # kB
    if "MemTotal" not in values:
        return None
    available = values.get("MemAvailable", values.get("MemFree", 0))
    return (values["MemTotal"] - available) / 1024.0


def parse_cpuinfo_mhz(text):
    """Mean of the ``cpu MHz`` lines of ``/proc/cpuinfo`` (None when there are none)."""
    values = []
    for line in text.splitlines():
        if line.lower().startswith("cpu mhz"):
            try:
                values.append(float(line.split(":", 1)[1]))
            except (IndexError, ValueError):
                continue
    return sum(values) / len(values) if values else None


def read_cpu_freq_mhz(sys_root="/sys", proc="/proc"):
    """Mean current CPU frequency: cpufreq in sysfs (kHz), else ``/proc/cpuinfo``; None if neither."""
    base = os.path.join(sys_root, "devices", "system", "cpu")
    values = []
    try:
        names = os.listdir(base)
    except OSError:
        names = []
    for name in names:
        if not (name.startswith("cpu") and name[3:].isdigit()):
            continue
        try:
            with open(os.path.join(base, name, "cpufreq", "scaling_cur_freq")) as handle:
                values.append(int(handle.read().strip()) / 1000.0)
        except (OSError, ValueError):
            continue
    if values:
        return sum(values) / len(values)
    return parse_cpuinfo_mhz(_read(os.path.join(proc, "cpuinfo")))


def _read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return ""


class TreeSampler:
    """Samples one process tree; each :meth:`sample` after the first yields a CSV row."""

    def __init__(self, root_pid, proc="/proc", sys_root="/sys"):
        self.root_pid = root_pid
        self.proc = proc
        self.sys_root = sys_root
        self.clock_ticks = os.sysconf("SC_CLK_TCK")
        self.page_size = os.sysconf("SC_PAGE_SIZE")
        self.started = time.monotonic()
        self._last = None

    def _reading(self):
        table = read_processes(self.proc)
        tree = process_tree(self.root_pid, table)
        ticks = sum(table[pid][1] for pid in tree)
        rss = sum(table[pid][2] for pid in tree) * self.page_size / MIB
        system = parse_proc_stat_cpu(_read(os.path.join(self.proc, "stat")))
        return time.monotonic(), len(tree), ticks, rss, system

    def sample(self):
        now, count, ticks, rss, system = self._reading()
        last, self._last = self._last, (now, ticks, system)
        if last is None or count == 0:
            return None
        elapsed = now - last[0]
        if elapsed <= 0:
            return None
        cpu = max(0.0, (ticks - last[1]) / self.clock_ticks / elapsed * 100.0)
        system_cpu = ""
        if system and last[2] and system[1] > last[2][1]:
            system_cpu = round(100.0 * (system[0] - last[2][0]) / (system[1] - last[2][1]), 2)
        used = parse_meminfo_used_mb(_read(os.path.join(self.proc, "meminfo")))
        freq = read_cpu_freq_mhz(self.sys_root, self.proc)
        return {
            "timestamp": round(time.time(), 3), "elapsed_s": round(now - self.started, 3), "processes": count,
            "cpu_percent": round(cpu, 2), "rss_mb": round(rss, 2), "system_cpu_percent": system_cpu,
            "system_mem_used_mb": "" if used is None else round(used, 1),
            "cpu_freq_mhz": "" if freq is None else round(freq, 1),
        }


def _number(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def summarise(rows, cpu_seconds=None, wall_seconds=None, maxrss_mb=None, freq_mhz=None):
    """Summary of the samples (CSV rows as dicts) and, when known, the command's own usage.

    The mean CPU utilisation is exact when the command's CPU time is known (from ``wait4``):
    CPU seconds over wall seconds; otherwise it is the mean of the samples. 100 % = one core.
    ``freq_mhz`` stands in for the frequency when no sample has one (a run shorter than the
    interval).
    """
    cpu = [v for v in (_number(r.get("cpu_percent")) for r in rows) if v is not None]
    rss = [v for v in (_number(r.get("rss_mb")) for r in rows) if v is not None]
    freq = [v for v in (_number(r.get("cpu_freq_mhz")) for r in rows) if v is not None]
    if not freq and freq_mhz is not None:
        freq = [freq_mhz]
    if cpu_seconds is not None and wall_seconds:
        mean = 100.0 * cpu_seconds / wall_seconds
    elif cpu:
        mean = sum(cpu) / len(cpu)
    else:
        mean = None
    peak_rss = max(rss + ([maxrss_mb] if maxrss_mb else [])) if (rss or maxrss_mb) else None
    peak_cpu = max(cpu) if cpu else mean
    if peak_cpu is not None and mean is not None:
        peak_cpu = max(peak_cpu, mean)
    return {
        "cpu_util_mean": _rounded(mean),
        "cpu_util_peak": _rounded(peak_cpu),
        "rss_peak_mb": _rounded(peak_rss),
        "cpu_freq_mean_mhz": _rounded(sum(freq) / len(freq) if freq else None, 1),
        "samples": len(rows),
        "duration_s": _rounded(wall_seconds, 3),
        "cpu_seconds": _rounded(cpu_seconds, 3),
    }


def _rounded(value, digits=2):
    return "" if value is None else round(value, digits)


def read_rows(path):
    """The sample rows of a monitor CSV ([] when it is missing)."""
    try:
        with open(path, newline="") as handle:
            return list(csv.DictReader(handle))
    except OSError:
        return []


def exit_status(status):
    """A shell-style exit status from a ``wait`` status: the code, or 128+N for signal N."""
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def _parse_args(argv):
    if "--" not in argv:
        raise SystemExit("cpu_monitor: usage: cpu_monitor.py [options] -- COMMAND...")
    split = argv.index("--")
    parser = argparse.ArgumentParser(prog="cpu_monitor.py")
    parser.add_argument("--output", default="cpu_monitor.csv")
    parser.add_argument("--summary", default="cpu_monitor_summary.json")
    parser.add_argument("--interval", type=float,
                        default=_number(os.environ.get("CPU_MONITOR_SAMPLING_RATE")) or DEFAULT_INTERVAL)
    args = parser.parse_args(argv[:split])
    command = argv[split + 1:]
    if not command:
        raise SystemExit("cpu_monitor: no command to run after --")
    return args, command


def _sample_loop(sampler, writer, handle, stop, interval):
    while not stop.wait(interval):
        row = sampler.sample()
        if row is not None:
            writer.writerow(row)
            handle.flush()


def main(argv=None):
    args, command = _parse_args(sys.argv[1:] if argv is None else argv)
    interval = max(0.05, args.interval)
    handle = open(args.output, "w", newline="")
    writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS)
    writer.writeheader()
    handle.flush()
    started = time.monotonic()
    try:
        child = subprocess.Popen(command)
    except OSError as exc:
        sys.stderr.write("cpu_monitor: cannot run %s: %s\n" % (command[0], exc.strerror))
        handle.close()
        return 127

    def forward(signum, _frame):
        try:
            os.kill(child.pid, signum)
        except OSError:
            pass

    for name in ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2"):
        signal.signal(getattr(signal, name), forward)
    sampler = TreeSampler(child.pid)
    sampler.sample()  # the baseline the first row's CPU time is measured from
    stop = threading.Event()
    thread = threading.Thread(target=_sample_loop, args=(sampler, writer, handle, stop, interval))
    thread.daemon = True
    thread.start()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = exit_status(status)  # so Popen never waits on the reaped pid again
    wall = time.monotonic() - started
    stop.set()
    thread.join(timeout=5)
    handle.close()
    summary = summarise(read_rows(args.output), cpu_seconds=usage.ru_utime + usage.ru_stime,
                        wall_seconds=wall, maxrss_mb=usage.ru_maxrss / 1024.0, freq_mhz=read_cpu_freq_mhz())
    summary["exit_code"] = child.returncode
    with open(args.summary, "w") as out:
        json.dump(summary, out, indent=2, sort_keys=True)
        out.write("\n")
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
