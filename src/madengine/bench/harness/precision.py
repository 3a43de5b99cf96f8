"""Numeric precision: the names madengine accepts and records, and what decides whether one can run.

A benchmark runs at ``f32`` unless asked otherwise: no backend is let pick a reduced precision on its
own (OpenVINO's CPU plugin would take bf16 on a CPU that has it). What a run actually computed in is
recorded as one plain name of :data:`PRECISIONS` (``f32``, ``bf16``, ...), whatever the runtime
called it (``<Type: 'bfloat16'>``, ``tensor(float16)``, ``torch.float32``): :func:`normalise`.

Reduced precision is opt-in and never emulated: :func:`cpu_lacks` says why this CPU cannot compute
a precision natively (its ``/proc/cpuinfo`` flags), so the caller answers UNSUPPORTED instead of a
slow, silent emulation. :func:`model_precision` is the precision of the model's own weights, which
is what runtimes that never rewrite a model (ONNX Runtime on the CPU, TVM, onnx's reference
evaluator) compute in.

Portable like the rest of the harness: the standard library only (``onnx`` when present).
"""

from __future__ import annotations

import functools
import os
import re
from typing import Any, Iterable, List, Optional

from .errors import HarnessInputError, PrecisionUnsupported

#: the default: full single precision, what every backend runs unless asked otherwise
DEFAULT = "f32"
#: the precisions a run may ask for, full first
PRECISIONS = ("f32", "tf32", "bf16", "fp16", "int8")

#: what runtimes call a precision (lower case) → its name here
_ALIASES = {
    "f32": "f32", "fp32": "f32", "float32": "f32", "float": "f32", "single": "f32",
    "tf32": "tf32",
    "bf16": "bf16", "bfloat16": "bf16",
    "fp16": "fp16", "f16": "fp16", "float16": "fp16", "half": "fp16",
    "int8": "int8", "i8": "int8", "uint8": "int8", "u8": "int8",
    "f64": "f64", "fp64": "f64", "float64": "f64", "double": "f64",
}

#: CPU flags (``/proc/cpuinfo``) that matter to the precision and speed of inference, in report order
RELEVANT_CPU_FLAGS = (
    "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni", "avx512_bf16",
    "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "amx_fp16", "avx_ne_convert", "avx_vnni_int8",
    "asimdhp", "asimddp", "bf16", "i8mm", "sve",  # AArch64 (``Features``)
)

#: a precision → the CPU flags of which one lets the CPU compute in it natively (not emulated)
NATIVE_CPU_FLAGS = {
    "bf16": ("avx512_bf16", "amx_bf16", "avx_ne_convert", "bf16"),
    "fp16": ("avx512_fp16", "amx_fp16", "avx_ne_convert", "asimdhp"),
}


def normalise(value: Any) -> str:
    """A runtime's name for a precision as a name of :data:`PRECISIONS` (or ``f64``): ``"<Type:
    'bfloat16'>"`` → ``bf16``, ``"tensor(float)"`` → ``f32``, ``torch.float16`` → ``fp16``. A name
    not known here comes back cleaned but kept (never hidden); ``None`` or empty gives ``""``."""
    if value is None:
        return ""
    text = str(value).strip().lower()
    for pattern in (r"^<type:\s*'([^']*)'>$", r"^tensor\((.*)\)$", r"^(?:torch|numpy|np)\.(.*)$",
                    r"^(?:ov::)?element::(?:type_t::)?(.*)$"):
        found = re.match(pattern, text)
        if found:
            text = found.group(1).strip()
    return _ALIASES.get(text, text)


def parse(text: str, field: str = "--precision") -> str:
    """A precision the user asked for, by any alias (``fp32``, ``bfloat16``, ``f16``); an unknown one is a
    :class:`HarnessInputError` naming the valid ones."""
    name = normalise(text)
    if name not in PRECISIONS:
        raise HarnessInputError(f"unknown precision '{str(text).strip()}'", field=field,
                                hint="valid: " + ", ".join(PRECISIONS))
    return name


def parse_list(text: str, field: str = "--precision") -> List[str]:
    """``"f32,bf16"`` → ``["f32", "bf16"]`` (each parsed, duplicates dropped, order kept)."""
    names: List[str] = []
    for part in str(text).split(","):
        if not part.strip():
            continue
        name = parse(part, field)
        if name not in names:
            names.append(name)
    if not names:
        raise HarnessInputError("names no precision", field=field, hint="valid: " + ", ".join(PRECISIONS))
    return names


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> List[str]:
    """The :data:`RELEVANT_CPU_FLAGS` this CPU has, in that order (empty when unknown)."""
    present = set()
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    present.update(value.split())
                    break
    except OSError:
        return []
    return [flag for flag in RELEVANT_CPU_FLAGS if flag in present]


def cpu_lacks(precision: str, flags: Optional[Iterable[str]] = None) -> Optional[str]:
    """Why this CPU cannot compute ``precision`` natively (None: it can, or the precision needs no
    special instructions): ``"bf16 needs one of the CPU flags avx512_bf16, amx_bf16, ... (this CPU
    has none)"``. Runtimes emulate such precisions on lesser CPUs (OpenVINO's CPU plugin takes bf16
    on any AVX-512 CPU); a benchmark of an emulation measures nothing a user wants."""
    needed = NATIVE_CPU_FLAGS.get(precision)
    if not needed:
        return None
    have = set(cpu_flags() if flags is None else flags)
    if have & set(needed):
        return None
    return f"{precision} needs one of the CPU flags {', '.join(needed)} (this CPU has none: it would be emulated)"


#: ONNX TensorProto element types → precision names (the float and quantised weight types)
_ONNX_TYPES = {1: "f32", 10: "fp16", 16: "bf16", 11: "f64", 3: "int8", 2: "int8"}


def model_precision(path: Any) -> str:
    """The precision of a model's own weights: the type of most of its float/int8 initializer elements
    (``f32`` for a float32 model, ``fp16`` for a converted one, ``int8`` for a quantised one); without
    initializers, the type of its first float input or output. ``""`` when the onnx package is absent
    or the file unreadable."""
    try:
        stat = os.stat(str(path))
    except OSError:
        return ""
    return _weights_precision(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=64)
def _weights_precision(path: str, mtime_ns: int, size: int) -> str:
    """:func:`model_precision` of one version of a file (read once: the cells of a model share it)."""
    try:
        import onnx
    except ImportError:
        return ""
    try:
        graph = onnx.load(path, load_external_data=False).graph
    except Exception:  # not a model: the backend that loads it says so, with its own words
        return ""
    counts: dict = {}
    for init in graph.initializer:
        name = _ONNX_TYPES.get(init.data_type)
        if name:
            size = 1
            for dim in init.dims:
                size *= int(dim)
            counts[name] = counts.get(name, 0) + size
    if counts:
        return max(sorted(counts), key=lambda name: counts[name])
    for value in list(graph.input) + list(graph.output):
        name = _ONNX_TYPES.get(value.type.tensor_type.elem_type) if value.type.HasField("tensor_type") else None
        if name and name != "int8":
            return name
    return ""


# -- ONNX Runtime ----------------------------------------------------------------------------------
#: provider → {precision: the provider options that select it}; ``f32`` turns every reduced mode off
#: explicitly (CUDA's TF32 convolutions and matmuls are on by default)
ORT_PRECISION_OPTIONS = {
    "CUDAExecutionProvider": {"f32": {"use_tf32": "0"}, "tf32": {"use_tf32": "1"}},
    "TensorrtExecutionProvider": {"f32": {"trt_fp16_enable": "False", "trt_int8_enable": "False"},
                                  "fp16": {"trt_fp16_enable": "True", "trt_int8_enable": "False"}},
}


def ort_provider_options(provider: str, precision: str, model_path: Any) -> dict:
    """The provider options that make ``provider`` compute at ``precision`` (see
    :func:`require_mode`: a provider without a mode for it runs the model's own types)."""
    modes = ORT_PRECISION_OPTIONS.get(provider, {})
    if precision in modes:
        return dict(modes[precision])
    require_mode(f"onnxruntime's {provider}", modes, precision,
                 model_precision(model_path) if precision != DEFAULT else "")
    return dict(modes.get(DEFAULT, {}))


def require_mode(runtime: str, modes: Iterable[str], precision: str, own: str) -> None:
    """Nothing when ``runtime`` can compute at ``precision``: ``f32``, one of its ``modes``, or ``own``,
    the precision of the model's own weights (which a runtime without that mode computes in). Else
    :class:`PrecisionUnsupported` saying what it offers: madengine never rewrites a model."""
    offered = [mode for mode in PRECISIONS if mode in set(modes) and mode != DEFAULT]
    if precision == DEFAULT or precision in offered or precision == own:
        return
    what = "modes " + ", ".join(offered) if offered else "no reduced-precision mode"
    valid = [name for name in PRECISIONS if name == DEFAULT or name in offered or name == own]
    raise PrecisionUnsupported(
        f"{runtime} cannot run {precision}: it computes in the model's own types ({own or 'unknown'}) "
        f"and has {what} (valid for it: {', '.join(valid)})",
        hint="give it a model converted to that precision, e.g. bench SCRIPT.py --fp16")


def ort_session_precision(session: Any, provider: str, model_path: Any) -> str:
    """What an ONNX Runtime session computes in, as ORT reports it: the precision options read back
    from the session (TensorRT fp16/int8, CUDA TF32), else the model's own weight type, else the type of
    the session's first float output."""
    try:
        options = session.get_provider_options().get(provider, {})
    except Exception:  # an older ORT without get_provider_options: the model's types decide
        options = {}
    own = model_precision(model_path)
    if _enabled(options.get("trt_int8_enable")):
        return "int8"
    if _enabled(options.get("trt_fp16_enable")):
        return "fp16"
    if _enabled(options.get("use_tf32")) and own in ("f32", ""):
        return "tf32"
    if own:
        return own
    for output in session.get_outputs():
        name = normalise(output.type)
        if name in ("f32", "fp16", "bf16", "f64"):
            return name
    return ""


def _enabled(value: Any) -> bool:
    return str(value).strip().lower() in ("1", "true")
