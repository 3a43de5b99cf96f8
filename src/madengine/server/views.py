"""What the dashboard shows, as JSON-ready data: one method per view, shared by the pages and ``/api``.

Everything is computed from the results table through a read-only
:class:`~madengine.database.dashboard.Reader` and kept per *data version* (the table's newest row
id): a page asked again before a row lands costs nothing, and a new row makes every view current at
once. Results are grouped by :class:`~madengine.results.identity.ResultIdentity`; comparisons are
``report compare``'s (:func:`madengine.reports.compare.compare_rows`) and changes ``report
regressions``' (:mod:`madengine.server.changes`), so the dashboard and the CLI give the same verdicts.

A table an import of this release wrote also has its series states and alerts
(:mod:`madengine.database.history_tables`): the overview puts first what needs a person (untriaged
regressions by size × confidence, new failures, flaky results with their failure rate), colours
"vs baseline" by the latest run's verdict against its history, and shows the detector's precision
measured by triage; changes are the stored alerts, complete as soon as an import returns. A table of
an earlier release falls back to finding change points in the background (``ChangeWatch``).
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import dataclasses
import json
import math
import threading
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, TypeVar

from madengine.core.errors import InputError
from madengine.core.gcpause import collector_paused, settle
from madengine.database import alerts as alertlib
from madengine.database.dashboard import COMPARE_COLUMNS, IdentityEntry, Reader, RunEntry, Version
from madengine.reports.compare import CompareResult, Side, compare_groups, group_samples
from madengine.results.direction import lower_is_better
from madengine.results.series import Change, numbered_points
from madengine.results.columns import Status
from madengine.results.identity import FIELDS as IDENTITY_FIELDS
from madengine.results.identity import ResultIdentity
from madengine.server import files
from madengine.server.changes import ChangeWatch
from madengine.server.history import SeriesCache
from madengine.server.filters import VERDICTS, Filters, row_time
from madengine.stats.compare import ALPHA
from madengine.stats.history import state_words

T = TypeVar("T")
MAX_TRENDS = 12  #: identities charted on one trend page (narrow the filters for others)
#: threads reading the rows of a trend's next series while this one makes the first: SQLite reads
#: without the interpreter lock (the rows of a model's 10 configs, 5,000 of them, are half its time)
ROW_READERS = 2
MAX_FAILURES = 50  #: failures listed first on the overview
RECENT_CHANGES = 10  #: changes on the overview
MAX_TRIAGE = 20  #: untriaged regressions on the first screen (the alerts page lists them all)
MAX_FLAKY = 20  #: flaky results listed in their group on the overview
SUMMARIES_PER_PAGE = 10  #: alert summaries on a page
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


def failure_profile(latest_status: str, statuses: str, failures: int, successes: int) -> dict[str, Any]:
    """How a result has been failing: ``new`` (failing now, passing before, never failed before this
    streak), ``flaky`` (failing now and on and off before), ``failing`` (no pass in the window), or
    ``passing``; with the failure rate over the latest runs the series state keeps (``statuses``:
    S/F/K per row, oldest first; the identity's FAILURE and SUCCESS counts when there is none)."""
    window = statuses or ("F" if latest_status == Status.FAILURE else "S")
    rate = window.count("F") / len(window)
    streak = len(window) - len(window.rstrip("F"))
    if latest_status != Status.FAILURE:
        kind = "passing"
    elif "S" not in window and (statuses or not successes):
        kind = "failing"
    elif failures <= streak:
        kind = "new"
    else:
        kind = "flaky"
    return {"kind": kind, "failure_rate": round(rate, 4), "runs": len(window), "streak": streak}


def significance(verdict: Mapping[str, Any] | None) -> str:
    """What colours "vs baseline": ``slower``/``faster`` (the latest run is outside its history's
    band), ``noise`` (inside it), '' (no verdict)."""
    if not verdict:
        return ""
    return verdict["verdict"] if verdict["verdict"] in ("slower", "faster") else "noise"


def _number_or(value: Any, default: float) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return default
    return number if math.isfinite(number) else default


#: how each sortable column of the overview's results orders an item (missing figures go last)
RESULT_SORTS: dict[str, Callable[[Mapping[str, Any]], Any]] = {
    "result": lambda i: i["label"].lower(),
    "metric": lambda i: i["metric"],
    "status": lambda i: i["latest"]["status"],
    "performance": lambda i: _number_or(i["latest"]["performance"], -math.inf),
    "n": lambda i: _number_or(i["latest"]["perf_n"], -math.inf),
    "cv": lambda i: _number_or(i["latest"]["perf_cv"], -math.inf),
    "vs_baseline": lambda i: _number_or(i["vs_baseline"]["change_percent"] if i["vs_baseline"] else None, -math.inf),
    "run": lambda i: i["latest"]["run_id"],
    "started": lambda i: i["latest"]["started_at"],
    "machine": lambda i: i["latest"]["machine_name"],
    "rows": lambda i: i["rows"],
}
DESCENDING_FIRST = frozenset(("performance", "n", "cv", "vs_baseline", "started", "rows", "weight", "size", "confidence",
                              "ratio", "change"))


def sort_items(items: Sequence[T], filters: Filters, keys: Mapping[str, Callable[[T], Any]]) -> list[T]:
    """``items`` in the order the URL asks (``sort``, ``order``); as they are for no (or another table's) column."""
    key = keys.get(filters.sort)
    if key is None:
        return list(items)
    descending = filters.order == "desc" if filters.order else filters.sort in DESCENDING_FIRST
    return sorted(items, key=key, reverse=descending)


def _vs_baseline(verdict: Mapping[str, Any] | None, relative: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The latest run against its baseline: the history verdict (change, method, p, false-alarm rate)
    when the series has one, else the row's ``relative_change`` (no significance)."""
    if verdict:
        return {"change_percent": verdict.get("change_percent"), "significance": significance(verdict),
                "verdict": verdict["verdict"], "method": verdict.get("method", ""), "p_value": verdict.get("p_value"),
                "false_alarm_rate": verdict.get("false_alarm_rate"), "reason": verdict.get("reason", ""),
                "state": state_words(verdict), "more_runs": verdict.get("more_runs")}
    if relative and relative.get("pct_change") is not None:
        return {"change_percent": relative["pct_change"], "significance": "", "verdict": "", "p_value": None,
                "method": f"against the mean of the latest {relative.get('sample_count', '')} runs (relative_change)",
                "false_alarm_rate": None, "reason": "", "state": "", "more_runs": None}
    return None


class Memo:
    """Values computed for a data version, at most ``size`` of them (least recently used out first).
    A value asked for by several threads at once is computed once: the others wait for it."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._values: collections.OrderedDict[tuple[Any, ...], tuple[Any, Any]] = collections.OrderedDict()
        self._lock = threading.Lock()
        self._computing: dict[tuple[Any, ...], threading.Lock] = {}

    def _hit(self, key: tuple[Any, ...], version: Any) -> tuple[bool, Any]:
        with self._lock:
            hit = self._values.get(key)
            if hit is not None and hit[0] == version:
                self._values.move_to_end(key)
                return True, hit[1]
            return False, None

    def get(self, key: tuple[Any, ...], version: Any, compute: Callable[[], T]) -> T:
        found, value = self._hit(key, version)
        if found:
            return value
        with self._lock:
            computing = self._computing.setdefault(key, threading.Lock())
        with computing:
            found, value = self._hit(key, version)  # another thread made it meanwhile
            if found:
                return value
            value = compute()
            self._store(key, version, value)
        return value

    def _store(self, key: tuple[Any, ...], version: Any, value: Any) -> None:
        with self._lock:
            self._values[key] = (version, value)
            self._values.move_to_end(key)
            while len(self._values) > self.size:
                self._values.popitem(last=False)


class Dashboard:
    """The dashboard's data over one results table."""

    def __init__(self, reader: Reader, runs_dir: Path, url_shown: str, table: str, cwd: Path | None = None) -> None:
        self.reader = reader
        self.runs_dir = Path(runs_dir)
        self.url_shown = url_shown
        self.table = table
        self.cwd = cwd or Path.cwd()
        self.changes = ChangeWatch(reader, self.entries, self.covered, self.warm)
        # what is kept, per data version (least recently used first out): sized so that a server over a
        # million rows stays small (a run's full rows are megabytes; its compare groups far less)
        self._latest = Memo(4)  # identities, their latest rows, runs
        self._identity_rows = Memo(16)  # at least MAX_TRENDS: a trend's series read ahead stay until they are drawn
        self._row_readers = concurrent.futures.ThreadPoolExecutor(ROW_READERS, thread_name_prefix="madengine-rows")
        self._run_rows = Memo(2)
        self._groups = Memo(32)  # per run: its samples grouped by identity, for comparisons
        self._compared = Memo(8)
        self._history = Memo(2)  # alerts (per triage version)
        self._references = Memo(8)  # per old run: the history each result is judged against
        self._run_commits = Memo(64)  # per run: each result's git_commit (the summaries' commit ranges)
        self.tails = SeriesCache(reader.states)  # kept across versions: reloaded where rows landed
        self._settled: Version | None = None  #: the version whose references were last made and frozen
        self._serving = 0  #: requests being answered: the background pass gives way to them
        self._serving_lock = threading.Lock()

    def close(self) -> None:
        """Stop the background pass and the row readers (the server is stopping)."""
        self.changes.stop()
        self._row_readers.shutdown(wait=True, cancel_futures=True)

    # --- data versions ---

    def warm(self) -> None:
        """Make what the pages read for the current data (the background pass calls it), so that the
        first request after rows land does not pay for it."""
        version = self.version()
        if not version.exists:
            return
        # a new version makes hundreds of thousands of objects that live until the next one; frozen
        # once made (the program's own process), no full collection walks them again (150 ms, paid
        # by whichever request triggered it). The references, made only while no request is being
        # answered (which may take long), are made with the collector running, then frozen too.
        fresh = version != self._settled
        with collector_paused() if fresh else contextlib.nullcontext():
            self._items(version)
            self._alerts(version)
            self.tails.refresh(self._series_states(version))
        self.tails.prepare(stop=lambda: self.changes.stopping, busy=lambda: self._serving > 0)
        if fresh and not self.changes.stopping:
            self._settled = version
            settle()

    @contextlib.contextmanager
    def serving(self) -> Iterator[None]:
        """Around the answer to a request: the background pass waits meanwhile."""
        with self._serving_lock:
            self._serving += 1
        try:
            yield
        finally:
            with self._serving_lock:
                self._serving -= 1

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
            series = self.reader.series_overview()
            items = [self._item(e, latest.get(e.latest_id, {}), series.get(e.key)) for e in entries]
            items.sort(key=lambda i: (i["latest"]["status"] != Status.FAILURE, i["label"].lower(), i["identity_key"]))
            return items
        return self._latest.get(("items",), version.max_id, compute)

    @staticmethod
    def _item(entry: IdentityEntry, row: Mapping[str, str], series: Mapping[str, Any] | None) -> dict[str, Any]:
        latest = {name: row.get(name, "") for name in ("status", "performance", "reason", "run_id", "started_at",
                                                      "machine_name", "tags", "perf_n", "perf_cv", "created_date")}
        latest["id"] = entry.latest_id
        latest["relative_change"] = _relative_change(row.get("relative_change", ""))
        # a verdict on an earlier run than the latest row (which failed) says nothing about it
        verdict = series["verdict"] if series and series["verdict"] and \
            series["verdict"].get("run_id") == latest["run_id"] and latest["status"] == Status.SUCCESS else None
        return {**identity_json(entry.identity), "rows": entry.rows, "success": entry.success,
                "failure": entry.failure, "skipped": entry.skipped, "latest": latest,
                "vs_baseline": _vs_baseline(verdict, latest["relative_change"]),
                "profile": failure_profile(latest["status"], series["statuses"] if series else "", entry.failure,
                                           entry.success)}

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
        return {"url": self.url_shown, "table": self.table, "exists": version.exists, "version": version.max_id,
                "triage": version.triage, "token": version.token}

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
        """What needs a person first (untriaged regressions, new failures, flaky results), then the
        latest row per identity (failures first, or as ``sort`` asks), status counts, changes, precision."""
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
        page, paging = _page(sort_items(items, filters, RESULT_SORTS), filters)
        runs = self._runs(version)
        failing = [i for i in items if i["latest"]["status"] == Status.FAILURE]
        return {"database": self.database(version), "empty": False, "filters": filters.query(),
                "totals": {"rows": sum(i["rows"] for i in every), "identities": len(every), "runs": len(runs),
                           "latest_run": runs[-1].run_id if runs else ""},
                "counts": counts, "failures": failing[:MAX_FAILURES], **self._failure_groups(failing),
                "triage": self._triage(items, version), "precision": self._precision(items, version),
                "changes": self._changes_summary(items, RECENT_CHANGES),
                "results": {**paging, "items": page}, "facets": self.facets(every)}

    @staticmethod
    def _failure_groups(failing: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """The results failing now, by how: new failures first, flaky ones (by failure rate), broken ones."""
        groups: dict[str, list[Mapping[str, Any]]] = {"new": [], "flaky": [], "failing": []}
        for item in failing:
            groups.get(item["profile"]["kind"], groups["flaky"]).append(item)
        flaky = sorted(groups["flaky"], key=lambda i: (-i["profile"]["failure_rate"], i["label"].lower()))
        return {"new_failures": groups["new"],
                "flaky": {"total": len(flaky), "items": flaky[:MAX_FLAKY], "more": max(len(flaky) - MAX_FLAKY, 0)},
                "broken": {"total": len(groups["failing"]), "items": groups["failing"][:MAX_FLAKY],
                           "more": max(len(groups["failing"]) - MAX_FLAKY, 0)}}

    # --- alerts (the history tables) ---

    def _alerts(self, version: Version) -> list[alertlib.Alert]:
        return self._history.get(("alerts",), version.token, self.reader.alerts) if version.exists else []

    def _triage(self, items: Sequence[Mapping[str, Any]], version: Version) -> dict[str, Any]:
        """Untriaged regressions the detection still finds, of the results shown, by size × confidence."""
        labels = {i["identity_key"]: i for i in items}
        waiting = sorted((a for a in self._alerts(version) if a.detected and a.state == alertlib.UNTRIAGED
                          and a.kind == "regression" and a.identity_key in labels), key=alertlib.priority)
        return {"available": self.reader.has_history(), "total": len(waiting),
                "items": [self._alert_json(a, labels[a.identity_key]) for a in waiting[:MAX_TRIAGE]],
                "more": max(len(waiting) - MAX_TRIAGE, 0)}

    def _precision(self, items: Sequence[Mapping[str, Any]], version: Version) -> dict[str, Any]:
        wanted = {i["identity_key"] for i in items}
        return alertlib.precision(a for a in self._alerts(version) if a.identity_key in wanted)

    @staticmethod
    def _alert_json(alert: alertlib.Alert, item: Mapping[str, Any] | None = None) -> dict[str, Any]:
        label = item["label"] if item else alert.change.get("identity", alert.model)
        return {**alert.to_json(), "label": label, "lower_is_better": alert.change.get("lower_is_better", False),
                "change_words": alertlib.change_words(alert.size_percent, alert.kind),
                "before_mean": alert.change.get("before", {}).get("mean"),
                "after_mean": alert.change.get("after", {}).get("mean"),
                "trace_diff": alert.change.get("trace_diff", "")}

    def _chosen_alerts(self, filters: Filters, version: Version) -> tuple[dict[str, Any], list[alertlib.Alert]]:
        """The results the filters pick (by identity key), and their alerts the detection still finds
        of the filters' ``kind`` and ``state``."""
        items = {i["identity_key"]: i for i in self._items(version) if self._item_matches(i, picking_identities(filters))}
        alerts = [a for a in self._alerts(version) if a.detected and a.identity_key in items
                  and (not filters.kind or a.kind == filters.kind) and (not filters.state or a.state == filters.state)]
        return items, alerts

    def alerts_view(self, filters: Filters) -> dict[str, Any]:
        """Every alert the detection still finds (of the results the filters pick), the most deserving
        first (or as ``sort`` asks), with the detector's precision per metric and per month."""
        version = self.version()
        if not version.exists:
            return self._empty(version, items=[])
        items, alerts = self._chosen_alerts(filters, version)
        ordered = sort_items(sorted(alerts, key=alertlib.priority), filters, ALERT_SORTS)
        page, paging = _page(ordered, filters)
        states = dict.fromkeys(alertlib.STATES, 0)
        for alert in alerts:
            states[alert.state] += 1
        return {"database": self.database(version), "empty": not items, "history": self.reader.has_history(),
                "states": states, "precision": alertlib.precision(a for a in self._alerts(version)
                                                                if a.identity_key in items),
                **paging, "items": [self._alert_json(a, items[a.identity_key]) for a in page]}

    def summaries_view(self, filters: Filters) -> dict[str, Any]:
        """The alerts the detection still finds (of the results the filters pick, of ``kind`` and
        ``state``) grouped by the run that introduced them (:func:`madengine.database.alerts.summaries`),
        ``SUMMARIES_PER_PAGE`` to a page, each with its suspected commit range."""
        version = self.version()
        if not version.exists:
            return self._empty(version, items=[])
        items, alerts = self._chosen_alerts(filters, version)
        made = alertlib.summaries(alerts)
        page, paging = _page(made, dataclasses.replace(filters, per_page=SUMMARIES_PER_PAGE))
        for summary in page:
            summary.commits = alertlib.commit_ranges(summary, lambda run: self._commits(run, version))
        shown = [{**s.to_json(), "items": [self._alert_json(a, items[a.identity_key]) for a in s.alerts]} for s in page]
        return {"database": self.database(version), "empty": not items, "history": self.reader.has_history(),
                "alerts": len(alerts), **paging, "items": shown}

    def _commits(self, run_id: str, version: Version) -> dict[str, str]:
        """Per identity key, its row's ``git_commit`` in run ``run_id``."""
        columns = (*IDENTITY_FIELDS, "git_commit")
        return self._run_commits.get((run_id,), version.max_id,
                                lambda: alertlib.commits_of(self.reader.run_rows(run_id, columns)))

    def triage_many(self, alert_ids: Sequence[str], summary: str | None,
                    decide: Callable[[], alertlib.Triage]) -> dict[str, Any]:
        """One decision about several alerts: those named, or a summary's (all of it, or those named
        of it); the ids are checked before the decision."""
        from madengine.database.api import triage_chosen
        from madengine.database.sql import SqlStore, driver_errors

        with driver_errors(self.reader.url), SqlStore(self.reader.url, self.table) as store:
            if not store.table_exists():
                raise LookupError(f"no results table '{self.table}'")
            outcome = triage_chosen(store, alert_ids, summary, decide)
        return {**outcome.to_json(), "alerts": [self._alert_json(a) for a in outcome.alerts]}

    def triage(self, alert_id: str, decision: alertlib.Triage) -> dict[str, Any]:
        """Record a person's decision about an alert (the only write of the dashboard: the alerts
        table, never the results)."""
        from madengine.database.api import triage_alert
        from madengine.database.sql import SqlStore, driver_errors

        with driver_errors(self.reader.url), SqlStore(self.reader.url, self.table) as store:
            if not store.table_exists():
                raise LookupError(f"no results table '{self.table}'")
            alert = triage_alert(store, alert_id, decision)
        return self._alert_json(alert)

    def identities(self, filters: Filters) -> dict[str, Any]:
        version = self.version()
        if not version.exists:
            return self._empty(version, items=[])
        every = self._items(version)
        page, paging = _page([i for i in every if self._item_matches(i, filters)], filters)
        return {"database": self.database(version), "empty": not every, **paging, "items": page,
                "facets": self.facets(every)}

    def _series_states(self, version: Version) -> dict[str, dict[str, Any]]:
        return self._latest.get(("series",), version.max_id, self.reader.series_overview) if version.exists else {}

    def covered(self, entries: Sequence[IdentityEntry], version: Version | None = None) -> set[str]:
        """The keys of ``entries`` whose changes the database's alerts have up to their latest row."""
        states = self._series_states(version or self.version())
        return {e.key for e in entries if e.key in states and states[e.key]["covered"] >= e.latest_id}

    def _change_records(self, entries: Sequence[IdentityEntry], version: Version) -> tuple[int, list[dict[str, Any]]]:
        """(identities whose changes are known, their changes as ``report regressions --json`` shows
        them, each with its ``alert`` when the database keeps one)."""
        known = self.covered(entries, version)
        covered = [e for e in entries if e.key in known]
        wanted = {e.key for e in covered}
        records = [{**a.change, "alert": self._alert_json(a)} for a in self._alerts(version)
                   if a.detected and a.identity_key in wanted]
        rest = [e for e in entries if e.key not in wanted]
        checked, found = self.changes.known(rest)
        return checked + len(covered), records + [{**_change_json(c), "alert": None} for c in found]

    def _changes_summary(self, items: Sequence[Mapping[str, Any]], limit: int, kind: str = "", state: str = "",
                         sort: Filters | None = None) -> dict[str, Any]:
        wanted = {i["identity_key"] for i in items}
        entries = [e for e in self.entries() if e.key in wanted]
        checked, found = self._change_records(entries, self.version())
        found = [c for c in found if (not kind or c["kind"] == kind)
                 and (not state or (c["alert"] or {}).get("state") == state)]
        found.sort(key=lambda c: (c["after"]["started_at"], c["after"]["run_id"]), reverse=True)
        if sort is not None:
            found = sort_items(found, sort, CHANGE_SORTS)
        counts = {"regression": 0, "improvement": 0, "change": 0}
        for change in found:
            counts[change["kind"]] += 1
        left = len(entries) - checked
        return {"complete": left == 0, "checked": checked, "results": len(entries), "counts": counts,
                "estimate_s": None if not left else self.changes.estimate(left), "error": self.changes.error,
                "items": found[:limit], "more": max(len(found) - limit, 0)}

    def changes_view(self, filters: Filters) -> dict[str, Any]:
        """Every detected change (newest first, or as ``sort`` asks) of the identities the filters
        select, each with its alert and triage; the detector's precision."""
        version = self.version()
        if not version.exists:
            return self._empty(version, items=[])
        every = self._items(version)
        if not every:  # a table without rows: say how to fill it (a filter that picks nothing is no empty database)
            return self._empty(version, items=[])
        items = [i for i in every if self._item_matches(i, picking_identities(filters))]
        summary = self._changes_summary(items, filters.page * filters.per_page, filters.kind, filters.state, filters)
        page, paging = _page(summary["items"], filters)
        paging["total"] = len(summary["items"]) + summary["more"]
        return {"database": self.database(version), "empty": False, "history": self.reader.has_history(),
                "precision": self._precision(items, version),
                **{k: v for k, v in summary.items() if k not in ("items", "more")}, **paging, "items": page}

    def series(self, entry: IdentityEntry, filters: Filters, version: Version) -> dict[str, Any]:
        """One identity: a point per run (the median of its samples, their min and max), the failed
        rows with their reasons, and the changes ``report regressions`` finds in its whole history."""
        rows = self._rows(entry)
        if self.covered([entry], version):
            changes = [{**a.change, "alert": self._alert_json(a)} for a in self._alerts(version)
                       if a.detected and a.identity_key == entry.key]
            changes.sort(key=lambda c: c["index"])
        else:
            changes = [{**_change_json(c), "alert": None} for c in self.changes.of(entry, rows)]
        narrowed = any(filters.time_window()) or filters.machine or filters.tag.strip()
        shown = [r for r in rows if in_window(r, filters) and (not filters.machine or r["machine_name"] == filters.machine)
                 and tag_matches(filters.tag, r["tags"], entry.identity.tag_configs)] if narrowed else rows
        machines: dict[str, set[str]] = {}
        for row in shown:
            machines.setdefault(row["run_id"] or row["started_at"], set()).add(row["machine_name"])
        points = []
        for point in numbered_points(enumerate(shown)):  # the rows of one identity: its series
            samples = point.samples
            points.append({"run_id": point.run, "started_at": point.started_at, "value": point.value,
                           "n": len(samples), "min": min(samples), "max": max(samples),
                           "machine_name": ", ".join(sorted(filter(None, machines.get(point.run, ()))))})
        in_view = {p["run_id"] for p in points}
        failures = [{"run_id": r["run_id"], "started_at": r["started_at"], "status": r["status"], "reason": r["reason"],
                     "machine_name": r["machine_name"]} for r in shown if r["status"] != Status.SUCCESS]
        return {"identity": identity_json(entry.identity), "rows": entry.rows, "points": points,
                "failures": failures[::-1],
                "changes": [{**c, "in_view": c["after"]["run_id"] in in_view} for c in changes]}

    def _rows(self, entry: IdentityEntry) -> list[dict[str, str]]:
        """Every row of one identity (``Reader.identity_rows``), kept for its latest row."""
        return self._identity_rows.get((entry.key,), entry.latest_id, lambda: self.reader.identity_rows(entry.key))

    def trend(self, filters: Filters) -> dict[str, Any]:
        """The series of the identities the filters select (at most ``MAX_TRENDS``); the rows of the
        second one on are read in ``ROW_READERS`` threads meanwhile (a failed read is read again here,
        where its error is answered)."""
        version = self.version()
        if not version.exists:
            return self._empty(version, series=[])
        every = self._items(version)
        picking = picking_identities(filters)
        chosen = [i for i in every if self._item_matches(i, picking)]
        by_key = {e.key: e for e in self.entries()}
        entries = [by_key[i["identity_key"]] for i in chosen[:MAX_TRENDS]]
        for entry in entries[1:]:
            self._row_readers.submit(self._rows, entry)
        series = [self.series(entry, filters, version) for entry in entries]
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
            result = compare_groups(groups[0], groups[1], filters.threshold / 100, across_environments=filters.across,
                                    references=self._references_at(old, version))
            result.comparisons.sort(key=lambda c: VERDICT_ORDER.index(c.verdict))  # stable: the CLI's order otherwise
            return result
        result = self._compared.get((old, new, filters.threshold, filters.across), version.max_id, compute)
        chosen = sort_items([c for c in result.comparisons if not filters.verdict or c.verdict == filters.verdict],
                            filters, COMPARISON_SORTS)
        page, paging = _page(chosen, filters)
        return {**base, "counts": result.counts(), "warnings": result.warnings, "empty": False, **paging,
                "models": [c.to_json() for c in page]}

    def _references_at(self, run_id: str, version: Version) -> dict[ResultIdentity, Any]:
        """Per identity whose series has run ``run_id`` among its latest: the reference (stable segment up
        to that run) a single new figure is judged against (``report compare --old-run`` makes the same)."""
        def compute() -> dict[ResultIdentity, Any]:
            self.tails.refresh(self._series_states(version))
            return self.tails.references_at(run_id, {e.key: e.identity for e in self.entries()})
        return self._references.get((run_id,), version.max_id, compute)


#: how compare's list sorts (by default worst first: the verdicts in VERDICT_ORDER)
COMPARISON_SORTS: dict[str, Callable[[Any], Any]] = {
    "result": lambda c: c.identity.label().lower(), "metric": lambda c: c.metric,
    "old": lambda c: _number_or(c.old.median, -math.inf), "new": lambda c: _number_or(c.new.median, -math.inf),
    "ratio": lambda c: _number_or(c.ratio, -math.inf), "change": lambda c: _number_or(c.change, -math.inf),
    "verdict": lambda c: VERDICT_ORDER.index(c.verdict), "n": lambda c: len(c.new.samples),
}

#: how the changes list sorts
CHANGE_SORTS: dict[str, Callable[[Mapping[str, Any]], Any]] = {
    "size": lambda c: abs(c["size_percent"] or 0.0), "confidence": lambda c: c["confidence"],
    "weight": lambda c: abs(c["size_percent"] or 0.0) * c["confidence"], "started": lambda c: c["after"]["started_at"],
    "result": lambda c: c["identity"].lower(), "kind": lambda c: c["kind"],
    "state": lambda c: (c["alert"] or {}).get("state", ""),
}

#: how the alerts list sorts
ALERT_SORTS: dict[str, Callable[[alertlib.Alert], Any]] = {
    "weight": lambda a: a.weight, "size": lambda a: abs(a.size_percent or 0.0), "confidence": lambda a: a.confidence,
    "started": lambda a: a.after_started_at, "result": lambda a: a.change.get("identity", a.model).lower(),
    "state": lambda a: alertlib.STATES.index(a.state), "kind": lambda a: a.kind, "metric": lambda a: a.metric,
}


def picking_identities(filters: Filters) -> Filters:
    """The filters that choose identities (model, tag, GPU architecture, executor, identity); the
    others narrow a trend's points (machine, time range) or do not apply (status)."""
    return dataclasses.replace(filters, status="", machine="", since="", until="")
