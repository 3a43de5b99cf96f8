"""perf.html and the email body in a real headless Chromium (Debian package ``chromium``).

The browser loads the page from a file:// URL with networking off, runs its script, and dumps the
resulting DOM; a copy of the page with a small driver script appended clicks the sort headers,
types into the filter, pages and picks a model, and writes what it saw into the DOM. Screenshots
go to test-artifacts/ (gitignored) for people to look at.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, require_service
from madengine.reports.html import PAGE_SIZE, csv_to_html
from madengine.reports.mail import write_email
from madengine.results import PerfRecord, append_records

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ARTIFACTS = REPO / "test-artifacts"
XSS = "<script>alert(1)</script>"

DRIVER = """
<script>
(function () {
  var rows = document.getElementById("rows");
  var tools = document.querySelector('[data-tools="rows"]');
  var header = Array.prototype.map.call(rows.tHead.rows[0].cells, function (th) { return th.textContent; });
  var perf = header.indexOf("performance");
  function column(index) {
    return Array.prototype.map.call(rows.tBodies[0].rows, function (tr) { return tr.cells[index].textContent; });
  }
  var seen = {header: header, first_page: rows.tBodies[0].rows.length,
              info: tools.querySelector("[data-info]").textContent};
  rows.tHead.rows[0].cells[perf].click();
  seen.ascending = column(perf).slice(0, 3);
  rows.tHead.rows[0].cells[perf].click();
  seen.descending = column(perf).slice(0, 3);
  tools.querySelector("[data-next]").click();
  seen.page_two = tools.querySelector("[data-info]").textContent;
  var query = tools.querySelector("[data-query]");
  query.value = "bert";
  query.dispatchEvent(new Event("input"));
  seen.filtered_models = column(0).filter(function (v, i, a) { return a.indexOf(v) === i; });
  query.value = "";
  query.dispatchEvent(new Event("input"));
  var status = tools.querySelector("[data-status]");
  status.value = "FAILURE";
  status.dispatchEvent(new Event("change"));
  seen.failure_statuses = column(header.indexOf("status")).filter(function (v, i, a) { return a.indexOf(v) === i; });
  status.value = "";
  status.dispatchEvent(new Event("change"));
  document.querySelector('#models a[data-model-filter]').click();
  seen.chip = tools.querySelector("[data-model-chip]").textContent;
  seen.model_rows = column(0).filter(function (v, i, a) { return a.indexOf(v) === i; });
  var out = document.createElement("pre");
  out.id = "driver-result";
  out.textContent = JSON.stringify(seen);
  document.body.appendChild(out);
}());
</script>
"""


def chromium_binary() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def chromium():
    binary = chromium_binary()
    require_service("chromium", binary is not None, "apt-get install chromium (scripts/ci.d/50-chromium.sh)")
    return binary


def browse(chromium: str, page: Path, profile: Path, *extra: str) -> str:
    """Load ``page`` in headless Chromium (no network, fresh profile) and return its stdout."""
    argv = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
            "--disable-extensions", "--hide-scrollbars", f"--user-data-dir={profile}", "--virtual-time-budget=5000",
            "--run-all-compositor-stages-before-draw",  # screenshots of fully painted pages
            *extra, page.as_uri()]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def write_history(path: Path) -> Path:
    records = []
    for run in range(4):
        for model, base in (("bert", 100.0), ("resnet50", 250.0), (XSS, 60.0)):
            records.append(PerfRecord(model=model, status="SUCCESS", performance=base * (1 + run / 10),
                                      metric="samples_per_second", run_id=f"run-{run}", machine_name="node1",
                                      started_at=f"2024-06-0{run + 1}T08:00:00+00:00", gpu_architecture="gfx942"))
        for n in range(14):
            records.append(PerfRecord(model=f"llama_{n}", status="SUCCESS" if n % 5 else "FAILURE",
                                      performance=float(10 + n + run) if n % 5 else None, metric="tokens/sec",
                                      reason="" if n % 5 else "model script exited with code 1",
                                      run_id=f"run-{run}", started_at=f"2024-06-0{run + 1}T09:00:00+00:00"))
    append_records(path, records)
    return path


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    return csv_to_html(write_history(tmp_path_factory.mktemp("browser") / "perf.csv"))


def test_page_renders_tables_and_charts(chromium, page, tmp_path):
    dom = browse(chromium, page, tmp_path / "profile", "--dump-dom")
    assert 'data-report-ready="1"' in dom  # the page's script ran to its end
    rows_body = dom.split('id="rows"')[1].split("</tbody>")[0]
    assert rows_body.count("<tr ") == PAGE_SIZE  # 68 rows, paged by the script
    assert f"rows 1–{PAGE_SIZE} of 68 (page 1/2)" in dom
    assert dom.count("<svg") >= 4 and "<rect" in dom and "<path" in dom and "<polyline" in dom
    assert "17 of 17 shown" in dom  # the models table, one row per model
    # the hostile model name is text, never markup
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom and XSS not in dom
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "perf-report.png"
    shot.unlink(missing_ok=True)
    browse(chromium, page, tmp_path / "profile2", f"--screenshot={shot}", "--window-size=1280,2400")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000


def test_sorting_filtering_paging_and_model_grouping(chromium, page, tmp_path):
    driven = tmp_path / "driven.html"
    driven.write_text(page.read_text().replace("</body>", DRIVER + "</body>"))
    dom = browse(chromium, driven, tmp_path / "profile", "--dump-dom")
    seen = json.loads(html.unescape(re.search(r'<pre id="driver-result">(.*?)</pre>', dom, re.S).group(1)))
    assert seen["first_page"] == PAGE_SIZE and seen["header"][:5] == ["model", "status", "reason", "performance", "metric"]
    ascending = [float(v) for v in seen["ascending"]]
    descending = [float(v) for v in seen["descending"]]
    assert ascending == sorted(ascending) and ascending[0] == 11.0
    assert descending == sorted(descending, reverse=True) and descending[0] == 325.0
    assert seen["page_two"] == f"rows {PAGE_SIZE + 1}–68 of 68 (page 2/2)"
    assert seen["filtered_models"] == ["bert"]
    assert seen["failure_statuses"] == ["FAILURE"]
    first_model = seen["chip"].removeprefix("model: ").removesuffix(" ✕")
    assert seen["model_rows"] == [first_model]


def test_email_body_renders(chromium, tmp_path):
    folder = tmp_path / "results"
    folder.mkdir()
    write_history(folder / "nightly.csv")
    append_records(folder / "adhoc.csv", [PerfRecord(model="solo", status="SUCCESS", performance=1.0, metric="x")])
    target, _ = write_email(folder)
    dom = browse(chromium, target, tmp_path / "profile", "--dump-dom")
    assert dom.index(">adhoc.csv</h2>") < dom.index(">nightly.csv</h2>")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom and XSS not in dom
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "email-body.png"
    shot.unlink(missing_ok=True)
    browse(chromium, target, tmp_path / "profile2", f"--screenshot={shot}", "--window-size=1100,1400")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


VISIBILITY_DRIVER = """
<script>
(function () {
  var rows = document.getElementById("rows");
  var header = Array.prototype.map.call(rows.tHead.rows[0].cells, function (th) { return th.textContent; });
  var reason = header.indexOf("reason");
  var failing = Array.prototype.filter.call(rows.tBodies[0].rows, function (tr) {
    return tr.classList.contains("failure"); })[0];
  var cell = failing.cells[reason].getBoundingClientRect();
  var seen = {viewport: window.innerWidth, reason_left: cell.left, reason_right: cell.right,
              reason_text: failing.cells[reason].textContent};
  var out = document.createElement("pre"); out.id = "seen"; out.textContent = JSON.stringify(seen);
  document.body.appendChild(out);
})();
</script>
"""


def test_failure_reasons_are_visible_at_1280_px(chromium, tmp_path):
    """A FAILURE row's reason is on screen in a 1280 px window, without scrolling sideways."""
    reason = ("model script exited with code 3: ValueError: the input has shape (3, 224, 224) but the model "
              "expects (3, 256, 256); resize the images or pass --size 224 (and a lot more words to wrap)")
    csv = tmp_path / "perf.csv"
    append_records(csv, [PerfRecord(model="resnet50_training_long_name", status="SUCCESS", performance=1234.5,
                                    metric="images_per_second", docker_image="ci-resnet50_training_long_name_rocm",
                                    machine_name="node-with-a-long-host-name-01", gpu_architecture="gfx942",
                                    run_id="20261123-120000-abcdef", started_at="2026-11-23T12:00:00+00:00"),
                         PerfRecord(model="bert_large_inference", status="FAILURE", reason=reason,
                                    docker_image="ci-bert_large_inference_rocm", machine_name="node-01",
                                    run_id="20261123-120000-abcdef", started_at="2026-11-23T12:00:00+00:00")])
    page = csv_to_html(csv)
    driven = page.with_name("visible.html")
    driven.write_text(page.read_text().replace("</body>", VISIBILITY_DRIVER + "</body>"))
    dom = browse(chromium, driven, tmp_path / "profile", "--dump-dom", "--window-size=1280,900")
    seen = json.loads(html.unescape(re.search(r'<pre id="seen">(.*?)</pre>', dom, re.S).group(1)))
    assert seen["viewport"] == 1280 and seen["reason_text"].startswith("model script exited with code 3")
    assert 0 <= seen["reason_left"] and seen["reason_right"] <= seen["viewport"], seen
    ARTIFACTS.mkdir(exist_ok=True)
    browse(chromium, page, tmp_path / "profile2", f"--screenshot={ARTIFACTS / 'perf-html-failure-1280.png'}",
           "--window-size=1280,900")


SCORECARD_DRIVER = """
<script>
(function () {
  var grid = document.querySelector("table.grid");
  var header = Array.prototype.map.call(grid.tHead.rows[0].cells, function (th) { return th.innerText.trim(); });
  var cells = Array.prototype.map.call(grid.tBodies[0].rows[0].cells, function (td) { return td.innerText.trim(); });
  var badge = grid.querySelector("span.precision").getBoundingClientRect();
  var out = document.createElement("pre"); out.id = "seen";
  out.textContent = JSON.stringify({header: header, cells: cells, badge_width: badge.width});
  document.body.appendChild(out);
})();
</script>
"""


def _scorecard_cell(backend: str, status: str, precision: str, p50: float | None, ratio: float | None,
                    reason: str = "") -> dict:
    requested = backend.partition(":")[2] or "f32"
    return {"backend": backend, "status": status, "reason": reason, "operator": None,
            "reference": backend == "onnxruntime-cpu-opt-disabled", "precision": precision,
            "precision_requested": requested, "p50_ms": p50, "ratio": ratio, "prepare_ms": 5.0 if p50 else None,
            "first_inference_ms": 1.0 if p50 else None, "version": "1.0",
            "environment": {"cpu_model": "Test CPU", "cpu_flags": ["avx2", "avx512_bf16", "amx_bf16"],
                            "versions": {"openvino": "2026.4.1", "numpy": "2.4.6", "python": "3.11.7"}},
            "stats": {"p50_ms": p50, "p90_ms": p50, "p99_ms": p50, "cv": 0.01, "n": 20} if p50 else None,
            "warnings": [], "details": {}, "atol": 2e-2 if requested == "bf16" else 1e-4,
            "rtol": 2e-2 if requested == "bf16" else 1e-4, "check": None}


def test_scorecard_grid_shows_each_cells_precision(chromium, tmp_path):
    """What a person sees in the scorecard page: every cell says the precision the runtime computed in
    (f32 by default, bf16 in the opt-in column), the bf16 column is named so, and a cell that did not
    run shows none."""
    from madengine.reports.scorecard import write_scorecard_html

    cells = [_scorecard_cell("onnxruntime-cpu-opt-disabled", "PASS", "f32", 13.7, 1.0),
             _scorecard_cell("openvino-cpu", "PASS", "f32", 11.7, 0.86),
             _scorecard_cell("openvino-cpu:bf16", "PASS", "bf16", 4.19, 0.31),
             _scorecard_cell("tvm-relax-llvm:bf16", "UNSUPPORTED", "", None, None,
                             "tvm-relax-llvm cannot run bf16: it computes in the model's own types (f32)")]
    backends = [c["backend"] for c in cells]
    scorecard = {"run_id": "20261125-000000-abcdef", "perf_csv": "perf.csv", "run_dir": "runs", "image": "",
                 "backends": backends, "counts": {"PASS": 3, "MISMATCH": 0, "UNSUPPORTED": 1, "ERROR": 0},
                 "models": [{"model": "vision/resnet18@1", "path": "resnet18.onnx", "url": "", "sha256": "ab" * 32,
                             "reference": "onnxruntime-cpu-opt-disabled", "atol": 1e-4, "rtol": 1e-4,
                             "input_shapes": "pixel_values=1,3,64,64", "batch_size": 1, "problem": "",
                             "backends": backends, "cells": cells}]}
    page = write_scorecard_html(scorecard, tmp_path / "scorecard.html")
    driven = tmp_path / "driven.html"
    driven.write_text(page.read_text().replace("</body>", SCORECARD_DRIVER + "</body>"))
    dom = browse(chromium, driven, tmp_path / "profile", "--dump-dom", "--window-size=1280,900")
    seen = json.loads(html.unescape(re.search(r'<pre id="seen">(.*?)</pre>', dom, re.S).group(1)))
    assert seen["header"] == ["model", *backends]
    text = [" ".join(cell.split()) for cell in seen["cells"][1:]]
    assert text[0].startswith("PASS f32 reference 13.7 ms") and text[1].startswith("PASS f32 11.7 ms")
    assert text[2].startswith("PASS bf16 4.19 ms 0.31×")
    assert text[3].startswith("UNSUPPORTED tvm-relax-llvm cannot run bf16") and "f32 " not in text[3][:20]
    assert seen["badge_width"] > 10  # the precision is drawn, not just in the markup
    assert "CPU <code>Test CPU</code> (avx2 avx512_bf16 amx_bf16)" in dom
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "scorecard-precision.png"
    shot.unlink(missing_ok=True)
    browse(chromium, page, tmp_path / "profile2", f"--screenshot={shot}", "--window-size=1280,900")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
