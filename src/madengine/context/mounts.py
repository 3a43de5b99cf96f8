"""The context's ``docker_mounts``: host folders or files mounted into every model's container.

Format (the original madengine's, container path first)::

    "docker_mounts": {"/data": "/mnt/datasets",                     # read-write
                      "/ref": "/mnt/reference:ro",                  # read-only
                      "/ckpt": {"host": "/mnt/ckpt", "read_only": true}}
"""

from __future__ import annotations

import dataclasses
import posixpath
from pathlib import Path
from typing import Any, Mapping

from madengine.core.errors import ContextError

_WHERE = {"path": "context", "field": "docker_mounts"}


@dataclasses.dataclass(frozen=True)
class ContextMount:
    host: str
    container: str
    read_only: bool


def _entry(container: str, value: Any) -> ContextMount:
    if isinstance(value, Mapping):
        host, read_only = value.get("host"), value.get("read_only", False)
        if not isinstance(read_only, bool):
            raise ContextError(f"read_only of '{container}' must be true or false", **_WHERE)
    elif isinstance(value, str):
        host, _, mode = value.rpartition(":") if value.endswith((":ro", ":rw")) else (value, "", "rw")
        read_only = mode == "ro"
    else:
        raise ContextError(f"'{container}' must map to a host path (\"/host\", \"/host:ro\" or "
                           "{\"host\": ..., \"read_only\": true})", **_WHERE)
    if not isinstance(host, str) or not host.startswith("/"):
        raise ContextError(f"the host path of '{container}' must be absolute, got {host!r}", **_WHERE)
    return ContextMount(host=host, container=container, read_only=bool(read_only))


def docker_mounts(values: Mapping[str, Any]) -> list[ContextMount]:
    """The mounts of a context's ``docker_mounts``; a ContextError (exit 2) names a bad entry."""
    mounts = []
    for container, value in (values or {}).items():
        if not isinstance(container, str) or not posixpath.isabs(container) or "\n" in container:
            raise ContextError(f"container path {container!r} must be absolute", **_WHERE)
        mounts.append(_entry(container, value))
    return mounts


def check_host_paths(mounts: list[ContextMount]) -> None:
    """Every host path exists (a missing one is exit 2 before any model runs)."""
    for mount in mounts:
        if not Path(mount.host).exists():
            raise ContextError(f"host path {mount.host} (for {mount.container}) does not exist", **_WHERE,
                               hint="create it or fix the context")
