"""ONNX Runtime benchmarking: ``madengine bench`` and models.json entries with ``"onnx"``.

Public surface: :class:`BenchRequest`, :func:`run_bench`, :class:`BenchSummary`,
:class:`BenchOutcome`, :func:`load_suite`, :class:`ModelEntry`, :data:`BENCH_COLUMNS`.
The timing itself lives in the portable :mod:`madengine.bench.harness` (no madengine imports), which
both paths run. Nothing here imports numpy or onnxruntime at import time.
"""

import sys
import types

from madengine.bench.columns import BENCH_COLUMNS
from madengine.bench.runner import BenchOutcome, BenchRequest, BenchSummary, run_bench
from madengine.bench.suite import ModelEntry, load_suite

__all__ = ["BENCH_COLUMNS", "BenchOutcome", "BenchRequest", "BenchSummary", "ModelEntry", "load_suite", "run_bench"]


class _CallablePackage(types.ModuleType):
    """``madengine.bench`` is both this package and the Python API's ``bench()`` function: once any
    ``madengine.bench.*`` module is imported, Python makes the package the ``madengine.bench``
    attribute, so the package itself answers the call (:func:`madengine.bench.entry.bench`, which
    :mod:`madengine.api` offers too)."""

    def __call__(self, *args, **kwargs):
        from madengine.bench.entry import bench

        return bench(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
