"""The scorecard as a self-contained HTML page: the models × backends grid coloured by status, with
p50 latencies and ratios, then every cell's details (reason, check errors, compile and first
inference times). Built from the scorecard's JSON (``ScorecardSummary.to_json()``), so a saved
``--json`` file renders the same page. One file, no script, no external resource; autoescaped.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any, Mapping

from madengine.core.version import __version__
from madengine.core.redact import redact
from madengine.reports.render import environment, write_atomically

STATUS_CLASSES = {"PASS": "pass", "MISMATCH": "mismatch", "INCONCLUSIVE": "inconclusive", "UNSUPPORTED": "unsupported",
                  "ERROR": "error"}


def render_scorecard_html(scorecard: Mapping[str, Any]) -> str:
    backends = list(scorecard.get("backends", []))
    rows = []
    for model in scorecard.get("models", []):
        cells = {cell["backend"]: cell for cell in model.get("cells", [])}
        rows.append({"model": model, "cells": [cells.get(b) for b in backends]})
    text = environment().get_template("scorecard.html.j2").render(
        title=f"madengine scorecard {scorecard.get('run_id', '')}", scorecard=scorecard, backends=backends,
        rows=rows, classes=STATUS_CLASSES, version=__version__,
        generated=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
    return redact(text)


def write_scorecard_html(scorecard: Mapping[str, Any], target: Path) -> Path:
    write_atomically(Path(target), render_scorecard_html(scorecard))
    return Path(target)
