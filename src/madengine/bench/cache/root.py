"""Where madengine's cache lives, and what is in it.

``<cache>`` is ``--cache-dir`` when given, else ``$MADENGINE_CACHE_DIR``, else
``$XDG_CACHE_HOME/madengine``, else ``~/.cache/madengine``. It holds

* ``onnx/`` and ``tensorrt/``: prepared models of ``.onnx`` files (:mod:`.prepared`);
* ``builds/<build>/``: ONNX builds of the PyTorch models found in scripts (:mod:`.builds`).

Deleting the folder (or ``madengine cache delete --all``) is always safe: everything in it is
made again when needed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

#: the sub-folders madengine writes under the cache root
CACHE_FOLDERS = ("builds", "onnx", "tensorrt")


def cache_root(environ: Mapping[str, str], override: str | Path | None = None) -> Path:
    """The cache folder: ``override`` (``--cache-dir``), else the environment's choice (module doc)."""
    if override:
        return Path(override).expanduser()
    if environ.get("MADENGINE_CACHE_DIR"):
        return Path(environ["MADENGINE_CACHE_DIR"]).expanduser()
    if environ.get("XDG_CACHE_HOME"):
        return Path(environ["XDG_CACHE_HOME"]).expanduser() / "madengine"
    return Path.home() / ".cache" / "madengine"
