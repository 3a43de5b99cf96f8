"""ONNX Runtime benchmarking: ``madengine bench`` and models.json entries with ``"onnx"``.

Public surface: :class:`BenchRequest`, :func:`run_bench`, :class:`BenchSummary`,
:class:`BenchOutcome`, :func:`load_suite`, :class:`ModelEntry`, :data:`BENCH_COLUMNS`.
The timing itself lives in the portable :mod:`madengine.bench.harness` (no madengine imports), which
both paths run. Nothing here imports numpy or onnxruntime at import time.
"""

from madengine.bench.columns import BENCH_COLUMNS
from madengine.bench.runner import BenchOutcome, BenchRequest, BenchSummary, run_bench
from madengine.bench.suite import ModelEntry, load_suite

__all__ = ["BENCH_COLUMNS", "BenchOutcome", "BenchRequest", "BenchSummary", "ModelEntry", "load_suite", "run_bench"]
