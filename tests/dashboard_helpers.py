"""Helpers shared by the dashboard tests (no tests here): a results history and a real server.

The server is the real application under the real uvicorn, on a free port of 127.0.0.1, in a thread
of the test process; requests go over real sockets (urllib).
"""

from __future__ import annotations

import json
import random
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from madengine.results import PerfRecord, append_records

XSS = "<script>alert(1)</script>"
RUNS = 12
STEP_AT = 7  #: gpt2's latency is 10 % higher from this run on: a regression `report regressions` finds


def run_id(k: int) -> str:
    return f"run{k:02d}"


def history_records(runs: int = RUNS, seed: int = 1) -> list[PerfRecord]:
    """``runs`` runs of four results: bert [bs=64] (5 samples a run), gpt2 (a step up at STEP_AT),
    a model named like a script tag, and resnet that always fails with a reason."""
    rng = random.Random(seed)
    records = []
    for k in range(1, runs + 1):
        for model, base, metric in (("bert", 100.0, "samples_per_second"), ("gpt2", 20.0, "latency_ms"),
                                    (XSS, 5.0, "items")):
            level = base * (1.1 if model == "gpt2" and k >= STEP_AT else 1.0)
            samples = [round(level * (1 + rng.gauss(0, 0.005)), 4) for _ in range(5)]
            records.append(PerfRecord(
                model=model, status="SUCCESS", performance=sorted(samples)[2], metric=metric, run_id=run_id(k),
                started_at=f"2026-02-{k:02d}T10:00:00Z", machine_name="node1" if k % 2 else "node2",
                gpu_architecture="gfx942", gpu_vendor="AMD", executor="docker", n_gpus="1",
                tag_configs="bs=64" if model == "bert" else "", tags="nightly,llm" if model != XSS else "odd",
                perf_n=5, perf_samples=json.dumps(samples), perf_min=min(samples), perf_max=max(samples)))
        records.append(PerfRecord(
            model="resnet", status="FAILURE", reason=f"model script exited with code {k}: out of memory",
            run_id=run_id(k), started_at=f"2026-02-{k:02d}T10:05:00Z", machine_name="node1",
            gpu_architecture="gfx942", gpu_vendor="AMD", executor="docker", n_gpus="1", tags="nightly",
            artifacts=f"madengine_runs/{run_id(k)}/resnet/run.log"))
    return records


def write_history(path: Path, runs: int = RUNS) -> Path:
    return append_records(path, history_records(runs))


BAD_RUN = "night-07"  #: the run that makes BAD_MODELS results worse at once (write_bad_night)
BAD_MODELS = 20


def bad_night_records(models: int = BAD_MODELS, runs: int = 14, at: int = 7, seed: int = 5) -> list[PerfRecord]:
    """``runs`` nights of ``models`` results (half throughput, half latency), every one of them worse
    from night ``at`` on (BAD_RUN): one run that introduces ``models`` alerts. Each row carries the
    commit it ran (``commit-NN``)."""
    rng = random.Random(seed)
    records = []
    for k in range(runs):
        for m in range(models):
            throughput = m % 2 == 0
            worse = 1.0 + (0.08 + 0.01 * (m % 7)) * (k >= at) * (-1 if throughput else 1)
            records.append(PerfRecord(
                model=f"net{m:02d}", status="SUCCESS", performance=round(100.0 * worse * (1 + rng.gauss(0, 0.004)), 4),
                metric="samples_per_second" if throughput else "latency_ms", run_id=f"night-{k:02d}",
                started_at=f"2026-03-{k + 1:02d}T02:00:00Z", machine_name="node3", gpu_architecture="gfx942",
                gpu_vendor="AMD", executor="docker", n_gpus="1", git_commit=f"commit-{k:02d}"))
    return records


def write_bad_night(path: Path) -> Path:
    return append_records(path, bad_night_records())


def write_run_files(runs_dir: Path, k: int = RUNS) -> None:
    """The files of run ``k`` that rows link to: resnet's log and the run's trace.json."""
    folder = runs_dir / run_id(k)
    (folder / "resnet").mkdir(parents=True, exist_ok=True)
    (folder / "resnet" / "run.log").write_text("RuntimeError: out of memory <b>not html</b>\n")
    (folder / "trace.json").write_text(json.dumps({"traceEvents": []}))


class LiveServer:
    """``create_app(config)`` served by uvicorn in a thread until :meth:`stop`."""

    def __init__(self, config: Any) -> None:
        import uvicorn

        from madengine.server.app import create_app
        from madengine.server.serve import address_of, bind, uvicorn_config

        sock = bind(config.host, 0)
        self.base = address_of(sock).rstrip("/")
        self.port = sock.getsockname()[1]
        self.server = uvicorn.Server(uvicorn_config(create_app(config)))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the dashboard did not start")
            time.sleep(0.02)
        self._sock = sock

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        """(status, headers, body) of a GET; redirects are not followed."""
        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args, **kwargs):
                return None

        opener = urllib.request.build_opener(NoRedirect)
        request = urllib.request.Request(self.base + path, headers=headers or {})
        try:
            with opener.open(request, timeout=30) as response:
                return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
        except urllib.error.HTTPError as error:
            return error.code, {k.lower(): v for k, v in error.headers.items()}, error.read()

    def post(self, path: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        """(status, headers, body) of a POST; redirects are not followed."""
        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args, **kwargs):
                return None

        opener = urllib.request.build_opener(NoRedirect)
        request = urllib.request.Request(self.base + path, data=body, headers=headers or {}, method="POST")
        try:
            with opener.open(request, timeout=30) as response:
                return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
        except urllib.error.HTTPError as error:
            return error.code, {k.lower(): v for k, v in error.headers.items()}, error.read()

    def json(self, path: str, headers: dict[str, str] | None = None) -> Any:
        status, _, body = self.get(path, headers)
        assert status == 200, (path, status, body[:500])
        return json.loads(body)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)
        self._sock.close()
