"""``madengine scorecard``: ONNX models on several backends, outputs checked, timings side by side.

Public surface: :class:`ScorecardRequest`, :func:`run_scorecard`, :class:`ScorecardSummary`,
:data:`SCORECARD_COLUMNS`, :data:`STATUSES`. The backends are :mod:`madengine.bench.backends`, the
output check :mod:`madengine.bench.correctness`; ``--image`` cells go through
:mod:`madengine.bench.scorecard.container`. Nothing here imports numpy or a backend at import time.
"""

from madengine.bench.scorecard.card import SCORECARD_COLUMNS, Cell, ModelCard, ScorecardRequest, ScorecardSummary
from madengine.bench.scorecard.cells import STATUSES
from madengine.bench.scorecard.runner import default_backends, run_scorecard

__all__ = ["SCORECARD_COLUMNS", "STATUSES", "Cell", "ModelCard", "ScorecardRequest", "ScorecardSummary",
           "default_backends", "run_scorecard"]
