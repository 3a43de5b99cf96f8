"""The pipeline: what ``madengine run`` and ``madengine build`` do, above execution and distributed.

It selects models (from the catalog or a build manifest), checks the inputs, chooses the executor
and the scheduler (one after another, ``--parallel``, or Slurm) and records the results. The CLI
and the Python API call it; nothing below imports it.

Public surface: :class:`RunRequest`, :func:`run`, :class:`BuildRequest`, :func:`build`.
"""

from madengine.pipeline.build import build
from madengine.pipeline.requests import BuildRequest, RunRequest
from madengine.pipeline.run import run

__all__ = ["BuildRequest", "RunRequest", "build", "run"]
