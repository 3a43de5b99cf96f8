"""OpenVINO as a backend (``openvino`` from PyPI; it reads ONNX directly), on CPU or GPU.

The model is reshaped to the run's static input shapes and compiled with ``PERFORMANCE_HINT``
``LATENCY`` (one request at a time, as the timing loop runs it) and, when asked,
``INFERENCE_NUM_THREADS``. Everything else (the inference precision included) is OpenVINO's default
for the device, as a user would get it; the precision it chose is reported in ``details``. A device
OpenVINO does not list is :class:`BackendUnsupported`.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Callable, Mapping

from .base import Backend, BackendUnsupported, Session, Shapes, classify


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

    def __init__(self, device: str = "CPU") -> None:
        self.device = device.upper()
        self.id = f"openvino-{self.device.lower()}"
        self.device_vendor = "CPU" if self.device == "CPU" else "Intel"

    def prepare(self, model: str | Path, shapes: Shapes, threads: int | None = None) -> Session:
        import openvino as ov

        core = ov.Core()
        devices = list(core.available_devices)
        if not any(d == self.device or d.startswith(self.device + ".") for d in devices):
            raise BackendUnsupported(f"OpenVINO {ov.__version__} has no {self.device} device "
                                     f"(available: {', '.join(devices) or 'none'})")
        try:
            network = core.read_model(str(model))
            names = [output.get_any_name() for output in network.outputs]  # ONNX tensor names are kept
            network.reshape({port.get_any_name(): ov.PartialShape(list(shapes[port.get_any_name()]))
                             for port in network.inputs if port.get_any_name() in shapes})
            config: dict[str, Any] = {"PERFORMANCE_HINT": "LATENCY"}
            if threads:
                config["INFERENCE_NUM_THREADS"] = threads
            compiled = core.compile_model(network, self.device, config)
        except Exception as exc:  # OpenVINO raises RuntimeError / OpConversionFailure / GeneralFailure
            raise classify(exc, "OpenVINO cannot compile the model") from None
        details = {"device": self.device, "threads": threads or "auto", "version": ov.__version__,
                   "inference_precision": _property(compiled, "INFERENCE_PRECISION_HINT")}
        return OpenVinoSession(compiled, names, details)


def _property(compiled: Any, key: str) -> str:
    try:
        return str(compiled.get_property(key))
    except Exception:  # not every device reports every property
        return ""
