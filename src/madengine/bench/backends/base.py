"""What every inference backend provides, and the one way a backend is measured.

A :class:`Backend` turns an ONNX file into a :class:`Session` (``prepare``: compilation or session
creation, timed on its own); a session runs one inference on named numpy inputs and returns named
numpy outputs (``run``), and hands the timing loop a zero-argument call of the backend's own API with
the inputs already converted (``bind``), so the loop times the backend and nothing of ours.
:func:`measure_backend` is the method: prepare (timed), first inference (timed, its outputs kept for
the correctness check), then :func:`madengine.bench.harness.engine.measure` and its statistics, the
loop and figures ``madengine bench`` uses.

Portable like the harness: standard library, numpy and the backend's own package only (imported
inside methods), no other madengine import, so the same code runs inside a container.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import os
import re
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from ..harness import engine
from ..harness import precision as precisions
from ..harness.errors import HarnessError, PrecisionUnsupported
from ..harness.stats import stability_warnings, summarize

Shapes = Mapping[str, "tuple[int, ...]"]


class BackendError(HarnessError):
    """The backend failed on this model (load, compile or run): an ERROR cell."""


class BackendUnsupported(BackendError):
    """The backend cannot run this model here: an operator it lacks, a device or provider that is
    absent or did not initialise, or the backend is not installed. An UNSUPPORTED cell, never a
    silent run elsewhere. ``operator`` names the ONNX operator when one is to blame."""

    def __init__(self, message: str, *, operator: str | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.operator = operator


class Session(abc.ABC):
    """A prepared model on one backend (subclasses implement ``run`` and ``bind``)."""

    #: the backend's own description of what it prepared (providers used, target, ...); ``precision``
    #: is what the runtime reports it computes in, as a name of madengine.bench.harness.precision
    details: dict[str, Any]

    @abc.abstractmethod
    def run(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        """One inference: input name → numpy array in, output name → numpy array out."""

    @abc.abstractmethod
    def bind(self, feeds: Mapping[str, Any]) -> Callable[[], Any]:
        """The zero-argument call the timing loop repeats: the backend's own inference call with
        ``feeds`` converted once (e.g. ``functools.partial(session.run, None, feeds)``)."""

    def close(self) -> None:
        """Release the backend's resources (default: nothing to do)."""


class Backend(abc.ABC):
    """One way to run ONNX models. Subclasses set the class attributes and implement ``prepare``."""

    #: the perf.csv ``backend`` column value, e.g. ``onnxruntime-cpu-opt-all``
    id: str = ""
    #: what runs it: ``CPU`` or a GPU vendor (perf.csv ``gpu_vendor``)
    device_vendor: str = "CPU"
    #: the Python package the backend needs, and how to install it
    module: str = ""
    install_hint: str = ""
    #: the reduced precisions the backend has a mode for (it runs f32, and the model's own types, always)
    reduced_precisions: tuple[str, ...] = ()

    def missing(self) -> str | None:
        """None when the backend's package imports; else the install hint (``pip install openvino``)."""
        import importlib

        try:
            importlib.import_module(self.module)
        except Exception:  # ImportError, or a broken install failing inside its own import
            return self.install_hint
        return None

    def version(self) -> str:
        """The backend package's version ("" when not installed)."""
        return package_version(self.module)

    def versions(self) -> dict[str, str]:
        """The packages the backend runs on, name → version (what a row records)."""
        return {self.module: self.version()} if self.module else {}

    @abc.abstractmethod
    def prepare(self, model: str | Path, shapes: Shapes, threads: int | None = None,
                precision: str = precisions.DEFAULT) -> Session:
        """Load and compile ``model`` (an .onnx file) for inputs of ``shapes``; ``threads`` = intra-op
        threads (None: the backend's default); ``precision``: what it may compute in (f32 unless
        asked; never a reduced precision of the runtime's own choosing). Raises BackendUnsupported /
        BackendError."""

    def own_precision(self, model: str | Path | None) -> str:
        """The precision of the model's own types, which a backend without a mode computes in."""
        return precisions.model_precision(model) if model else ""

    def check_mode(self, precision: str, model: str | Path | None) -> None:
        """BackendUnsupported when the backend has no way to compute ``precision`` on any machine (no
        mode for it, and not the model's own type: :func:`madengine.bench.harness.precision.require_mode`):
        what a request can be told before anything runs, whatever the hardware."""
        if precision == precisions.DEFAULT:
            return
        try:
            precisions.require_mode(self.id, self.reduced_precisions, precision, self.own_precision(model))
        except PrecisionUnsupported as exc:
            raise BackendUnsupported(exc.message, hint=exc.hint) from None

    def check_precision(self, precision: str, model: str | Path | None) -> None:
        """BackendUnsupported, before anything is compiled, when the backend cannot run ``precision``
        here: :meth:`check_mode`, and what this machine lacks (a backend that knows adds it)."""
        self.check_mode(precision, model)

    def require_installed(self) -> None:
        hint = self.missing()
        if hint:
            raise BackendUnsupported(f"{self.id} is not installed", hint=hint)


def package_version(module: str) -> str:
    """An importable package's ``__version__`` ("" when it is not installed or has none)."""
    import importlib

    try:
        return str(getattr(importlib.import_module(module), "__version__", ""))
    except Exception:  # ImportError, or a broken install failing inside its own import
        return ""


@dataclasses.dataclass
class BackendRun:
    """One backend measured on one model (see :func:`measure_backend`)."""

    backend: str
    prepare_ms: float  # compilation or session creation
    first_inference_ms: float
    outputs: dict[str, Any]  # of the first inference
    latencies_ms: list[float]
    stats: dict[str, Any]  # madengine.bench.harness.stats.summarize
    warnings: list[str]
    details: dict[str, Any]
    timed_wall_s: float
    precision: str = ""  # what the runtime reports it computed in (details["precision"])


#: the phase of :func:`measure_backend` that compiles the model or creates the session
PHASE_PREPARE = "prepare"


def measure_backend(backend: Backend, model: str | Path, feeds: Mapping[str, Any], shapes: Shapes, *,
                    threads: int | None = None, warmup: int = engine.DEFAULT_WARMUP, iterations: int | None = None,
                    min_time: float | None = None, min_iterations: int = engine.DEFAULT_MIN_ITERATIONS,
                    batch_size: int = 1, phase: engine.Phase = engine.no_phase,
                    precision: str = precisions.DEFAULT) -> BackendRun:
    """Prepare (timed) at ``precision``, first inference (timed; outputs kept), then the harness's
    warm-up and timed loop over ``session.bind(feeds)`` and its statistics. ``phase`` is told of each
    (as in :func:`madengine.bench.harness.engine.benchmark`). A precision the backend cannot run, or
    one the runtime did not take (it reports another), is BackendUnsupported: never a silent fallback."""
    backend.require_installed()
    backend.check_precision(precision, model)
    with kept_affinity():
        with phase(PHASE_PREPARE):
            started = time.perf_counter_ns()
            session = backend.prepare(model, shapes, threads, precision)
            prepare_ms = (time.perf_counter_ns() - started) / 1e6
        try:
            _require_reported(backend, session, precision, model)
            with phase(engine.PHASE_FIRST_INFERENCE):
                started = time.perf_counter_ns()
                outputs = _guarded(session.run, feeds)
                first_ms = (time.perf_counter_ns() - started) / 1e6
            run_once = session.bind(feeds)
            timing = _guarded(lambda: engine.measure(run_once, warmup=warmup, iterations=iterations,
                                                     min_time=min_time, min_iterations=min_iterations, phase=phase))
        finally:
            session.close()
    stats = summarize(timing.latencies_ms, batch_size)
    return BackendRun(backend.id, prepare_ms, first_ms, outputs, timing.latencies_ms, stats,
                      stability_warnings(stats), dict(session.details), timing.wall_s,
                      str(session.details.get("precision", "")))


def _require_reported(backend: Backend, session: Session, precision: str, model: str | Path | None) -> None:
    """The runtime computes in what was asked: ``precision`` itself, or (for the f32 default) the
    model's own types; anything else (a runtime that ignored the request) is UNSUPPORTED."""
    reported = precisions.normalise(session.details.get("precision"))
    allowed = {precision}
    if precision == precisions.DEFAULT:
        allowed |= {"", backend.own_precision(model)}
    if reported not in allowed:
        raise BackendUnsupported(f"{backend.id} was asked for {precision} but reports {reported or 'nothing'}: "
                                 "it did not take the precision (never a silent fallback)")


@contextlib.contextmanager
def kept_affinity() -> Iterator[None]:
    """The calling thread's CPUs as they were before a backend ran: TVM's runtime pins the thread
    that calls it to one core, which would otherwise stay so for everything the process does next
    (a ``--parallel`` run in the same process would see one CPU)."""
    getter = getattr(os, "sched_getaffinity", None)
    before = getter(0) if getter else None
    try:
        yield
    finally:
        if before is not None and os.sched_getaffinity(0) != before:
            os.sched_setaffinity(0, before)


def _guarded(call: Callable[..., Any], *args: Any) -> Any:
    """Run ``call``; any exception of the backend's own becomes a BackendError with one line."""
    try:
        return call(*args)
    except BackendError:
        raise
    except Exception as exc:  # each backend raises its own exception types
        raise classify(exc, "inference failed") from None


#: how backends name the operator they cannot run (in the exception, or in what they printed)
_OPERATOR_PATTERNS = (
    re.compile(r"Could not find an implementation for (\w+)"),  # onnxruntime: no kernel
    re.compile(r"([\w.]+:\w+|\w+)\(-?\d+\) is not a registered function/op"),  # onnxruntime: unknown op
    re.compile(r"operators are not supported[^:]*:\s*[{\[]?'?(\w+)"),  # TVM OpNotImplemented
    re.compile(r"Error converting operator (\w+)"),  # TVM's frontend, printed
    re.compile(r"No conversion rule found for operations:\s*([\w.]+)"),  # OpenVINO
    re.compile(r"Node type '(\w+)' from domain '[\w.]*' is unknown"),  # onnx's reference evaluator
)
#: a message saying the model uses something the backend lacks (not a crash of the backend)
_UNSUPPORTED_WORDS = re.compile(r"not (?:yet )?(?:supported|implemented)|unsupported|NOT_IMPLEMENTED", re.IGNORECASE)


def classify(exc: BaseException, what: str, printed: str = "") -> BackendError:
    """An exception from a backend's own code as BackendUnsupported (something the backend lacks:
    an operator, named when its message or what it ``printed`` says which) or BackendError."""
    text = one_line(exc)
    operator = None
    for pattern in _OPERATOR_PATTERNS:
        found = pattern.search(text) or pattern.search(printed)
        if found:
            operator = found.group(1)
            break
    if operator or _UNSUPPORTED_WORDS.search(text):
        prefix = f"operator {operator}: " if operator else ""
        return BackendUnsupported(f"{prefix}{text}", operator=operator)
    return BackendError(f"{what}: {text}")


def one_line(exc: BaseException, limit: int = 500) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:limit] + ("…" if len(text) > limit else "")
