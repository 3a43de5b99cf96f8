"""Model inputs: the signature, shape resolution for dynamic dimensions, and generated data.

Shapes are resolved per dimension, first rule that applies:

1. ``--shape name=d0,d1,...`` gives the whole shape of that input (fixed dimensions must agree);
2. a fixed dimension keeps its value;
3. a named dynamic dimension (``dim_param``, e.g. ``batch``) takes its value from ``--axes``;
4. a dynamic dimension 0 takes ``--batch-size`` when one is given;
5. otherwise the dimension is unresolved: an error names the input, the dimension and the flag
   that would fix it (nothing is guessed: a silently chosen 1 would benchmark another workload).

Data are random with a fixed seed, drawn in signature order: floats uniform in [0, 1), integers
from {0, 1} (valid as indices into any table and as masks), booleans from {False, True}.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Mapping, Sequence, Union

from .errors import HarnessInputError

Dim = Union[int, str, None]  # not `int | str | None`: container Pythons may predate 3.10

#: ONNX Runtime type strings → numpy dtype names
NUMPY_DTYPES = {
    "tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
    "tensor(int8)": "int8", "tensor(int16)": "int16", "tensor(int32)": "int32", "tensor(int64)": "int64",
    "tensor(uint8)": "uint8", "tensor(uint16)": "uint16", "tensor(uint32)": "uint32", "tensor(uint64)": "uint64",
    "tensor(bool)": "bool",
}


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """One model input: its name, declared dimensions (int, axis name, or None) and ORT type."""

    name: str
    dims: tuple[Dim, ...] | None  # None: the rank itself is unknown
    type: str

    @property
    def dtype(self) -> str:
        try:
            return NUMPY_DTYPES[self.type]
        except KeyError:
            raise HarnessInputError(f"input type {self.type} cannot be generated",
                                    field=f"input '{self.name}'",
                                    hint="supported: " + ", ".join(t[7:-1] for t in NUMPY_DTYPES)) from None


def signature_from_session(session: Any) -> list[InputSpec]:
    """The inputs of an ``onnxruntime.InferenceSession``."""
    specs = []
    for arg in session.get_inputs():
        shape = arg.shape
        dims = None if shape is None else tuple(_normal_dim(d) for d in shape)
        specs.append(InputSpec(arg.name, dims, arg.type))
    return specs


def _normal_dim(dim: Any) -> Dim:
    if isinstance(dim, int):
        return dim if dim >= 0 else None
    if isinstance(dim, str) and dim.strip():
        return dim
    return None


def parse_dims(text: str, *, what: str) -> tuple[int, ...]:
    """``'1,3,224,224'`` → ``(1, 3, 224, 224)``; also accepts ``x`` as the separator."""
    parts = [p.strip() for p in text.replace("x", ",").split(",")]
    try:
        dims = tuple(int(p) for p in parts)
    except ValueError:
        raise HarnessInputError(f"'{text}' is not a list of whole numbers", field=what,
                                hint="write e.g. 1,3,224,224") from None
    if any(d < 0 for d in dims):
        raise HarnessInputError(f"'{text}' has a negative dimension", field=what)
    return dims


def parse_assignments(items: Iterable[str], *, flag: str) -> dict[str, str]:
    """``['a=1', 'b=2,3']`` → ``{'a': '1', 'b': '2,3'}``; names must be unique."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value:
            raise HarnessInputError(f"'{item}' is not NAME=VALUE", field=flag)
        if name in out:
            raise HarnessInputError(f"'{name}' is given twice", field=flag)
        out[name] = value
    return out


def parse_shapes(items: Iterable[str]) -> dict[str, tuple[int, ...]]:
    """``--shape`` values → input name → dimensions."""
    return {name: parse_dims(value, what=f"--shape {name}")
            for name, value in parse_assignments(items, flag="--shape").items()}


def parse_axes(items: Iterable[str]) -> dict[str, int]:
    """``--axes`` values → axis name → size."""
    axes = {}
    for name, value in parse_assignments(items, flag="--axes").items():
        dims = parse_dims(value, what=f"--axes {name}")
        if len(dims) != 1:
            raise HarnessInputError(f"'{value}' is not one whole number", field=f"--axes {name}")
        axes[name] = dims[0]
    return axes


def resolve_shapes(signature: Sequence[InputSpec], shapes: Mapping[str, Sequence[int]] | None = None,
                   axes: Mapping[str, int] | None = None, batch_size: int | None = None) -> dict[str, tuple[int, ...]]:
    """The concrete shape of every input (see the module docstring for the rules)."""
    shapes = dict(shapes or {})
    axes = dict(axes or {})
    names = [spec.name for spec in signature]
    unknown = [name for name in shapes if name not in names]
    if unknown:
        raise HarnessInputError(f"the model has no input named {', '.join(repr(u) for u in unknown)}",
                                field="--shape", hint="inputs: " + ", ".join(names))
    used_axes = {d for spec in signature for d in (spec.dims or ()) if isinstance(d, str)}
    unused = [name for name in axes if name not in used_axes]
    if unused:
        raise HarnessInputError(f"the model has no dynamic axis named {', '.join(repr(u) for u in unused)}",
                                field="--axes",
                                hint=("axes: " + ", ".join(sorted(used_axes))) if used_axes else "the model has no named axes")
    resolved = {}
    for spec in signature:
        if spec.name in shapes:
            resolved[spec.name] = _given_shape(spec, tuple(shapes[spec.name]), axes)
        else:
            resolved[spec.name] = _derived_shape(spec, axes, batch_size)
    _check_batch(signature, resolved, shapes, batch_size)
    return resolved


def _given_shape(spec: InputSpec, given: tuple[int, ...], axes: Mapping[str, int]) -> tuple[int, ...]:
    if spec.dims is not None:
        if len(given) != len(spec.dims):
            raise HarnessInputError(f"--shape gives {len(given)} dimension(s) but the input has {len(spec.dims)}",
                                    field=f"input '{spec.name}'", hint=f"declared shape: {_show(spec.dims)}")
        for index, (declared, value) in enumerate(zip(spec.dims, given)):
            if isinstance(declared, int) and declared != value:
                raise HarnessInputError(f"dimension {index} is fixed at {declared}, --shape gives {value}",
                                        field=f"input '{spec.name}'")
            if isinstance(declared, str) and declared in axes and axes[declared] != value:
                raise HarnessInputError(f"dimension {index} ('{declared}') is {axes[declared]} by --axes but "
                                        f"{value} by --shape", field=f"input '{spec.name}'")
    return given


def _derived_shape(spec: InputSpec, axes: Mapping[str, int], batch_size: int | None) -> tuple[int, ...]:
    if spec.dims is None:
        raise HarnessInputError("the rank of this input is unknown", field=f"input '{spec.name}'",
                                hint=f"give its whole shape: --shape {spec.name}=d0,d1,...")
    shape = []
    for index, dim in enumerate(spec.dims):
        if isinstance(dim, int):
            shape.append(dim)
        elif isinstance(dim, str) and dim in axes:
            shape.append(axes[dim])
        elif index == 0 and batch_size is not None:
            shape.append(batch_size)
        else:
            raise unresolved(spec, index, dim)
    return tuple(shape)


def unresolved(spec: InputSpec, index: int, dim: Dim) -> HarnessInputError:
    """The error for a dynamic dimension nothing gave a value to."""
    if isinstance(dim, str):
        what = f"dimension {index} ('{dim}') is dynamic and has no value"
        hint = f"give --axes {dim}=N"
    else:
        what = f"dimension {index} (unnamed) is dynamic and has no value"
        hint = f"give --shape {spec.name}=..."
    if index == 0:
        hint += " or --batch-size N"
    return HarnessInputError(what, field=f"input '{spec.name}'", hint=f"{hint}; declared shape {_show(spec.dims)}")


def _check_batch(signature: Sequence[InputSpec], resolved: Mapping[str, tuple[int, ...]],
                 shapes: Mapping[str, Sequence[int]], batch_size: int | None) -> None:
    """A batch size the first input cannot take is an error, not a silently ignored flag."""
    if batch_size is None or not signature:
        return
    first = signature[0]
    shape = resolved[first.name]
    if shape and shape[0] != batch_size:
        source = "--shape" if first.name in shapes else "the model (fixed)" if first.dims and isinstance(
            first.dims[0], int) else "--axes"
        raise HarnessInputError(f"dimension 0 is {shape[0]} by {source}, but --batch-size is {batch_size}",
                                field=f"input '{first.name}'", hint="drop one of them or make them agree")


def batch_size_of(signature: Sequence[InputSpec], resolved: Mapping[str, tuple[int, ...]],
                  batch_size: int | None) -> int:
    """The batch size samples/s is computed with: the given one, else dimension 0 of the first input."""
    if batch_size is not None:
        return batch_size
    if signature:
        shape = resolved[signature[0].name]
        if shape and shape[0] > 0:
            return shape[0]
    return 1


def generate(signature: Sequence[InputSpec], resolved: Mapping[str, tuple[int, ...]], seed: int = 0) -> dict[str, Any]:
    """Random input arrays with a fixed seed (see the module docstring for the value ranges)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    feeds = {}
    for spec in signature:
        shape = resolved[spec.name]
        dtype = np.dtype(spec.dtype)
        if dtype.kind == "f":
            feeds[spec.name] = rng.random(shape, dtype=np.float32).astype(dtype, copy=False)
        elif dtype.kind == "b":
            feeds[spec.name] = rng.integers(0, 2, size=shape).astype(bool)
        else:
            feeds[spec.name] = rng.integers(0, 2, size=shape, dtype=dtype)
    return feeds


def describe(signature: Sequence[InputSpec], resolved: Mapping[str, tuple[int, ...]]) -> dict[str, dict[str, Any]]:
    """Input name → declared dims, resolved shape and dtype (for results and reports)."""
    return {spec.name: {"declared": None if spec.dims is None else list(spec.dims),
                        "shape": list(resolved[spec.name]), "dtype": spec.dtype} for spec in signature}


def shapes_text(resolved: Mapping[str, Sequence[int]]) -> str:
    """``x=1,3,224,224;mask=1,128``: the shapes as one perf.csv cell."""
    return ";".join(f"{name}={','.join(str(d) for d in shape)}" for name, shape in resolved.items())


def _show(dims: Sequence[Dim] | None) -> str:
    if dims is None:
        return "unknown"
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"
