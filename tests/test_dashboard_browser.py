"""The dashboard in a real headless Chromium (Debian's ``chromium``, driven by Playwright's Python
package pointed at the system browser; Playwright's own browser download is not used).

What a person sees: the trend chart has one point per run, a filter narrows the list, a row written
while the page is open appears without a reload, the compare view shows a verdict, a hostile model
name is text. Screenshots go to test-artifacts/dashboard-*.png (gitignored).
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import pytest

from conftest import REPO, require_service
from dashboard_helpers import (BAD_MODELS, BAD_RUN, RUNS, STEP_AT, XSS, LiveServer, run_id, write_bad_night,
                               write_history, write_run_files)
from madengine.database import update_table
from madengine.database.live import LiveRecorder
from madengine.database.urls import parse_url
from madengine.results import PerfRecord
from madengine.server.config import ServerConfig

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = REPO / "test-artifacts"
#: a row written while a page is open shows without a reload (the server checks every 0.5 s, about a
#: second on a quiet machine); the bound leaves a loaded CI machine room and still tells a live page
#: from one that never updates
LIVE_WITHIN_S = 10.0


@pytest.fixture(scope="module")
def browser():
    require_service("chromium", CHROMIUM.exists(), "apt-get install chromium (scripts/ci.d/50-chromium.sh)")
    require_service("playwright", importlib.util.find_spec("playwright") is not None, "pip install 'madengine[test]'")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield launched
        launched.close()


@pytest.fixture
def site(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'results.db'}"
    update_table(write_history(tmp_path / "perf.csv"), url)
    write_run_files(tmp_path / "madengine_runs")
    serving = LiveServer(ServerConfig(url=parse_url(url), runs_dir=tmp_path / "madengine_runs", port=0))
    serving.url = url
    yield serving
    serving.stop()


@pytest.fixture
def page(browser, site):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    opened = context.new_page()
    problems: list[str] = []
    opened.on("pageerror", lambda error: problems.append(str(error)))
    opened.on("dialog", lambda dialog: problems.append(f"dialog: {dialog.message}"))  # an alert() that ran
    opened.problems = problems
    yield opened
    context.close()
    assert problems == []


def open_page(page, site, path: str) -> None:
    page.goto(site.base + path)
    page.wait_for_selector("html[data-ready='1']")


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"dashboard-{name}.png"), full_page=True)


def result_names(page) -> list[str]:
    return page.locator("#results tbody tr td:first-child").all_inner_texts()


def test_overview_filters_narrow_the_list_and_live_in_the_url(page, site):
    open_page(page, site, "/")
    names = result_names(page)
    assert len(names) == 4 and names[0].startswith("resnet")  # failures first
    assert f"{XSS} · docker" in page.locator("#results").inner_text()  # the hostile name is text
    # resnet has never passed: not a new failure, it waits folded in its group, with its reason
    assert page.locator("table.new-failures").count() == 0
    page.click("details#broken summary")
    assert "out of memory" in page.locator("table.broken-failures").inner_text()
    page.wait_for_selector("#live-state[data-state='on']")
    shot(page, "overview")
    page.fill("input[name=model]", "gpt")
    page.press("input[name=model]", "Enter")
    page.wait_for_url("**/?model=gpt*")
    assert [n.split(" ·")[0] for n in result_names(page)] == ["gpt2"]
    page.goto(site.base + "/")
    page.select_option("select[name=status]", "FAILURE")  # a list submits itself
    page.wait_for_url("**status=FAILURE*")
    assert [n.split(" ·")[0] for n in result_names(page)] == ["resnet"]
    shared = page.url
    page.goto(shared)  # the URL alone gives the same view
    assert [n.split(" ·")[0] for n in result_names(page)] == ["resnet"]
    # the results sort on the server (all pages): a header is a link that keeps the filters
    open_page(page, site, "/")
    page.click("#results thead th[data-sort-key='performance'] a")
    page.wait_for_url("**sort=performance&order=desc*")
    assert result_names(page)[0].startswith("bert [bs=64]")  # 100 samples/s: the largest figure
    assert page.locator("#results thead th[aria-sort='descending']").inner_text().startswith("performance")
    # a table of one page sorts in the page: the runs of a trend, oldest first after a click on "started"
    open_page(page, site, "/trend?model=gpt2")
    page.click("details.runs-of-trend summary")
    runs = page.locator("details.runs-of-trend table")
    runs.locator("thead th", has_text="started").click()
    assert runs.locator("tbody tr td:first-child").first.inner_text() == run_id(1)


def test_trend_chart_has_one_point_per_run_and_marks_the_change(page, site):
    open_page(page, site, "/trend?model=gpt2&since=2026-02-01")
    chart = page.locator("svg.trend-chart")
    assert chart.count() == 1
    points = chart.locator("circle.point")
    assert points.count() == RUNS
    assert [points.nth(k).get_attribute("data-run") for k in range(RUNS)] == [run_id(k) for k in range(1, RUNS + 1)]
    assert chart.locator("line.change.regression").count() == 1
    assert chart.locator("polygon.band").count() == 1  # five samples a run: a spread band
    assert "regression" in page.locator("table.changes").inner_text()
    shot(page, "trend")
    page.select_option("select[name=machine]", "node1")
    page.wait_for_url("**machine=node1*")
    assert page.locator("svg.trend-chart circle.point").count() == RUNS // 2


def test_rows_of_a_run_in_progress_appear_without_a_reload(page, site):
    recorder = LiveRecorder(parse_url(site.url), {})
    new_run = "run-live"

    def land(model: str, performance: float | None) -> float:
        record = PerfRecord(model=model, status="SUCCESS" if performance else "FAILURE", performance=performance,
                            metric="samples_per_second", run_id=new_run, started_at="2026-03-01T10:00:00Z",
                            machine_name="node1", gpu_architecture="gfx942", gpu_vendor="AMD", executor="docker",
                            n_gpus="1", reason="" if performance else "killed by the test")
        assert recorder.record(record.to_row(), "perf.csv") is None
        return time.monotonic()

    land("first_model", 10.0)
    open_page(page, site, f"/run?run={new_run}")
    page.wait_for_selector("#live-state[data-state='on']")
    page.evaluate("window.__same_page = true")
    assert page.locator("#rows tbody tr").count() == 1
    written = land("second_model", None)
    page.wait_for_selector("#rows tbody tr[data-model='second_model']", timeout=LIVE_WITHIN_S * 1000)
    seen_after = time.monotonic() - written
    assert seen_after <= LIVE_WITHIN_S, seen_after
    assert page.evaluate("window.__same_page === true")  # updated in place, not reloaded
    assert page.locator("#rows tbody tr").first.get_attribute("data-model") == "second_model"  # failures first
    assert "killed by the test" in page.locator("#rows").inner_text()
    shot(page, "run-live")
    # the overview follows too: the new results are there without a reload
    open_page(page, site, "/")
    page.wait_for_selector("#live-state[data-state='on']")
    written = land("third_model", 3.0)
    page.wait_for_selector("#results tr:has-text('third_model')", timeout=LIVE_WITHIN_S * 1000)
    assert time.monotonic() - written <= LIVE_WITHIN_S


def test_compare_view_shows_the_verdict(page, site):
    open_page(page, site, f"/compare?old={run_id(STEP_AT - 1)}&new={run_id(STEP_AT)}")
    verdicts = {row.locator("td").first.inner_text().split(" ·")[0]: row.locator("[data-verdict]").inner_text()
                for row in page.locator("#compare tbody tr").all()}
    assert verdicts["gpt2"] == "slower"
    assert page.locator("[data-verdict-count='slower'] .card-value").inner_text() == "1"
    shot(page, "compare")
    page.select_option("select[name=old]", run_id(1))
    page.click("button[type=submit]")
    page.wait_for_url(f"**old={run_id(1)}*")
    assert page.locator("h1").inner_text() == f"{run_id(1)} → {run_id(STEP_AT)}"


def test_run_detail_links_the_log_and_the_trace(page, site):
    open_page(page, site, f"/run?run={run_id(RUNS)}")
    first = page.locator("#rows tbody tr").first
    assert first.get_attribute("data-model") == "resnet" and "out of memory" in first.inner_text()
    with page.expect_response(lambda r: r.url.endswith("/resnet/run.log")) as response:
        first.locator("td.files a").click()
    assert response.value.status == 200 and "out of memory" in page.locator("body").inner_text()
    open_page(page, site, f"/run?run={run_id(RUNS)}")
    page.click("text=trace.json")
    assert "traceEvents" in page.locator("body").inner_text()


def served_with_token(tmp_path, perf_csv):
    """A dashboard with an access token (triage needs one) over ``perf_csv`` imported into SQLite."""
    url = f"sqlite:///{tmp_path / 'results.db'}"
    update_table(perf_csv, url)
    serving = LiveServer(ServerConfig(url=parse_url(url), runs_dir=tmp_path / "madengine_runs", port=0,
                                      token=TRIAGE_TOKEN))
    serving.url = url
    return serving


@pytest.fixture
def triage_site(tmp_path, monkeypatch):
    """The history of ``site``, served with an access token."""
    monkeypatch.chdir(tmp_path)
    serving = served_with_token(tmp_path, write_history(tmp_path / "perf.csv"))
    yield serving
    serving.stop()


TRIAGE_TOKEN = "triage-token-for-the-test"


def test_a_regression_is_triaged_invalid_and_leaves_the_first_screen(browser, triage_site):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.goto(triage_site.base + f"/?token={TRIAGE_TOKEN}")  # once: a cookie, then the page without it
    page.wait_for_selector("html[data-ready='1']")
    assert "token" not in page.url
    # the step of gpt2 is an untriaged regression, first on the screen; nothing triaged yet
    waiting = page.locator("#triage tbody tr")
    assert waiting.count() == 1 and waiting.first.get_attribute("data-state") == "untriaged"
    assert waiting.first.locator("td").first.inner_text().startswith("gpt2")
    assert page.locator("#precision-value").inner_text() == "–"
    assert "not measured yet" in page.locator("[data-precision]").inner_text()
    shot(page, "triage-before")
    form = waiting.first.locator("form.triage")
    form.locator("select[name=state]").select_option("invalid")
    form.locator("input[name=note]").fill("noise: node2 ran a backup")
    form.locator("input[name=link]").fill("https://github.com/ROCm/madengine/issues/4242")
    form.locator("input[name=by]").fill("alice")
    with page.expect_navigation():
        form.locator("button[type=submit]").click()
    page.wait_for_selector("html[data-ready='1']")
    # it left the first screen, and the precision figure says what the triage measured
    assert page.locator("#triage tbody tr").count() == 0
    assert page.locator("[data-triage-empty]").count() == 1
    assert page.locator("#precision-value").inner_text() == "0 %"
    assert page.locator("[data-precision]").inner_text() == "0 % (1 invalid of 1 triaged)"
    shot(page, "triage-after")
    # the alerts page keeps it, with its state, note, link and who
    page.goto(triage_site.base + "/changes?state=invalid")
    row = page.locator("table.changes tbody tr").first
    assert row.get_attribute("data-state") == "invalid"
    text = row.inner_text()
    assert "noise: node2 ran a backup" in text and "alice" in text and "issues/4242" in text
    assert page.locator("form.triage input[name=by]").first.input_value() == "alice"  # remembered
    shot(page, "triage-alerts")
    context.close()
    assert problems == []


@pytest.fixture
def night_site(tmp_path, monkeypatch):
    """One night that made twenty results worse at once (tests/dashboard_helpers), served with a token."""
    monkeypatch.chdir(tmp_path)
    serving = served_with_token(tmp_path, write_bad_night(tmp_path / "night.csv"))
    yield serving
    serving.stop()


def test_a_twenty_alert_summary_is_triaged_with_one_action_and_twelve_fit_the_first_screen(browser, night_site):
    context = browser.new_context(viewport={"width": 1366, "height": 900})
    page = context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.goto(night_site.base + f"/summaries?token={TRIAGE_TOKEN}")
    page.wait_for_selector("html[data-ready='1']")
    summary = page.locator(f"section[data-summary='{BAD_RUN}']")
    rows = summary.locator("tbody tr")
    assert rows.count() == BAD_MODELS
    assert all(state == "untriaged" for state in (r.get_attribute("data-state") for r in rows.all()))
    # compact rows: the first screen (no scrolling) shows at least twelve of them whole
    on_screen = [box for box in (r.bounding_box() for r in rows.all()) if box and box["y"] + box["height"] <= 900]
    assert len(on_screen) >= 12, on_screen
    head = summary.locator("h2").inner_text()
    assert f"{BAD_MODELS} regression(s)" in head and "commit-06..commit-07" in head
    first = rows.first.inner_text()
    assert ", worse" in first and ("samples_per_second" in first or "latency_ms" in first)  # metric, direction in words
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard-summary-first-screen.png"))  # the 1366x900 screen itself
    # one action: the summary's state, who, and its button set all twenty
    summary.locator(".bulk-bar select[name=state]").select_option("invalid")
    summary.locator(".bulk-bar input[name=by]").fill("alice")
    with page.expect_navigation():
        summary.locator("button[data-bulk]").click()
    page.wait_for_selector("html[data-ready='1']")
    assert page.url.endswith(f"/summaries#summary-{BAD_RUN}")
    rows = page.locator(f"section[data-summary='{BAD_RUN}'] tbody tr")
    assert [r.get_attribute("data-state") for r in rows.all()] == ["invalid"] * BAD_MODELS
    shot(page, "summary-triaged")
    context.close()
    assert problems == []
