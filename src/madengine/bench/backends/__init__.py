"""Inference backends for ONNX models, measured by the harness's one timing loop.

``get_backend(id)`` gives a :class:`Backend` by its id, which is also the perf.csv ``backend``
column: ``onnxruntime-cpu-opt-disabled``, ``onnxruntime-cpu-opt-all``, ``openvino-cpu``,
``tvm-relax-llvm`` (CPU); ``onnxruntime-cuda``, ``onnxruntime-tensorrt``, ``openvino-gpu`` (GPU);
``onnx-reference`` (onnx's reference evaluator, a correctness oracle only). A scorecard cell is a
backend at a precision: ``openvino-cpu`` (f32, the default) or ``openvino-cpu:bf16``
(:func:`split_cell`, :func:`cell_name`).
:func:`measure_backend` prepares a model on a backend (timed), runs a first inference (timed, its
outputs kept) and times it with the same loop and statistics as ``madengine bench``.

Portable like the harness: no madengine import outside ``madengine.bench.harness``/``backends``;
every backend's own package is imported only when used.
"""

from __future__ import annotations

from typing import Callable

from ..harness import precision as precisions
from ..harness.errors import HarnessInputError
from .base import Backend, BackendError, BackendRun, BackendUnsupported, Session, classify, measure_backend


def _factories() -> dict[str, Callable[[], Backend]]:
    from .onnxruntime import OnnxRuntimeBackend
    from .openvino import OpenVinoBackend
    from .reference import OnnxReferenceBackend
    from .tvm import TvmRelaxBackend

    return {
        "onnxruntime-cpu-opt-disabled": lambda: OnnxRuntimeBackend("cpu", "disabled"),
        "onnxruntime-cpu-opt-all": lambda: OnnxRuntimeBackend("cpu", "all"),
        "openvino-cpu": lambda: OpenVinoBackend("CPU"),
        "tvm-relax-llvm": TvmRelaxBackend,
        "onnxruntime-cuda": lambda: OnnxRuntimeBackend("cuda"),
        "onnxruntime-tensorrt": lambda: OnnxRuntimeBackend("tensorrt"),
        "openvino-gpu": lambda: OpenVinoBackend("GPU"),
        "onnx-reference": OnnxReferenceBackend,
    }


CPU_BACKENDS = ("onnxruntime-cpu-opt-disabled", "onnxruntime-cpu-opt-all", "openvino-cpu", "tvm-relax-llvm")
GPU_BACKENDS = ("onnxruntime-cuda", "onnxruntime-tensorrt", "openvino-gpu")
#: backends whose outputs can be the reference of a correctness check
REFERENCES = ("onnxruntime-cpu-opt-disabled", "onnx-reference")
BACKEND_IDS = CPU_BACKENDS + GPU_BACKENDS + ("onnx-reference",)


def get_backend(backend_id: str) -> Backend:
    """The backend named ``backend_id``; ValueError listing the known ids for any other name."""
    factories = _factories()
    try:
        return factories[backend_id]()
    except KeyError:
        raise ValueError(f"unknown backend '{backend_id}' (known: {', '.join(BACKEND_IDS)})") from None


def split_cell(name: str) -> tuple[str, str | None]:
    """``'openvino-cpu:bf16'`` → ``('openvino-cpu', 'bf16')``; ``'openvino-cpu'`` → ``('openvino-cpu',
    None)`` (no precision of its own). ValueError naming the known backends or the valid precisions."""
    backend, sep, precision = str(name).strip().partition(":")
    backend = backend.strip()
    if backend not in BACKEND_IDS:
        raise ValueError(f"unknown backend '{backend}' (known: {', '.join(BACKEND_IDS)})")
    if not sep:
        return backend, None
    try:
        return backend, precisions.parse(precision)
    except HarnessInputError as exc:
        raise ValueError(f"{exc.message} in '{str(name).strip()}' ({exc.hint})") from None


def cell_name(backend: str, precision: str | None) -> str:
    """A backend at a precision as one name: the backend id alone at f32, ``id:precision`` otherwise
    (the perf.csv ``backend`` of the cell, so results at different precisions never share an identity)."""
    return backend if not precision or precision == precisions.DEFAULT else f"{backend}:{precision}"


__all__ = ["BACKEND_IDS", "CPU_BACKENDS", "GPU_BACKENDS", "REFERENCES", "Backend", "BackendError", "BackendRun",
           "BackendUnsupported", "Session", "cell_name", "classify", "get_backend", "measure_backend", "split_cell"]
