"""The context keys madengine knows: one table, the one place where a key is added.

Every top-level key of a context must be in :data:`KEYS`, or be named by a ``# CONTEXT`` header of
one of the catalog's Dockerfiles (a catalog's own keys, e.g. ``variant``; any value), or it is an
error naming the nearest known key; a key of the table must hold a value of the key's type. Three
kinds of entry:

* keys madengine reads (``effect=True``);
* blocks owned by a part of madengine (``slurm``, ``distributed``, ``k8s``/``kubernetes``): here only
  "a dict"; what is inside is checked by its owner;
* keys the original madengine accepted that have no effect here (``effect=False``): still accepted,
  so existing contexts keep working, with a warning saying they change nothing.

Free-form values a user wants kept with the run go under :data:`PASS_THROUGH` (``extra``): never
checked, recorded in the ``context`` column of every row, and read by Dockerfile ``# CONTEXT``
headers like any other key.

To add a key: one line in the table (flip ``effect`` when a compatibility key starts to work).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Collection

#: the key that holds free-form values (any JSON object), passed through unchecked
PASS_THROUGH = "extra"
DOCS = "docs/catalog-and-context.md"


@dataclasses.dataclass(frozen=True)
class ContextKey:
    name: str
    kind: type | None  #: dict, list or str; None: any value (a number's own check is in validate_context)
    meaning: str
    effect: bool = True  #: False: accepted for compatibility with the original madengine, changes nothing here


def _table(*keys: ContextKey) -> dict[str, ContextKey]:
    return {key.name: key for key in keys}


_ORIGINAL = "accepted for compatibility with the original madengine"

KEYS: dict[str, ContextKey] = _table(
    # -- detected, and overridable ------------------------------------------------------------------
    ContextKey("gpu_vendor", str, "AMD, NVIDIA or CPU: device options, Dockerfile filter"),
    ContextKey("gpu_architecture", None, "MAD_SYSTEM_GPU_ARCHITECTURE, skip_gpu_arch, perf gpu_architecture"),
    ContextKey("gpu_product_name", None, "MAD_SYSTEM_GPU_PRODUCT_NAME"),
    ContextKey("gpu_driver_version", None, "the GPU driver's version, recorded with every row (context column)"),
    ContextKey("system_ngpus", None, "MAD_SYSTEM_NGPUS; the GPUs runs may use"),
    ContextKey("host_os", None, "recorded with every row"),
    ContextKey("guest_os", str, "Dockerfile filter, MAD_GUEST_OS"),
    # -- read by a run ------------------------------------------------------------------------------
    ContextKey("docker_build_arg", dict, "build arguments"),
    ContextKey("docker_env_vars", dict, "container environment"),
    ContextKey("docker_mounts", dict, "extra mounts"),
    ContextKey("docker_gpus", None, "GPU indices runs may use, e.g. '0,2-4'"),
    ContextKey("n_gpus", None, "every model's n_gpus"),
    ContextKey("n_cpus", None, "CPUs of each parallel run"),
    ContextKey("batch_size", None, "MAD_MODEL_BATCH_SIZE"),
    ContextKey("tools", list, "profiling tools (docs/tools.md)"),
    ContextKey("pre_scripts", list, "scripts before the model (docs/tools.md)"),
    ContextKey("post_scripts", list, "scripts after the model (docs/tools.md)"),
    ContextKey("data", dict, "data.json entries (docs/data-and-credentials.md)"),
    ContextKey(PASS_THROUGH, dict, "free-form values, passed through unchecked and recorded"),
    # -- blocks whose insides their owners check ---------------------------------------------------------
    ContextKey("slurm", dict, "Slurm executor settings (docs/distributed.md)"),
    ContextKey("distributed", dict, "launcher settings (docs/distributed.md): checked by madengine.launch"),
    ContextKey("k8s", dict, "Kubernetes settings of --executor k8s and k8s render (docs/distributed.md): checked "
                            "by madengine.k8s"),
    ContextKey("kubernetes", dict, "Kubernetes settings (another name of k8s)"),
    # -- the original madengine's keys that change nothing here ------------------------------------------
    ContextKey("timeout", None, "use --timeout or a model's timeout", effect=False),
    ContextKey("docker_cpus", None, _ORIGINAL, effect=False),
    ContextKey("gpu_renderDs", None, _ORIGINAL, effect=False),
    ContextKey("numa_balancing", None, _ORIGINAL, effect=False),
    ContextKey("MAD_CONTAINER_IMAGE", str, _ORIGINAL, effect=False),
    ContextKey("MAD_ROCM_PATH", None, _ORIGINAL, effect=False),
    ContextKey("model_args", None, _ORIGINAL, effect=False),
    ContextKey("encapsulate_script", None, _ORIGINAL, effect=False),
    ContextKey("gen_sys_env_details", None, "use --generate-sys-env-details", effect=False),
    ContextKey("generate_sys_env_details", None, "use --generate-sys-env-details", effect=False),
    ContextKey("rocenv_mode", None, _ORIGINAL, effect=False),
    ContextKey("log_error_pattern_scan", None, _ORIGINAL, effect=False),
    ContextKey("log_error_benign_patterns", None, _ORIGINAL, effect=False),
    ContextKey("log_error_patterns", None, _ORIGINAL, effect=False),
    ContextKey("gpus_per_node", None, "use n_gpus, or slurm.gpus_per_node", effect=False),
    ContextKey("gpu_count", None, "use n_gpus", effect=False),
    ContextKey("num_gpus", None, "use n_gpus", effect=False),
    ContextKey("ngpus", None, "use n_gpus", effect=False),
    ContextKey("env_vars", dict, "use docker_env_vars", effect=False),
    ContextKey("vllm", dict, _ORIGINAL, effect=False),
    ContextKey("debug", None, _ORIGINAL, effect=False),
    ContextKey("deploy", None, _ORIGINAL, effect=False),
    ContextKey("deployment_config", dict, _ORIGINAL, effect=False),
    ContextKey("shared_data", None, _ORIGINAL, effect=False),
    ContextKey("launcher", None, _ORIGINAL, effect=False),
    ContextKey("monitor", None, _ORIGINAL, effect=False),
    ContextKey("cleanup_on_failure", None, _ORIGINAL, effect=False),
    ContextKey("skip_perf_collection", None, _ORIGINAL, effect=False),
    ContextKey("SHM_SIZE", None, "use the model's additional_docker_run_options: --shm-size", effect=False),
    ContextKey("multi_node_args", dict, _ORIGINAL, effect=False),
)

#: unknown keys that say what the user meant better than the nearest name does
_MEANT = {
    "docker_options": "docker run options are a model's additional_docker_run_options (models.json), not a context key",
    "docker_run_options": "docker run options are a model's additional_docker_run_options (models.json), not a "
                          "context key",
    "additional_docker_run_options": "a model field of models.json, not a context key",
    "docker_args": "docker run options are a model's additional_docker_run_options (models.json); build "
                   "arguments are docker_build_arg",
}


def nearest_key(name: str, catalog_keys: Collection[str] = ()) -> str | None:
    """The known key ``name`` most likely meant (of the table, or of the catalog's Dockerfile
    headers): the same name in other case, else a close spelling."""
    known_keys = [*KEYS, *(key for key in catalog_keys if key not in KEYS)]
    for known in known_keys:
        if known.lower() == name.lower():
            return known
    import difflib  # only for an unknown key's message

    close = difflib.get_close_matches(name, known_keys, n=1, cutoff=0.6)
    return close[0] if close else None


def unknown_key_hint(name: str, catalog_keys: Collection[str] = ()) -> str:
    """What to do about the unknown key ``name``: the key meant, and where free-form values go."""
    meant = _MEANT.get(name.strip().lower())
    nearest = nearest_key(name, catalog_keys)
    first = meant + "." if meant else f"did you mean {nearest}?" if nearest else f"known keys: {DOCS}."
    return f"{first} Free-form values go under '{PASS_THROUGH}'"


def without_effect(values: dict[str, Any]) -> list[str]:
    """The keys of ``values`` that are accepted but change nothing here, in the order given."""
    return [name for name in values if name in KEYS and not KEYS[name].effect]
