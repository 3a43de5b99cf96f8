"""madengine's cache: prepared ``.onnx`` models and ONNX builds of scripts' PyTorch models.

One folder (:func:`cache_root`), two kinds of entries: :mod:`.prepared` (ONNX Runtime's optimized
copy of an ``.onnx`` file, keyed by its content) and :mod:`.builds` (a PyTorch model exported to
ONNX, keyed by its hash, the export settings, the script's arguments and the tool versions, with
staleness rules and ``--rebuild``). ``madengine cache list|stats|delete|report`` reads both.
"""

from madengine.bench.cache.prepared import (
    ENGINE_CACHE_PROVIDERS, OPTIMIZATION_LEVEL, SAVABLE_PROVIDERS, Prepared, cache_key, commit, discard, prepare,
)
from madengine.bench.cache.root import CACHE_FOLDERS, cache_root

__all__ = ["CACHE_FOLDERS", "ENGINE_CACHE_PROVIDERS", "OPTIMIZATION_LEVEL", "Prepared", "SAVABLE_PROVIDERS",
           "cache_key", "cache_root", "commit", "discard", "prepare"]
