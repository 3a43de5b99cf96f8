"""Overhead of tracing on `madengine run`: tracing on versus off, side by side in one run.

On the bundled examples (`--tags examples --executor local`, in a copy of this repository's
models.json, scripts/examples and docker/), alternating, ROUNDS times:
  A. `madengine run ... --no-trace`                       (tracing off)
  B. `madengine run ...`                                   (trace.json, the default)
  C. `madengine run ...` with OTEL_EXPORTER_OTLP_ENDPOINT  (trace.json + OTLP to a local collector
     that answers 200 at once; only when the opentelemetry packages are installed)
Prints the medians, and per round (paired) the difference and the ratio to A.
Target: ≤ 1.01 (issue 16: ≤ 1 % of the run's wall time).
Also checks that B wrote a trace.json, so a tracer that is not wired in cannot pass.
"""

from __future__ import annotations

import http.server
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROUNDS = int(os.environ.get("ROUNDS", "5"))
TAGS = os.environ.get("TAGS", "examples")
EXECUTOR = os.environ.get("EXECUTOR", "local")
TARGET = 1.01
REPO = Path(__file__).resolve().parents[1]


def make_repo(root: Path) -> None:
    shutil.copy(REPO / "models.json", root / "models.json")
    shutil.copytree(REPO / "scripts" / "examples", root / "scripts" / "examples")
    shutil.copytree(REPO / "docker", root / "docker")


def madengine(*argv: str) -> list[str]:
    return [sys.executable, "-m", "madengine", *argv]


def has_flag(flag: str) -> bool:
    text = subprocess.run(madengine("run", "--help"), capture_output=True, text=True).stdout
    return flag in text


def timed(argv: list[str], cwd: Path, env: dict | None = None) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          env={**os.environ, **(env or {})})
    if done.returncode != 0:
        sys.exit(f"trace_overhead: {' '.join(argv[2:])} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return time.perf_counter() - start


def start_collector() -> tuple[http.server.HTTPServer, str]:
    """A local OTLP endpoint that accepts every export at once (the cost measured is madengine's)."""

    class Accept(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Accept)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def otlp_installed() -> bool:
    probe = "import opentelemetry.sdk.trace, opentelemetry.exporter.otlp.proto.http.trace_exporter"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0


def main() -> None:
    if not has_flag("--no-trace"):
        sys.exit("trace_overhead: `madengine run` has no --no-trace flag yet: the run path must create its tracer "
                 "(madengine.tracing.Tracer.from_environ, enabled=not args.no_trace) and flush it "
                 "(madengine.tracing.flush) before this benchmark can compare on and off")
    modes = {"tracing off (--no-trace)": ("--no-trace",), "trace.json (default)": ()}
    environs: dict[str, dict] = {}
    server = None
    if otlp_installed():
        server, endpoint = start_collector()
        modes["trace.json + OTLP (local collector)"] = ()
        environs["trace.json + OTLP (local collector)"] = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}
    times: dict[str, list[float]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_repo(root)
        base = ["run", "--tags", TAGS, "--executor", EXECUTOR, "--no-html", "-o", "perf.csv",
                "--runs-dir", "runs"]
        timed(madengine(*base, "--no-trace"), root)  # warm: page cache, built images, pyc files
        for _ in range(ROUNDS):
            for mode, extra in modes.items():
                times[mode].append(timed(madengine(*base, *extra), root, environs.get(mode)))
        traces = list((root / "runs").glob("*/trace.json"))
    if server is not None:
        server.shutdown()
    if not traces:
        sys.exit("trace_overhead: the traced runs wrote no runs/<run id>/trace.json: tracing is not wired in yet")
    off = times["tracing off (--no-trace)"]
    print(f"rounds: {ROUNDS} (alternating), models: --tags {TAGS} --executor {EXECUTOR}")
    worst = 1.0
    for mode, values in times.items():
        # paired per round (each round's modes run back to back), so load from elsewhere cancels out
        ratio = statistics.median(v / o for v, o in zip(values, off))
        delta = statistics.median(v - o for v, o in zip(values, off))
        worst = max(worst, ratio)
        print(f"{mode:38s}: {statistics.median(values):7.3f} s median   {delta * 1000:+7.1f} ms   ratio to off "
              f"{ratio:.4f}")
    print(f"trace files written: {len(traces)}")
    print(f"{'PASS' if worst <= TARGET else 'FAIL'} (target: every ratio ≤ {TARGET})")

if __name__ == "__main__":
    main()
