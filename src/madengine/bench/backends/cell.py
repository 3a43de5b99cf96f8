"""One scorecard cell: one model on one backend, as plain JSON plus the outputs.

:func:`run_cell` is what ``madengine scorecard`` does for each cell in-process, and what
``python3 -m madengine.bench.backends.cell`` does inside a container (``--image``), where the
inputs come from and the outputs go to ``.npz`` files in the work folder; the host checks the
outputs. The answer's ``outcome`` is ``ran`` (with timings and outputs), ``unsupported`` (the
operator or reason; a backend that is not installed, or a precision it cannot run, included) or
``error``. Every answer says where it ran (``environment``: the CPU model and its relevant flags,
the versions of the packages the backend runs on); a run also the precision the runtime reports
(``precision``) beside the one asked (``precision_requested``). Portable: the harness, the backends,
numpy, and the backend's own package.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path
from typing import Any, Mapping

from ..harness import precision as precisions
from ..harness.engine import Phase, cpu_model, no_phase
from . import Backend, BackendError, BackendUnsupported, get_backend, measure_backend
from .base import package_version

RAN, UNSUPPORTED, ERROR = "ran", "unsupported", "error"


def run_cell(backend_id: str, model: str | Path, feeds: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]],
             *, timed: bool = True, threads: int | None = None, warmup: int = 10, iterations: int | None = None,
             min_time: float | None = None, batch_size: int = 1, phase: Phase = no_phase,
             precision: str = precisions.DEFAULT) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the cell as JSON, the first inference's outputs). ``timed=False`` (a correctness oracle)
    runs one inference after the first and no warm-up. ``phase``: see :func:`measure_backend`."""
    backend = get_backend(backend_id)
    answer: dict[str, Any] = {"backend": backend_id, "version": backend.version(),
                              "device_vendor": backend.device_vendor, "precision_requested": precision,
                              "precision": "", "environment": environment(backend)}
    try:
        if timed:
            run = measure_backend(backend, model, feeds, shapes, threads=threads, warmup=warmup,
                                  iterations=iterations, min_time=min_time, batch_size=batch_size, phase=phase,
                                  precision=precision)
        else:
            run = measure_backend(backend, model, feeds, shapes, threads=threads, warmup=0, iterations=1,
                                  batch_size=batch_size, phase=phase, precision=precision)
    except BackendUnsupported as exc:
        answer.update(outcome=UNSUPPORTED, reason=str(exc), operator=exc.operator)
        return answer, {}
    except BackendError as exc:
        answer.update(outcome=ERROR, reason=str(exc), operator=None)
        return answer, {}
    answer.update(outcome=RAN, reason="", operator=None, version=backend.version(), prepare_ms=run.prepare_ms,
                  first_inference_ms=run.first_inference_ms, stats=run.stats, warnings=run.warnings,
                  details=run.details, latencies_ms=run.latencies_ms, timed_wall_s=run.timed_wall_s,
                  precision=run.precision)
    return answer, run.outputs


def environment(backend: Backend) -> dict[str, Any]:
    """Where a cell runs: the CPU model and its relevant flags, and the versions of what computes
    (the backend's packages, numpy, Python) in this process, the host's or a container's."""
    versions = {name: version for name, version in backend.versions().items() if version}
    versions.update(numpy=package_version("numpy"), python=platform.python_version())
    return {"cpu_model": cpu_model(), "cpu_flags": precisions.cpu_flags(), "versions": versions}


def save_named(path: str | Path, arrays: Mapping[str, Any]) -> None:
    """Named arrays into one .npz: positional entries plus their names (any text, in order)."""
    import numpy as np

    names = list(arrays)
    np.savez(path, np.array(names, dtype=str), *[np.asarray(arrays[name]) for name in names])


def load_named(path: str | Path) -> dict[str, Any]:
    import numpy as np

    with np.load(path, allow_pickle=False) as loaded:
        names = [str(n) for n in loaded["arr_0"]]
        return {name: loaded[f"arr_{index + 1}"] for index, name in enumerate(names)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m madengine.bench.backends.cell", description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--backend", required=True)
    parser.add_argument("--inputs", required=True, help=".npz of the inputs (input name → array)")
    parser.add_argument("--result", required=True, help="JSON answer written here")
    parser.add_argument("--outputs", required=True, help=".npz of the outputs written here")
    parser.add_argument("--untimed", action="store_true")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--iterations", type=int)
    parser.add_argument("--min-time", type=float)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--precision", default=precisions.DEFAULT, choices=precisions.PRECISIONS)
    args = parser.parse_args(argv)
    feeds = load_named(args.inputs)
    answer, outputs = run_cell(args.backend, args.model, feeds, {k: tuple(v.shape) for k, v in feeds.items()},
                               timed=not args.untimed, threads=args.threads, warmup=args.warmup,
                               iterations=args.iterations, min_time=args.min_time, batch_size=args.batch_size,
                               precision=args.precision)
    save_named(args.outputs, outputs)
    Path(args.result).write_text(json.dumps(answer), encoding="utf-8")
    print(f"madengine cell: {args.backend}: {answer['outcome']} {answer.get('reason', '')}".rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
