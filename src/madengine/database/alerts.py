"""Alerts: every change point the detection finds, with what people decided about it.

An alert is one detected change of one result series (:class:`~madengine.results.series.Change`).
It starts ``untriaged``; a person sets it to ``acknowledged`` (being looked at), ``expected`` (an
intended change), ``invalid`` (noise: the detector was wrong) or ``fixed``, with a note and links
(a commit, an issue URL), from the dashboard or ``madengine report alerts``. The results database
keeps the alerts (``<table>_alerts``) and every triage step with who and when (``<table>_alert_log``).

**Identity across imports.** An alert's id is made from its series and the first run after the
change. When an import finds the change again, a run or two away (more runs sharpen its place), the
alert found within ``MIN_SEGMENT`` runs of it with the same direction is the same alert: it moves
and keeps its triage. A change the detection no longer finds stays, ``detected`` false, with its
triage. Re-importing a perf.csv adds no rows, so it changes no alert.

**Summaries** (as Perfherder groups alerts by the push that caused them): the alerts of one run,
the first run after each change (:func:`summaries`): one summary per run, its id the run id, with
its counts of regressions and improvements, its alerts the worst first, and the suspected commit
range when the rows carry ``git_commit`` (:func:`commit_ranges`). A summary, or chosen alerts of
it, is triaged at once.

**Precision** of the detector, measured by the people who triage: of the triaged alerts, the share
not marked ``invalid`` (:func:`precision`), per metric and per month of the change.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from typing import Any, Callable, Iterable, Mapping, Sequence
from urllib.parse import urlsplit

from madengine.core.errors import InputError
from madengine.results.identity import ResultIdentity
from madengine.results.series import Change
from madengine.stats.changepoint import MIN_SEGMENT

UNTRIAGED = "untriaged"
STATES = (UNTRIAGED, "acknowledged", "expected", "invalid", "fixed")
INVALID = "invalid"
MAX_NOTE = 2000
MAX_LINKS = 10
MAX_LINK = 500
MAX_BY = 100
_COMMIT = re.compile(r"^[0-9a-fA-F]{7,64}$")


@dataclasses.dataclass
class Alert:
    alert_id: str
    identity_key: str
    model: str
    metric: str
    kind: str  #: regression | improvement | change
    position: int  #: the first run after the change in its series (0-based)
    before_run: str
    after_run: str
    after_started_at: str
    size_percent: float | None
    confidence: float
    detected: bool  #: the latest detection still finds it
    latest: bool  #: the series' most recent detected change (still in effect)
    change: dict[str, Any]  #: the change as ``report regressions --json`` shows it
    state: str = UNTRIAGED
    note: str = ""
    links: list[str] = dataclasses.field(default_factory=list)
    updated_by: str = ""
    updated_at: str = ""
    detected_at: str = ""

    @property
    def weight(self) -> float:
        """How much it deserves a look: |size| × confidence."""
        return abs(self.size_percent or 0.0) * self.confidence

    @property
    def month(self) -> str:
        return (self.after_started_at or self.detected_at)[:7]

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "weight": round(self.weight, 6)}


def priority(alert: Alert) -> tuple[int, int, float, str]:
    """Sort key: untriaged regressions first, by size × confidence; then the rest by the same."""
    return (alert.state != UNTRIAGED, alert.kind != "regression", -alert.weight, alert.alert_id)


def change_words(size_percent: float | None, kind: str) -> str:
    """The change in words: ``-15.9 %, worse`` (a regression), ``+4.0 %, better`` (an improvement)."""
    if size_percent is None:
        return "no relative size"
    word = {"regression": "worse", "improvement": "better"}.get(kind, "changed")
    return f"{size_percent:+.1f} %, {word}".replace("-", "\u2212")


def alert_id(identity_key: str, after_run: str) -> str:
    return hashlib.sha256(f"{identity_key}\n{after_run}".encode("utf-8")).hexdigest()[:16]


def _fill(alert: Alert, change: Change) -> None:
    alert.kind = change.kind
    alert.position = change.index
    alert.before_run = change.before_run.run
    alert.after_run = change.after_run.run
    alert.after_started_at = change.after_run.started_at
    alert.size_percent = None if change.point.size is None else round(change.point.size * 100, 3)
    alert.confidence = round(change.point.confidence, 6)
    alert.detected = True
    alert.change = change.to_json()


def _new(change: Change, now: str) -> Alert:
    identity = change.identity
    alert = Alert(alert_id(identity.key(), change.after_run.run), identity.key(), identity.model, identity.metric,
                  change.kind, 0, "", "", "", None, 0.0, True, False, {}, detected_at=now)
    _fill(alert, change)
    return alert


def reconcile(existing: Sequence[Alert], changes: Sequence[Change], frozen_before: int, now: str) -> list[Alert]:
    """The alerts of one series after a detection: ``changes`` found at positions from
    ``frozen_before`` on; alerts before that are left as they are. Returns the alerts that changed."""
    by_id = {a.alert_id: a for a in existing}
    open_alerts = [a for a in existing if a.position >= frozen_before]  # withdrawn ones may come back
    before = {a.alert_id: dataclasses.replace(a, links=list(a.links)) for a in existing}
    for change in changes:
        near = [a for a in open_alerts if a.kind == change.kind and abs(a.position - change.index) < MIN_SEGMENT]
        alert = min(near, key=lambda a: (not a.detected, abs(a.position - change.index))) if near else \
            by_id.get(alert_id(change.identity.key(), change.after_run.run))
        if alert is None:
            alert = _new(change, now)
            by_id[alert.alert_id] = alert
        else:
            _fill(alert, change)
        if alert in open_alerts:
            open_alerts.remove(alert)
    for alert in open_alerts:
        alert.detected = False
    detected = [a for a in by_id.values() if a.detected]
    newest = max(detected, key=lambda a: a.position, default=None)
    for alert in by_id.values():
        alert.latest = alert is newest
    return [a for a in by_id.values() if a.alert_id not in before or before[a.alert_id] != a]


# --- triage ------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Triage:
    """What a person decided about an alert (checked by :func:`triage`)."""

    state: str
    note: str
    links: tuple[str, ...]
    by: str


def _link(text: str, field: str) -> str:
    text = text.strip()
    if _COMMIT.match(text):
        return text
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc or len(text) > MAX_LINK or any(c.isspace() for c in text):
        raise InputError(f"not a commit hash or an http(s) URL: {text[:60]!r}", path=field,
                         hint="give a commit (7-64 hex digits) or an issue/merge-request URL")
    return text


def triage(state: str, note: str = "", links: Iterable[str] = (), by: str = "", *, prefix: str = "") -> Triage:
    """A checked :class:`Triage`: a known state, a note of at most ``MAX_NOTE`` characters, links that
    are commit hashes or http(s) URLs, and who decided (an InputError names the bad field, after
    ``prefix``: ``--`` for flags)."""
    state = (state or "").strip().lower()
    if state not in STATES:
        raise InputError(f"unknown state {state[:40]!r}", path=f"{prefix}state", hint=f"one of {', '.join(STATES)}")
    note = (note or "").strip()
    if len(note) > MAX_NOTE or any(ord(c) < 32 and c not in "\n\t" for c in note):
        raise InputError(f"at most {MAX_NOTE} characters of text (no control characters but newlines and tabs)",
                         path=f"{prefix}note")
    kept = tuple(_link(text, f"{prefix}link") for text in links if text and text.strip())
    if len(kept) > MAX_LINKS:
        raise InputError(f"at most {MAX_LINKS} links", path=f"{prefix}link")
    by = (by or "").strip()
    if not by or len(by) > MAX_BY or any(ord(c) < 32 for c in by):
        raise InputError("say who decides: a name of 1 to 100 characters", path=f"{prefix}by")
    return Triage(state, note, kept, by)


def apply(alert: Alert, decision: Triage, now: str) -> Alert:
    return dataclasses.replace(alert, state=decision.state, note=decision.note, links=list(decision.links),
                               updated_by=decision.by, updated_at=now)


def unchanged_by(alert: Alert, decision: Triage) -> bool:
    """The decision says what the alert says already (who decides does not count): nothing to write."""
    return (alert.state, alert.note, list(alert.links)) == (decision.state, decision.note, list(decision.links))


# --- summaries ---------------------------------------------------------------------------------

@dataclasses.dataclass
class Summary:
    """The alerts one run introduced (their first run after the change), the worst first."""

    summary_id: str  #: the run id
    started_at: str
    alerts: list[Alert]
    commits: list[dict[str, Any]] = dataclasses.field(default_factory=list)  #: suspected ranges (commit_ranges)

    def count(self, kind: str) -> int:
        return sum(a.kind == kind for a in self.alerts)

    @property
    def untriaged(self) -> int:
        return sum(a.state == UNTRIAGED for a in self.alerts)

    @property
    def worst(self) -> Alert:
        return self.alerts[0]

    def to_json(self) -> dict[str, Any]:
        states = dict.fromkeys(STATES, 0)
        for alert in self.alerts:
            states[alert.state] += 1
        return {"summary_id": self.summary_id, "run_id": self.summary_id, "started_at": self.started_at,
                "alerts": len(self.alerts), "regressions": self.count("regression"),
                "improvements": self.count("improvement"), "untriaged": self.untriaged, "states": states,
                "commits": self.commits, "items": [a.to_json() for a in self.alerts]}


def worst_first(alert: Alert) -> tuple[int, float, str]:
    """Within a summary: regressions before the rest, each by size × confidence."""
    return (alert.kind != "regression", -alert.weight, alert.alert_id)


def summaries(alerts: Iterable[Alert]) -> list[Summary]:
    """The alerts grouped by the run that introduced them: summaries with an untriaged regression
    first, then the newest first; within each, the worst alert first."""
    runs: dict[str, list[Alert]] = {}
    for alert in alerts:
        runs.setdefault(alert.after_run, []).append(alert)
    made = [Summary(run, max((a.after_started_at for a in group), default=""), sorted(group, key=worst_first))
            for run, group in runs.items()]
    made.sort(key=lambda s: (s.started_at, s.summary_id), reverse=True)
    made.sort(key=lambda s: not any(a.kind == "regression" and a.state == UNTRIAGED for a in s.alerts))
    return made


def commits_of(rows: Iterable[Mapping[str, str]]) -> dict[str, str]:
    """Per identity key, the ``git_commit`` of its row among ``rows`` (one run's), when it has one."""
    return {ResultIdentity.from_row(r).key(): commit for r in rows if (commit := (r.get("git_commit") or "").strip())}


def commit_ranges(summary: Summary, commits_at: Callable[[str], Mapping[str, str]]) -> list[dict[str, Any]]:
    """The suspected commit ranges of a summary: per alert, the ``git_commit`` of its result's row in
    the last run before the change and in the first run after it (``commits_at(run)``: identity key
    -> commit); the distinct ranges, the one most alerts share first ([] when the rows carry none)."""
    ranges: dict[tuple[str, str], int] = {}
    before: dict[str, Mapping[str, str]] = {}
    after = commits_at(summary.summary_id)
    for alert in summary.alerts:
        if alert.before_run not in before:
            before[alert.before_run] = commits_at(alert.before_run)
        old, new = before[alert.before_run].get(alert.identity_key, ""), after.get(alert.identity_key, "")
        if old or new:
            ranges[(old, new)] = ranges.get((old, new), 0) + 1
    ordered = sorted(ranges.items(), key=lambda item: (-item[1], item[0]))
    return [{"from": old, "to": new, "alerts": n, "range": f"{old[:12] or '?'}..{new[:12] or '?'}"}
            for (old, new), n in ordered]


# --- precision ---------------------------------------------------------------------------------

def _figure(alerts: Sequence[Alert]) -> dict[str, Any]:
    triaged = [a for a in alerts if a.state != UNTRIAGED]
    invalid = sum(a.state == INVALID for a in triaged)
    return {"alerts": len(alerts), "triaged": len(triaged), "invalid": invalid,
            "untriaged": len(alerts) - len(triaged),
            "precision": None if not triaged else round(1 - invalid / len(triaged), 4),
            "invalid_share": None if not triaged else round(invalid / len(triaged), 4)}


def precision(alerts: Iterable[Alert]) -> dict[str, Any]:
    """The detector's measured precision: overall, per metric and per month of the change
    (``precision`` = 1 − invalid ÷ triaged; None before anything is triaged)."""
    alerts = list(alerts)
    by_metric: dict[str, list[Alert]] = {}
    by_month: dict[str, list[Alert]] = {}
    for alert in alerts:
        by_metric.setdefault(alert.metric, []).append(alert)
        by_month.setdefault(alert.month or "(unknown)", []).append(alert)
    return {"overall": _figure(alerts),
            "metrics": [{"metric": m, **_figure(a)} for m, a in sorted(by_metric.items())],
            "months": [{"month": m, **_figure(a)} for m, a in sorted(by_month.items())]}


def from_record(record: Mapping[str, Any]) -> Alert:
    """An :class:`Alert` from a stored record (SQL row or MongoDB document, JSON fields parsed)."""
    fields = {f.name for f in dataclasses.fields(Alert)}
    values = {k: v for k, v in record.items() if k in fields}
    values["detected"], values["latest"] = bool(values.get("detected")), bool(values.get("latest"))
    values["size_percent"] = None if values.get("size_percent") is None else float(values["size_percent"])
    values["confidence"] = float(values.get("confidence") or 0.0)
    values["position"] = int(values.get("position") or 0)
    values["links"] = list(values.get("links") or [])
    values["change"] = dict(values.get("change") or {})
    for name in ("note", "updated_by", "updated_at", "detected_at", "after_started_at", "before_run", "after_run"):
        values[name] = "" if values.get(name) is None else str(values[name])
    return Alert(**values)
