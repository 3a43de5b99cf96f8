"""One check's answer, and the verdict of them all.

A check is one line of ``madengine doctor``: a name, a status, what was found, and (unless it
passed) what to do about it. ``SKIP`` says a check does not apply here (a CPU host has no GPU
driver to check); it never counts against the host.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable

PASS, WARN, FAIL, SKIP = "PASS", "WARN", "FAIL", "SKIP"
STATUSES = (PASS, WARN, FAIL, SKIP)


@dataclasses.dataclass(frozen=True)
class Check:
    """One line of the report. ``need`` names what the check is about (``docker``, ``gpu``) so
    that ``--tags`` can tell a failure that matters to the selected models from one that does not;
    ``data`` holds what was found, for ``--json``."""

    name: str
    status: str
    summary: str
    fix: str = ""
    need: str = ""
    data: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "summary": self.summary, "fix": self.fix,
                "data": dict(self.data)}


def passed(name: str, summary: str, **data: Any) -> Check:
    return Check(name, PASS, summary, data=data)


def skipped(name: str, summary: str, **data: Any) -> Check:
    return Check(name, SKIP, summary, data=data)


def not_needed(check: Check, needs: Iterable[str]) -> Check:
    """``check`` as the selected models see it: a failure of something none of them needs (a GPU
    device for models that run on the CPU) is a warning."""
    if check.status != FAIL or not check.need or check.need in set(needs):
        return check
    return dataclasses.replace(check, status=WARN, summary=f"{check.summary} (the selected models do not need it)")


def failed_checks(checks: Iterable[Check]) -> list[Check]:
    return [check for check in checks if check.status == FAIL]


def counts(checks: Iterable[Check]) -> dict[str, int]:
    tally = dict.fromkeys(STATUSES, 0)
    for check in checks:
        tally[check.status] += 1
    return tally
