"""Compare two sets of results per result identity, with a significance test on every sample.

Inputs: two perf.csv files, two folders of repeated runs (see :func:`read_side`), or two run ids of
the results database. Each side's SUCCESS rows are grouped by
:class:`~madengine.results.identity.ResultIdentity` (model, metric, tag configs, executor, GPU
vendor and architecture, n_gpus, backend); a group's figures are every sample of its rows
(``perf_samples``, else ``performance``). Matching identities are compared with
:func:`madengine.stats.compare.compare_samples` (Mann–Whitney U at α 0.05, Hodges–Lehmann ratio
with a 95 % CI, ``--threshold`` the minimum effect size): ``faster``, ``slower``, ``unchanged`` or
``inconclusive``, in the metric's direction (:func:`madengine.results.direction.lower_is_better`).
``new``/``missing``: only the new/old side has figures for that identity.

**Against the history.** When a side has fewer than 3 figures (one run each: the common nightly
case) and the caller knows the result's history (``references``: the figures of its stable segment
up to the old run, e.g. ``compare_runs`` from the results database), the new figures are judged
against that history's own noise instead (:func:`madengine.stats.history.judge`: a prediction
interval from the stable segment, 1 % false alarms). Every comparison says which ``method`` decided.

Different environments are never mixed: a model that ran under docker on one side and locally on
the other is ``missing`` + ``new`` unless ``across_environments`` is set, which pairs the one old
and the one new environment of a (model, metric, tag configs) and records a warning naming what
differs.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from madengine.core.errors import InputError, ServiceError
from madengine.results.direction import lower_is_better
from madengine.reports.table import bulk, load_table
from madengine.results.columns import Status
from madengine.results.figures import with_figures
from madengine.results.identity import FIELDS as IDENTITY_FIELDS
from madengine.results.identity import ResultIdentity
from madengine.results.samples import SAMPLES_FILE, read_samples_file, row_samples
from madengine.stats import history as historylib
from madengine.stats.compare import ALPHA, DEFAULT_MIN_EFFECT, MIN_SAMPLES, compare_samples

VERDICTS = ("faster", "slower", "unchanged", "inconclusive", "new", "missing")
MANN_WHITNEY = "Mann-Whitney U"
TOO_FEW = "too few figures"
DEFAULT_THRESHOLD = DEFAULT_MIN_EFFECT
PERF_FILE = "perf.csv"


@dataclasses.dataclass
class Side:
    """One identity's figures on one side."""

    rows: int = 0
    samples: list[float] = dataclasses.field(default_factory=list)

    @property
    def mean(self) -> float | None:
        return _mean(self.samples)

    @property
    def median(self) -> float | None:
        if not self.samples:
            return None
        ordered = sorted(self.samples)
        middle = len(ordered) // 2
        return ordered[middle] if len(ordered) % 2 else ordered[middle - 1] / 2 + ordered[middle] / 2


def _mean(values: Sequence[float]) -> float | None:
    if not values:
        return None
    scale = max(abs(v) for v in values) or 1.0
    return math.fsum(v / scale for v in values) / len(values) * scale


@dataclasses.dataclass
class Comparison:
    identity: ResultIdentity
    lower_is_better: bool
    old: Side
    new: Side
    verdict: str
    ratio: float | None = None  #: NEW/OLD
    ci_low: float | None = None
    ci_high: float | None = None
    p_value: float | None = None
    reason: str = ""
    new_identity: ResultIdentity | None = None  #: set when compared across environments
    environment_differences: list[str] = dataclasses.field(default_factory=list)
    method: str = ""  #: what decided the verdict: Mann-Whitney U, a prediction interval from the history, ...
    false_alarm_rate: float | None = None  #: how often this method calls an unchanged result faster/slower

    @property
    def model(self) -> str:
        return self.identity.model

    @property
    def metric(self) -> str:
        return self.identity.metric

    @property
    def change(self) -> float | None:
        return None if self.ratio is None else self.ratio - 1.0

    def to_json(self) -> dict[str, Any]:
        identity = self.identity
        return {
            "model": identity.model, "metric": identity.metric, "tag_configs": identity.tag_configs,
            "identity": identity.label(), "identity_key": identity.key(),
            "new_identity": None if self.new_identity is None else self.new_identity.label(),
            "environment_differences": self.environment_differences, "lower_is_better": self.lower_is_better,
            "old_mean": _json_number(self.old.mean), "new_mean": _json_number(self.new.mean),
            "old_median": _json_number(self.old.median), "new_median": _json_number(self.new.median),
            "old_rows": self.old.rows, "new_rows": self.new.rows,
            "old_n": len(self.old.samples), "new_n": len(self.new.samples),
            "ratio": _json_number(self.ratio), "ci95_low": _json_number(self.ci_low),
            "ci95_high": _json_number(self.ci_high), "p_value": _json_number(self.p_value),
            "change_percent": None if self.change is None or not math.isfinite(self.change)
            else round(self.change * 100, 3),
            "verdict": self.verdict, "reason": self.reason, "method": self.method,
            "false_alarm_rate": self.false_alarm_rate,
        }


def _json_number(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


@dataclasses.dataclass
class CompareResult:
    comparisons: list[Comparison]
    warnings: list[str]

    def counts(self) -> dict[str, int]:
        tally = dict.fromkeys(VERDICTS, 0)
        for comparison in self.comparisons:
            tally[comparison.verdict] += 1
        return tally

    @property
    def regressed(self) -> bool:
        return any(c.verdict == "slower" for c in self.comparisons)


# --- grouping ----------------------------------------------------------------------------------

@functools.lru_cache(maxsize=1 << 16)  # a dashboard compares runs of thousands of results, again and again
def _identity(fields: tuple[Any, ...]) -> ResultIdentity:
    return ResultIdentity.from_row(dict(zip(IDENTITY_FIELDS, fields)))


def group_samples(rows: Iterable[Mapping[str, str]], source: str = "") -> dict[ResultIdentity, Side]:
    """SUCCESS rows with figures, grouped by identity (each figure a row names in ``figures`` too:
    :func:`~madengine.results.figures.with_figures`); a malformed ``perf_samples`` is an
    :class:`InputError` naming ``source`` and the row."""
    groups: dict[ResultIdentity, Side] = {}
    for number, row in enumerate(with_figures(rows), start=1):
        if (row.get("status") or "").strip().upper() != Status.SUCCESS:
            continue
        try:
            values = row_samples(row, strict=True)
        except ValueError as exc:
            raise InputError(f"row {number} ({(row.get('model') or '').strip()}): {exc}", path=source or None,
                             hint="perf_samples must be a JSON list of numbers, or empty") from None
        if not values:
            continue
        side = groups.setdefault(_identity(tuple(map(row.get, IDENTITY_FIELDS))), Side())
        side.rows += 1
        side.samples.extend(values)
    return groups


def _pair_across_environments(old: dict[ResultIdentity, Side], new: dict[ResultIdentity, Side]
                              ) -> list[tuple[ResultIdentity, ResultIdentity]]:
    """Unmatched old/new identities that differ only in their environment, one of each per
    (model, metric, tag configs); ambiguous ones (several environments on a side) stay unpaired."""
    lonely_old: dict[tuple[str, str, str], list[ResultIdentity]] = {}
    lonely_new: dict[tuple[str, str, str], list[ResultIdentity]] = {}
    for identity in old.keys() - new.keys():
        lonely_old.setdefault(identity.comparable_key(), []).append(identity)
    for identity in new.keys() - old.keys():
        lonely_new.setdefault(identity.comparable_key(), []).append(identity)
    return [(olds[0], lonely_new[key][0]) for key, olds in lonely_old.items()
            if len(olds) == 1 and len(lonely_new.get(key, [])) == 1]


def compare_rows(old_rows: Iterable[Mapping[str, str]], new_rows: Iterable[Mapping[str, str]],
                 threshold: float = DEFAULT_THRESHOLD, *, across_environments: bool = False,
                 sources: tuple[str, str] = ("", "")) -> CompareResult:
    """Compare two sets of perf rows (dicts keyed by perf.csv column names), per identity."""
    if threshold < 0:
        raise InputError("the threshold cannot be negative", path="--threshold")
    return compare_groups(group_samples(old_rows, sources[0]), group_samples(new_rows, sources[1]), threshold,
                          across_environments=across_environments)


def compare_groups(old: dict[ResultIdentity, Side], new: dict[ResultIdentity, Side],
                   threshold: float = DEFAULT_THRESHOLD, *, across_environments: bool = False,
                   references: Mapping[ResultIdentity, Sequence[float] | historylib.Reference] | None = None
                   ) -> CompareResult:
    """Compare two sides already grouped by :func:`group_samples` (a dashboard keeps a run's groups).
    ``references``: per old identity, the figures of its stable segment up to the old side, or their
    :class:`~madengine.stats.history.Reference` made already (see the module docstring)."""
    if threshold < 0:
        raise InputError("the threshold cannot be negative", path="--threshold")
    pairs = {identity: identity for identity in old.keys() & new.keys()}
    crossed = _pair_across_environments(old, new)
    warnings = []
    if across_environments:
        for old_identity, new_identity in crossed:
            pairs[old_identity] = new_identity
            warnings.append(f"{old_identity.model}: compared across environments "
                            f"({old_identity.describe_differences(new_identity)})")
    elif crossed:
        examples = "; ".join(f"{o.model} ({o.describe_differences(n)})" for o, n in crossed[:3])
        warnings.append(f"{len(crossed)} result(s) ran in a different environment and are not compared: {examples}; "
                        "--across-environments compares them anyway")
    paired_new = set(pairs.values())
    results = []
    for identity in sorted(old.keys() | (new.keys() - paired_new)):
        lower = lower_is_better(identity.metric)
        if identity not in old:
            results.append(Comparison(identity, lower, Side(), new[identity], "new"))
        elif identity not in pairs:
            results.append(Comparison(identity, lower, old[identity], Side(), "missing"))
        else:
            results.append(_compared(identity, pairs[identity], old[identity], new[pairs[identity]], lower, threshold,
                                     (references or {}).get(identity)))
    return CompareResult(results, warnings)


def _compared(identity: ResultIdentity, new_identity: ResultIdentity, old: Side, new: Side, lower: bool,
              threshold: float, reference: Sequence[float] | historylib.Reference | None = None) -> Comparison:
    differences = identity.environment_differences(new_identity)
    other = new_identity if differences else None
    if min(len(old.samples), len(new.samples)) < MIN_SAMPLES and reference:
        ref = reference if isinstance(reference, historylib.Reference) else historylib.reference(reference)
        if ref is not None:
            verdict = historylib.judge(ref, new.samples, lower_is_better=lower, min_effect=threshold)
            return Comparison(identity, lower, old, new, verdict.verdict, verdict.ratio, verdict.ci_low, verdict.ci_high,
                              verdict.p_value, verdict.reason, other, differences, verdict.method,
                              verdict.false_alarm_rate)
    outcome = compare_samples(old.samples, new.samples, lower_is_better=lower, min_effect=threshold, alpha=ALPHA)
    method = MANN_WHITNEY if outcome.p_value is not None else TOO_FEW
    return Comparison(identity, lower, old, new, outcome.verdict, outcome.ratio, outcome.ci_low, outcome.ci_high,
                      outcome.p_value, outcome.reason, other, differences, method,
                      ALPHA if outcome.p_value is not None else None)


# --- inputs ------------------------------------------------------------------------------------

def read_side(path: Path) -> list[dict[str, str]]:
    """The rows of one side: a perf.csv file, or a folder of repeated runs.

    A folder contributes every ``perf.csv`` under it (any depth), plus every ``samples.json`` (a run
    folder's per-result samples) whose (run id, identity) none of those perf.csv rows has.
    """
    path = Path(path)
    if path.is_dir():
        return _folder_rows(path)
    return list(load_table(path).dicts())


def _folder_rows(folder: Path) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = []
    for csv_path in sorted(folder.rglob(PERF_FILE)):
        rows.extend(load_table(csv_path).dicts())
    seen = {(row.get("run_id", ""), ResultIdentity.from_row(row)) for row in rows}
    for samples_path in sorted(folder.rglob(SAMPLES_FILE)):
        for row in read_samples_file(samples_path):
            if (row.get("run_id", ""), ResultIdentity.from_row(row)) not in seen:
                rows.append(row)
    if not rows:
        raise InputError(f"no {PERF_FILE} or {SAMPLES_FILE} with results in this folder", path=str(folder),
                         hint="pass a perf.csv, or a folder holding the perf.csv files or run folders of repeated runs")
    return rows


def compare_paths(old_path: Path, new_path: Path, threshold: float = DEFAULT_THRESHOLD, *,
                  across_environments: bool = False) -> CompareResult:
    """Compare two perf.csv files or folders of repeated runs."""
    with bulk():
        old, new = read_side(Path(old_path)), read_side(Path(new_path))
        return compare_rows(old, new, threshold, across_environments=across_environments,
                            sources=(str(old_path), str(new_path)))


compare_csv = compare_paths  # the name of earlier releases


def compare_runs(db_url: str | None, old_run: str, new_run: str, threshold: float = DEFAULT_THRESHOLD,
                 environ: Mapping[str, str] | None = None, *, across_environments: bool = False) -> CompareResult:
    """Compare two runs stored in the results database (``madengine database``); a result with too
    few figures on a side is judged against its history there (see the module docstring).

    ``db_url`` None means the database's own default (``MADENGINE_DB_URL``, the ``TUNA_DB_*``
    variables, else the embedded SQLite file), read from ``environ``.
    """
    try:
        from madengine.database import fetch_references, fetch_run
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
    old = group_samples(fetched["--old-run"], f"run {old_run}")
    new = group_samples(fetched["--new-run"], f"run {new_run}")
    thin = [i for i, side in old.items()
            if len(side.samples) < MIN_SAMPLES or (i in new and len(new[i].samples) < MIN_SAMPLES)]
    by_key = {identity.key(): identity for identity in thin}
    found = fetch_references(db_url, old_run, list(by_key), environ=environ) if thin else {}
    return compare_groups(old, new, threshold, across_environments=across_environments,
                          references={by_key[k]: v for k, v in found.items()})
