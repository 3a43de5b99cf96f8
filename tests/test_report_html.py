"""madengine report to-html: the self-contained perf.html, its summary, charts, tables and escaping.

The page as a browser shows it is tested in test_report_browser.py (real headless Chromium).
"""

from __future__ import annotations

import html
import math
import re
from pathlib import Path

import markupsafe
import pytest

from madengine.core.errors import InputError
from madengine.reports import charts, html as report_html
from madengine.reports.html import csv_to_html
from madengine.reports.summary import summarize
from madengine.reports.table import load_table
from madengine.results import PerfRecord, append_records
from madengine.results.columns import PERF_COLUMNS

XSS = "<script>alert(1)</script>"
ATTRIBUTE_XSS = '"><img src=x onerror=alert(2)>'


def write_history(path: Path, runs: int = 3) -> Path:
    """Three models over ``runs`` runs; one failure, one skip, an XSS model name and reason."""
    records = []
    for run in range(runs):
        started = f"2024-05-0{run + 1}T10:00:00+00:00"
        for model, base, metric in (("bert", 100.0, "samples_per_second"), (XSS, 50.0, "samples_per_second"),
                                    ("gpt2", 20.0, "latency_ms")):
            records.append(PerfRecord(model=model, status="SUCCESS", performance=base + run, metric=metric,
                                      run_id=f"run-{run}", started_at=started, machine_name="node1"))
        records.append(PerfRecord(model="resnet", status="FAILURE", reason=ATTRIBUTE_XSS, run_id=f"run-{run}",
                                  started_at=started))
    records.append(PerfRecord(model="skipper", status="SKIPPED", reason="skip_gpu_arch", run_id=f"run-{runs - 1}"))
    append_records(path, records)
    return path


def test_writes_perf_html_beside_the_csv(cli, tmp_path):
    perf = write_history(tmp_path / "perf.csv")
    out = cli("report", "to-html", "--csv-file-path", str(perf))
    assert out.code == 0, out
    assert out.stdout.strip() == str(tmp_path / "perf.html")
    page = (tmp_path / "perf.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")


def test_output_option_and_old_name(cli, tmp_path):
    perf = write_history(tmp_path / "perf.csv")
    target = tmp_path / "out" / "report.html"
    assert cli("report", "to-html", "--csv_file_path", str(perf), "-o", str(target)).code == 0
    assert target.is_file() and not (tmp_path / "perf.html").exists()


def test_page_is_self_contained(tmp_path):
    page = csv_to_html(write_history(tmp_path / "perf.csv")).read_text()
    # no resource is fetched from anywhere: no external scripts, styles, images or fonts
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "@import" not in page and "url(" not in page
    assert "<script>" in page and "<style>" in page  # inline


def test_summary_counts_tables_and_status_colouring(tmp_path):
    page = csv_to_html(write_history(tmp_path / "perf.csv")).read_text()
    cards = re.findall(r'<div class="card-value">([^<]*)</div><div class="card-label">([^<]*)</div>', page)
    assert {label: value for value, label in cards} == {
        "rows": "13", "SUCCESS": "9", "FAILURE": "3", "SKIPPED": "1", "success rate": "69.2 %", "models": "5",
        "runs": "3", "machines": "1"}
    models_table = page.split('id="models"')[1].split("</table>")[0]
    assert models_table.count("<tr data-model=") == 5  # grouped: one row per model
    rows_table = page.split('id="rows"')[1].split("</table>")[0]
    assert rows_table.count('<tr class="failure" data-status="FAILURE"') == 3
    assert rows_table.count('<tr class="success" data-status="SUCCESS"') == 9
    assert rows_table.count('<tr class="skipped" data-status="SKIPPED"') == 1
    assert "tr.failure" in page and "tr.success td.status" in page  # the colouring rules


def test_charts_per_model_and_across_runs(tmp_path):
    page = csv_to_html(write_history(tmp_path / "perf.csv")).read_text()
    assert page.count('<svg viewBox="0 0 900') == 4  # bars and lines for each of the 2 metrics
    assert "Mean <b>latency_ms</b> per model (lower is better)" in page
    assert "<b>samples_per_second</b> across runs" in page
    assert page.count('<polyline points=') == 3  # a sparkline for each model with history


def test_no_history_chart_for_a_single_run(tmp_path):
    page = csv_to_html(write_history(tmp_path / "perf.csv", runs=1)).read_text()
    assert "per model" in page and "across runs" not in page and "<polyline" not in page


def test_every_cell_is_escaped(tmp_path):
    page = csv_to_html(write_history(tmp_path / "perf.csv")).read_text()
    assert XSS not in page and "<img" not in page
    escaped = html.escape(XSS)
    assert page.count(escaped) >= 5  # bar label, legend, models table, rows table, chart tooltips
    assert str(markupsafe.escape(ATTRIBUTE_XSS)) in page
    assert 'data-model="&lt;script&gt;alert(1)&lt;/script&gt;"' in page  # attributes too
    assert page.count("<script") == 1  # only the page's own script


def test_scale_limits_keep_the_page_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(report_html, "ROW_LIMIT", 10)
    monkeypatch.setattr(report_html, "MODEL_LIMIT", 4)
    monkeypatch.setattr(charts, "MAX_BARS", 3)
    monkeypatch.setattr(charts, "MAX_POINTS", 5)
    records = [PerfRecord(model=f"m{n % 6}", status="SUCCESS", performance=float(n), metric="x",
                          run_id=f"r{n // 6:03d}", reason="long " * 2000) for n in range(120)]
    perf = tmp_path / "perf.csv"
    append_records(perf, records)
    page = csv_to_html(perf).read_text()
    rows_table = page.split('id="rows"')[1].split("</table>")[0]
    assert rows_table.count("<tr class=") == 10
    assert "Showing the latest 10 of 120 rows" in page
    assert 'data-model="m5"' in rows_table.split("<tr class=")[1]  # newest first
    assert page.split('id="models"')[1].split("</table>")[0].count("<tr data-model=") == 4
    assert "The 4 models with most rows are listed; summary and charts cover all 6." in page
    assert "3 more model(s) with fewer results not shown" in page
    assert "20 runs averaged into 5 buckets" in page
    assert '<div class="card-value">120</div>' in page
    assert "long " * 2000 not in page and ("long " * 59 + "long…") in page  # cells clipped to 300 characters


def test_v1_perf_csv_without_run_columns(tmp_path):
    perf = tmp_path / "perf.csv"
    perf.write_text(", ".join(PERF_COLUMNS) + "\n"
                    + "\n".join(",".join([m, "1"] + [""] * 11 + [p, "img/s", "", "SUCCESS"] + [""] * 8)
                                for m, p in (("a", "10"), ("a", "12"), ("b", "7"))) + "\n")
    page = csv_to_html(perf).read_text()
    assert '<div class="card-value">3</div><div class="card-label">rows</div>' in page
    assert "<b>img/s</b> per model" in page and "across runs" not in page


def test_summary_aggregates(tmp_path):
    perf = tmp_path / "perf.csv"
    append_records(perf, [
        PerfRecord(model="m", status="SUCCESS", performance=99.0, metric="other", run_id="early"),
        PerfRecord(model="m", status="SUCCESS", performance=10.0, metric="x", run_id="late", started_at="2024-02-01"),
        PerfRecord(model="m", status="SUCCESS", performance=2.0, metric="x", run_id="early", started_at="2024-01-01"),
        PerfRecord(model="m", status="SUCCESS", performance=4.0, metric="x", run_id="early", started_at="2024-01-01"),
        PerfRecord(model="m", status="FAILURE", run_id="late", started_at="2024-02-01"),
        PerfRecord(model="n", status="weird", started_at="2024-03-01"),
    ])
    summary = summarize(load_table(perf))
    assert summary.counts == {"SUCCESS": 4, "FAILURE": 1, "SKIPPED": 0, "other": 1}
    assert [run.key for run in summary.runs] == ["early", "late", "2024-03-01"]  # by start time
    m, n = summary.models
    assert (m.metric, m.rows, m.success, m.failure, m.latest_status) == ("x", 5, 4, 1, "FAILURE")
    assert (m.count, m.mean, m.minimum, m.maximum) == (3, 16 / 3, 2.0, 10.0)  # the older 'other' metric left out
    assert m.history == [(0, 3.0), (1, 10.0)]
    assert (n.rows, n.mean, n.latest_status) == (1, None, "WEIRD")


def test_nice_ticks_and_sparkline():
    from madengine.reports.summary import ModelStats

    assert charts.nice_ticks(0, 97) == [0, 25, 50, 75, 100]
    assert charts.nice_ticks(-3, 12) == [-5, 0, 5, 10, 15]
    flat = charts.nice_ticks(5, 5)
    assert flat[0] < 5 < flat[-1]
    assert charts.sparkline(ModelStats("one", history=[(0, 1.0)])) == ""
    points = charts.sparkline(ModelStats("m", history=[(0, 1.0), (1, 3.0), (2, 2.0)]))
    assert points == "2.0,22.0 60.0,2.0 118.0,12.0"  # low at the bottom, high at the top, own scale


@pytest.mark.parametrize("content, expected", [
    ("", "empty CSV"),
    ("name,value\na,1\n", "no column model"),
    ("model,status\na,SUCCESS,extra\n", "data row 1 has 3 cells but the header has 2"),
    ("model,status\n\"a,SUCCESS\n", "malformed CSV"),
])
def test_malformed_csv_is_an_input_error(cli, tmp_path, content, expected):
    perf = tmp_path / "perf.csv"
    perf.write_text(content)
    out = cli("report", "to-html", "--csv-file-path", str(perf))
    assert out.code == 2 and expected in out.stderr, out
    assert len(out.stderr.strip().splitlines()) == 1 and not (tmp_path / "perf.html").exists()


def test_other_bad_inputs(cli, tmp_path):
    (tmp_path / "latin1.csv").write_bytes("model\ncaf\xe9\n".encode("latin-1"))
    perf = write_history(tmp_path / "perf.csv")
    cases = [
        (("--csv-file-path", str(tmp_path / "missing.csv")), "missing.csv: file not found"),
        (("--csv-file-path", str(tmp_path)), "is a folder, not a regular file"),
        (("--csv-file-path", str(tmp_path / "latin1.csv")), "not a UTF-8 text CSV"),
        (("--csv-file-path", str(perf), "-o", str(perf)), "would overwrite its own CSV"),
        (("--csv-file-path", str(perf), "-o", str(tmp_path / "perf.csv" / "x.html")), "cannot write the report"),
    ]
    for argv, expected in cases:
        out = cli("report", "to-html", *argv)
        assert out.code == 2 and expected in out.stderr, (argv, out)
        assert len(out.stderr.strip().splitlines()) == 1, out
    with pytest.raises(InputError):
        csv_to_html(tmp_path / "missing.csv")


def test_run_writes_perf_html_after_a_run(tmp_path):
    from madengine.cli.perf_html import write_html
    from madengine.cli.env import Environment
    import io

    perf = write_history(tmp_path / "perf.csv")
    err = io.StringIO()
    write_html(Environment(stdout=io.StringIO(), stderr=err), perf)
    assert (tmp_path / "perf.html").is_file() and "report written to" in err.getvalue()
    write_html(Environment(stdout=io.StringIO(), stderr=err), tmp_path / "gone.csv")  # never raises
    assert "perf.html not written" in err.getvalue()


# --- spread, identities, run labels and detected changes -------------------------------------------

def _stepped_history(path: Path) -> Path:
    """gpt2 latency steps up at run 10 of 16 (a regression); each run has 3 repeats."""
    import random

    from madengine.results.samples import sample_columns

    rng = random.Random(3)
    records = []
    for run in range(16):
        started = f"2024-07-01T08:{run:02d}:{run * 3 % 60:02d}+00:00"  # one minute apart: labels must differ
        level = 24.0 if run >= 10 else 20.0
        records.append(PerfRecord(model="gpt2", status="SUCCESS", metric="latency_ms", run_id=f"run-{run:02d}",
                                  started_at=started, executor="docker", gpu_vendor="AMD", gpu_architecture="gfx942",
                                  n_gpus="1", **sample_columns([level * rng.lognormvariate(0, 0.01) for _ in range(3)])))
        for configs, base in (("", 100.0), ("bs=64", 400.0)):
            records.append(PerfRecord(model="bert", status="SUCCESS", metric="samples_per_second", tag_configs=configs,
                                      performance=base * rng.lognormvariate(0, 0.01), run_id=f"run-{run:02d}",
                                      started_at=started, executor="docker"))
    append_records(path, records)
    return path


def test_spread_identities_run_labels_and_changes(tmp_path):
    page = csv_to_html(_stepped_history(tmp_path / "perf.csv")).read_text()
    # tag configs beside the model name; two identities of bert are two results, never averaged together
    assert ">bert [bs=64]</a>" in page and ">bert</a>" in page
    assert '<div class="card-value">3</div><div class="card-label">results</div>' in page
    models_table = page.split('id="models"')[1].split("</table>")[0]
    assert models_table.count("<tr data-model=") == 3 and "docker · AMD gfx942 · 1 GPU" in models_table
    # spread: CI error bars on the bars, min–max bands on the lines, from the repeats
    assert 'class="error"' in page and "95 % CI" in page and '<polygon class="band"' in page
    # the across-runs axis: run id and start time to the second
    assert ">run-00<tspan" in page and "2024-07-01 08:00:00</tspan>" in page and "2024-07-01 08:15:45" in page
    # the change: marked on the chart and listed with where to look next
    assert page.count('<line class="change regression"') == 1
    changes = page.split('id="changes"')[1].split("</table>")[0]
    assert "regression (latest)" in changes and "run-09 · 2024-07-01 08:09:27" in changes
    assert "madengine report trace-diff run-09 run-10 gpt2" in changes


@pytest.mark.parametrize("figures", [
    (5e-324, 0.0, -1.0, 1e308, 1.7e308, -1.7e308),
    (1.7e308, 1.7e308, 1.7e308),
    (5e-324, 5e-324, 1e-320),
    (0.0, 0.0, 0.0),
    (-1.7e308, -1e308, -5e-324),
])
def test_extreme_figures_render(tmp_path, figures):
    from madengine.results.samples import sample_columns

    records = []
    for run in range(8):
        for number, value in enumerate(figures):
            records.append(PerfRecord(model=f"m{number}", status="SUCCESS", metric="x", performance=value,
                                      run_id=f"r{run}", started_at=f"2024-01-01T00:00:0{run}Z"))
        records.append(PerfRecord(model="mixed", status="SUCCESS", metric="x", run_id=f"r{run}",
                                  started_at=f"2024-01-01T00:00:0{run}Z", **sample_columns(list(figures))))
    perf = tmp_path / "perf.csv"
    append_records(perf, records)
    page = csv_to_html(perf).read_text()
    assert page.rstrip().endswith("</html>")
    svg_numbers = re.findall(r' (?:x|y|x1|x2|y1|y2|cx|cy|width)="([^"]*)"', page)
    assert svg_numbers and all(math.isfinite(float(v)) for v in svg_numbers if not v.endswith("%"))
    assert not re.search(r"\b(nan|inf)\b", re.sub(r"<script>.*?</script>", "", page, flags=re.S), re.I)


def test_one_rounding_everywhere():
    from madengine.reports.metrics import format_number
    from madengine.reports.render import format_figure

    for value in (5e-324, 0.0, -1.0, 0.12345678, 12.3456, 1234567.8, 1e308, 1.7e308, -1.7e308):
        assert format_figure(repr(value)) == format_number(value)
    assert (format_number(1.7e308), format_number(5e-324), format_number(-1.0)) == ("1.7e+308", "4.941e-324", "-1")
    assert format_figure("n/a") == "n/a" and format_number(float("inf")) == ""
