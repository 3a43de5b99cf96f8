"""The run folder's files (logs, artifacts, trace.json) that the dashboard links to.

Only regular files inside the configured runs folder (``--runs-dir``, default ``madengine_runs``) are
ever served: a path is resolved (symbolic links followed) and refused unless it stays inside the
folder, so ``..``, absolute paths and links pointing out of it answer 404 like a missing file. Files
are served as plain text or as downloads, never as HTML, so a file of a run cannot run script in the
dashboard's pages.
"""

from __future__ import annotations

import os
from pathlib import Path

TRACE_FILE = "trace.json"
#: suffixes shown in the browser as text; everything else is a download
TEXT_TYPES = {".log": "text/plain", ".txt": "text/plain", ".csv": "text/plain", ".out": "text/plain",
              ".err": "text/plain", ".yaml": "text/plain", ".yml": "text/plain", ".md": "text/plain",
              ".json": "application/json"}


def inside(root: Path, relative: str) -> Path | None:
    """The regular file ``relative`` names inside ``root``; None for anything else."""
    if not relative or "\x00" in relative or "\\" in relative:
        return None
    candidate = Path(relative)
    if candidate.is_absolute():
        return None
    try:
        base = root.resolve(strict=True)
        target = (base / candidate).resolve(strict=True)
    except (OSError, RuntimeError):  # missing, a loop of links, a name too long
        return None
    if target == base or not target.is_relative_to(base) or not target.is_file():
        return None
    return target


def link_of(root: Path, path_text: str, cwd: Path | None = None) -> str | None:
    """The path under ``root`` (POSIX, for a ``/files/`` URL) of a file a row names, when that file
    is inside ``root``; relative names are taken from ``cwd`` (where the run ran: the server's
    folder by default), then from ``root`` itself."""
    text = path_text.strip()
    if not text or "\x00" in text:
        return None
    try:
        base = root.resolve(strict=True)
    except OSError:
        return None
    path = Path(text)
    candidates = [path] if path.is_absolute() else [(cwd or Path.cwd()) / path, base / path]
    for candidate in candidates:
        try:
            real = candidate.resolve(strict=True)
        except (OSError, RuntimeError):
            continue
        if real != base and real.is_relative_to(base) and real.is_file():
            return real.relative_to(base).as_posix()
    return None


def artifact_paths(cell: str) -> list[str]:
    """The paths of a row's ``artifacts`` cell (perf.csv joins them with ',' or ';')."""
    return [p.strip() for p in cell.replace(";", ",").split(",") if p.strip()]


def trace_link(root: Path, run_id: str) -> str | None:
    """The run's trace.json under ``root`` (``<run id>/trace.json``), when it is there."""
    if not run_id or os.sep in run_id or run_id in (".", ".."):
        return None
    relative = f"{run_id}/{TRACE_FILE}"
    return relative if inside(root, relative) is not None else None


def media_type(path: Path) -> str | None:
    """Text types to show in the browser; None: a download."""
    return TEXT_TYPES.get(path.suffix.lower())
