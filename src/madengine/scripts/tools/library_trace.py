#!/usr/bin/env python3
"""madengine library trace: runs a command and counts the ROCm library calls its logs describe.

Usage: python3 library_trace.py [--output library_trace.csv] -- COMMAND...

The libraries log one line per call when asked to through their own environment variables (the
tools.json entries set them): rocBLAS ``ROCBLAS_LAYER=2`` (``rocblas-bench`` command lines) and
``ROCBLAS_LAYER=4`` (``- { rocblas_function: ..., call_count: N }`` profile lines), hipBLASLt
``HIPBLASLT_LOG_MASK=32`` (``hipblaslt-bench`` lines), MIOpen ``MIOPEN_ENABLE_LOGGING_CMD=1``
(``MIOpen(HIP): Command [...] ./bin/MIOpenDriver ...``), Tensile ``TENSILE_DB=0x8000``
(``Running kernel: <name>``) and RCCL ``NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL``
(``NCCL INFO AllReduce: opCount ... count N datatype D op O root R comm ... [nranks=K]``).

The command's stdout and stderr are read as one stream (executors merge them anyway); lines
that are library calls are counted and left out of the log (``LIBRARY_TRACE_ECHO=1`` keeps
them), every other line passes through unchanged, so ``performance:`` lines still reach
madengine. The CSV has one row per library and call configuration with its number of calls:
``jobid, created_date, model, library, config, calls``. The exit status is the command's
(128+N when signal N ended it): a trace never hides a failure.
"""

import argparse
import csv
import datetime
import os
import re
import signal
import subprocess
import sys

CSV_FIELDS = ("jobid", "created_date", "model", "library", "config", "calls")

_ROCBLAS_BENCH = re.compile(r"(?:^|\s)(?:\S*/)?rocblas-bench\s+(-.*\S)")
_ROCBLAS_PROFILE = re.compile(r"^\s*-\s*\{\s*(rocblas_function:.*?)\s*\}\s*$")
_CALL_COUNT = re.compile(r",?\s*call_count:\s*(\d+)")
_HIPBLASLT_BENCH = re.compile(r"(?:^|\s)(?:\S*/)?hipblaslt-bench\s+(-.*\S)")
_MIOPEN = re.compile(r"MIOpen\(HIP\): Command \[\w+\]\s+(?:\S*/)?MIOpenDriver\s+(.*\S)")
_TENSILE = re.compile(r"^\s*Running kernel:\s*(\S.*?)\s*$")
_RCCL = re.compile(r"NCCL INFO (\w+): opCount \S+ sendbuff \S+ recvbuff \S+ count (\d+) datatype (\d+) "
                   r"op (\d+) root (\d+) comm \S+ \[nranks=(\d+)\]")


def _normalise(text):
    return " ".join(text.split())


def parse_line(line):
    """``(library, config, calls)`` when the log line records a library call, else None."""
    if "rocblas" in line:
        match = _ROCBLAS_BENCH.search(line)
        if match:
            return "rocblas", "rocblas-bench " + _normalise(match.group(1)), 1
        match = _ROCBLAS_PROFILE.match(line)
        if match:
            body = match.group(1)
            count = _CALL_COUNT.search(body)
            config = _normalise(_CALL_COUNT.sub("", body))
            return "rocblas_function", config, int(count.group(1)) if count else 1
    if "hipblaslt-bench" in line:
        match = _HIPBLASLT_BENCH.search(line)
        if match:
            return "hipblaslt", "hipblaslt-bench " + _normalise(match.group(1)), 1
    if "MIOpenDriver" in line:
        match = _MIOPEN.search(line)
        if match:
            return "miopen", "MIOpenDriver " + _normalise(match.group(1)), 1
    if "Running kernel" in line:
        match = _TENSILE.match(line)
        if match:
            return "tensile", match.group(1), 1
    if "NCCL INFO" in line and "opCount" in line:
        match = _RCCL.search(line)
        if match:
            collective, count, datatype, op, root, nranks = match.groups()
            return "rccl", "%s count %s datatype %s op %s root %s nranks %s" % (
                collective, count, datatype, op, root, nranks), 1
    return None


class CallCounter:
    """Calls per (library, config), in first-seen order."""

    def __init__(self):
        self.calls = {}

    def feed(self, line):
        """Count the line when it is a library call; True when it was one."""
        parsed = parse_line(line)
        if parsed is None:
            return False
        library, config, calls = parsed
        key = (library, config)
        self.calls[key] = self.calls.get(key, 0) + calls
        return True

    def rows(self, jobid="0", model="", created=None):
        created = created or datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
        return [{"jobid": jobid, "created_date": created, "model": model, "library": library, "config": config,
                 "calls": calls} for (library, config), calls in self.calls.items()]


def count_file(path):
    """A :class:`CallCounter` over a saved log file."""
    counter = CallCounter()
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            counter.feed(line.rstrip("\n"))
    return counter


def write_csv(path, rows):
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS)
        writer.writeheader()
        writer.writerows(rows)


def summarise(rows):
    """Total calls and distinct call configurations of a library_trace.csv (rows as dicts)."""
    total = 0
    for row in rows:
        try:
            total += int(row.get("calls") or 0)
        except ValueError:
            continue
    return {"library_trace_calls": total, "library_trace_configs": len(rows)}


def read_rows(path):
    try:
        with open(path, newline="") as handle:
            return list(csv.DictReader(handle))
    except OSError:
        return []


def exit_status(returncode):
    return 128 - returncode if returncode < 0 else returncode


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if "--" not in argv:
        sys.stderr.write("library_trace: usage: library_trace.py [--output FILE] -- COMMAND...\n")
        return 2
    split = argv.index("--")
    parser = argparse.ArgumentParser(prog="library_trace.py")
    parser.add_argument("--output", default="library_trace.csv")
    args = parser.parse_args(argv[:split])
    command = argv[split + 1:]
    if not command:
        sys.stderr.write("library_trace: no command to run after --\n")
        return 2
    echo = os.environ.get("LIBRARY_TRACE_ECHO", "") not in ("", "0")
    try:
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except OSError as exc:
        sys.stderr.write("library_trace: cannot run %s: %s\n" % (command[0], exc.strerror))
        return 127

    def forward(signum, _frame):
        try:
            os.kill(child.pid, signum)
        except OSError:
            pass

    for name in ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT"):
        signal.signal(getattr(signal, name), forward)
    counter = CallCounter()
    out = sys.stdout.buffer
    for raw in iter(child.stdout.readline, b""):
        if counter.feed(raw.decode("utf-8", "replace").rstrip("\r\n")) and not echo:
            continue
        out.write(raw)
        out.flush()
    status = exit_status(child.wait())
    write_csv(args.output, counter.rows(os.environ.get("JENKINS_BUILD_NUMBER", "0"),
                                        os.environ.get("MAD_MODEL_NAME", "")))
    return status


if __name__ == "__main__":
    sys.exit(main())
