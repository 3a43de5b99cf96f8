"""`madengine report serve` over 1,000,000 rows: API latency, overview in Chromium, server memory.

A SQLite results table of 2,000 result identities x 500 runs (1,000,000 rows; 2 % FAILURE rows with
reasons, a fifth of the rows with 3 samples, a step change in every 50th identity) is written
straight into the schema `database create-table` makes, then `create-table` builds the summary
tables from the rows (the in-place migration, timed). A real server (`python -m madengine report
serve`, a separate process) answers every /api call the pages use, each asked 40 times with
different arguments (other results, other runs, other run pairs), and the pages themselves;
headless Chromium (Debian's, through Playwright) opens the overview. Targets: every call
<= 200 ms median and <= 500 ms p95, the overview interactive within 2 s, the server's RSS <= 300 MB.

    python3 benchmarks/dashboard_scale.py [--db PATH] [--identities 2000] [--runs 500]

``--db`` keeps the database for the next time (it is rebuilt when its row count differs).
Exit 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from madengine.database import create_table  # noqa: E402
from madengine.database.sql import STORED_COLUMNS  # noqa: E402
from madengine.results.identity import ResultIdentity  # noqa: E402

CALLS = 40
TARGET_MEDIAN_S, TARGET_P95_S = 0.200, 0.500
TARGET_INTERACTIVE_S = 2.0
TARGET_RSS_MB = 300
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def identities(count: int) -> list[ResultIdentity]:
    archs = ("gfx942", "gfx90a")
    return [ResultIdentity(model=f"model_{k // 2:04d}", metric="samples_per_second" if k % 3 else "latency_ms",
                           tag_configs="bs=64" if k % 4 == 0 else "", executor="docker", gpu_vendor="AMD",
                           gpu_architecture=archs[k % 2], n_gpus="1") for k in range(count)]


def build(path: Path, n_identities: int, n_runs: int) -> float:
    """The rows, written straight into the table create-table makes; returns the seconds create-table
    then takes to build the summary tables from them (the migration of a table without them)."""
    url = f"sqlite:///{path}"
    if path.exists():
        path.unlink()
    create_table(url)
    connection = sqlite3.connect(path)
    connection.execute("DROP TABLE dlm_table_ids")  # as an earlier release left it: no summary tables
    connection.execute("DROP TABLE dlm_table_runs")
    names = ["row_key", "created_date", *STORED_COLUMNS]
    statement = f"INSERT INTO dlm_table ({', '.join(names)}) VALUES ({', '.join('?' for _ in names)})"
    rng = random.Random(13)
    chosen = identities(n_identities)
    keys = [i.key() for i in chosen]
    empty = dict.fromkeys(STORED_COLUMNS, "")

    def rows():
        for run in range(n_runs):
            run_id = f"2026{run // 28 + 1:02d}{run % 28 + 1:02d}-0{run % 10}0000-{run:06x}"
            started = f"2026-{run // 28 % 12 + 1:02d}-{run % 28 + 1:02d}T{run % 24:02d}:00:00+00:00"
            machine = f"node{run % 4}"
            for index, identity in enumerate(chosen):
                base = 100.0 + index % 97
                if index % 50 == 0 and run >= n_runs // 2:
                    base *= 1.08
                cells = dict(empty, model=identity.model, metric=identity.metric, tag_configs=identity.tag_configs,
                             executor="docker", gpu_vendor="AMD", gpu_architecture=identity.gpu_architecture,
                             n_gpus="1", run_id=run_id, started_at=started, machine_name=machine,
                             tags="nightly,perf", identity_key=keys[index], base_docker="rocm/pytorch:latest")
                if rng.random() < 0.02:
                    cells.update(status="FAILURE", reason="model script exited with code 1: out of memory")
                else:
                    value = base * (1 + rng.gauss(0, 0.01))
                    cells.update(status="SUCCESS", performance=repr(round(value, 4)))
                    if index % 5 == 0:
                        samples = [round(value * (1 + rng.gauss(0, 0.01)), 4) for _ in range(3)]
                        cells.update(perf_n="3", perf_samples=json.dumps(samples), perf_min=repr(min(samples)),
                                     perf_max=repr(max(samples)))
                yield (os.urandom(32).hex(), "2026-06-01 00:00:00", *(cells[n] for n in STORED_COLUMNS))

    connection.executemany(statement, rows())
    connection.commit()
    connection.close()
    started = time.perf_counter()
    create_table(url)  # finds no summary tables: builds them from the rows
    return time.perf_counter() - started


def ensure_database(path: Path, n_identities: int, n_runs: int) -> float | None:
    if path.exists():
        try:
            count = sqlite3.connect(f"file:{path}?mode=ro", uri=True).execute("SELECT COUNT(*) FROM dlm_table_ids").fetchone()[0]
            rows = sqlite3.connect(f"file:{path}?mode=ro", uri=True).execute("SELECT MAX(id) FROM dlm_table").fetchone()[0]
            if count == n_identities and rows == n_identities * n_runs:
                return None
        except sqlite3.Error:
            pass
    print(f"building {n_identities * n_runs:,} rows in {path} ...", file=sys.stderr, flush=True)
    started = time.perf_counter()
    migration = build(path, n_identities, n_runs)
    print(f"built in {time.perf_counter() - started:.0f} s ({path.stat().st_size / 1e6:.0f} MB)", file=sys.stderr)
    return migration


class Server:
    def __init__(self, db: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
        self.process = subprocess.Popen([sys.executable, "-m", "madengine", "report", "serve", "--db-url", f"sqlite:///{db}",
                                         "--port", "0"], stderr=subprocess.PIPE, text=True, env=env)
        line = self.process.stderr.readline()
        found = re.search(r"(http://127\.0\.0\.1:\d+/)", line)
        if not found:
            raise SystemExit(f"the server did not start: {line}{self.process.stderr.read()}")
        self.base = found.group(1).rstrip("/")
        self.rss_peak = 0
        self.errors: collections.deque[str] = collections.deque(maxlen=40)  # the server's stderr, drained
        threading.Thread(target=lambda: self.errors.extend(self.process.stderr), daemon=True).start()

    def get(self, path: str) -> tuple[float, bytes]:
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(self.base + path, timeout=60) as response:
                body = response.read()
        except urllib.error.HTTPError as error:
            raise SystemExit(f"{path}: HTTP {error.code}\n{''.join(self.errors)}") from None
        elapsed = time.perf_counter() - started
        self.sample_rss()
        return elapsed, body

    def sample_rss(self) -> int:
        with open(f"/proc/{self.process.pid}/status") as handle:
            rss = next(int(line.split()[1]) * 1024 for line in handle if line.startswith("VmRSS:"))
        self.rss_peak = max(self.rss_peak, rss)
        return rss

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def quantiles(times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]


def measure_api(server: Server, chosen: list[ResultIdentity], runs: list[str]) -> list[tuple[str, float, float, float]]:
    """(call, first, median, p95) per call the pages make, each with CALLS different arguments."""
    q = urllib.parse.quote
    calls = {
        "/api/overview": lambda k: "/api/overview" + ("" if k % 2 else f"?page={k % 5 + 1}"),
        "/api/overview?status=FAILURE&model=…": lambda k: f"/api/overview?status=FAILURE&model=model_{k % 9}",
        "/api/identities?gpu_architecture=…": lambda k: f"/api/identities?gpu_architecture=gfx90a&page={k % 8 + 1}",
        "/api/series?identity=…": lambda k: "/api/series?identity=" + q(chosen[(k * 37) % len(chosen)].key()),
        "/api/trend?model=…&machine=…": lambda k: f"/api/trend?model=model_{(k * 13) % 1000:04d}&machine=node{k % 4}",
        "/api/runs": lambda k: f"/api/runs?page={k % 5 + 1}",
        "/api/run?run=…": lambda k: "/api/run?run=" + q(runs[(k * 7) % len(runs)]),
        "/api/compare?old=…&new=…": lambda k: f"/api/compare?old={q(runs[(k * 11) % len(runs)])}&new={q(runs[(k * 11 + 1) % len(runs)])}",
        "/api/changes": lambda k: "/api/changes" + ("" if k % 2 else "?kind=regression"),
        "/api/version": lambda k: "/api/version",
        "page /": lambda k: "/" + ("" if k % 2 else "?status=FAILURE"),
        "page /trend?identity=…": lambda k: "/trend?identity=" + q(chosen[(k * 53) % len(chosen)].key()),
        "page /run?run=…": lambda k: "/run?run=" + q(runs[(k * 3) % len(runs)]),
        "page /compare": lambda k: f"/compare?old={q(runs[(k * 5) % len(runs)])}&new={q(runs[(k * 5 + 2) % len(runs)])}",
        "page /runs": lambda k: "/runs",
        "page /changes": lambda k: "/changes",
    }
    results = []
    for name, make in calls.items():
        times = [server.get(make(k))[0] for k in range(CALLS)]
        median, p95 = quantiles(times)
        results.append((name, times[0], median, p95))
    return results


def during_background_pass(server: Server, chosen: list[ResultIdentity], runs: list[str]) -> tuple[float, float]:
    """(median, p95) of page and API calls made while the change-point pass still runs after start."""
    q = urllib.parse.quote
    paths = []
    for k in range(8):
        paths += ["/", "/api/overview?status=FAILURE", "/trend?identity=" + q(chosen[(k * 71) % len(chosen)].key()),
                  "/run?run=" + q(runs[(k * 29) % len(runs)]), "/runs"]
    return quantiles([server.get(path)[0] for path in paths])


def overview_in_chromium(base: str) -> list[float]:
    """Seconds from navigation to the overview being interactive (DOMContentLoaded, its script run)."""
    from playwright.sync_api import sync_playwright

    seconds = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        for _ in range(5):
            page = browser.new_page()
            page.goto(base + "/", wait_until="domcontentloaded")
            page.wait_for_selector("html[data-ready='1']")
            timing = page.evaluate("() => { const n = performance.getEntriesByType('navigation')[0];"
                                   " return [n.startTime, n.domInteractive, n.domContentLoadedEventEnd]; }")
            seconds.append((timing[2] - timing[0]) / 1000)
            page.close()
        browser.close()
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", type=Path, default=None, help="keep the database here (default: a temporary folder)")
    parser.add_argument("--identities", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dashboard-scale-") as tmp:
        db = args.db or Path(tmp) / "results.db"
        migration = ensure_database(db, args.identities, args.runs)
        rows = args.identities * args.runs
        server = Server(db)
        try:
            started = time.perf_counter()
            server.get("/api/version")
            runs = [r["run_id"] for r in json.loads(server.get("/api/runs?per_page=500")[1])["items"]]
            first_overview, _ = server.get("/")
            during = during_background_pass(server, identities(args.identities), runs)
            complete = None
            while time.perf_counter() - started < 600:
                state = json.loads(server.get("/api/changes?per_page=1")[1])
                if state["complete"]:
                    complete = time.perf_counter() - started
                    break
                time.sleep(1)
            api = measure_api(server, identities(args.identities), runs)
            interactive = overview_in_chromium(server.base)
            rss_now = server.sample_rss()
        finally:
            server.stop()
    print(f"dashboard over {rows:,} rows ({args.identities:,} identities x {args.runs} runs), SQLite, 2-core machine")
    if migration is not None:
        print(f"  create-table builds the summary tables from the rows (migration in place): {migration:.1f} s")
    print(f"  first overview page after start: {first_overview * 1000:.0f} ms")
    print(f"  change points of every identity (background, after start): "
          + (f"{complete:.1f} s" if complete is not None else "not done in 600 s"))
    print(f"  pages and API while that pass runs (overview, trend, run, runs; 40 calls): median "
          f"{during[0] * 1000:.0f} ms, p95 {during[1] * 1000:.0f} ms")
    print(f"  {'call':40} {'first ms':>9} {'median ms':>10} {'p95 ms':>8}   (each {CALLS} calls, other arguments)")
    failed = []
    for name, first, median, p95 in api:
        ok = median <= TARGET_MEDIAN_S and p95 <= TARGET_P95_S
        failed += [] if ok else [name]
        print(f"  {name:40} {first * 1000:9.1f} {median * 1000:10.1f} {p95 * 1000:8.1f}   {'ok' if ok else 'MISSED'}")
    interactive_median = statistics.median(interactive)
    print(f"  overview interactive in Chromium (DOMContentLoaded, 5 loads): median {interactive_median:.2f} s, "
          f"max {max(interactive):.2f} s (target <= {TARGET_INTERACTIVE_S:.0f} s)")
    print(f"  server RSS: peak {server.rss_peak / 2**20:.0f} MB, at the end {rss_now / 2**20:.0f} MB "
          f"(target <= {TARGET_RSS_MB} MB)")
    if max(interactive) > TARGET_INTERACTIVE_S:
        failed.append("overview interactive")
    if server.rss_peak > TARGET_RSS_MB * 2**20:
        failed.append("RSS")
    if complete is None:
        failed.append("change points")
    print("all targets met" if not failed else f"MISSED: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
