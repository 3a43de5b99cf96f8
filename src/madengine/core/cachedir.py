"""Where madengine keeps what it can always make again.

``<cache>`` is an explicit override (``--cache-dir``) when given, else ``$MADENGINE_CACHE_DIR``,
else ``$XDG_CACHE_HOME/madengine``, else ``~/.cache/madengine``. Deleting it is always safe.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping


def cache_root(environ: Mapping[str, str], override: str | Path | None = None) -> Path:
    """The cache folder: ``override``, else the environment's choice (module doc)."""
    if override:
        return Path(override).expanduser()
    if environ.get("MADENGINE_CACHE_DIR"):
        return Path(environ["MADENGINE_CACHE_DIR"]).expanduser()
    if environ.get("XDG_CACHE_HOME"):
        return Path(environ["XDG_CACHE_HOME"]).expanduser() / "madengine"
    return Path.home() / ".cache" / "madengine"
