"""The pipeline: what ``madengine run`` and ``madengine build`` do, above execution and distributed.

It selects models (from the catalog or a build manifest), checks the inputs, chooses the executor
and the scheduler (one after another, ``--parallel``, or Slurm) and records the results. The CLI
and the Python API call it; nothing below imports it.

Public surface: :class:`RunRequest`, :func:`run`, :class:`BuildRequest`, :func:`build` (imported
on first use: a run does not load the build's registry code, nor a build the run's).
"""

from __future__ import annotations

from madengine.core.lazy import lazy_exports

_EXPORTS = {"RunRequest": "madengine.pipeline.requests", "BuildRequest": "madengine.pipeline.requests",
            "run": "madengine.pipeline.runs", "build": "madengine.pipeline.builds"}


__getattr__ = lazy_exports(__name__, _EXPORTS)


__all__ = sorted(_EXPORTS)
