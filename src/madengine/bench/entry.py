"""``madengine.bench(...)``: the Python API's ONNX benchmark, here so that the package itself can
answer the call (``madengine.bench`` is both this package and that function) without importing the
API above it. :mod:`madengine.api` offers the same function."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from madengine.bench.runner import BenchRequest, run_bench
from madengine.core.events import Reporter


def bench(models: Sequence[str | Path], *, perf_csv: str | Path, runs_dir: str | Path | None = None,
          providers: Sequence[str] = ("cpu",), batch_size: int | None = None, axes: Mapping[str, int] | None = None,
          warmup: int = 10, iterations: int | None = None, min_time: float | None = None, threads: int | None = None,
          metric: str = "throughput", profile: bool = False, environ: Mapping[str, str] | None = None,
          trace: bool = True, reporter: Reporter | None = None, precision: str | Sequence[str] = "f32") -> Any:
    """Benchmark ONNX models on ONNX Runtime, as ``madengine bench``; rows go to ``perf_csv``,
    result JSON, profiles and trace.json (``trace=False``: none) to ``runs_dir`` (default:
    ``madengine_runs`` beside ``perf_csv``). ``precision``: what the providers may compute in (one
    name or several, as ``--precision``; f32 by default).
    Returns the :class:`madengine.bench.BenchSummary` (``outcomes`` with their records and stats)."""
    perf_csv = Path(perf_csv)
    request = BenchRequest(models=[str(m) for m in models], providers=list(providers), batch_size=batch_size,
                           precisions=[precision] if isinstance(precision, str) else list(precision),
                           axes=[f"{k}={v}" for k, v in (axes or {}).items()], warmup=warmup, iterations=iterations,
                           min_time=min_time, threads=threads, metric=metric, profile=profile, output=perf_csv,
                           runs_dir=Path(runs_dir) if runs_dir is not None else perf_csv.parent / "madengine_runs",
                           command_line="madengine.bench", environ=dict(os.environ if environ is None else environ),
                           trace=trace)
    return run_bench(request, reporter)
