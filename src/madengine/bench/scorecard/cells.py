"""The statuses of a scorecard cell and the perf.csv status each becomes."""

from __future__ import annotations

from madengine.results import Status

PASS, MISMATCH, INCONCLUSIVE, UNSUPPORTED, ERROR = "PASS", "MISMATCH", "INCONCLUSIVE", "UNSUPPORTED", "ERROR"
STATUSES = (PASS, MISMATCH, INCONCLUSIVE, UNSUPPORTED, ERROR)
#: a MISMATCH is never a success: it is a FAILURE row, as an ERROR is; UNSUPPORTED is SKIPPED; an
#: INCONCLUSIVE cell ran and was timed, but its check could not tell (a degenerate reference output):
#: a SUCCESS row with its figure whose ``warnings`` say so, never a PASS
RECORD_STATUS = {PASS: Status.SUCCESS, MISMATCH: Status.FAILURE, INCONCLUSIVE: Status.SUCCESS,
                 UNSUPPORTED: Status.SKIPPED, ERROR: Status.FAILURE}
#: the statuses whose cells have timings to headline
TIMED = (PASS, INCONCLUSIVE)
