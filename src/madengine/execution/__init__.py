"""Execution: one model's run on an executor (docker or local), from image to records.

Public surface: :class:`Executor` (the protocol), :class:`ImageSource`, :class:`Target`,
:class:`ImageInfo`, :class:`ModelRunner`, :class:`Slot`, :class:`RunOptions`, :class:`BuildOptions`.
Choosing models, executors and schedulers is the pipeline's (:mod:`madengine.pipeline`).
"""

from madengine.execution.executor import Executor, ImageInfo, ImageSource, Target
from madengine.execution.options import BuildOptions, RunOptions
from madengine.execution.runner import Extension, ModelRunner, Slot

__all__ = ["Executor", "ImageInfo", "ImageSource", "Target", "BuildOptions", "RunOptions", "Extension",
           "ModelRunner", "Slot"]
