"""What the dashboard shows, as JSON-ready data: one method per view, shared by the pages and ``/api``.

Everything is computed from the results table through a read-only
:class:`~madengine.database.dashboard.Reader` and kept per *data version* (the table's newest row
id): a page asked again before a row lands costs nothing, and a new row makes every view current at
once. Results are grouped by :class:`~madengine.results.identity.ResultIdentity`; comparisons are
``report compare``'s (:func:`madengine.reports.compare.compare_rows`) and changes ``report
regressions``' (:mod:`madengine.server.changes`), so the dashboard and the CLI give the same verdicts.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import threading
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence, TypeVar

from madengine.core.errors import InputError
from madengine.database.dashboard import COMPARE_COLUMNS, IdentityEntry, Reader, RunEntry, Version
from madengine.reports.compare import CompareResult, Side, compare_groups, group_samples
from madengine.reports.metrics import lower_is_better
from madengine.reports.regressions import Change, series_from_rows
from madengine.results.columns import Status
from madengine.results.identity import FIELDS as IDENTITY_FIELDS
from madengine.results.identity import ResultIdentity
from madengine.server import files
from madengine.server.changes import ChangeWatch
from madengine.server.filters import VERDICTS, Filters, row_time
from madengine.stats.compare import ALPHA

T = TypeVar("T")
MAX_TRENDS = 12  #: identities charted on one trend page (narrow the filters for others)
MAX_FAILURES = 50  #: failures listed first on the overview
RECENT_CHANGES = 10  #: changes on the overview
#: compare verdicts in the order a person reads them: what got worse first, what did not change last
VERDICT_ORDER = VERDICTS
HOW_TO_FILL = ("madengine run --tags TAGS --db-url URL",
               "madengine database update-table --csv-file-path perf.csv --db-url URL")


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _relative_change(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text) if text else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def tag_matches(tag: str, tags_cell: str, tag_configs: str) -> bool:
    """``tag`` is one of the row's tags (``tags`` column) or of its tag configs (``size=64`` or ``size``)."""
    wanted = tag.strip().lower()
    if not wanted:
        return True
    tags = {t.strip().lower() for t in tags_cell.split(",") if t.strip()}
    configs = {c.strip().lower() for c in tag_configs.split(":") if c.strip()}
    return wanted in tags or wanted in configs or wanted in {c.split("=", 1)[0] for c in configs}


def in_window(row: Mapping[str, str], filters: Filters) -> bool:
    since, until = filters.time_window()
    if not since and not until:
        return True
    moment = row_time(row)
    return bool(moment) and (not since or moment >= since) and (not until or moment <= until)


def identity_json(identity: ResultIdentity) -> dict[str, Any]:
    return {"identity_key": identity.key(), "label": identity.label(), **{f: getattr(identity, f) for f in IDENTITY_FIELDS},
            "lower_is_better": lower_is_better(identity.metric)}


def _page(items: Sequence[T], filters: Filters) -> tuple[list[T], dict[str, int]]:
    pages = max(1, math.ceil(len(items) / filters.per_page))
    page = min(filters.page, pages)
    start = (page - 1) * filters.per_page
    return list(items[start:start + filters.per_page]), {"total": len(items), "page": page, "pages": pages,
                                                          "per_page": filters.per_page}


def _change_json(change: Change) -> dict[str, Any]:
    return change.to_json()


def _change_time(change: Change) -> tuple[str, str]:
    return change.after_run.started_at, change.after_run.run


class Memo:
    """Values computed for a data version, at most ``size`` of them (least recently used out first)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._values: collections.OrderedDict[tuple[Any, ...], tuple[int, Any]] = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[Any, ...], version: int, compute: Callable[[], T]) -> T:
        with self._lock:
            hit = self._values.get(key)
            if hit is not None and hit[0] == version:
                self._values.move_to_end(key)
                return hit[1]
        value = compute()
        with self._lock:
            self._values[key] = (version, value)
            self._values.move_to_end(key)
            while len(self._values) > self.size:
                self._values.popitem(last=False)
        return value


class Dashboard:
    """The dashboard's data over one results table."""

    def __init__(self, reader: Reader, runs_dir: Path, url_shown: str, table: str, cwd: Path | None = None) -> None:
        self.reader = reader
        self.runs_dir = Path(runs_dir)
        self.url_shown = url_shown
        self.table = table
        self.cwd = cwd or Path.cwd()
        self.changes = ChangeWatch(reader, self.entries)
        # what is kept, per data version (least recently used first out): sized so that a server over a
        # million rows stays small (a run's full rows are megabytes; its compare groups far less)
        self._latest = Memo(4)  # identities, their latest rows, runs
        self._identity_rows = Memo(16)
        self._run_rows = Memo(2)
        self._groups = Memo(32)  # per run: its samples grouped by identity, for comparisons
        self._compared = Memo(8)

    # --- data versions ---

    def version(self) -> Version:
        return self.reader.version()

    def entries(self) -> list[IdentityEntry]:
        version = self.version()
        if not version.exists:
            return []
        return self._latest.get(("entries",), version.max_id, self.reader.identities)

    def _items(self, version: Version) -> list[dict[str, Any]]:
        """Every identity with its counts and latest row, failures first, then by label."""
        def compute() -> list[dict[str, Any]]:
            entries = self.entries()
            latest = self.reader.rows_by_id([e.latest_id for e in entries])
            items = [self._item(e, latest.get(e.latest_id, {})) for e in entries]
            items.sort(key=lambda i: (i["latest"]["status"] != Status.FAILURE, i["label"].lower(), i["identity_key"]))
            return items
        return self._latest.get(("items",), version.max_id, compute)

    @staticmethod
    def _item(entry: IdentityEntry, row: Mapping[str, str]) -> dict[str, Any]:
        latest = {name: row.get(name, "") for name in ("status", "performance", "reason", "run_id", "started_at",
                                                      "machine_name", "tags", "perf_n", "perf_cv", "created_date")}
        latest["id"] = entry.latest_id
        latest["relative_change"] = _relative_change(row.get("relative_change", ""))
        return {**identity_json(entry.identity), "rows": entry.rows, "success": entry.success,
                "failure": entry.failure, "skipped": entry.skipped, "latest": latest}

    def _runs(self, version: Version) -> list[RunEntry]:
        return self._latest.get(("runs",), version.max_id, self.reader.runs)

    def _groups_of(self, run_id: str, version: Version) -> dict[ResultIdentity, Side]:
        """A run's SUCCESS samples per identity (``report compare``'s grouping); {} for an unknown run."""
        def compute() -> dict[ResultIdentity, Side]:
            rows = self.reader.run_rows(run_id, COMPARE_COLUMNS)
            if not rows:
                raise InputError(f"run {run_id!r} has no rows in the database", hint="/api/runs lists the runs")
            return group_samples(rows, f"run {run_id}")
        return self._groups.get((run_id,), version.max_id, compute)

    def database(self, version: Version) -> dict[str, Any]:
        return {"url": self.url_shown, "table": self.table, "exists": version.exists, "version": version.max_id}

    def _empty(self, version: Version, **extra: Any) -> dict[str, Any]:
        return {"database": self.database(version), "empty": True, "how_to_fill": list(HOW_TO_FILL), **extra}

    # --- filters ---

    @staticmethod
    def _item_matches(item: Mapping[str, Any], filters: Filters) -> bool:
        latest = item["latest"]
        return ((not filters.identity or item["identity_key"] == filters.identity)
                and (not filters.model or filters.model.lower() in item["model"].lower())
                and (not filters.status or latest["status"] == filters.status)
                and (not filters.gpu_architecture or item["gpu_architecture"] == filters.gpu_architecture)
                and (not filters.executor or item["executor"] == filters.executor)
                and (not filters.machine or latest["machine_name"] == filters.machine)
                and tag_matches(filters.tag, latest["tags"], item["tag_configs"])
                and in_window(latest, filters))

    def facets(self, items: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
        """The values the filter lists offer."""
        values: dict[str, set[str]] = {"gpu_architecture": set(), "executor": set(), "machine": set()}
        for item in items:
            values["gpu_architecture"].add(item["gpu_architecture"])
            values["executor"].add(item["executor"])
            values["machine"].add(item["latest"]["machine_name"])
        return {name: sorted(v for v in found if v) for name, found in values.items()}

    # --- views ---

    def overview(self, filters: Filters) -> dict[str, Any]:
        """Latest row per identity (failures first), status counts, recent changes."""
        version = self.version()
        if not version.exists:
            return self._empty(version)
        every = self._items(version)
        if not every:
            return self._empty(version)
        items = [i for i in every if self._item_matches(i, filters)]
        counts = dict.fromkeys(Status.ALL, 0)
        for item in items:
            status = item["latest"]["status"] or "(none)"
            counts[status] = counts.get(status, 0) + 1
        page, paging = _page(items, filters)
        runs = self._runs(version)
        return {"database": self.database(version), "empty": False, "filters": filters.query(),
                "totals": {"rows": sum(i["rows"] for i in every), "identities": len(every), "runs": len(runs),
                           "latest_run": runs[-1].run_id if runs else ""},
                "counts": counts,
                "failures": [i for i in items if i["latest"]["status"] == Status.FAILURE][:MAX_FAILURES],
                "changes": self._changes_summary(items, RECENT_CHANGES),
                "results": {**paging, "items": page}, "facets": self.facets(every)}

    def identities(self, filters: Filters) -> dict[str, Any]:
        version = self.version()
        if not version.exists:
            return self._empty(version, items=[])
        every = self._items(version)
        page, paging = _page([i for i in every if self._item_matches(i, filters)], filters)
        return {"database": self.database(version), "empty": not every, **paging, "items": page,
                "facets": self.facets(every)}

    def _changes_summary(self, items: Sequence[Mapping[str, Any]], limit: int, kind: str = "") -> dict[str, Any]:
        wanted = {i["identity_key"] for i in items}
        entries = [e for e in self.entries() if e.key in wanted]
        checked, found = self.changes.known(entries)
        found = sorted((c for c in found if not kind or c.kind == kind), key=_change_time, reverse=True)
        counts = {"regression": 0, "improvement": 0, "change": 0}
        for change in found:
            counts[change.kind] += 1
        return {"complete": checked == len(entries), "checked": checked, "results": len(entries), "counts": counts,
                "error": self.changes.error, "items": [_change_json(c) for c in found[:limit]], "more": max(len(found) - limit, 0)}

    def changes_view(self, filters: Filters) -> dict[str, Any]:
        """Every detected change (newest first) of the identities the filters select."""
        version = self.version()
        if not version.exists:
            return self._empty(version, items=[])
        every = self._items(version)
        if not every:  # a table without rows: say how to fill it (a filter that picks nothing is no empty database)
            return self._empty(version, items=[])
        items = [i for i in every if self._item_matches(i, picking_identities(filters))]
        summary = self._changes_summary(items, filters.page * filters.per_page, filters.kind)
        page, paging = _page(summary["items"], filters)
        paging["total"] = len(summary["items"]) + summary["more"]
        return {"database": self.database(version), "empty": False,
                **{k: v for k, v in summary.items() if k not in ("items", "more")}, **paging, "items": page}

    def series(self, entry: IdentityEntry, filters: Filters, version: Version) -> dict[str, Any]:
        """One identity: a point per run (the median of its samples, their min and max), the failed
        rows with their reasons, and the changes ``report regressions`` finds in its whole history."""
        rows = self._identity_rows.get((entry.key,), entry.latest_id, lambda: self.reader.identity_rows(entry.key))
        changes = self.changes.of(entry, rows)
        shown = [r for r in rows if in_window(r, filters) and (not filters.machine or r["machine_name"] == filters.machine)
                 and tag_matches(filters.tag, r["tags"], r["tag_configs"])]
        machines: dict[str, set[str]] = {}
        for row in shown:
            machines.setdefault(row["run_id"] or row["started_at"], set()).add(row["machine_name"])
        points = []
        for point in series_from_rows(shown).get(entry.identity, []):
            samples = point.samples
            points.append({"run_id": point.run, "started_at": point.started_at, "value": point.value,
                           "n": len(samples), "min": min(samples), "max": max(samples),
                           "machine_name": ", ".join(sorted(m for m in machines.get(point.run, ()) if m))})
        in_view = {p["run_id"] for p in points}
        failures = [{"run_id": r["run_id"], "started_at": r["started_at"], "status": r["status"], "reason": r["reason"],
                     "machine_name": r["machine_name"]} for r in shown if r["status"] != Status.SUCCESS]
        return {"identity": identity_json(entry.identity), "rows": entry.rows, "points": points,
                "failures": failures[::-1],
                "changes": [{**_change_json(c), "in_view": c.after_run.run in in_view} for c in changes]}

    def trend(self, filters: Filters) -> dict[str, Any]:
        """The series of the identities the filters select (at most ``MAX_TRENDS``)."""
        version = self.version()
        if not version.exists:
            return self._empty(version, series=[])
        every = self._items(version)
        chosen = [i for i in every if self._item_matches(i, picking_identities(filters))]
        by_key = {e.key: e for e in self.entries()}
        series = [self.series(by_key[i["identity_key"]], filters, version) for i in chosen[:MAX_TRENDS]]
        return {"database": self.database(version), "empty": False, "matching": len(chosen),
                "more": max(len(chosen) - MAX_TRENDS, 0), "series": series, "facets": self.facets(every)}

    def one_series(self, filters: Filters) -> dict[str, Any]:
        """``/api/series``: exactly the identity ``filters.identity``."""
        if not filters.identity:
            raise InputError("name the result: identity=<identity_key>", path="identity",
                             hint="/api/identities lists every identity_key")
        version = self.version()
        entry = next((e for e in self.entries() if e.key == filters.identity), None)
        if entry is None:
            raise LookupError(f"no result with identity_key {filters.identity}")
        return {"database": self.database(version), **self.series(entry, filters, version)}

    def runs(self, filters: Filters) -> dict[str, Any]:
        """Every run, newest first, with its counts."""
        version = self.version()
        if not version.exists or not self._items(version):  # no table, or a table without rows: how to fill it
            return self._empty(version, items=[])
        runs = [r for r in reversed(self._runs(version)) if self._run_matches(r, filters)]
        page, paging = _page(runs, filters)
        machines = sorted({r.machine_name for r in self._runs(version) if r.machine_name})
        return {"database": self.database(version), "empty": False,
                **paging, "items": [r.to_json() for r in page], "facets": {"machine": machines}}

    @staticmethod
    def _run_matches(run: RunEntry, filters: Filters) -> bool:
        by_status = {Status.SUCCESS: run.success, Status.FAILURE: run.failure, Status.SKIPPED: run.skipped}
        return ((not filters.machine or run.machine_name == filters.machine)
                and (not filters.status or by_status[filters.status] > 0)
                and (not filters.run or filters.run.lower() in run.run_id.lower())
                and in_window({"started_at": run.started_at, "created_date": run.created_date}, filters))

    def run(self, filters: Filters) -> dict[str, Any]:
        """One run's rows (failures first, each with its reason), its counts and its files."""
        version = self.version()
        if not filters.run:
            raise InputError("name the run: run=<run id>", path="run", hint="/api/runs lists the runs")
        rows = self._run_rows.get((filters.run,), version.max_id, lambda: self.reader.run_rows(filters.run)) \
            if version.exists else []
        if not rows:
            raise LookupError(f"run {filters.run!r} has no rows in {self.url_shown}")
        counts = dict.fromkeys(Status.ALL, 0)
        for row in rows:
            counts[row["status"] or "(none)"] = counts.get(row["status"] or "(none)", 0) + 1
        shown = [r for r in rows if (not filters.status or r["status"] == filters.status)
                 and (not filters.model or filters.model.lower() in r["model"].lower())
                 and tag_matches(filters.tag, r.get("tags", ""), r.get("tag_configs", ""))]
        ordered = sorted(shown, key=lambda r: r["status"] != Status.FAILURE)  # stable: insertion order otherwise
        page, paging = _page(ordered, filters)
        trace = files.trace_link(self.runs_dir, filters.run)
        return {"database": self.database(version), "run_id": filters.run, "counts": counts,
                "machines": sorted({r["machine_name"] for r in rows if r["machine_name"]}),
                "started_at": min((r["started_at"] for r in rows if r["started_at"]), default=""),
                "trace": f"/files/{trace}" if trace else None, **paging,
                "rows": [self._row_json(r) for r in page]}

    def _row_json(self, row: Mapping[str, str]) -> dict[str, Any]:
        identity = ResultIdentity.from_row(row)
        links = []
        for path in files.artifact_paths(row.get("artifacts", "")):
            relative = files.link_of(self.runs_dir, path, self.cwd)
            links.append({"path": path, "url": f"/files/{relative}" if relative else None})
        return {"label": identity.label(), "identity_key": identity.key(), "links": links, "row": dict(row)}

    def compare(self, filters: Filters) -> dict[str, Any]:
        """Two runs, per identity: ``report compare``'s verdicts (by default the two newest runs)."""
        version = self.version()
        runs = self._runs(version) if version.exists else []
        old = filters.old or (runs[-2].run_id if len(runs) >= 2 else "")
        new = filters.new or (runs[-1].run_id if runs else "")
        base = {"database": self.database(version), "old": old, "new": new, "threshold_percent": filters.threshold,
                "alpha": ALPHA, "across_environments": filters.across,
                "runs": [r.run_id for r in reversed(runs)]}
        if not old or not new:
            return {**base, "counts": {}, "warnings": [], "models": [], "empty": True, "total": 0, "page": 1,
                    "pages": 1, "per_page": filters.per_page}

        def compute() -> CompareResult:
            groups = []
            for flag, run_id in (("old", old), ("new", new)):
                try:
                    groups.append(self._groups_of(run_id, version))
                except InputError as exc:
                    raise InputError(str(exc).split(": ", 1)[-1], path=flag, hint=exc.hint) from None
            result = compare_groups(groups[0], groups[1], filters.threshold / 100, across_environments=filters.across)
            result.comparisons.sort(key=lambda c: VERDICT_ORDER.index(c.verdict))  # stable: the CLI's order otherwise
            return result
        result = self._compared.get((old, new, filters.threshold, filters.across), version.max_id, compute)
        chosen = [c for c in result.comparisons if not filters.verdict or c.verdict == filters.verdict]
        page, paging = _page(chosen, filters)
        return {**base, "counts": result.counts(), "warnings": result.warnings, "empty": False, **paging,
                "models": [c.to_json() for c in page]}

def picking_identities(filters: Filters) -> Filters:
    """The filters that choose identities (model, tag, GPU architecture, executor, identity); the
    others narrow a trend's points (machine, time range) or do not apply (status)."""
    return dataclasses.replace(filters, status="", machine="", since="", until="")
