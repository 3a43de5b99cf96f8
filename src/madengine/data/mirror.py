"""Host folders that downloaded data lands in.

A *persistent* mirror (``mirrorlocal`` or ``--force-mirror-local``) is ``<dir>/<dataname>`` and
outlives the run, so later runs only fetch what changed. Without one, data lands in the run's
work folder (``.madengine_data/<dataname>``) and goes away with it. Bookkeeping (the lock, the
per-object state that makes "unchanged" decidable) lives *beside* the data folder, never inside
it, so the model sees only the data.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import re
from pathlib import Path
from typing import Any, Iterator

TEMP_MIRRORS = ".madengine_data"


def folder_name(dataname: str) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]", "_", dataname)
    return name if name.strip(".") else "data"


@dataclasses.dataclass
class Mirror:
    path: Path
    persistent: bool

    @property
    def state_path(self) -> Path:
        return self.path.parent / f".{self.path.name}.madengine-state.json"

    @property
    def lock_path(self) -> Path:
        return self.path.parent / f".{self.path.name}.lock"

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Exclusive use of the mirror (two runs sharing it never download into it at once)."""
        self.path.mkdir(parents=True, exist_ok=True)
        with open(self.lock_path, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def load_state(self) -> dict[str, Any]:
        try:
            data = json.loads(self.state_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def save_state(self, state: dict[str, Any]) -> None:
        temporary = self.state_path.with_name(self.state_path.name + ".tmp")
        temporary.write_text(json.dumps(state, sort_keys=True), encoding="utf-8")
        os.replace(temporary, self.state_path)


def choose_mirror(dataname: str, mirrorlocal: str, force_mirror_local: str | None, root: Path,
                  workdir: Path) -> Mirror:
    """``--force-mirror-local`` (relative to the current directory) wins over the provider's
    ``mirrorlocal`` (relative to the model repository); neither → the run's work folder."""
    if force_mirror_local:
        return Mirror(Path(force_mirror_local).expanduser().resolve() / folder_name(dataname), persistent=True)
    if mirrorlocal:
        base = Path(mirrorlocal).expanduser()
        base = base if base.is_absolute() else root / base
        return Mirror(base.resolve() / folder_name(dataname), persistent=True)
    return Mirror(workdir.resolve() / TEMP_MIRRORS / folder_name(dataname), persistent=False)


def safe_relative(name: str) -> Path | None:
    """A remote object name as a path inside the mirror; None when it would escape it."""
    parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]
    if not parts or any(p == ".." for p in parts):
        return None
    return Path(*parts)


def part_path(path: Path) -> Path:
    """Where a file is written until it is complete (so a killed run never leaves a short file
    that a later run would take as done)."""
    return path.with_name(path.name + ".madengine-part")


def tree_size(path: Path) -> int:
    total = 0
    for folder, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                continue
    return total


def human_size(size: int) -> str:
    """``du -sh`` style: 512B, 4.0K, 1.5M, 12G."""
    value = float(size)
    for unit in ("B", "K", "M", "G", "T"):
        if value < 1024 or unit == "T":
            if unit == "B":
                return f"{int(value)}B"
            return f"{value:.1f}{unit}" if value < 10 else f"{value:.0f}{unit}"
        value /= 1024
    return f"{size}B"
