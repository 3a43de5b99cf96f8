"""Where madengine's cache lives, and what is in it.

``<cache>`` is ``--cache-dir`` when given, else ``$MADENGINE_CACHE_DIR``, else
``$XDG_CACHE_HOME/madengine``, else ``~/.cache/madengine``. It holds

* ``onnx/`` and ``tensorrt/``: prepared models of ``.onnx`` files (:mod:`.prepared`);
* ``builds/<build>/``: ONNX builds of the PyTorch models found in scripts (:mod:`.builds`);
* ``catalog/``: validated model catalogs (:mod:`madengine.catalog.cache`).

Deleting the folder (or ``madengine cache delete --all``) is always safe: everything in it is
made again when needed.
"""

from __future__ import annotations

from madengine.core.cachedir import cache_root

#: the sub-folders madengine writes under the cache root
CACHE_FOLDERS = ("builds", "onnx", "tensorrt", "catalog")

__all__ = ["CACHE_FOLDERS", "cache_root"]
