"""What tells two run rows apart beyond the model: the software inside the image, the thread
settings the model saw, and how busy the host was.

* **Framework versions** come from one light probe per image: a short container (or, for the local
  executor, the host's ``python3``) runs :data:`PROBE_SCRIPT`, which imports nothing heavy: Python's
  version, the installed distributions' versions from their metadata (torch, onnxruntime, ...),
  torch's CUDA/HIP build read from ``torch/version.py`` as text, and the ROCm/CUDA toolkits from
  their version files. An image id names immutable content, so its answer is kept in the cache
  folder (``<cache>/probes/``) and paid for once per image, not per run.
* **Thread settings**: the threading variables (``OMP_NUM_THREADS`` and the like) in the
  environment the model step got, and the CPUs it could use.
* **Host load** at the start and end of the model's run: :func:`madengine.core.host.runnable_per_cpu`.
* **Precision** (the ``training_precision: <name>`` line a model prints) and **what each rank saw**
  (a ``rank_settings: {json}`` line of each process) are read with its figure: :mod:`madengine.results.verdict`.

A row's note (``warnings`` column) for a host busier than its CPUs is made here too.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Mapping

from madengine.core.spec import RunSpec
from madengine.execution.engine import Engine, EngineError
from madengine.execution.streams import deadline

#: the environment variables that set how many threads (and where) numeric libraries use
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "BLIS_NUM_THREADS",
                    "NUMEXPR_NUM_THREADS", "NUMEXPR_MAX_THREADS", "VECLIB_MAXIMUM_THREADS",
                    "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_PROC_BIND", "OMP_PLACES",
                    "OMP_DYNAMIC", "OMP_WAIT_POLICY", "KMP_AFFINITY", "KMP_BLOCKTIME", "GOMP_CPU_AFFINITY",
                    "MKL_DYNAMIC", "MKL_THREADING_LAYER")

#: above this many runnable tasks per CPU (at the start or end of a run) a row says the host was busy
BUSY_LOAD = 1.0

#: the distributions whose versions a row records when the image has them (metadata only: no imports)
DISTRIBUTIONS = ("torch", "torchvision", "torchaudio", "triton", "pytorch-triton-rocm", "onnxruntime",
                 "onnxruntime-gpu", "onnxruntime-rocm", "onnxruntime-openvino", "openvino", "tensorflow",
                 "tensorflow-rocm", "jax", "jaxlib", "transformers", "deepspeed", "vllm", "apache-tvm", "numpy")

#: runs inside the image (any Python 3.8+): prints one JSON line, the versions found and the folders
#: Python looks for packages in; imports no framework (torch's CUDA/HIP build is read from its
#: version.py as text)
PROBE_SCRIPT = r"""
import glob, json, os, platform, re, sys
from importlib import metadata, util
found = {"python": platform.python_version()}
for name in sys.argv[1].split(","):
    try:
        found[name] = metadata.version(name)
    except Exception:
        pass
if "torch" in found:
    try:
        spec = util.find_spec("torch")
        text = open(os.path.join(os.path.dirname(spec.origin), "version.py"), encoding="utf-8").read()
        for key in ("cuda", "hip"):
            m = re.search(r"^%s\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]" % key, text, re.M)
            if m:
                found["torch_" + key] = m.group(1)
    except Exception:
        pass
def first_line(pattern):
    for path in sorted(glob.glob(pattern)):
        try:
            return open(path, encoding="utf-8", errors="replace").read().strip().splitlines()[0]
        except (OSError, IndexError):
            pass
    return ""
rocm = first_line("/opt/rocm/.info/version") or first_line("/opt/rocm-*/.info/version")
if rocm:
    found["rocm"] = rocm
try:
    found["cuda"] = json.load(open("/usr/local/cuda/version.json"))["cuda"]["version"]
except Exception:
    text = first_line("/usr/local/cuda/version.txt")
    if text:
        found["cuda"] = text.split()[-1]
if "cuda" not in found and os.environ.get("CUDA_VERSION"):
    found["cuda"] = os.environ["CUDA_VERSION"]
if os.environ.get("CUDNN_VERSION"):
    found["cudnn"] = os.environ["CUDNN_VERSION"]
try:
    for line in open("/etc/os-release", encoding="utf-8", errors="replace"):
        if line.startswith("PRETTY_NAME="):
            found["os"] = line.split("=", 1)[1].strip().strip('"')
except OSError:
    pass
paths = [p for p in sys.path if p and os.path.isdir(p)]
print(json.dumps({"versions": found, "paths": paths}, sort_keys=True))
"""

#: a probe that has not answered by then is killed (its row just has no versions)
PROBE_TIMEOUT = 60.0
_VERSION_TEXT = re.compile(r"^[\w.+\- ()/:,]{1,80}$")


def probe_argv(python: str = "python3") -> list[str]:
    """The probe's command: the script and the distributions it looks for, as arguments (no shell)."""
    return [python, "-c", PROBE_SCRIPT, ",".join(DISTRIBUTIONS)]


def parse_probe_output(text: str) -> tuple[dict[str, str], list[str]]:
    """The versions and package folders of the probe's last JSON line; text that is not one gives
    nothing (a probe that failed never fails a run). Versions are short strings, anything else is
    dropped."""
    for line in reversed(text.strip().splitlines()):
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and isinstance(data.get("versions"), dict):
            versions = {str(k): v for k, v in sorted(data["versions"].items())
                        if isinstance(v, str) and _VERSION_TEXT.match(v)}
            paths = data.get("paths")
            return versions, [p for p in paths if isinstance(p, str)] if isinstance(paths, list) else []
    return {}, []


def thread_settings(environment: Mapping[str, str], cpus: int | None) -> dict[str, Any]:
    """The threading variables set in the model's environment, and the CPUs it could use."""
    settings: dict[str, Any] = {name: environment[name] for name in THREAD_VARIABLES if name in environment}
    if cpus:
        settings["cpus"] = cpus
    return settings


def cpu_list_size(text: str) -> int:
    """How many CPUs a cpuset list names: ``'0-3,8'`` → 5 (0 for text that is not one)."""
    count = 0
    for part in str(text).split(","):
        low, sep, high = part.strip().partition("-")
        if not low.isdigit() or (sep and not high.isdigit()):
            return 0
        count += int(high) - int(low) + 1 if sep else 1
    return count


def rounded_load(load: float | None) -> float | None:
    """A ``host_load_start``/``host_load_end`` cell: two decimals (None when unknown)."""
    return None if load is None else round(load, 2)


def load_notes(start: float | None, end: float | None) -> list[str]:
    """A note when the host was busier than its CPUs when the model's run started or ended."""
    busy = [(when, value) for when, value in (("start", start), ("end", end)) if value is not None and
            value > BUSY_LOAD]
    if not busy:
        return []
    said = " and ".join(f"{value:.2f} at its {when}" for when, value in busy)
    return [f"host busier than its CPUs: {said} (runnable tasks per CPU, other than madengine's): "
            "the figure may be lower than on a quiet host"]


class ProbeCache:
    """Probe answers by key: in memory for this run, on disk (``<cache>/probes``, one JSON file per
    key) for later ones. An image id names immutable content, so its answer holds for good; the
    local interpreter's answer carries the modification times of its package folders and holds
    while they are unchanged (a ``pip install`` changes them). Thread-safe: a key being probed by
    one ``--parallel`` slot is waited for by another."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self._documents: dict[str, dict[str, Any]] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    def lock(self, key: str) -> threading.Lock:
        with self._lock:
            return self._locks.setdefault(key, threading.Lock())

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored ``{"versions": ..., "stamps": ...}`` of ``key`` (None: never probed)."""
        if key in self._documents:
            return self._documents[key]
        path = self._path(key)
        try:
            document = json.loads(path.read_text(encoding="utf-8")) if path is not None else None
        except (OSError, ValueError):
            return None
        if not isinstance(document, dict) or not isinstance(document.get("versions"), dict):
            return None
        self._documents[key] = document
        return document

    def put(self, key: str, versions: dict[str, str], stamps: dict[str, int] | None = None) -> None:
        document = {"versions": versions, "stamps": stamps or {}}
        self._documents[key] = document
        path = self._path(key)
        if path is None or not versions:  # a failed probe is tried again next run
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
            temporary.write_text(json.dumps(document, sort_keys=True) + "\n", encoding="utf-8")
            temporary.replace(path)
        except OSError:
            pass  # the cache is an optimisation: the next run probes again

    def _path(self, key: str) -> Path | None:
        if self.folder is None or not key:
            return None
        return self.folder / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".json")


@dataclasses.dataclass
class Probe:
    """What an executor found out about the software and threads of one model's run."""

    frameworks: dict[str, str] = dataclasses.field(default_factory=dict)
    threads: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: seconds the probe cost (0 when its answer was cached)
    seconds: float = 0.0
    cached: bool = False


# -- the docker executor's probe ------------------------------------------------------------------

def probe_docker(engine: Engine, spec: RunSpec, create_args: Mapping[str, Any], cache: ProbeCache,
                 labels: Mapping[str, str]) -> Probe:
    """The image's versions (cached by image id, else one short container) and the thread settings
    of the container ``create_args`` describes (the image's environment under the container's)."""
    image = engine.inspect_image(spec.image)
    environment = _env_dict((image.get("Config") or {}).get("Env") or [])
    environment.update(_env_dict(create_args.get("Env") or []))
    environment.update(_model_step_env(spec))
    threads = thread_settings(environment, _container_cpus(create_args.get("HostConfig") or {},
                                                           local=isinstance(engine.address, str)))
    image_id = image.get("Id", "")
    with cache.lock(image_id):
        known = cache.get(image_id)
        if known is not None:
            return Probe(dict(known["versions"]), threads, 0.0, cached=True)
        started = time.monotonic()
        versions = _run_probe_container(engine, image_id, labels)
        cache.put(image_id, versions)
    return Probe(versions, threads, time.monotonic() - started)


def _run_probe_container(engine: Engine, image_id: str, labels: Mapping[str, str]) -> dict[str, str]:
    """One short container of the image running the probe, removed at once: no network, the
    image's own user, its entrypoint bypassed."""
    name = f"madengine_probe_{image_id.split(':')[-1][:12]}_{uuid.uuid4().hex[:6]}"
    argv = probe_argv()
    config = {"Image": image_id, "Entrypoint": argv[:1], "Cmd": argv[1:], "Labels": dict(labels),
              "NetworkDisabled": True, "HostConfig": {"LogConfig": {"Type": "json-file", "Config": {}},
                                                      "NetworkMode": "none"}}
    container = engine.create_container(name, config)
    try:
        engine.start(container)
        with deadline(PROBE_TIMEOUT, lambda: _quietly(lambda: engine.kill(container))):
            # the engine itself must end the output by then too (a hung engine is EngineTimeout)
            output = b"".join(engine.logs(container, time.monotonic() + PROBE_TIMEOUT + 15)).decode("utf-8", "replace")
    except EngineError:  # no python3 in the image, or it could not start
        return {}
    finally:
        _quietly(lambda: engine.remove(container))
    return parse_probe_output(output)[0]


def _quietly(action: Any) -> None:
    try:
        action()
    except (EngineError, OSError):
        pass


def _env_dict(pairs: list[str]) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in pairs if "=" in pair)


def _model_step_env(spec: RunSpec) -> dict[str, str]:
    return next((dict(step.env) for step in spec.steps if step.is_model), {})


def _container_cpus(host_config: Mapping[str, Any], *, local: bool) -> float | int | None:
    """The CPUs a container may use: its cpuset, its CPU quota, else the host's (known only when
    the engine runs on this machine)."""
    if host_config.get("CpusetCpus"):
        return cpu_list_size(host_config["CpusetCpus"]) or None
    if host_config.get("NanoCpus"):
        return _whole(host_config["NanoCpus"] / 1e9)
    if host_config.get("CpuQuota") and host_config.get("CpuPeriod"):
        return _whole(host_config["CpuQuota"] / host_config["CpuPeriod"])
    return os.cpu_count() if local else None


def _whole(value: float) -> float | int:
    return int(value) if float(value).is_integer() else round(value, 2)


# -- the local executor's probe ---------------------------------------------------------------------

#: variables that change where the host's Python finds packages (part of the local cache key)
_PATH_VARIABLES = ("PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE", "PYTHONNOUSERSITE", "PYTHONSAFEPATH")


def probe_local(python: str | None, environment: Mapping[str, str], cpus: int | None, cache: ProbeCache) -> Probe:
    """The versions the host's ``python3`` finds (cached while its package folders are unchanged)
    and the thread settings of ``environment``."""
    threads = thread_settings(environment, cpus)
    if not python:
        return Probe({}, threads)
    key = json.dumps([os.path.realpath(python), *(environment.get(name, "") for name in _PATH_VARIABLES)])
    with cache.lock(key):
        known = cache.get(key)
        if known is not None and known.get("stamps") and _stamps(list(known["stamps"])) == known["stamps"]:
            return Probe(dict(known["versions"]), threads, 0.0, cached=True)
        started = time.monotonic()
        try:
            done = subprocess.run(probe_argv(python), env=dict(environment), capture_output=True, text=True,
                                  timeout=PROBE_TIMEOUT, stdin=subprocess.DEVNULL)
            versions, paths = parse_probe_output(done.stdout)
        except (OSError, subprocess.TimeoutExpired):
            versions, paths = {}, []
        cache.put(key, versions, _stamps([os.path.realpath(python), *paths]))
    return Probe(versions, threads, time.monotonic() - started)


def _stamps(paths: list[str]) -> dict[str, int]:
    """The modification time (ns) of each path, -1 for one that is gone."""
    stamps = {}
    for path in paths:
        try:
            stamps[path] = os.stat(path).st_mtime_ns
        except OSError:
            stamps[path] = -1
    return stamps
