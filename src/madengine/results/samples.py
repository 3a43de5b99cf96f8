"""Repeated measurements in perf.csv: the ``perf_*`` columns, the ``perf_samples`` cell, and the
run folder's samples file.

A repeated result (``run --repeat N``) is one perf.csv row whose ``performance`` is the **median** of
the kept samples, with ``perf_n``, ``perf_mean``, ``perf_stddev``, ``perf_cv``, ``perf_min``,
``perf_max``, ``perf_ci95_low``/``perf_ci95_high`` (95 % CI, never below 0 for figures >= 0) from
:func:`madengine.stats.summary.summarize`, every kept sample in ``perf_samples`` (a JSON list, run
order) and ``warmup_runs``. A single sample has ``perf_n`` 1 and empty spread columns.

Readers take a row's samples from ``perf_samples`` when it holds a list of numbers, else the row's
``performance`` (rows written before repetition existed): :func:`row_samples`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from madengine.core.errors import InputError
from madengine.core.jsonio import read_json_file
from madengine.results.parsing import as_number
from madengine.stats.summary import stability_warnings, summarize

SAMPLES_FILE = "samples.json"  #: per result folder: the rows of the result with every sample
SPREAD_COLUMNS = ("perf_stddev", "perf_cv", "perf_ci95_low", "perf_ci95_high")
_PLAIN_NUMBERS = frozenset((float, int))  #: what orjson reads a JSON number as (a bool is neither)
_FLOATS = frozenset((float,))


def _number_text(value: float | None) -> str:
    return "" if value is None or not math.isfinite(value) else repr(float(value))


def samples_text(samples: Sequence[float]) -> str:
    """The ``perf_samples`` cell: a JSON list of the samples in run order."""
    return json.dumps([float(v) for v in samples])


def parse_samples(text: str) -> list[float]:
    """The numbers of a ``perf_samples`` cell ([] for an empty cell); ``ValueError`` saying what is
    wrong for anything else than a JSON list of finite numbers."""
    if not text:
        return []  # an empty cell (rows of one figure, failures): no exception to catch
    import orjson

    try:
        # several times faster: a million-row import reads every cell (JSON allows the spaces around it)
        data = orjson.loads(text)
    except (orjson.JSONDecodeError, TypeError):
        # spaces alone, or NaN, Infinity or integers beyond 64 bits, which the json module reads (and
        # judges below)
        data = None
    else:
        # orjson reads no NaN or infinity: every number is finite (a set's test of a map runs in C)
        if type(data) is list and _FLOATS.issuperset(map(type, data)):
            return data  # a new list already: the common case, copied for nothing before
        if type(data) is list and _PLAIN_NUMBERS.issuperset(map(type, data)):
            return list(map(float, data))
    text = (text or "").strip()
    if not text:
        return []
    if data is None:
        try:
            data = json.loads(text)
        except ValueError:
            raise ValueError("perf_samples is not JSON (expected a list of numbers such as [1.5, 1.6])") from None
    if not isinstance(data, list):
        raise ValueError(f"perf_samples holds a {type(data).__name__}, not a list of numbers")
    values = []
    for item in data:
        if isinstance(item, bool) or not isinstance(item, (int, float)):
            raise ValueError(f"perf_samples has a non-number {json.dumps(item)[:40]}")
        number = float(item)
        if not math.isfinite(number):
            raise ValueError("perf_samples has a value that is not a finite number")
        values.append(number)
    return values


def row_samples(row: Mapping[str, Any], *, strict: bool = False) -> list[float]:
    """Every sample of a row: ``perf_samples``, else its numeric ``performance``, else [].

    A malformed ``perf_samples`` raises ``ValueError`` with ``strict`` (input of ``report compare``),
    otherwise the row falls back to its ``performance`` (reports must render whatever the file holds).
    """
    try:
        values = parse_samples(str(row.get("perf_samples") or ""))
    except ValueError:
        if strict:
            raise
        values = []
    if values:
        return values
    number = as_number(str(row.get("performance") or "").strip())
    return [] if number is None else [number]


def sample_columns(samples: Sequence[float], warmup_runs: int = 0) -> dict[str, Any]:
    """The perf.csv cells of a result measured ``len(samples)`` times (after ``warmup_runs``
    discarded runs): ``performance`` (the median, a float) and the ``perf_*``/``warmup_runs`` cells
    (text). Pass them to ``PerfRecord(...)`` or ``record.copy(**columns)``.
    """
    summary = summarize(samples)
    columns: dict[str, Any] = {
        "performance": summary.median,
        "perf_n": str(summary.n),
        "perf_mean": _number_text(summary.mean),
        "perf_stddev": _number_text(summary.stddev),
        "perf_cv": _number_text(summary.cv),
        "perf_min": _number_text(summary.minimum),
        "perf_max": _number_text(summary.maximum),
        "perf_ci95_low": _number_text(summary.ci95_low),
        "perf_ci95_high": _number_text(summary.ci95_high),
        "perf_samples": samples_text(samples),
        "warmup_runs": str(int(warmup_runs)),
    }
    return columns


def sample_warnings(samples: Sequence[float]) -> list[str]:
    """pyperf-style stability warnings of repeated samples (e.g. a CV of 10 % or more)."""
    return stability_warnings(summarize(samples), what="repeat") if len(samples) > 1 else []


# --- the run folder's samples file -------------------------------------------------------------

def write_samples_file(path: Path, rows: Iterable[Mapping[str, Any]]) -> Path:
    """Write ``samples.json``: a JSON list of the result's rows (perf.csv keys), ``perf_samples``
    as a list of numbers. One file per model run; ``report compare`` reads folders of them."""
    documents = []
    for row in rows:
        document = dict(row)
        if isinstance(document.get("perf_samples"), str):
            document["perf_samples"] = parse_samples(document["perf_samples"])
        documents.append(document)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(documents, indent=1, sort_keys=True), encoding="utf-8")
    return path


def read_samples_file(path: Path) -> list[dict[str, str]]:
    """The rows of a ``samples.json``, shaped like perf.csv rows (text cells); :class:`InputError`
    naming the file for anything that is not a list of objects with valid samples."""
    data = read_json_file(Path(path))
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
        raise InputError("expected a JSON list of result objects", path=str(path),
                         hint=f"{SAMPLES_FILE} holds the rows of one result with their perf_samples")
    rows = []
    for number, item in enumerate(data, start=1):
        row = {str(k): _cell(v) for k, v in item.items()}
        try:
            parse_samples(row.get("perf_samples", ""))
        except ValueError as exc:
            raise InputError(f"result {number}: {exc}", path=str(path)) from None
        rows.append(row)
    return rows


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)
