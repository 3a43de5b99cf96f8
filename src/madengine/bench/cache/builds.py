"""ONNX builds of the PyTorch models found in scripts: one folder per build, a state file, staleness.

A build is named ``<script stem>_<model hash>`` (``<name>_<hash>`` through the API) and lives in
``<cache>/builds/<name>/``: ``state.json``, ``onnx/*.onnx``, ``inputs.npz``, ``log_export.txt``.
Since the model hash covers the architecture and the input shapes, a model or shape change that
changes the hash is a *new* build; everything else that decides what a build contains is the
build's **key**, stored in its state and compared on every use:

* ``model_hash``, ``structure_sha256`` (the full architecture text, against hash-prefix
  collisions), ``code_sha256`` (every ``forward``'s bytecode) and ``weights_sha256``: *the model changed*;
* ``inputs`` (the call's signature text): *its shapes changed*;
* ``settings`` (exporter, opset, optimisation, fp16) and ``script_args``: *the arguments changed*;
* ``versions`` (madengine, torch, onnx, onnxscript, onnxruntime): *a version changed*.

A build whose key differs, whose state cannot be read, or that did not finish (``building``,
``failed``) is **stale**. ``--rebuild if_needed`` (default) rebuilds stale builds, ``always``
rebuilds every time, ``never`` uses a stale build that finished (with a warning) and builds only
missing ones. Builds of one name are serialised with a lock file (``builds/<name>.lock``); the
state is written atomically. After each benchmark the latest results per backend are kept in the
state (``results``) for ``madengine cache report``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Iterator

from madengine.core.clock import utc_now

STATE_FILE = "state.json"
STATE_FORMAT = 1
BUILDS = "builds"

_KEY_MEANING = {
    "model_hash": "the model changed (architecture or input shapes)",
    "structure_sha256": "the model changed (architecture)",
    "code_sha256": "the model changed (forward code)",
    "weights_sha256": "the model changed (weights)",
    "inputs": "its input shapes changed",
    "settings": "the export settings changed",
    "script_args": "the script's arguments changed",
}


@dataclasses.dataclass(frozen=True)
class BuildKey:
    """What a build is made from (module doc)."""

    model_hash: str
    structure_sha256: str
    code_sha256: str
    weights_sha256: str
    inputs: str
    settings: dict[str, Any]
    script_args: tuple[str, ...]
    versions: dict[str, str]

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["script_args"] = list(self.script_args)
        return data


def build_name(stem: str, model_hash: str) -> str:
    clean = re.sub(r"[^A-Za-z0-9_.-]+", "_", stem).strip("._") or "model"
    return f"{clean}_{model_hash}"


def builds_dir(root: Path) -> Path:
    return Path(root) / BUILDS


def build_folder(root: Path, name: str) -> Path:
    return builds_dir(root) / name


def lock_path(root: Path, name: str) -> Path:
    """The lock file that serialises builds of ``name`` (beside the build folder, not inside it)."""
    return builds_dir(root) / f"{name}.lock"


def read_state(folder: Path) -> dict[str, Any] | None:
    """The build's state, or None when missing or unreadable (an unreadable state is a stale build)."""
    try:
        data = json.loads((folder / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_state(folder: Path, state: dict[str, Any]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    state = dict(state, format=STATE_FORMAT, updated_at=utc_now())
    temporary = folder / f"{STATE_FILE}.tmp-{os.getpid()}"
    temporary.write_text(json.dumps(state, indent=1, sort_keys=True, default=str), encoding="utf-8")
    os.replace(temporary, folder / STATE_FILE)


def stale_reasons(state: dict[str, Any] | None, key: BuildKey) -> list[str]:
    """Why the build in ``state`` cannot stand for ``key`` (empty: it is up to date)."""
    if state is None:
        return ["no readable build state"]
    reasons = []
    if state.get("status") != "success":
        reasons.append(f"the last build did not finish ({state.get('status', 'unknown')})")
    stored = state.get("key") if isinstance(state.get("key"), dict) else {}
    wanted = key.to_json()
    for field, meaning in _KEY_MEANING.items():
        if stored.get(field) != wanted[field]:
            if field == "settings":
                changed = sorted(k for k in set(stored.get(field) or {}) | set(wanted[field])
                                 if (stored.get(field) or {}).get(k) != wanted[field].get(k))
                meaning = f"{meaning} ({', '.join(changed)})"
            if meaning not in reasons:
                reasons.append(meaning)
    old_versions = stored.get("versions") or {}
    for package, version in wanted["versions"].items():
        if old_versions.get(package) != version:
            reasons.append(f"{package} version changed ({old_versions.get(package) or 'none'} → {version or 'none'})")
    return reasons


def decide(policy: str, state: dict[str, Any] | None, key: BuildKey) -> tuple[str, list[str]]:
    """What to do with a build under ``--rebuild policy``: ``use`` (up to date), ``use-stale``
    (``never`` and stale), ``build`` (none usable exists) or ``rebuild`` (stale or ``always``)."""
    reasons = stale_reasons(state, key)
    finished = state is not None and state.get("status") == "success"
    if policy == "always":
        return ("rebuild" if state is not None else "build"), ["--rebuild always"]
    if not reasons:
        return "use", []
    if policy == "never" and finished:
        return "use-stale", reasons
    return ("rebuild" if state is not None else "build"), reasons


def record_results(folder: Path, backend: str, results: dict[str, Any]) -> None:
    """Keep ``backend``'s latest results in the build's state (for ``cache report``)."""
    state = read_state(folder)
    if state is None:
        return
    state.setdefault("results", {})[backend] = dict(results, at=utc_now())
    write_state(folder, state)


# -- reading the cache (madengine cache ...) ---------------------------------------------------------
def list_builds(root: Path) -> list[dict[str, Any]]:
    """Every build folder's state (a folder with no readable state shows as ``unreadable``)."""
    folder = builds_dir(root)
    if not folder.is_dir():
        return []
    builds = []
    for path in sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")):
        state = read_state(path) or {"status": "unreadable"}
        builds.append(dict(state, name=path.name, folder=str(path), size_bytes=folder_size(path)))
    return builds


def folder_size(path: Path) -> int:
    return sum(f.stat().st_size for f in _files(path))


def build_files(folder: Path) -> list[dict[str, Any]]:
    return [{"path": str(f.relative_to(folder)), "bytes": f.stat().st_size} for f in sorted(_files(folder))]


def _files(path: Path) -> Iterator[Path]:
    for dirpath, _, names in os.walk(path):
        for name in names:
            yield Path(dirpath) / name


def delete_build(root: Path, name: str) -> bool:
    """Remove one build (False when there is none of that name)."""
    folder = build_folder(root, name)
    if not folder.is_dir() or folder.parent != builds_dir(root):
        return False
    shutil.rmtree(folder)
    lock_path(root, name).unlink(missing_ok=True)
    return True


def reset_folder(folder: Path) -> None:
    """Empty a build folder before (re)building it, so no file of an older build survives."""
    if folder.is_dir():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)


REPORT_COLUMNS = ("build", "script", "model", "class", "hash", "parameters", "status", "opset", "fp16", "torch",
                  "onnxruntime", "madengine", "export_s", "optimize_s", "updated_at")
#: per backend, after REPORT_COLUMNS: <backend>_<field>
REPORT_RESULT_FIELDS = ("status", "p50_ms", "mean_ms", "samples_per_second", "correctness", "at")


def report_rows(root: Path) -> tuple[list[str], list[dict[str, Any]]]:
    """``madengine cache report``: one row per build with its latest results per backend."""
    builds = list_builds(root)
    backends = sorted({b for build in builds for b in (build.get("results") or {})})
    columns = list(REPORT_COLUMNS) + [f"{b}_{f}" for b in backends for f in REPORT_RESULT_FIELDS]
    rows = []
    for build in builds:
        key, model = build.get("key") or {}, build.get("model") or {}
        settings, versions, timings = key.get("settings") or {}, key.get("versions") or {}, build.get("timings") or {}
        row = {"build": build["name"], "script": model.get("script", ""), "model": model.get("name", ""),
               "class": model.get("class", ""), "hash": key.get("model_hash", ""),
               "parameters": model.get("parameters", ""), "status": build.get("status", ""),
               "opset": settings.get("opset", ""), "fp16": settings.get("fp16", ""),
               "torch": versions.get("torch", ""), "onnxruntime": versions.get("onnxruntime", ""),
               "madengine": versions.get("madengine", ""), "export_s": _rounded(timings.get("export_s")),
               "optimize_s": _rounded(timings.get("optimize_s")), "updated_at": build.get("updated_at", "")}
        for backend, result in (build.get("results") or {}).items():
            for field in REPORT_RESULT_FIELDS:
                row[f"{backend}_{field}"] = result.get(field, "")
        rows.append({c: "" if row.get(c) is None else row.get(c, "") for c in columns})
    return columns, rows


def _rounded(value: Any) -> Any:
    return round(value, 4) if isinstance(value, float) else ("" if value is None else value)
