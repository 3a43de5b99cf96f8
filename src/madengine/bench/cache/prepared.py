"""Content-hash cache of prepared models.

A prepared model is what ONNX Runtime makes of an ``.onnx`` file before running it: the
graph-optimized copy (``SessionOptions.optimized_model_filepath``) on the CPU provider, or
TensorRT's engine cache folder. GPU providers' optimized graphs are not cached: ORT places
memory-copy nodes and device-specific fusions in them, and a copy reloaded without optimization
could run differently from a fresh session, which would make a cache hit change the figures. The key
hashes everything the prepared form depends on: the model's sha256, the onnxruntime version, the
provider, the optimization level, the CPU model and machine type (ORT warns that level-ALL
graphs may hold hardware-specific layouts), and the precision when it is not f32 (a TensorRT fp16
engine is not the f32 one). Nothing else (shapes, threads, iterations) changes
the optimized graph, so it is not in the key.

Layout: ``<cache>/onnx/<key>.onnx`` + ``<key>.json`` (what the key was made of);
``<cache>/tensorrt/<key>/`` for TensorRT engines (``<cache>``: :func:`madengine.bench.cache.root.cache_root`).
A copy is written under a temporary name and renamed once the benchmark that produced it
succeeded, so a half-written file is never reused; deleting the folder is always safe.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Mapping

from madengine.bench.cache.root import cache_root
from madengine.core.clock import utc_now

FORMAT_VERSION = 1
OPTIMIZATION_LEVEL = "ORT_ENABLE_ALL"
SAVABLE_PROVIDERS = ("CPUExecutionProvider",)
ENGINE_CACHE_PROVIDERS = ("TensorrtExecutionProvider",)


@dataclasses.dataclass
class Prepared:
    """The file to benchmark and how it came from the cache.

    ``status``: ``hit`` (the cached optimized copy is used), ``miss`` (the copy is written while
    the session is created and kept if the benchmark succeeds), ``engine-cache`` (TensorRT keeps
    its engines in the cache folder), ``off`` (no cache: disabled or not possible for the provider).
    """

    path: Path
    status: str
    key: str = ""
    preoptimized: bool = False
    optimized_output: Path | None = None
    provider_options: dict[str, str] = dataclasses.field(default_factory=dict)
    final_path: Path | None = None
    metadata: dict[str, str] = dataclasses.field(default_factory=dict)


def cache_key(model_sha256: str, ort_version: str, provider: str, cpu_model: str, machine: str,
              precision: str = "f32") -> tuple[str, dict]:
    """The key and the values it hashes (f32 keys are those made before precisions were asked for)."""
    values = {"format": str(FORMAT_VERSION), "model_sha256": model_sha256, "ort_version": ort_version,
              "provider": provider, "optimization": OPTIMIZATION_LEVEL, "cpu_model": cpu_model, "machine": machine}
    if precision != "f32":
        values["precision"] = precision
    text = json.dumps(values, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32], values


def prepare(model_path: Path, model_sha256: str, provider: str, ort_version: str, cpu_model: str, machine: str,
            environ: Mapping[str, str], enabled: bool = True, precision: str = "f32") -> Prepared:
    """What to benchmark for ``model_path`` on ``provider``: a cached copy, or the file plus where to save one."""
    if not enabled:
        return Prepared(path=model_path, status="off")
    key, values = cache_key(model_sha256, ort_version, provider, cpu_model, machine, precision)
    root = cache_root(environ)
    if provider in ENGINE_CACHE_PROVIDERS:
        folder = root / "tensorrt" / key
        folder.mkdir(parents=True, exist_ok=True)
        return Prepared(path=model_path, status="engine-cache", key=key,
                        provider_options={"trt_engine_cache_enable": "True", "trt_engine_cache_path": str(folder)})
    if provider not in SAVABLE_PROVIDERS:
        return Prepared(path=model_path, status="off")
    folder = root / "onnx"
    cached, meta = folder / f"{key}.onnx", folder / f"{key}.json"
    if cached.is_file() and _metadata_matches(meta, values):
        return Prepared(path=cached, status="hit", key=key, preoptimized=True)
    folder.mkdir(parents=True, exist_ok=True)
    temporary = folder / f"{key}.tmp-{os.getpid()}.onnx"
    return Prepared(path=model_path, status="miss", key=key, optimized_output=temporary, final_path=cached,
                    metadata=values)


def commit(prepared: Prepared) -> None:
    """Keep the optimized copy a successful benchmark wrote (atomic rename)."""
    if prepared.status != "miss" or prepared.optimized_output is None or prepared.final_path is None:
        return
    if not prepared.optimized_output.is_file():
        return
    os.replace(prepared.optimized_output, prepared.final_path)
    meta = dict(prepared.metadata, created_at=utc_now())
    temporary = prepared.final_path.with_suffix(f".json.tmp-{os.getpid()}")
    temporary.write_text(json.dumps(meta, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(temporary, prepared.final_path.with_suffix(".json"))


def discard(prepared: Prepared) -> None:
    """Forget a copy that may be bad: a failed miss's temporary file, or a hit that would not load."""
    paths = []
    if prepared.optimized_output is not None:
        paths.append(prepared.optimized_output)
    if prepared.status == "hit":
        paths += [prepared.path, prepared.path.with_suffix(".json")]
    for path in paths:
        try:
            path.unlink()
        except FileNotFoundError:
            pass


def _metadata_matches(meta: Path, values: dict) -> bool:
    try:
        stored = json.loads(meta.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(stored, dict) and all(stored.get(k) == v for k, v in values.items())
