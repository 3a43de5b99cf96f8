"""Execution: one model's run on an executor (docker or local), from image to records.

Public surface: :class:`Executor` (the protocol), :class:`ImageSource`, :class:`Target`,
:class:`ImageInfo`, :class:`ModelRunner`, :class:`Slot`, :class:`RunOptions`, :class:`BuildOptions`.
Choosing models, executors and schedulers is the pipeline's (:mod:`madengine.pipeline`). Names are
imported on first use, so a command that needs only the options (and their flag tables) does not
load the runner.
"""

from __future__ import annotations

from madengine.core.lazy import lazy_exports

_EXPORTS = {
    "Executor": "madengine.execution.executor", "ImageInfo": "madengine.execution.executor",
    "ImageSource": "madengine.execution.executor", "Target": "madengine.execution.executor",
    "BuildOptions": "madengine.execution.options", "RunOptions": "madengine.execution.options",
    "Extension": "madengine.execution.runner", "ModelRunner": "madengine.execution.runner",
    "Slot": "madengine.execution.runner",
}


__getattr__ = lazy_exports(__name__, _EXPORTS)


__all__ = sorted(_EXPORTS)
