"""Execution: turn selected models into runs on an executor (docker, local, slurm) and results.

Public surface: :class:`RunOptions`, :func:`run_models`, :class:`RunSummary`, :class:`Reporter`.
"""

from madengine.execution.options import RunOptions
from madengine.core.events import Reporter
from madengine.execution.runner import RunSummary, run_models

__all__ = ["RunOptions", "Reporter", "RunSummary", "run_models"]
