"""onnx's reference evaluator (``onnx.reference.ReferenceEvaluator``) as a correctness oracle.

A plain numpy implementation of the ONNX operators, independent of every backend under test: the
reference for small models (it is far too slow to time large ones, and is never shown as a timed
cell).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Callable, Mapping

from ..harness import precision as precisions
from .base import Backend, Session, Shapes, classify


class ReferenceSession(Session):
    def __init__(self, evaluator: Any, precision: str) -> None:
        self.evaluator = evaluator
        self.details = {"evaluator": "onnx.reference.ReferenceEvaluator", "precision": precision}

    def run(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        return dict(zip(self.evaluator.output_names, self.evaluator.run(None, dict(feeds))))

    def bind(self, feeds: Mapping[str, Any]) -> Callable[[], Any]:
        return functools.partial(self.evaluator.run, None, dict(feeds))


class OnnxReferenceBackend(Backend):
    id = "onnx-reference"
    module = "onnx"
    install_hint = "pip install onnx"

    def prepare(self, model: str | Path, shapes: Shapes, threads: int | None = None,
                precision: str = precisions.DEFAULT) -> Session:
        from onnx.reference import ReferenceEvaluator

        try:  # numpy computes in the model's own types
            return ReferenceSession(ReferenceEvaluator(str(model)), precisions.model_precision(model))
        except Exception as exc:  # unknown operators raise NotImplementedError / RuntimeError
            raise classify(exc, "onnx's reference evaluator cannot load the model") from None
