"""``report update-perf``: append results given as files to perf.csv.

The inputs of the original tool's ``update_perf_csv``: a single result (JSON object), an
exception or failed result (JSON object, recorded as FAILURE), or a ``multiple_results`` CSV
merged with a ``common_info`` JSON. Rows only ever go to the end of perf.csv through
:mod:`madengine.results.perfcsv` (locked append; the file is rewritten only when a row brings a
new column, which then goes at the end).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from madengine.core.errors import InputError
from madengine.core.jsonio import read_json_file
from madengine.results.columns import Status
from madengine.results.parsing import as_number, parse_multiple_results
from madengine.results.perfcsv import append_rows
from madengine.results.record import PerfRecord

# keys of a result JSON that are not perf columns: the original tool dropped the superset configs too
_DROPPED_KEYS = ("configs",)
# run details of common_info that a multiple_results row always sets itself
_PER_ROW_KEYS = ("model", "performance", "metric", "status")


def read_json(path: Path) -> Any:
    return read_json_file(path)


def _json_object(path: Path) -> dict[str, Any]:
    data = read_json(path)
    if not isinstance(data, dict):
        raise InputError(f"expected a JSON object, found {type(data).__name__}", path=str(path))
    return data


def _json_entries(path: Path) -> list[dict[str, Any]]:
    """A result file holds one object, or a list of them (as perf_entry.json does for several)."""
    data = read_json(path)
    entries = data if isinstance(data, list) else [data]
    if not entries or not all(isinstance(e, dict) for e in entries):
        raise InputError("expected a JSON object or a non-empty list of objects", path=str(path))
    return entries


def _row(values: dict[str, Any]) -> dict[str, str]:
    """Perf cells of one result: lists comma-joined, objects as JSON, secrets redacted."""
    values = {k: v for k, v in values.items() if k.strip() not in _DROPPED_KEYS}
    record = PerfRecord.from_row(values)
    return record.to_row()


def _result_status(values: dict[str, Any]) -> str:
    stated = str(values.get("status") or "").strip().upper()
    if stated:
        return stated
    performance = values.get("performance")
    return Status.SUCCESS if as_number("" if performance is None else str(performance)) is not None else Status.FAILURE


def _merged(common: dict[str, Any], entry: dict[str, Any], model_name: str | None) -> dict[str, Any]:
    values = {**common, **entry}
    if model_name and not values.get("model"):
        values["model"] = model_name
    return values


def single_result_rows(path: Path, common: dict[str, Any], model_name: str | None = None) -> list[dict[str, str]]:
    rows = []
    for entry in _json_entries(path):
        values = _merged(common, entry, model_name)
        values["status"] = _result_status(values)
        rows.append(_row(values))
    return rows


def failure_rows(path: Path, common: dict[str, Any], model_name: str | None = None) -> list[dict[str, str]]:
    """Exception and failed results: whatever they say, the row is a FAILURE."""
    rows = []
    for entry in _json_entries(path):
        values = _merged(common, entry, model_name)
        values["status"] = Status.FAILURE
        rows.append(_row(values))
    return rows


def multiple_result_rows(path: Path, common: dict[str, Any], model_name: str | None) -> list[dict[str, str]]:
    """One row per line of a ``multiple_results`` CSV: ``<model_name>_<row model>`` with the common
    run details; SUCCESS when its performance is a number, else FAILURE."""
    base = {k: v for k, v in common.items() if k.strip() not in _PER_ROW_KEYS}
    rows = []
    for line in parse_multiple_results(path):
        number = as_number(line.get("performance", ""))
        values: dict[str, Any] = {**base, **{k: v for k, v in line.items() if k not in _PER_ROW_KEYS}}
        values["model"] = f"{model_name}_{line.get('model', '')}" if model_name else line.get("model", "")
        values["performance"] = line.get("performance", "") if number is not None else ""
        values["metric"] = line.get("metric", "")
        values["status"] = Status.SUCCESS if number is not None else Status.FAILURE
        if number is None and not values.get("reason"):
            values["reason"] = "multiple_results row has no performance number"
        rows.append(_row(values))
    return rows


def update_perf(perf_csv: Path, *, single_result: Path | None = None, exception_result: Path | None = None,
                failed_result: Path | None = None, multiple_results: Path | None = None,
                model_name: str | None = None, common_info: Path | None = None) -> list[dict[str, str]]:
    """Append the given result to ``perf_csv`` (created with the standard header when missing)
    and return the rows appended. With no result given, only makes sure perf.csv exists."""
    given = [name for name, value in (("--single_result", single_result), ("--exception-result", exception_result),
                                      ("--failed-result", failed_result), ("--multiple-results", multiple_results))
             if value]
    if len(given) > 1:
        raise InputError(f"give one result at a time, not {' and '.join(given)}", path=given[1])
    common = _json_object(common_info) if common_info else {}
    if multiple_results:
        rows = multiple_result_rows(multiple_results, common, model_name)
    elif single_result:
        rows = single_result_rows(single_result, common, model_name)
    elif exception_result or failed_result:
        rows = failure_rows(exception_result or failed_result, common, model_name)  # type: ignore[arg-type]
    else:
        rows = []
    append_rows(Path(perf_csv), rows)
    return rows
