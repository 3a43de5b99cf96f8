"""Compare two sets of results (two perf.csv files, or two runs from the database) per model.

Per (model, metric): the mean performance of the SUCCESS rows with a number on each side, the
ratio new/old and a verdict. ``faster`` / ``slower`` when the relative change passes the
threshold in the metric's good / bad direction (lower is better for times and latencies, see
:func:`madengine.reports.metrics.lower_is_better`), ``unchanged`` within it, ``new`` when only
the new side has figures, ``missing`` when only the old side has. A model whose metric changed
shows up as ``missing`` under the old metric and ``new`` under the new one: their figures are
not comparable.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Iterable, Mapping

from madengine.core.errors import InputError, ServiceError
from madengine.reports.metrics import lower_is_better
from madengine.reports.summary import SCALED, as_float, mean_of
from madengine.reports.table import bulk, load_table
from madengine.results.columns import Status

VERDICTS = ("faster", "slower", "unchanged", "new", "missing")
DEFAULT_THRESHOLD = 0.05


@dataclasses.dataclass
class Comparison:
    model: str
    metric: str
    lower_is_better: bool
    old_mean: float | None
    new_mean: float | None
    old_rows: int
    new_rows: int
    ratio: float | None  # new / old
    change: float | None  # relative change (new - old) / |old|
    verdict: str

    def to_json(self) -> dict:
        data = dataclasses.asdict(self)
        data["change_percent"] = None if self.change is None else round(self.change * 100, 3)
        del data["change"]
        return data


def _means(rows: Iterable[Mapping[str, str]]) -> dict[tuple[str, str], tuple[float, int]]:
    sums: dict[tuple[str, str], list[float]] = {}
    for row in rows:
        if (row.get("status") or "").strip().upper() != Status.SUCCESS:
            continue
        value = as_float((row.get("performance") or "").strip())
        if value is None:
            continue
        key = ((row.get("model") or "").strip(), (row.get("metric") or "").strip())
        acc = sums.setdefault(key, [0.0, 0, 0.0])
        acc[0] += value
        acc[1] += 1
        acc[2] += value * SCALED  # a sum of 1e308s overflows, their mean does not
    return {key: (mean_of(total, scaled, count), int(count)) for key, (total, count, scaled) in sums.items()}


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def verdict(old: float, new: float, lower_better: bool, threshold: float) -> tuple[float | None, float | None, str]:
    """(ratio, relative change, verdict) of one model's old and new means."""
    ratio = _finite(new / old) if old else None
    # rounding keeps 1.05/1.00 at exactly +5 %; a change too large for a float (1e308 vs 5e-324) is
    # None like a change from 0, and the direction alone decides
    change = _finite(round(new / abs(old) - old / abs(old), 12)) if old else None
    if change is None:
        better = new < old if lower_better else new > old
        return ratio, None, "unchanged" if new == old else ("faster" if better else "slower")
    if abs(change) <= threshold:
        return ratio, change, "unchanged"
    improved = change < 0 if lower_better else change > 0
    return ratio, change, "faster" if improved else "slower"


def compare_rows(old_rows: Iterable[Mapping[str, str]], new_rows: Iterable[Mapping[str, str]],
                 threshold: float = DEFAULT_THRESHOLD) -> list[Comparison]:
    """Compare two sets of perf rows (dicts keyed by perf.csv column names); sorted by model, metric."""
    if threshold < 0:
        raise InputError("the threshold cannot be negative", path="--threshold")
    old, new = _means(old_rows), _means(new_rows)
    results = []
    for key in sorted(old.keys() | new.keys()):
        model, metric = key
        lower = lower_is_better(metric)
        old_mean, old_count = old.get(key, (None, 0))
        new_mean, new_count = new.get(key, (None, 0))
        if old_mean is None:
            ratio, change, word = None, None, "new"
        elif new_mean is None:
            ratio, change, word = None, None, "missing"
        else:
            ratio, change, word = verdict(old_mean, new_mean, lower, threshold)
        results.append(Comparison(model, metric, lower, old_mean, new_mean, old_count, new_count, ratio, change, word))
    return results


def compare_csv(old_path: Path, new_path: Path, threshold: float = DEFAULT_THRESHOLD) -> list[Comparison]:
    """Compare two perf.csv files."""
    with bulk():
        old, new = load_table(old_path), load_table(new_path)
        return compare_rows(old.dicts(), new.dicts(), threshold)


def compare_runs(db_url: str | None, old_run: str, new_run: str, threshold: float = DEFAULT_THRESHOLD,
                 environ: Mapping[str, str] | None = None) -> list[Comparison]:
    """Compare two runs stored in the results database (``madengine database``).

    ``db_url`` None means the database's own default (``MADENGINE_DB_URL``, the ``TUNA_DB_*``
    variables, else the embedded SQLite file), read from ``environ``.
    """
    try:
        from madengine.database import fetch_run
    except ImportError as exc:
        raise ServiceError(f"the results database is not available in this installation ({exc})",
                           hint="compare two perf.csv files instead") from None
    fetched = {}
    for flag, run_id in (("--old-run", old_run), ("--new-run", new_run)):
        rows = fetch_run(db_url, run_id, environ=environ)
        if not rows:
            raise InputError(f"run '{run_id}' has no rows in the database", path=flag,
                             hint="'madengine database list-runs' lists the stored runs")
        fetched[flag] = rows
    return compare_rows(fetched["--old-run"], fetched["--new-run"], threshold)


def counts(results: list[Comparison]) -> dict[str, int]:
    tally = dict.fromkeys(VERDICTS, 0)
    for result in results:
        tally[result.verdict] += 1
    return tally
