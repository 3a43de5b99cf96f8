"""A model's rows from what its model step printed and how it exited: the one set of rules of every
executor (the runner's docker and local runs, and a Kubernetes job's pod, :mod:`madengine.k8s.collect`).

* a model step that exited non-zero is a FAILURE whose reason says the exit code and the model's last
  words (:func:`exit_reason`);
* otherwise each kept run's output must hold a ``performance: <number> <metric>`` line (the last one
  counts): SUCCESS with the figure (several runs: their median and spread,
  :mod:`madengine.results.samples`), else FAILURE ``no performance figure``;
* a ``multiple_results`` model gives one row per result of its CSV (:func:`read_table`), SUCCESS
  when the row has a number;
* the precision the model reported (``training_precision: <name>``) wins over its declaration
  (models.json or a ``precision`` tag config), with a note when they differ (:func:`precision_columns`);
* what each rank of a job saw (a ``rank_settings: {json}`` line of each process) goes into
  ``thread_settings`` and fills the row's ``device``, ``threads``, ``dist_backend`` and version
  columns (:func:`rank_settings`).

Pure: the callers read the files and logs, and decide what a run's values (artifacts, images,
durations) are. ``model`` is any object with a catalog model's fields (``name``,
``multiple_results``, ``training_precision``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from madengine.core.errors import MadEngineError
from madengine.core.precision import canonical
from madengine.core.redact import redact
from madengine.results.columns import Status
from madengine.results.identity import tag_configs_text
from madengine.results.parsing import as_number, parse_multiple_results, parse_performance
from madengine.results.record import PerfRecord, RecordFactory
from madengine.results.samples import parse_samples, sample_columns, sample_warnings

NO_FIGURE = "the script printed no 'performance: <number> <metric>' line"
#: what a launcher puts before each line a rank prints (torchrun's ``[default1]:``, torch's ``[rank1]:``)
_LAUNCHER_PREFIX = r"(?:\[(?:rank|default)\d+\]:\s?)*"
_PRECISION_LINE = re.compile(rf"^{_LAUNCHER_PREFIX}\s*training_precision:\s*([A-Za-z][A-Za-z0-9_+.-]{{0,31}})\s*$",
                             re.MULTILINE)
_RANK_LINE = re.compile(rf"^{_LAUNCHER_PREFIX}\s*rank_settings:\s*(\{{.*\}})\s*$", re.MULTILINE)
#: a rank's report: at most this many entries, each a short scalar
_RANK_KEYS, _RANK_TEXT = 32, 200
#: the row columns a distributed job's ranks fill when the model's own table has not (their value, or
#: each rank's value in rank order when they differ), and every ``<package>_version`` key
_RANK_COLUMNS = ("device", "threads", "dist_backend")
#: the columns of a ``multiple_results`` row that are not extra columns
_TABLE_COLUMNS = ("model", "performance", "metric", "status", "reason", "tag_configs")


def last_meaningful_line(output: str, limit: int = 200) -> str:
    """What a failing model said last (an exception's message, an error line), for its reason."""
    for line in reversed(output.splitlines()):
        text = line.strip()
        if not text or text.startswith(("performance:", "===", "File \"", "Traceback")) or \
                not any(c.isalnum() for c in text):
            continue
        return text if len(text) <= limit else text[:limit - 1] + "…"
    return ""


def exit_reason(exit_code: int, output: str, *, which: str = "", where: str = "", cause: str = "") -> str:
    """Why a model step that exited non-zero failed: ``model script[ which] exited with code N[
    (where)]: <its last words>``; ``cause`` (a kill the executor saw: 'killed by SIGSEGV') replaces
    the first part; ``where`` names the pod or node."""
    head = f"{cause} (exit code {exit_code})" if cause else f"model script{which} exited with code {exit_code}"
    if where:
        head = f"{head} ({where})"
    said = last_meaningful_line(output)
    return f"{head}: {said}" if said else head


def step_reason(name: str, exit_code: int, cause: str = "") -> str:
    """Why a step around the model step (a tool's or a pre/post script) failed."""
    return f"{cause} (exit code {exit_code})" if cause else f"{name} failed with exit code {exit_code}"


def reported_precision(output: str) -> str:
    """The precision the model said it ran at (its last ``training_precision: <name>`` line), or ''."""
    found = _PRECISION_LINE.findall(output or "")
    return found[-1] if found else ""


def declared_precision(model: Any) -> tuple[str, str]:
    """The precision a selected model is declared to run at, and who declared it: its ``precision``
    tag config (the selection puts it in ``training_precision``), else models.json."""
    by_tag = any(key == "precision" for key, _ in getattr(model, "tag_configs", ()))
    return model.training_precision, "the tag config" if by_tag else "models.json"


def precision_columns(declared: str, reported: str, declared_by: str = "models.json") -> tuple[dict[str, str], list[str]]:
    """``training_precision`` and ``precision_source`` of a row, and a note when the model
    contradicts its declaration: what it reported wins, the declaration is named in the note."""
    if reported:
        notes = [f"{declared_by} declares training_precision {declared} but the model reported {reported}"] \
            if declared and canonical(declared) != canonical(reported) else []
        return {"training_precision": reported, "precision_source": "reported"}, notes
    return {"training_precision": declared, "precision_source": "declared" if declared else ""}, []


def rank_settings(output: str) -> list[dict[str, Any]]:
    """What each rank of a job said it saw, from its ``rank_settings: {json}`` lines (a launcher's
    prefix allowed): one report per rank (its last), in rank order. A report is a JSON object with
    an integer ``rank`` and short scalar values (``OMP_NUM_THREADS``, ``threads``, ``device``,
    ``torch_version``, ...); anything else is ignored, never an error."""
    reports: dict[int, dict[str, Any]] = {}
    for text in _RANK_LINE.findall(output or ""):
        try:
            report = json.loads(text)
        except ValueError:
            continue
        if not isinstance(report, dict) or isinstance(report.get("rank"), bool) or \
                not isinstance(report.get("rank"), int):
            continue
        kept = {str(key)[:40]: value for key, value in list(report.items())[:_RANK_KEYS]
                if value is None or isinstance(value, (bool, int, float)) or
                (isinstance(value, str) and len(value) <= _RANK_TEXT)}
        reports[report["rank"]] = kept
    return [reports[rank] for rank in sorted(reports)]


def rank_columns(ranks: list[dict[str, Any]]) -> dict[str, str]:
    """The row columns the ranks' reports fill: ``device``, ``threads``, ``dist_backend`` (the
    collective of a job's process group) and each ``<name>_version``, the ranks' common value, or
    every rank's in rank order (``cuda:0,cuda:1``) when they differ."""
    names = [key for key in dict.fromkeys(k for report in ranks for k in report)
             if key in _RANK_COLUMNS or key.endswith("_version")]
    columns = {}
    for name in names:
        values = [str(report[name]) for report in ranks if report.get(name) not in (None, "")]
        if values:
            columns[name] = values[0] if len(set(values)) == 1 else ",".join(values)
    return columns


def read_table(path: Path, name: str) -> list[dict[str, str]] | str:
    """The rows of a ``multiple_results`` CSV the model wrote, or the FAILURE reason when there are none."""
    try:
        rows = parse_multiple_results(path)
    except MadEngineError as exc:
        return f"multiple_results: {exc}"
    return rows if rows else f"multiple_results: {name} has no rows"


def model_records(factory: RecordFactory, model: Any, outputs: Sequence[str], values: Mapping[str, Any], *,
                  tables: Sequence[Sequence[Mapping[str, str]]] = (), warmup: int = 0,
                  figure_optional: bool = False, results_table: str | None = None) -> list[PerfRecord]:
    """The rows of a model whose step ended well, from each kept run's output (and, for a model
    with a results table — ``multiple_results``, or a serving block's — each run's CSV rows).
    ``figure_optional``: a node of several whose job row is made elsewhere (it may print no figure).
    ``results_table``: the table's name when it is not the model's ``multiple_results``."""
    if results_table if results_table is not None else model.multiple_results:
        return _table_records(factory, model, outputs, tables, values, warmup)
    figures = [parse_performance(output) for output in outputs]
    missing = [i for i, figure in enumerate(figures, start=1) if figure is None]
    if len(missing) == len(figures) and figure_optional:
        return [factory.for_model(model, Status.SUCCESS, **_fresh(values))]
    if missing or not figures:
        which = f" (repeat {missing[0]} of {len(figures)})" if len(figures) > 1 else ""
        return [factory.failure(model, f"no performance figure{which}: {NO_FIGURE}", **_fresh(values))]
    record = factory.for_model(model, Status.SUCCESS, metric=figures[-1].metric, **_fresh(values),
                               **_samples([f.value for f in figures], warmup))  # type: ignore[union-attr]
    _describe_success(record, model, outputs[-1])
    return [record]


def _table_records(factory: RecordFactory, model: Any, outputs: Sequence[str],
                   tables: Sequence[Sequence[Mapping[str, str]]], values: Mapping[str, Any],
                   warmup: int) -> list[PerfRecord]:
    """One row per result of the CSV (its name, and its ``tag_configs`` when it has them), its
    samples taken from every kept run. A row may say it is FAILURE and why (``status``,
    ``reason``: a serving model's load point that failed); one with an empty name keeps the
    model's, told apart from the others by its tag configs (added to the model's own)."""
    records = []
    for (name, configs), rows in _by_result_name(tables).items():
        mine = _fresh(values)
        mine["extra"].update({k: v for k, v in rows[-1].items() if k not in _TABLE_COLUMNS})
        numbers = [as_number(row.get("performance", "")) for row in rows]
        record = factory.for_model(model, Status.SUCCESS, metric=rows[-1].get("metric", ""), **mine)
        record.model = f"{model.name}_{name}" if name else model.name
        if configs:
            record.tag_configs = tag_configs_text(list(getattr(model, "tag_configs", ())) + _config_pairs(configs))
        failed = next((row for row in rows if (row.get("status") or "").strip().upper() == Status.FAILURE), None)
        if failed is not None:
            record.status, record.reason = Status.FAILURE, redact(failed.get("reason") or "the result said FAILURE")
            if numbers[-1] is not None:
                record.performance = numbers[-1]
        elif None in numbers or len(numbers) < len(tables):
            record.status, record.reason = Status.FAILURE, "multiple_results row has no performance number" \
                if None in numbers else f"multiple_results row {name!r} is missing from some repeats"
        else:
            for key, value in _samples(numbers, warmup).items():  # type: ignore[arg-type]
                setattr(record, key, value)
            _describe_success(record, model, outputs[-1] if outputs else "")
        records.append(record)
    return records


def _config_pairs(text: str) -> list[tuple[str, str]]:
    """``concurrency=4:input_len=32`` → [("concurrency", "4"), ("input_len", "32")]."""
    return [(key, value) for key, _, value in (item.partition("=") for item in text.split(":")) if key]


def _fresh(values: Mapping[str, Any]) -> dict[str, Any]:
    """The caller's values for one row: its own ``extra`` and ``artifacts`` (rows never share them)."""
    out = dict(values)
    out["extra"] = dict(values.get("extra") or {})
    if isinstance(out.get("artifacts"), list):
        out["artifacts"] = list(out["artifacts"])
    return out


def _samples(values: Sequence[float], warmup: int) -> dict[str, Any]:
    """The ``perf_*`` columns; one sample keeps its figure exactly as the model printed it."""
    columns = sample_columns(values, warmup)
    if len(values) == 1:
        columns["performance"] = values[0]
    return columns


def _describe_success(record: PerfRecord, model: Any, output: str) -> None:
    """The precision the model reported, what each of its ranks saw, and the notes of a figure not
    to trust as it is."""
    declared, declared_by = declared_precision(model)
    columns, notes = precision_columns(declared, reported_precision(output), declared_by)
    for key, value in columns.items():
        setattr(record, key, value)
    ranks = rank_settings(output)
    if ranks:
        record.thread_settings = {**(record.thread_settings or {}), "ranks": ranks}
        for key, value in rank_columns(ranks).items():
            record.extra.setdefault(key, value)
    samples = parse_samples(record.perf_samples) if record.perf_samples else []
    record.add_warnings(sample_warnings(samples) + notes)


def _by_result_name(tables: Sequence[Sequence[Mapping[str, str]]]) -> dict[tuple[str, str], list[Mapping[str, str]]]:
    """The rows of every run's CSV grouped by result name and tag configs, in first-seen order."""
    grouped: dict[tuple[str, str], list[Mapping[str, str]]] = {}
    for table in tables:
        for row in table:
            grouped.setdefault((row.get("model", ""), row.get("tag_configs", "") or ""), []).append(row)
    return grouped


__all__ = ["NO_FIGURE", "declared_precision", "exit_reason", "last_meaningful_line", "model_records", "precision_columns",
           "rank_columns", "rank_settings", "read_table", "reported_precision", "step_reason"]
