"""Overhead of tracing on `madengine run`: tracing on versus off, side by side in one run.

On the bundled examples (`--tags examples`, in a copy of this repository's models.json,
scripts/examples and docker/; `EXECUTOR=local` by default, `EXECUTOR=docker` for containers),
ROUNDS times (default 20), each round running every mode once, the order rotating from round to
round so that no mode always runs first:
  A. `madengine run ... --no-trace`                       (tracing off)
  B. `madengine run ...`                                   (trace.json, the default)
  C. `madengine run ...` with OTEL_EXPORTER_OTLP_ENDPOINT  (trace.json + OTLP to a local collector
     that answers 200 at once; only when the opentelemetry packages are installed)
Prints, per mode, the median wall time and, paired per round (so load from elsewhere cancels
out), the median difference to A, the median ratio to A and the mean ratio with its 95 % CI.
Target: median ratio ≤ 1.01 (issue 16: ≤ 1 % of the run's wall time).

Bytecode: an installed madengine has compiled bytecode (pip compiles it); a machine with
PYTHONDONTWRITEBYTECODE=1 and a source checkout compiles every imported module on every run,
which charges tracing for compiling the modules it imports (trace.json writer, OTLP exporter).
`BYTECODE=cached` (default) lets the runs cache bytecode in a temporary PYTHONPYCACHEPREFIX, as
an installation has it; `BYTECODE=off` keeps the compile-every-time setting.
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

ROUNDS = int(os.environ.get("ROUNDS", "20"))
TAGS = os.environ.get("TAGS", "examples")
EXECUTOR = os.environ.get("EXECUTOR", "local")
BYTECODE = os.environ.get("BYTECODE", "cached")
TARGET = 1.01
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))  # madengine.stats (standard library only)


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


def bytecode_environ(tmp: Path) -> dict[str, str]:
    if BYTECODE == "off":
        return {"PYTHONDONTWRITEBYTECODE": "1"}
    return {"PYTHONDONTWRITEBYTECODE": "", "PYTHONPYCACHEPREFIX": str(tmp / "pycache")}


def paired(values: list[float], off: list[float]) -> tuple[float, float, float, float, float]:
    """(median Δ s, median ratio, mean ratio, its 95 % CI low, high) of the rounds' pairs."""
    from madengine.stats.summary import summarize

    ratios = [v / o for v, o in zip(values, off)]
    summary = summarize(ratios)
    return (statistics.median(v - o for v, o in zip(values, off)), summary.median, summary.mean,
            summary.ci95_low if summary.ci95_low is not None else summary.mean,
            summary.ci95_high if summary.ci95_high is not None else summary.mean)


def main() -> None:
    if not has_flag("--no-trace"):
        sys.exit("trace_overhead: `madengine run` has no --no-trace flag yet: the run path must create its tracer "
                 "(madengine.tracing.Tracer.from_environ, enabled=not args.no_trace) and flush it "
                 "(madengine.tracing.flush) before this benchmark can compare on and off")
    off_mode = "tracing off (--no-trace)"
    modes = {off_mode: ("--no-trace",), "trace.json (default)": ()}
    environs: dict[str, dict] = {}
    server = None
    if otlp_installed():
        server, endpoint = start_collector()
        modes["trace.json + OTLP (local collector)"] = ()
        environs["trace.json + OTLP (local collector)"] = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}
    times: dict[str, list[float]] = {mode: [] for mode in modes}
    order = list(modes)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "repo"
        root.mkdir()
        make_repo(root)
        common = bytecode_environ(Path(tmp))
        base = ["run", "--tags", TAGS, "--executor", EXECUTOR, "--no-html", "-o", "perf.csv",
                "--runs-dir", "runs"]
        for mode in order:  # warm: page cache, built images, bytecode of every mode's modules
            timed(madengine(*base, *modes[mode]), root, {**common, **environs.get(mode, {})})
        for index in range(ROUNDS):
            shift = index % len(order)
            for mode in order[shift:] + order[:shift]:
                times[mode].append(timed(madengine(*base, *modes[mode]), root, {**common, **environs.get(mode, {})}))
        traces = list((root / "runs").glob("*/trace.json"))
    if server is not None:
        server.shutdown()
    if not traces:
        sys.exit("trace_overhead: the traced runs wrote no runs/<run id>/trace.json: tracing is not wired in yet")
    off = times[off_mode]
    print(f"rounds: {ROUNDS} (every mode once per round, rotating order), models: --tags {TAGS} --executor "
          f"{EXECUTOR}, bytecode: {BYTECODE}")
    verdicts = []
    for mode, values in times.items():
        delta, ratio, mean, low, high = paired(values, off)
        if mode != off_mode:
            verdicts.append(f"{mode}: {'PASS' if ratio <= TARGET else 'FAIL'}")
        print(f"{mode:38s}: {statistics.median(values):7.3f} s median   paired: {delta * 1000:+7.1f} ms   "
              f"ratio to off {ratio:.4f} (mean {mean:.4f}, 95% CI {low:.4f}–{high:.4f})")
    print(f"trace files written: {len(traces)}")
    print("; ".join(verdicts) + f" (target: median paired ratio ≤ {TARGET})")


if __name__ == "__main__":
    main()
