"""The run-time context: detected host values overlaid with user overrides.

Order (later wins): detected values → ``--additional-context-file`` (JSON) →
``--additional-context`` (JSON or a Python dict literal, parsed with ``json`` then
``ast.literal_eval``; never ``eval``). Nested dicts merge key by key.
"""

from __future__ import annotations

import ast
import copy
import json
import re
from pathlib import Path
from typing import Any, Mapping

from madengine.context.detect import VENDORS, detect_gpus, detect_host_os
from madengine.core.errors import ContextError
from madengine.core.jsonio import read_json_file

DEFAULT_GUEST_OS = "UBUNTU"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DICT_KEYS = ("docker_build_arg", "docker_env_vars", "docker_mounts", "slurm", "data")
_LIST_KEYS = ("tools", "pre_scripts", "post_scripts")
_EXAMPLE = "e.g. --additional-context '{\"gpu_vendor\": \"AMD\", \"guest_os\": \"UBUNTU\"}'"


def parse_context_string(text: str, *, source: str = "--additional-context") -> dict[str, Any]:
    """Parse a context given on the command line: JSON first, then a Python literal."""
    text = (text or "").strip()
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
            detail = getattr(exc, "msg", None) or str(exc) or type(exc).__name__
            raise ContextError(f"not a JSON object or Python dict literal ({detail})", path=source,
                               hint=_EXAMPLE) from None
    if not isinstance(value, dict):
        raise ContextError(f"must be a dict/object, got {type(value).__name__}", path=source, hint=_EXAMPLE)
    return value


def load_context_file(path: str | Path) -> dict[str, Any]:
    shown = str(path)
    value = read_json_file(path, error=ContextError, hint="check --additional-context-file")
    if not isinstance(value, dict):
        raise ContextError(f"must hold a JSON object, got {type(value).__name__}", path=shown)
    return value


def deep_merge(base: dict[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    """A new dict: ``base`` with ``overlay`` merged in, nested dicts key by key (overlay wins)."""
    merged = copy.deepcopy(base)
    for key, value in overlay.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def validate_context(values: dict[str, Any], source: str = "context") -> dict[str, Any]:
    """Check the types of the keys madengine reads; normalise vendor/OS names. Returns ``values``."""
    for key in _DICT_KEYS:
        if key in values and not isinstance(values[key], dict):
            raise ContextError(f"must be a dict, got {type(values[key]).__name__}", path=source, field=key)
    for key in _LIST_KEYS:
        if key in values and not isinstance(values[key], list):
            raise ContextError(f"must be a list, got {type(values[key]).__name__}", path=source, field=key)
    for key in ("docker_build_arg", "docker_env_vars"):
        table = values.get(key, {})
        for name, value in list(table.items()):
            if not _ENV_NAME.match(str(name)):
                raise ContextError(f"'{name}' is not a valid variable name", path=source, field=key)
            if isinstance(value, (dict, list)):
                raise ContextError(f"value of '{name}' must be a string or number", path=source, field=key)
            table[name] = "" if value is None else str(value)
    if "gpu_vendor" in values:
        vendor = str(values["gpu_vendor"]).upper()
        if vendor not in VENDORS:
            raise ContextError(f"unknown value '{values['gpu_vendor']}'", path=source, field="gpu_vendor",
                               hint="use one of " + ", ".join(VENDORS))
        values["gpu_vendor"] = vendor
    if "guest_os" in values:
        values["guest_os"] = str(values["guest_os"]).upper()
    if "timeout" in values:
        try:
            values["timeout"] = int(values["timeout"])
        except (TypeError, ValueError):
            raise ContextError("must be a number of seconds", path=source, field="timeout") from None
    for key in ("n_gpus", "system_ngpus"):
        if key in values:
            try:
                values[key] = int(values[key])
            except (TypeError, ValueError):
                raise ContextError("must be an integer", path=source, field=key) from None
    return values


class Context:
    """Merged context values with typed accessors for the keys madengine itself reads."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self.values: dict[str, Any] = dict(values)
        self.values.setdefault("docker_build_arg", {})
        self.values.setdefault("docker_env_vars", {})
        self.values.setdefault("docker_mounts", {})

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def __contains__(self, key: str) -> bool:
        return key in self.values

    @property
    def gpu_vendor(self) -> str:
        return self.values.get("gpu_vendor", "CPU")

    @property
    def gpu_architecture(self) -> str:
        return str(self.values.get("gpu_architecture", ""))

    @property
    def system_ngpus(self) -> int:
        return int(self.values.get("system_ngpus", 0))

    @property
    def guest_os(self) -> str:
        return self.values.get("guest_os", DEFAULT_GUEST_OS)

    @property
    def docker_build_arg(self) -> dict[str, str]:
        return self.values["docker_build_arg"]

    @property
    def docker_env_vars(self) -> dict[str, str]:
        return self.values["docker_env_vars"]

    @property
    def docker_mounts(self) -> dict[str, str]:
        return self.values["docker_mounts"]

    def summary(self) -> dict[str, Any]:
        """The values that describe where a result was measured (recorded with every row)."""
        keys = ("gpu_vendor", "gpu_architecture", "gpu_product_name", "system_ngpus", "host_os", "guest_os")
        return {k: self.values[k] for k in keys if k in self.values}


def detected_values() -> dict[str, Any]:
    gpus = detect_gpus()
    return {
        "gpu_vendor": gpus.vendor,
        "gpu_architecture": gpus.architecture,
        "gpu_product_name": gpus.product_name,
        "system_ngpus": gpus.count,
        "host_os": detect_host_os(),
        "guest_os": DEFAULT_GUEST_OS,
    }


def build_context(*, context_file: str | Path | None = None, context_string: str | None = None,
                  detect: bool = True) -> Context:
    """Detected values, then the context file, then the context string (later wins)."""
    values: dict[str, Any] = detected_values() if detect else {"guest_os": DEFAULT_GUEST_OS}
    if context_file:
        values = deep_merge(values, validate_context(load_context_file(context_file), str(context_file)))
    if context_string:
        values = deep_merge(values, validate_context(parse_context_string(context_string)))
    return Context(validate_context(values))
