"""The statuses of a scorecard cell and the perf.csv status each becomes."""

from __future__ import annotations

from madengine.results import Status

PASS, MISMATCH, UNSUPPORTED, ERROR = "PASS", "MISMATCH", "UNSUPPORTED", "ERROR"
STATUSES = (PASS, MISMATCH, UNSUPPORTED, ERROR)
#: a MISMATCH is never a success: it is a FAILURE row, as an ERROR is; UNSUPPORTED is SKIPPED
RECORD_STATUS = {PASS: Status.SUCCESS, MISMATCH: Status.FAILURE, UNSUPPORTED: Status.SKIPPED, ERROR: Status.FAILURE}
