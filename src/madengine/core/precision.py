"""The names of the numeric precisions a model runs at, one spelling per precision: what models.json's
``training_precision``, a ``precision`` tag config and the ``training_precision:`` line a model prints
may say, and what compares them (``bfloat16`` and ``bf16`` are one precision).

The benchmark harness (:mod:`madengine.bench.harness.precision`) has its own names (``f32``): it is
copied into containers and imports nothing of madengine.
"""

from __future__ import annotations

#: the precisions, one name each, widest first
NAMES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")

#: other spellings (torch's dtype names, numpy's, the short ones) → the name above
_ALIASES = {"float64": "fp64", "f64": "fp64", "double": "fp64", "float32": "fp32", "f32": "fp32", "float": "fp32",
            "single": "fp32", "float16": "fp16", "f16": "fp16", "half": "fp16", "bfloat16": "bf16",
            "float8": "fp8", "f8": "fp8", "i8": "int8"}


def canonical(name: str) -> str:
    """``name`` as one of :data:`NAMES` (``bfloat16`` → ``bf16``); a name not known is kept, lower case."""
    text = str(name).strip().lower()
    return _ALIASES.get(text, text)


def is_precision(name: str) -> bool:
    return canonical(name) in NAMES


def valid_names() -> str:
    """The names a user may write, for a message: ``fp64, fp32, ..., int8; aliases bfloat16, ...``."""
    return ", ".join(NAMES) + "; aliases " + ", ".join(sorted(_ALIASES))
