"""ONNX Runtime as a backend: CPU at graph optimisation ``disabled`` or ``all``, CUDA, TensorRT.

Sessions come from the harness (:func:`madengine.bench.harness.engine.open_session`), so they are
configured exactly as ``madengine bench`` configures them (one inter-op thread, sequential
execution, ``enable_fallback=0``, the precision options of
:data:`madengine.bench.harness.precision.ORT_PRECISION_OPTIONS`): a GPU provider that this
onnxruntime does not offer, or that does not initialise, is :class:`BackendUnsupported` with the
reason, never a CPU run under a GPU label. The precision reported is the harness's read-back
(:func:`~madengine.bench.harness.precision.ort_session_precision`).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Callable, Mapping

from ..harness import engine
from ..harness import precision as precisions
from ..harness.errors import HarnessError, HarnessInputError, PrecisionUnsupported, ProviderNotInitialised
from .base import Backend, BackendUnsupported, Session, Shapes, classify


class OnnxRuntimeSession(Session):
    def __init__(self, session: Any, details: dict[str, Any]) -> None:
        self.session = session
        self.output_names = [o.name for o in session.get_outputs()]
        self.details = details

    def run(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        return dict(zip(self.output_names, self.session.run(None, dict(feeds))))

    def bind(self, feeds: Mapping[str, Any]) -> Callable[[], Any]:
        return functools.partial(self.session.run, None, dict(feeds))

    def close(self) -> None:
        self.session = None


class OnnxRuntimeBackend(Backend):
    module = "onnxruntime"

    def __init__(self, provider: str, optimization: str = "all") -> None:
        self.provider = engine.provider_name(provider)
        self.optimization = optimization
        short = engine.short_provider(self.provider)
        self.id = f"onnxruntime-{short}-opt-{optimization}" if short == "cpu" else f"onnxruntime-{short}"
        self.device_vendor = engine.GPU_VENDORS.get(self.provider, "CPU")
        self.install_hint = ("pip install onnxruntime-gpu" if self.device_vendor == "NVIDIA"
                             else "pip install onnxruntime")
        modes = precisions.ORT_PRECISION_OPTIONS.get(self.provider, {})
        self.reduced_precisions = tuple(p for p in modes if p != precisions.DEFAULT)

    def prepare(self, model: str | Path, shapes: Shapes, threads: int | None = None,
                precision: str = precisions.DEFAULT) -> Session:
        ort = engine.import_onnxruntime()
        available = list(ort.get_available_providers())
        if self.provider not in available:
            raise BackendUnsupported(f"onnxruntime {ort.__version__} does not offer {self.provider} "
                                     f"(it offers {', '.join(available)})", hint=self.install_hint)
        options = engine.BenchOptions(provider=self.provider, threads=threads, optimization=self.optimization,
                                      precision=precision)
        try:
            session, _ = engine.open_session(str(model), options)
        except (ProviderNotInitialised, PrecisionUnsupported) as exc:
            raise BackendUnsupported(exc.message, hint=exc.hint) from None
        except HarnessInputError as exc:
            raise BackendUnsupported(str(exc)) from None
        except HarnessError as exc:
            raise classify(exc, "onnxruntime cannot load the model") from None
        return OnnxRuntimeSession(session, {"providers": list(session.get_providers()),
                                            "graph_optimization": self.optimization,
                                            "threads": threads or "auto", "version": ort.__version__,
                                            "precision": precisions.ort_session_precision(session, self.provider,
                                                                                          model)})
