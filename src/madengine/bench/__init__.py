"""ONNX Runtime benchmarking: ``madengine bench`` and models.json entries with ``"onnx"``.

Public surface: :class:`BenchRequest`, :func:`run_bench`, :class:`BenchSummary`,
:class:`BenchOutcome`, :func:`load_suite`, :class:`ModelEntry`, :data:`BENCH_COLUMNS`.
The timing itself lives in the portable :mod:`madengine.bench.harness` (no madengine imports), which
both paths run. Nothing here imports numpy or onnxruntime at import time, and the names are
imported on first use: the CLI reads :mod:`madengine.bench.flags` to build its parser without
loading the runner.
"""

import sys
import types

from madengine.core.lazy import lazy_exports

_EXPORTS = {"BENCH_COLUMNS": "madengine.bench.columns", "BenchOutcome": "madengine.bench.runner",
            "BenchRequest": "madengine.bench.runner", "BenchSummary": "madengine.bench.runner",
            "run_bench": "madengine.bench.runner", "ModelEntry": "madengine.bench.suite",
            "load_suite": "madengine.bench.suite"}

__getattr__ = lazy_exports(__name__, _EXPORTS)

__all__ = sorted(_EXPORTS)


class _CallablePackage(types.ModuleType):
    """``madengine.bench`` is both this package and the Python API's ``bench()`` function: once any
    ``madengine.bench.*`` module is imported, Python makes the package the ``madengine.bench``
    attribute, so the package itself answers the call (:func:`madengine.bench.entry.bench`, which
    :mod:`madengine.api` offers too)."""

    def __call__(self, *args, **kwargs):
        from madengine.bench.entry import bench

        return bench(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
