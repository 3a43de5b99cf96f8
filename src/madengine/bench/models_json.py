"""models.json entries with ``"onnx"``: benchmark the file through the harness in the model's run.

``{"name": "mlp", "onnx": "models/mlp.onnx", "dockerfile": "docker/onnx", "tags": [...]}`` (no
``scripts`` needed). The runner calls :func:`onnx_step`, which copies the portable harness
(:mod:`madengine.bench.harness`) and the model into the work folder and returns the model step
``python3 -m madengine_onnx_harness onnx_model/<file> ...``. It runs inside the container (which
needs numpy and onnxruntime) or, with the local executor, on the host with madengine's own Python.
The harness prints ``performance: <value> <metric>`` (what the runner records) and writes
``onnx_bench.json``, which a finalizer turns into the same extra columns ``madengine bench`` writes.

Optional entry fields: ``onnx_shapes`` (input → dims, may hold ``$axes``), ``onnx_axes``
(axis → size), ``onnx_provider`` (default ``cpu``), ``onnx_sha256`` (checked before the run). Any
other harness option goes in ``args`` (``"--iterations 200 --metric p50"``); tag configs such
as ``batch-size=8`` arrive there as ``--batch-size 8``.
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any, Callable

from madengine.bench.columns import bench_columns
from madengine.bench.harness.engine import sha256_file
from madengine.bench.suite import axes_from, providers_from, shapes_from
from madengine.core.errors import ExecutionError

HARNESS_FOLDER = "madengine_onnx_harness"
MODEL_FOLDER = "onnx_model"
RESULT_FILE = "onnx_bench.json"
PROFILE_FOLDER = "onnx_profile"
HARNESS_SOURCE = Path(__file__).resolve().parent / "harness"
#: the shared statistics the harness imports (stdlib only), copied beside it: see bench/harness/stats.py
STATS_SOURCE = Path(__file__).resolve().parents[1] / "stats"
PORTABLE_STATS = ("distributions.py", "summary.py")


def onnx_step(spec: Any, root: Path, executor_name: str) -> Any:
    """The model step that benchmarks ``spec.model.onnx`` (and the files it needs in the work folder)."""
    from madengine.core.spec import Step

    model = spec.model
    source = Path(root) / model.onnx
    if not source.is_file():
        raise ExecutionError(f"model '{model.name}': onnx file {model.onnx} not found")
    expected = str(model.extra.get("onnx_sha256", "")).strip().lower()
    if expected:
        actual = sha256_file(source)
        if actual != expected:
            raise ExecutionError(f"model '{model.name}': sha256 mismatch for {model.onnx}: expected {expected}, "
                                 f"file has {actual}")
    options = harness_options(model)
    copy_harness(spec.workdir / HARNESS_FOLDER)
    (spec.workdir / MODEL_FOLDER).mkdir(parents=True, exist_ok=True)
    shutil.copy2(source, spec.workdir / MODEL_FOLDER / source.name)
    python = sys.executable if executor_name == "local" else "python3"
    argv = [python, "-m", HARNESS_FOLDER, f"{MODEL_FOLDER}/{source.name}", "--json-out", RESULT_FILE,
            "--artifacts", PROFILE_FOLDER, *options]
    spec.collect += [RESULT_FILE, f"{PROFILE_FOLDER}/*"]
    spec.finalizers.append(stats_finalizer(spec.workdir / RESULT_FILE))
    return Step("onnx-bench", argv, is_model=True)


def harness_options(model: Any) -> list[str]:
    """Harness flags from the entry's ``onnx_*`` fields, then its ``args`` (which win on conflicts)."""
    source, where = model.source or "models.json", f"model '{model.name}'"
    extra = model.extra
    options: list[str] = []
    providers = providers_from(extra.get("onnx_provider"), source, where)
    if len(providers) > 1:
        raise ExecutionError(f"{where}: onnx_provider names one provider, got {', '.join(providers)}")
    if providers:
        options += ["--provider", providers[0]]
    shapes_value = extra.get("onnx_shapes") or {}
    if not isinstance(shapes_value, dict):
        raise ExecutionError(f"{where}: onnx_shapes must map input names to dims")
    axes_value = dict(shapes_value.get("$axes") or {})
    axes_value.update(extra.get("onnx_axes") or {})
    for name, dims in shapes_from({k: v for k, v in shapes_value.items() if k != "$axes"}, source, where).items():
        options += ["--shape", f"{name}={','.join(str(d) for d in dims)}"]
    for name, size in axes_from(axes_value, source, where).items():
        options += ["--axes", f"{name}={size}"]
    try:
        options += shlex.split(model.run_args)
    except ValueError as exc:
        raise ExecutionError(f"{where}: args cannot be parsed ({exc})") from None
    return options


def copy_harness(target: Path) -> None:
    """The portable harness package (its .py files only) into ``target``, with the shared
    statistics modules it imports (``madengine.stats.summary`` and ``distributions``)."""
    target.mkdir(parents=True, exist_ok=True)
    for path in HARNESS_SOURCE.glob("*.py"):
        shutil.copy2(path, target / path.name)
    for name in PORTABLE_STATS:
        shutil.copy2(STATS_SOURCE / name, target / name)


def stats_finalizer(result_file: Path) -> Callable[[Any], dict[str, Any]]:
    """A finalizer turning the harness's JSON into perf.csv extra columns (none when it wrote none)."""

    def finalize(spec: Any) -> dict[str, Any]:
        try:
            result = json.loads(result_file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise ExecutionError(f"unreadable {result_file.name}: {exc}") from None
        return bench_columns(result, cache="off")

    return finalize
