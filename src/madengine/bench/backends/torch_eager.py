"""PyTorch eager as a backend (``torch-eager``): the ``nn.Module`` itself, on the ONNX build's inputs.

Unlike the other backends it does not read the ONNX file: ``prepare`` wraps the module and the
example call it was exported from. The feeds (ONNX input name → numpy array) go back into the
call's argument structure: the tensors of the example call, in ``torch.utils._pytree`` order, are
replaced one by one by the feeds named in ``leaf_names`` (converted once, to the example tensor's
dtype and device). An inference is ``module(*args, **kwargs)`` in ``eval()`` mode under
``torch.inference_mode()`` (plus ``torch.cuda.synchronize()`` for a module on a GPU, so its time
is the work done); outputs are flattened in pytree order and named like the ONNX outputs
(:func:`flatten_outputs`). ``threads`` sets ``torch.set_num_threads`` for the session's life.
For the session's life too, every float32 math mode of torch is IEEE (:func:`full_precision`): a
script's ``torch.set_float32_matmul_precision("medium")`` would otherwise let oneDNN compute float32
matmuls in bf16 on a CPU that has it, and cuDNN convolutions use TF32 by default. The precision
reported is the type of the module's parameters.

Portable like the other backends: torch and numpy only (imported when used).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..harness import precision as precisions
from .base import Backend, BackendError, Session, Shapes, classify

BACKEND_ID = "torch-eager"


def flatten_outputs(outputs: Any) -> tuple[list[str], list[Any]]:
    """Output tensors in ``torch.utils._pytree`` order (the exporter's) as numpy, named by their path:
    ``last_hidden_state`` for a ModelOutput field, ``output_0`` for a bare tensor or a tuple item."""
    import torch
    from torch.utils import _pytree as pytree

    leaves, _ = pytree.tree_flatten_with_path(outputs)
    names, arrays = [], []
    for path, leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            names.append(path_name(path, "output", len(names)))
            arrays.append(to_numpy(leaf))
    return unique_names(names), arrays


def tensor_leaves(args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
    """Every tensor in a call's arguments, in pytree order, named by its path (``input_ids``, ``input_0``)."""
    import torch
    from torch.utils import _pytree as pytree

    leaves, _ = pytree.tree_flatten_with_path((args, kwargs))
    named = [(path_name(path[1:], "input", i), leaf) for i, (path, leaf) in enumerate(leaves)
             if isinstance(leaf, torch.Tensor)]
    return list(zip(unique_names([n for n, _ in named]), [leaf for _, leaf in named]))


def path_name(path: Sequence[Any], prefix: str, index: int = 0) -> str:
    parts = [str(getattr(entry, "key", getattr(entry, "idx", getattr(entry, "name", "")))) for entry in path]
    if not parts:
        return f"{prefix}_{index}"
    name = "_".join(parts)
    return name if not name[0].isdigit() else f"{prefix}_{name}"


def unique_names(names: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for name in names:
        count = seen.get(name, 0)
        seen[name] = count + 1
        out.append(name if count == 0 else f"{name}_{count}")
    return out


def to_numpy(tensor: Any) -> Any:
    import torch

    value = tensor.detach().cpu()
    if value.dtype == torch.bfloat16:
        value = value.float()
    return value.numpy().copy()


@contextlib.contextmanager
def eval_mode(module: Any):
    """``module`` in eval() for the block; every sub-module's own train/eval flag put back after."""
    modes = [(sub, sub.training) for sub in module.modules()]
    module.eval()
    try:
        yield
    finally:
        for sub, training in modes:
            sub.training = training


def device_vendor(module: Any) -> str:
    """CPU, or the GPU vendor of the device the module's first parameter lives on."""
    import torch

    tensor = next(iter(module.parameters()), None)
    if tensor is None or tensor.device.type == "cpu":
        return "CPU"
    return "AMD" if getattr(torch.version, "hip", None) else "NVIDIA"


#: torch's float32 math-mode switches (torch 2.9+): object path under ``torch.backends``
_FP32_SWITCHES = ("", "cuda.matmul", "cudnn", "cudnn.conv", "cudnn.rnn", "mkldnn", "mkldnn.matmul", "mkldnn.conv",
                  "mkldnn.rnn")


def full_precision(torch: Any) -> Callable[[], None]:
    """Every float32 math mode of ``torch`` set to IEEE float32; returns the call that puts them back.
    torch 2.9+ has one switch per backend and operation (``fp32_precision``; mixing it with the older
    switches makes torch raise), older torch the matmul precision and the two ``allow_tf32`` flags."""
    switches = []
    for path in _FP32_SWITCHES:
        owner = torch.backends
        for part in filter(None, path.split(".")):
            owner = getattr(owner, part, None)
        if owner is not None and hasattr(owner, "fp32_precision"):
            switches.append((owner, owner.fp32_precision))
    if switches:
        for owner, _ in switches:
            owner.fp32_precision = "ieee"

        def put_back() -> None:
            for owner, value in switches:
                owner.fp32_precision = value

        return put_back
    legacy = (torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32,
              torch.backends.cudnn.allow_tf32)
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False

    def put_back_legacy() -> None:
        torch.set_float32_matmul_precision(legacy[0])
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = legacy[1], legacy[2]

    return put_back_legacy


def parameters_precision(module: Any) -> str:
    """The type of most of a module's parameter elements, as a precision name (``f32`` when it has none)."""
    counts: dict[str, int] = {}
    for parameter in module.parameters():
        name = precisions.normalise(parameter.dtype)
        counts[name] = counts.get(name, 0) + parameter.numel()
    return max(sorted(counts), key=lambda name: counts[name]) if counts else precisions.DEFAULT


class TorchEagerSession(Session):
    def __init__(self, module: Any, args: tuple, kwargs: dict, leaf_names: list[str], threads: int | None) -> None:
        import torch

        self.torch = torch
        self.module, self.args, self.kwargs, self.leaf_names = module, args, kwargs, leaf_names
        self.saved_threads = torch.get_num_threads()
        if threads:
            torch.set_num_threads(threads)
        self.restore_precision = full_precision(torch)
        self.on_gpu = any(p.device.type != "cpu" for p in module.parameters())
        self.details = {"torch_version": torch.__version__, "threads": threads or "auto",
                        "device": str(next(iter(module.parameters())).device) if self.on_gpu else "cpu",
                        "precision": parameters_precision(module), "fp32_math": "ieee"}

    def _arguments(self, feeds: Mapping[str, Any]) -> tuple[tuple, dict]:
        from torch.utils import _pytree as pytree

        torch = self.torch
        leaves, spec = pytree.tree_flatten((self.args, self.kwargs))
        replaced, position = [], 0
        for leaf in leaves:
            if isinstance(leaf, torch.Tensor):
                # an input the ONNX graph dropped (unused) has no feed: the example's own tensor stands
                feed = feeds.get(self.leaf_names[position]) if position < len(self.leaf_names) else None
                value = leaf if feed is None else torch.as_tensor(feed)
                replaced.append(value.to(device=leaf.device, dtype=leaf.dtype))
                position += 1
            else:
                replaced.append(leaf)
        args, kwargs = pytree.tree_unflatten(replaced, spec)
        return args, kwargs

    def _call(self, args: tuple, kwargs: dict) -> Any:
        torch = self.torch
        with eval_mode(self.module), torch.inference_mode():
            outputs = self.module(*args, **kwargs)
            if self.on_gpu:
                torch.cuda.synchronize()
        return outputs

    def run(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        names, arrays = flatten_outputs(self._call(*self._arguments(feeds)))
        return dict(zip(names, arrays))

    def bind(self, feeds: Mapping[str, Any]) -> Callable[[], Any]:
        args, kwargs = self._arguments(feeds)
        module, torch, on_gpu = self.module, self.torch, self.on_gpu
        modes = [(sub, sub.training) for sub in module.modules()]

        def run_once() -> Any:
            with torch.inference_mode():
                outputs = module(*args, **kwargs)
                if on_gpu:
                    torch.cuda.synchronize()
            return outputs

        module.eval()  # for the timed loop (put back by close): no per-call mode switching in the timing
        self._restore = modes
        return run_once

    def close(self) -> None:
        for sub, training in getattr(self, "_restore", []):
            sub.training = training
        self.torch.set_num_threads(self.saved_threads)
        self.restore_precision()


class TorchEagerBackend(Backend):
    """An ``nn.Module`` and its example call (``args``, ``kwargs``; ``leaf_names`` name its tensors'
    feeds in pytree order) as a backend; ``prepare`` ignores the model path."""

    id = BACKEND_ID
    module = "torch"
    install_hint = "pip install 'madengine[torch]'"

    def __init__(self, model: Any, args: tuple, kwargs: dict, leaf_names: list[str]) -> None:
        self.model, self.args, self.kwargs, self.leaf_names = model, args, kwargs, list(leaf_names)
        self.device_vendor = device_vendor(model)

    def versions(self) -> dict[str, str]:
        return {"torch": self.version()}

    def own_precision(self, model: str | Path | None) -> str:
        return parameters_precision(self.model)  # the module's, not a file's

    def prepare(self, model: str | Path | None, shapes: Shapes, threads: int | None = None,
                precision: str = precisions.DEFAULT) -> Session:
        try:
            return TorchEagerSession(self.model, self.args, self.kwargs, self.leaf_names, threads)
        except BackendError:
            raise
        except Exception as exc:
            raise classify(exc, "torch-eager cannot prepare the model") from None
