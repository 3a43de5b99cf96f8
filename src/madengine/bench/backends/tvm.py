"""TVM Relax as a backend (``apache-tvm`` from PyPI): its ONNX frontend, compiled for the host CPU.

``relax.frontend.onnx.from_onnx`` imports the model with the run's static input shapes (weights
become constants); ``tvm.compile`` builds it with TVM's default Relax pipeline for the LLVM target
of this machine's CPU (``Target.from_device(tvm.cpu())``: ``llvm -mcpu=<host>``), without tuning;
the Relax virtual machine runs it. Compilation is the backend's ``prepare`` time. ``threads``
sizes TVM's thread pool (``runtime.config_threadpool``). The default pipeline applies no
mixed-precision pass (``ToMixedPrecision`` is opt-in in TVM and madengine does not apply it): TVM
computes in the model's own types, which is the precision reported.
"""

from __future__ import annotations

import contextlib
import functools
import io
import sys
from pathlib import Path
from typing import Any, Callable, Mapping

from ..harness import precision as precisions
from .base import Backend, Session, Shapes, classify, kept_affinity, package_version


class TvmSession(Session):
    def __init__(self, main: Any, input_names: list[str], output_names: list[str], details: dict[str, Any]) -> None:
        self.main = main
        self.input_names = input_names
        self.output_names = output_names
        self.details = details

    def _arguments(self, feeds: Mapping[str, Any]) -> list[Any]:
        import tvm

        device = tvm.cpu()
        return [tvm.runtime.tensor(feeds[name], device) for name in self.input_names]

    def run(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        with kept_affinity():  # TVM's thread pool pins the thread that first calls it
            result = self.main(*self._arguments(feeds))
        values = [result] if hasattr(result, "numpy") else list(result)  # one tensor, or a tuple of them
        return {name: value.numpy() for name, value in zip(self.output_names, values)}

    def bind(self, feeds: Mapping[str, Any]) -> Callable[[], Any]:
        # inputs are copied into TVM tensors once; the outputs stay TVM tensors in host memory
        return functools.partial(self.main, *self._arguments(feeds))

    def close(self) -> None:
        self.main = None


class TvmRelaxBackend(Backend):
    id = "tvm-relax-llvm"
    module = "tvm"
    install_hint = "pip install apache-tvm"

    def versions(self) -> dict[str, str]:
        # by distribution name, as run rows' framework_versions name them; its ONNX frontend reads the file
        return {"apache-tvm": self.version(), "onnx": package_version("onnx")}

    def prepare(self, model: str | Path, shapes: Shapes, threads: int | None = None,
                precision: str = precisions.DEFAULT) -> Session:
        with kept_affinity():  # configuring TVM's thread pool pins the calling thread to one core
            return self._prepare(model, shapes, threads)

    def _prepare(self, model: str | Path, shapes: Shapes, threads: int | None) -> Session:
        import onnx
        import tvm
        from tvm import relax
        from tvm.relax.frontend.onnx import from_onnx

        graph = onnx.load(str(model))
        initializers = {init.name for init in graph.graph.initializer}
        input_names = [value.name for value in graph.graph.input if value.name not in initializers]
        output_names = [value.name for value in graph.graph.output]
        printed = io.StringIO()
        try:
            # the frontend prints "Error converting operator X, ..." to stdout (where --json data goes)
            with contextlib.redirect_stdout(printed):
                module = from_onnx(graph, shape_dict={name: list(shapes[name]) for name in input_names
                                                      if name in shapes}, keep_params_in_input=False)
        except Exception as exc:  # the frontend raises OpNotImplemented / tvm.error.* / ValueError
            raise classify(exc, "TVM's ONNX frontend cannot import the model", printed.getvalue()) from None
        finally:
            sys.stderr.write(printed.getvalue())
        target = tvm.target.Target.from_device(tvm.cpu())
        try:
            executable = tvm.compile(module, target=target)
        except Exception as exc:
            raise classify(exc, "TVM cannot compile the model") from None
        if threads:
            tvm.get_global_func("runtime.config_threadpool")(1, threads)
        machine = relax.VirtualMachine(executable, tvm.cpu())
        details = {"target": _describe(target), "threads": threads or "auto", "version": tvm.__version__,
                   "tuning": "none", "precision": precisions.model_precision(model)}
        return TvmSession(machine["main"], input_names, output_names, details)

    def missing(self) -> str | None:
        hint = super().missing()
        if hint is None:
            try:
                import tvm.relax.frontend.onnx  # noqa: F401 - the frontend needs the onnx package too
            except Exception:
                return "pip install apache-tvm onnx"
        return hint


def _describe(target: Any) -> str:
    mcpu = target.attrs.get("mcpu", "")
    return f"llvm -mcpu={mcpu}" if mcpu else "llvm"
