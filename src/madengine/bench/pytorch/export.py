"""Export one observed model to ONNX, optimise it with ONNX Runtime, optionally convert it to fp16.

Method (each step's output is kept in the build folder, its log in ``log_export.txt``):

1. **Reference run**: the module runs once in ``eval()`` mode under ``torch.inference_mode()`` on
   the example inputs (the arguments of its first observed call); its outputs, flattened in
   ``torch.utils._pytree`` order, are the reference of the correctness check and name the ONNX
   outputs (``last_hidden_state``, ``logits``, ``output_0``...).
2. **Export**: ``torch.onnx.export(module, args, kwargs=..., dynamo=True, opset_version=<opset>)``
   in ``eval()`` mode with the example inputs, so every dimension is the observed one (static
   shapes). Positional arguments are passed by the name of ``forward``'s parameter when it has
   one, so ONNX inputs are named after them. The model's ``ir_version`` is then set to the lowest
   one its opsets need (``onnx.helper.find_min_ir_version_for``), which every onnxruntime that
   knows the opset loads. The TorchScript exporter (``dynamo=False``) is not used: it cannot trace
   transformers 5's models.
3. **Optimise**: an ONNX Runtime session at ``ORT_ENABLE_EXTENDED`` on the benchmark's provider
   (with CPU as fallback for nodes it cannot run) writes the optimised graph
   (``SessionOptions.optimized_model_filepath``): constant folding and redundant-node removal,
   then that provider's fusions (GELU, LayerNorm, Attention, MatMul+Add...). They do not depend on
   the machine, so the build can be cached; the machine-specific layout optimisations of
   ``ORT_ENABLE_ALL`` happen when a benchmark session is created (as for ``madengine bench
   model.onnx``). An extended graph holds the provider's own fused operators, so the provider is
   part of the build's settings. (``ORT_ENABLE_BASIC`` offline is not used: onnxruntime 1.32
   cannot apply its extended fusions to some basic-optimised graphs afterwards, e.g. BERT's —
   "Attempt to replace the existing tensor".)
4. **fp16** (``--fp16``): ``onnxruntime.transformers.float16.convert_float_to_float16`` with
   ``keep_io_types=True``: weights and compute in float16, inputs and outputs stay float32 (Cast
   nodes at the edges), so the same inputs feed it and its outputs compare with eager's fp32
   outputs (at fp16 tolerances).

Files: ``onnx/<build>-op<opset>-base.onnx``, ``-opt.onnx``, ``-opt-f16.onnx``; ``inputs.npz`` (the
ONNX feeds). Models over 2 GB keep their weights in ``<file>.data`` beside the file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Iterator

from madengine.bench.backends.torch_eager import eval_mode, flatten_outputs, tensor_leaves, to_numpy

#: the default ONNX opset of exports; torch's exporter targets 18 and converts others down
DEFAULT_OPSET = 18
EXPORTER = "torch.onnx.export(dynamo=True)"
OPTIMIZATION = "ORT_ENABLE_EXTENDED"
#: above this many bytes of weights, ONNX files keep them in external data (protobuf's 2 GB limit)
EXTERNAL_DATA_BYTES = 1_800_000_000


class ExportError(Exception):
    """The model could not be exported, optimised or converted; the message is one line."""


@dataclasses.dataclass(frozen=True)
class ExportSettings:
    """Everything that changes what a build produces (part of the build key)."""

    opset: int = DEFAULT_OPSET
    fp16: bool = False
    provider: str = "CPUExecutionProvider"  # the provider the graph is optimised for (and benchmarked on)

    def key(self) -> dict[str, Any]:
        return {"exporter": EXPORTER, "opset": self.opset, "optimization": OPTIMIZATION, "provider": self.provider,
                "fp16": self.fp16}


@dataclasses.dataclass
class Exported:
    """The files of a build and how to feed them."""

    base: Path
    optimized: Path
    fp16: Path | None
    input_names: list[str]
    output_names: list[str]
    timings: dict[str, float]

    @property
    def final(self) -> Path:
        return self.fp16 or self.optimized


@dataclasses.dataclass
class Example:
    """A model's example call as export and benchmarks use it."""

    args: tuple
    kwargs: dict
    feeds: dict[str, Any]  # ONNX input name → numpy array (after export: the graph's own names)
    leaf_names: list[str]  # the feed of each tensor of (args, kwargs), in pytree order
    outputs: dict[str, Any]  # the reference run's outputs: name → numpy array
    output_names: list[str]


def versions() -> dict[str, str]:
    """The versions a build depends on (part of the build key)."""
    import onnx
    import onnxruntime
    import torch

    from madengine.core.version import __version__

    found = {"madengine": __version__, "torch": torch.__version__, "onnx": onnx.__version__,
             "onnxruntime": onnxruntime.__version__}
    try:
        import onnxscript

        found["onnxscript"] = getattr(onnxscript, "__version__", "")
    except ImportError:
        found["onnxscript"] = ""
    return found


def prepare_example(module: Any, args: tuple, kwargs: dict) -> Example:
    """Bind positional arguments to names, run the reference call, name the outputs (step 1)."""
    import torch

    args, kwargs = _by_name(module, args, kwargs)
    with eval_mode(module), torch.inference_mode():
        outputs = module(*args, **kwargs)
    names, arrays = flatten_outputs(outputs)
    leaves = tensor_leaves(args, kwargs)
    return Example(args=args, kwargs=kwargs, feeds={name: to_numpy(value) for name, value in leaves},
                   leaf_names=[name for name, _ in leaves], outputs=dict(zip(names, arrays)), output_names=names)


def export(module: Any, example: Example, folder: Path, stem: str, settings: ExportSettings) -> Exported:
    """Steps 2–4 of the module doc into ``folder``; ExportError with the exporter's message on failure."""
    onnx_dir = folder / "onnx"
    onnx_dir.mkdir(parents=True, exist_ok=True)
    base = onnx_dir / f"{stem}-op{settings.opset}-base.onnx"
    optimized = onnx_dir / f"{stem}-op{settings.opset}-opt.onnx"
    timings: dict[str, float] = {}
    with _captured_output(folder / "log_export.txt"):
        started = time.perf_counter()
        _export_base(module, example, base, settings.opset)
        timings["export_s"] = time.perf_counter() - started
        started = time.perf_counter()
        input_names, output_names = _optimize(base, optimized, settings.provider)
        timings["optimize_s"] = time.perf_counter() - started
        converted = None
        if settings.fp16:
            started = time.perf_counter()
            converted = onnx_dir / f"{stem}-op{settings.opset}-opt-f16.onnx"
            _convert_fp16(optimized, converted)
            timings["fp16_s"] = time.perf_counter() - started
    rename_feeds(example, input_names)
    _save_feeds(folder / "inputs.npz", example.feeds)
    return Exported(base, optimized, converted, input_names, output_names, timings)


# -- step 1 helpers -----------------------------------------------------------------------------------
def _by_name(module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Positional arguments as keyword arguments when ``forward`` names them (ONNX inputs get the names)."""
    import inspect

    try:
        bound = inspect.signature(module.forward).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return args, kwargs
    kinds = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.POSITIONAL_ONLY)
    parameters = inspect.signature(module.forward).parameters
    if any(parameters[name].kind in kinds for name in bound.arguments):
        return args, kwargs
    named = {}
    for name, value in bound.arguments.items():
        if parameters[name].kind == inspect.Parameter.VAR_KEYWORD:
            named.update(value)
        else:
            named[name] = value
    return (), named


# -- steps 2–4 --------------------------------------------------------------------------------------------
def _export_base(module: Any, example: Example, path: Path, opset: int) -> None:
    import onnx
    import torch

    size = sum(t.numel() * t.element_size() for t in module.state_dict().values() if isinstance(t, torch.Tensor))
    try:
        with eval_mode(module):
            program = torch.onnx.export(module, example.args, kwargs=example.kwargs, dynamo=True,
                                        opset_version=opset, output_names=example.output_names,
                                        external_data=size > EXTERNAL_DATA_BYTES, verbose=False)
        if program is None:
            raise ExportError("torch.onnx.export returned no program")
        proto = program.model_proto
    except ExportError:
        raise
    except Exception as exc:  # torch raises many types (TorchExportError, ConversionError, ...)
        import traceback

        traceback.print_exc()  # the whole story into log_export.txt (export() captures it); the row gets one line
        raise ExportError(f"torch.onnx.export failed: {exporter_message(exc)}") from None
    proto.ir_version = onnx.helper.find_min_ir_version_for(list(proto.opset_import), ignore_unknown=True)
    if size > EXTERNAL_DATA_BYTES:
        onnx.save_model(proto, str(path), save_as_external_data=True, location=path.name + ".data")
    else:
        onnx.save_model(proto, str(path))


def _optimize(source: Path, target: Path, provider: str) -> tuple[list[str], list[str]]:
    """ORT extended optimisation for ``provider`` (module doc), which also proves onnxruntime loads the export."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(target)
    providers = list(dict.fromkeys([provider, "CPUExecutionProvider"]))
    try:
        session = ort.InferenceSession(str(source), options, providers=providers)
    except Exception as exc:
        raise ExportError(f"onnxruntime cannot load the export: {one_line(exc)}") from None
    return [i.name for i in session.get_inputs()], [o.name for o in session.get_outputs()]


def _convert_fp16(source: Path, target: Path) -> None:
    import onnx

    try:
        from onnxruntime.transformers.float16 import convert_float_to_float16

        model = convert_float_to_float16(onnx.load(str(source)), keep_io_types=True)
        onnx.save_model(model, str(target))
    except Exception as exc:
        raise ExportError(f"fp16 conversion failed: {one_line(exc)}") from None


def rename_feeds(example: Example, input_names: list[str]) -> None:
    """Key the feeds by the graph's input names: by name when they match, else in order."""
    if set(input_names) <= set(example.feeds):
        example.feeds = {name: example.feeds[name] for name in input_names}
        return
    values = list(example.feeds.values())
    if len(values) != len(input_names):
        raise ExportError(f"the export takes {len(input_names)} input(s) ({', '.join(input_names)}) but the call "
                          f"passed {len(values)} tensor(s)")
    example.feeds = dict(zip(input_names, values))
    example.leaf_names = list(input_names)


def _save_feeds(path: Path, feeds: dict[str, Any]) -> None:
    import numpy

    numpy.savez(path, **feeds)


@contextlib.contextmanager
def _captured_output(log_path: Path) -> Iterator[None]:
    """Everything the exporter prints (Python and C++, stdout and stderr) goes to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    with open(log_path, "a", encoding="utf-8") as log:
        saved = []
        try:
            for fd in (1, 2):
                try:
                    saved.append((fd, os.dup(fd)))
                    os.dup2(log.fileno(), fd)
                except OSError:
                    pass
            with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                yield
        finally:
            log.flush()
            for fd, copy in saved:
                os.dup2(copy, fd)
                os.close(copy)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def exporter_message(exc: BaseException) -> str:
    """The exporter's failure in one line: its own first sentence, then the root cause (the
    exception at the end of the ``__cause__`` chain, which names the operator or the Python line
    torch.export could not trace)."""
    chain, seen, current = [], set(), exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        chain.append(current)
        current = current.__cause__ or current.__context__
    outer, root = chain[0], chain[-1]
    first = _ANSI.sub("", str(outer)).strip().split("\n")[0]
    first = first.split(". ")[0].rstrip(".") + "."
    text = f"{type(outer).__name__}: {first}"
    if root is not outer:
        text += f" Cause: {one_line(root, limit=400)}"
    return " ".join(text.split())


def one_line(exc: BaseException, limit: int = 500) -> str:
    text = " ".join(_ANSI.sub("", str(exc)).split()) or type(exc).__name__
    if not text.startswith(type(exc).__name__):
        text = f"{type(exc).__name__}: {text}"
    return text[:limit] + ("…" if len(text) > limit else "")


__all__ = ["DEFAULT_OPSET", "Example", "ExportError", "ExportSettings", "Exported", "export", "prepare_example",
           "rename_feeds", "versions"]
