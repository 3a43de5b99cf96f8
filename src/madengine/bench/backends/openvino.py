"""OpenVINO as a backend (``openvino`` from PyPI; it reads ONNX directly), on CPU or GPU.

The model is reshaped to the run's static input shapes and compiled with ``PERFORMANCE_HINT``
``LATENCY`` (one request at a time, as the timing loop runs it), an explicit
``INFERENCE_PRECISION_HINT`` (``f32`` unless asked: OpenVINO's own default is bf16 on CPUs that have
it, f16 on GPUs) and, when asked, ``INFERENCE_NUM_THREADS``. Everything else is OpenVINO's default
for the device. The precision reported is the compiled model's own ``INFERENCE_PRECISION_HINT``, read
back. bf16 and fp16 are opt-in; each needs the device to list it in ``OPTIMIZATION_CAPABILITIES``
and, on the CPU, instructions that compute it natively (OpenVINO would otherwise emulate bf16 on any
AVX-512 CPU): else :class:`BackendUnsupported` with the reason. A device OpenVINO does not list is
:class:`BackendUnsupported`.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Callable, Mapping

from ..harness import precision as precisions
from .base import Backend, BackendUnsupported, Session, Shapes, classify

#: madengine's precision names → OpenVINO's INFERENCE_PRECISION_HINT values
HINTS = {"f32": "f32", "bf16": "bf16", "fp16": "f16"}
#: a precision → the OPTIMIZATION_CAPABILITIES entry a device lists when it can compute it
CAPABILITIES = {"f32": "FP32", "bf16": "BF16", "fp16": "FP16"}


class OpenVinoSession(Session):
    def __init__(self, compiled: Any, names: list[str], details: dict[str, Any]) -> None:
        self.compiled = compiled
        self.request = compiled.create_infer_request()
        self.names = names
        self.details = details

    def run(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        import numpy as np

        results = self.request.infer(dict(feeds))
        return {name: np.array(results[output]) for name, output in zip(self.names, self.compiled.outputs)}

    def bind(self, feeds: Mapping[str, Any]) -> Callable[[], Any]:
        # the inputs are shared with OpenVINO (no copy per run); the outputs are copied out, as
        # onnxruntime's session.run returns fresh arrays
        return functools.partial(self.request.infer, dict(feeds), share_inputs=True)

    def close(self) -> None:
        self.request = self.compiled = None


class OpenVinoBackend(Backend):
    module = "openvino"
    install_hint = "pip install openvino"
    reduced_precisions = ("bf16", "fp16")

    def __init__(self, device: str = "CPU") -> None:
        self.device = device.upper()
        self.id = f"openvino-{self.device.lower()}"
        self.device_vendor = "CPU" if self.device == "CPU" else "Intel"

    def check_mode(self, precision: str, model: str | Path | None) -> None:
        if precision not in HINTS:
            raise BackendUnsupported(f"{self.id} cannot run {precision}: OpenVINO's INFERENCE_PRECISION_HINT takes "
                                     "f32, bf16 and f16 (int8 comes only from a model quantised beforehand, e.g. NNCF)")

    def check_precision(self, precision: str, model: str | Path | None) -> None:
        self.check_mode(precision, model)
        lacks = precisions.cpu_lacks(precision) if self.device == "CPU" else None
        if lacks:
            raise BackendUnsupported(f"{self.id} cannot run {precision} on this CPU: {lacks}")

    def prepare(self, model: str | Path, shapes: Shapes, threads: int | None = None,
                precision: str = precisions.DEFAULT) -> Session:
        import openvino as ov

        core = ov.Core()
        devices = list(core.available_devices)
        if not any(d == self.device or d.startswith(self.device + ".") for d in devices):
            raise BackendUnsupported(f"OpenVINO {ov.__version__} has no {self.device} device "
                                     f"(available: {', '.join(devices) or 'none'})")
        _require_capability(core, self.device, precision)
        try:
            network = core.read_model(str(model))
            names = [output.get_any_name() for output in network.outputs]  # ONNX tensor names are kept
            network.reshape({port.get_any_name(): ov.PartialShape(list(shapes[port.get_any_name()]))
                             for port in network.inputs if port.get_any_name() in shapes})
            config: dict[str, Any] = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": HINTS[precision]}
            if threads:
                config["INFERENCE_NUM_THREADS"] = threads
            compiled = core.compile_model(network, self.device, config)
        except Exception as exc:  # OpenVINO raises RuntimeError / OpConversionFailure / GeneralFailure
            raise classify(exc, "OpenVINO cannot compile the model") from None
        details = {"device": self.device, "threads": threads or "auto", "version": ov.__version__,
                   "precision": precisions.normalise(_property(compiled, "INFERENCE_PRECISION_HINT")),
                   "execution_mode": _property(compiled, "EXECUTION_MODE_HINT")}
        return OpenVinoSession(compiled, names, details)


def _require_capability(core: Any, device: str, precision: str) -> None:
    """BackendUnsupported when ``device`` does not list the precision among its capabilities."""
    try:
        listed = [str(c).upper() for c in core.get_property(device, "OPTIMIZATION_CAPABILITIES")]
    except Exception:  # a device that does not report its capabilities: the read-back decides
        return
    if CAPABILITIES[precision] not in listed:
        raise BackendUnsupported(f"OpenVINO's {device} device cannot compute {precision} "
                                 f"(its capabilities: {', '.join(listed) or 'none'})")


def _property(compiled: Any, key: str) -> str:
    try:
        return str(compiled.get_property(key))
    except Exception:  # not every device reports every property
        return ""
