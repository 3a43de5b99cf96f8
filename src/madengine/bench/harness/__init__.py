"""The ONNX Runtime benchmark harness: one piece of code for ``madengine bench`` and models.json.

This sub-package is *portable*: it imports only the standard library, numpy and onnxruntime (the
last two lazily), never ``madengine``. ``madengine bench`` imports it in-process; a models.json
entry with ``"onnx"`` copies this folder into the run's work folder and runs it there as
``python3 -m <folder> ...`` (inside a container or on the host), so both paths time a model with
the same loop, generate the same inputs and compute the same statistics.
"""

from .errors import HarnessError, HarnessInputError

__all__ = ["HarnessError", "HarnessInputError"]
