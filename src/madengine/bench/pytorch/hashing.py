"""The model hash and the digests that decide whether a cached build is stale.

**Model hash** (what ``SCRIPT.py::HASH`` selects, and the ``model_hash`` of a perf.csv row): the
first 8 hex digits of ``sha256(structure_text + "\\n--\\n" + signature_text)``, where

* ``structure_text`` has one line per sub-module in ``named_modules()`` order,
  ``<path> <module>.<class>(<extra_repr>)``, each followed by one line per parameter and buffer it
  owns, ``<path>.<name> <dtype>[<shape>]``. It depends on the architecture (classes, layer settings,
  tensor shapes), never on the weights' values, so a script that builds a model with random weights
  gets the same hash on every run;
* ``signature_text`` has one line per argument of the call, named after ``forward``'s parameters
  (positional arguments are bound to their names): a tensor as ``name: <dtype>[<shape>]``, None,
  booleans, numbers and short strings by value, containers item by item, anything else by type.
  The device is not part of it (the same model on another device is the same workload).

Two calls of one model with different shapes are two models to benchmark (two hashes).

**Staleness digests** (stored with a build, never shown as identity): :func:`weights_digest`
(every parameter and buffer's bytes) and :func:`code_digest` (the bytecode of every ``forward`` in
the model), so a build is rebuilt when the weights or the forward code change although the hash
(architecture + shapes) did not.
"""

from __future__ import annotations

import hashlib
import inspect
from typing import Any, Iterable

from madengine.bench.pytorch.parsing import HASH_LENGTH

#: values shown in a signature by value up to this many characters
MAX_VALUE_TEXT = 80


def class_name(obj: Any) -> str:
    cls = obj if isinstance(obj, type) else type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def dtype_name(dtype: Any) -> str:
    return str(dtype).replace("torch.", "")


def tensor_text(tensor: Any) -> str:
    return f"{dtype_name(tensor.dtype)}[{', '.join(str(d) for d in tensor.shape)}]"


def structure_text(module: Any) -> str:
    """The architecture of ``module`` as text (see the module doc)."""
    lines = []
    for path, sub in module.named_modules():
        try:
            extra = sub.extra_repr()
        except Exception:  # a user's extra_repr that fails must not stop the analysis
            extra = "?"
        lines.append(f"{path or '.'} {class_name(sub)}({extra})")
        for kind in (sub.named_parameters(recurse=False), sub.named_buffers(recurse=False)):
            for name, tensor in kind:
                if tensor is not None:
                    lines.append(f"{path}.{name} {tensor_text(tensor)}")
    return "\n".join(lines)


def value_text(value: Any) -> str:
    """One argument as signature text: tensors by dtype and shape, simple values by value."""
    import torch

    if isinstance(value, torch.Tensor):
        return tensor_text(value)
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    if isinstance(value, str):
        text = repr(value)
        return text if len(text) <= MAX_VALUE_TEXT else f"str[{len(value)}]"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(value_text(v) for v in value)
        return f"({inner})" if isinstance(value, tuple) else f"[{inner}]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {value_text(v)}" for k, v in value.items()) + "}"
    return class_name(value)


def signature_text(arguments: Iterable[tuple[str, Any]]) -> str:
    return "\n".join(f"{name}: {value_text(value)}" for name, value in arguments)


def model_hash(structure: str, signature: str) -> str:
    """The model hash of an architecture called with a signature (see the module doc)."""
    text = f"{structure}\n--\n{signature}"
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_LENGTH]


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def weights_digest(module: Any) -> str:
    """sha256 of every parameter's and buffer's bytes, in ``state_dict`` order."""
    import torch

    digest = hashlib.sha256()
    for name, tensor in module.state_dict(keep_vars=True).items():
        if not isinstance(tensor, torch.Tensor):
            continue
        digest.update(f"{name} {tensor_text(tensor)}\n".encode())
        data = tensor.detach().cpu().contiguous().reshape(-1)
        if data.numel():
            digest.update(data.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def code_digest(module: Any) -> str:
    """sha256 of the bytecode of the ``forward`` of every class in the model (decorators unwrapped)."""
    digest = hashlib.sha256()
    seen = set()
    for _, sub in module.named_modules():
        cls = type(sub)
        if cls in seen:
            continue
        seen.add(cls)
        forward = inspect.unwrap(getattr(cls, "forward", None) or (lambda: None))
        code = getattr(forward, "__code__", None)
        digest.update(class_name(cls).encode())
        if code is not None:
            _update_with_code(digest, code)
    return digest.hexdigest()


def _update_with_code(digest: Any, code: Any) -> None:
    digest.update(code.co_code)
    digest.update(repr(code.co_names).encode())
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            _update_with_code(digest, const)
        else:
            digest.update(repr(const).encode("utf-8", "surrogatepass"))
