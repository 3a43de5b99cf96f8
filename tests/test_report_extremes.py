"""Reports never crash on a figure the parser accepts: 5e-324, 0, negative figures, 1e308 and
1.7e308 (alone, mixed, across runs) in perf.html, its charts, the email body and ``report compare``."""

from __future__ import annotations

import csv
import json
import re

import pytest

from conftest import run_cli

EXTREMES = ["5e-324", "0", "-3", "-1.7e308", "1e308", "1.7e308", "2.2250738585072014e-308", "7"]


def _perf_csv(path, figures_by_model: dict[str, list[str]], runs: int = 3) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["model", "status", "performance", "metric", "run_id", "started_at", "gpu_architecture"])
        for run in range(runs):
            for model, figures in figures_by_model.items():
                writer.writerow([model, "SUCCESS", figures[run % len(figures)], "samples_per_second", f"r{run}",
                                 f"2026-01-0{run + 1}T00:00:00+00:00", "x86_64"])


def _strict_json(text: str):
    def refuse(constant):
        raise AssertionError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("layout", ["one-model-each", "all-in-one-model", "single-run"])
def test_html_and_email_handle_extreme_figures(tmp_path, monkeypatch, layout):
    monkeypatch.chdir(tmp_path)
    if layout == "one-model-each":
        _perf_csv(tmp_path / "perf.csv", {f"m{i}": [f] for i, f in enumerate(EXTREMES)})
    elif layout == "all-in-one-model":
        _perf_csv(tmp_path / "perf.csv", {"mixed": EXTREMES}, runs=len(EXTREMES))
    else:
        _perf_csv(tmp_path / "perf.csv", {f"m{i}": [f] for i, f in enumerate(EXTREMES)}, runs=1)
    done = run_cli("report", "to-html", "--csv-file-path", "perf.csv")
    assert done.code == 0, done
    page = (tmp_path / "perf.html").read_text()
    svg_numbers = re.findall(r'(?:points|d|x|y|x1|x2|y1|y2|width|height)="([^"]*)"', page)
    assert not [n for n in svg_numbers if re.search(r"\b(nan|inf)\b", n, re.I)]
    email = run_cli("report", "to-email", "--dir", ".", "-o", "email.html")
    assert email.code == 0, email


@pytest.mark.parametrize("old, new, verdict", [
    ("5e-324", "1.7e308", "faster"), ("1.7e308", "-1.7e308", "slower"), ("0", "5e-324", "faster"),
    ("1e308", "1e308", "unchanged"), ("-3", "-3", "unchanged"), ("1.7e308", "1e308", "slower"),
    ("5e-324", "5e-324", "unchanged"), ("0", "0", "unchanged"),
])
def test_compare_handles_extreme_figures(tmp_path, old, new, verdict):
    _perf_csv(tmp_path / "old.csv", {"m": [old]})
    _perf_csv(tmp_path / "new.csv", {"m": [new]})
    done = run_cli("report", "compare", str(tmp_path / "old.csv"), str(tmp_path / "new.csv"), "--json")
    assert done.code == 0, done
    [model] = _strict_json(done.stdout)["models"]
    assert model["verdict"] == verdict, model
    table = run_cli("report", "compare", str(tmp_path / "old.csv"), str(tmp_path / "new.csv"))
    assert table.code == 0 and "nan" not in table.stdout and "inf" not in table.stdout, table


def test_mean_of_huge_figures_does_not_overflow(tmp_path):
    _perf_csv(tmp_path / "a.csv", {"m": ["1.7e308"]})
    done = run_cli("report", "compare", str(tmp_path / "a.csv"), str(tmp_path / "a.csv"), "--json")
    [model] = _strict_json(done.stdout)["models"]
    assert model["old_mean"] == pytest.approx(1.7e308) and model["ratio"] == 1.0
