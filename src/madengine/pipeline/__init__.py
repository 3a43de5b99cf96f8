"""The pipeline: what ``madengine run`` and ``madengine build`` do, above execution and distributed.

It selects models (from the catalog or a build manifest), checks the inputs, chooses the executor
and the scheduler (one after another, ``--parallel``, or Slurm) and records the results. The CLI
and the Python API call it; nothing below imports it.

Public surface: :class:`RunRequest`, :func:`run`, :class:`BuildRequest`, :func:`build` (imported
on first use: a run does not load the build's registry code, nor a build the run's).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {"RunRequest": "madengine.pipeline.requests", "BuildRequest": "madengine.pipeline.requests",
            "run": "madengine.pipeline.runs", "build": "madengine.pipeline.builds"}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'madengine.pipeline' has no attribute '{name}'")


__all__ = sorted(_EXPORTS)
