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
from madengine.core.jsonio import MAX_DEPTH, json_problem, read_json_file, too_deep
from madengine.core.values import MAX_TIMEOUT, brief, timeout_seconds, whole_number
from madengine.launch.spec import check_block

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
        value = _python_literal(text, source)
    except (ValueError, RecursionError) as exc:  # valid-looking JSON Python cannot hold
        message, hint = json_problem(exc)
        raise ContextError(message, path=source, hint=hint) from None
    if not isinstance(value, dict):
        raise ContextError(f"must be a dict/object, got {type(value).__name__}", path=source, hint=_EXAMPLE)
    if too_deep(value):
        raise ContextError(f"nested more than {MAX_DEPTH} levels deep", path=source, hint="flatten the structure")
    return value


#: what a Python context literal may hold besides constants: the containers of JSON (and tuples)
_LITERAL_NODES = (ast.Expression, ast.Constant, ast.Dict, ast.List, ast.Tuple, ast.UnaryOp, ast.USub, ast.UAdd,
                  ast.Load)


def _python_literal(text: str, source: str) -> Any:
    """``ast.literal_eval`` of ``text`` (never ``eval``), with messages that say what is wrong."""
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        detail = getattr(exc, "msg", None) or str(exc) or type(exc).__name__
        if "digits" in detail:
            detail = "a number has too many digits"
        raise ContextError(f"not a JSON object or Python dict literal ({detail})", path=source,
                           hint=_EXAMPLE) from None
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            raise ContextError(f"'{node.id}' is not a value", path=source,
                               hint="quote strings, e.g. {'gpu_vendor': 'AMD'}; write True, False, None") from None
        if not isinstance(node, _LITERAL_NODES):
            raise ContextError(f"only literal values are allowed, not {type(node).__name__.lower()} expressions",
                               path=source, hint=_EXAMPLE)
    try:
        value = ast.literal_eval(tree)
    except TypeError:  # {[]: 1}: an unhashable key
        raise ContextError("dict keys must be strings", path=source, hint=_EXAMPLE) from None
    except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
        raise ContextError(f"not a JSON object or Python dict literal ({type(exc).__name__})", path=source,
                           hint=_EXAMPLE) from None
    try:
        return _as_json_value(value, source)
    except RecursionError:
        raise ContextError("nested too deeply to read", path=source, hint="flatten the structure") from None


def _as_json_value(value: Any, source: str) -> Any:
    """A Python literal as the JSON value it stands for (tuples → lists); keys must be strings and
    values JSON's (a set, bytes or a complex number is refused)."""
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                raise ContextError(f"dict keys must be strings, got {brief(key)}", path=source, hint=_EXAMPLE)
        return {key: _as_json_value(item, source) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_as_json_value(item, source) for item in value]
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    raise ContextError(f"{brief(value)} is not a JSON value ({type(value).__name__})", path=source, hint=_EXAMPLE)


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
    for key in ("gpu_vendor", "guest_os"):
        if key in values and not isinstance(values[key], str):
            raise ContextError(f"must be a string, got {brief(values[key])}", path=source, field=key)
    if "gpu_vendor" in values:
        vendor = values["gpu_vendor"].upper()
        if vendor not in VENDORS:
            raise ContextError(f"unknown value {brief(values['gpu_vendor'])}", path=source, field="gpu_vendor",
                               hint="use one of " + ", ".join(VENDORS))
        values["gpu_vendor"] = vendor
    if "guest_os" in values:
        values["guest_os"] = values["guest_os"].upper()
    if "timeout" in values:
        seconds = timeout_seconds(values["timeout"])
        if seconds is None:
            raise ContextError(f"must be 0 (never) to {MAX_TIMEOUT} seconds, got {brief(values['timeout'])}",
                               path=source, field="timeout")
        values["timeout"] = seconds
    for key, least in (("n_gpus", -1), ("system_ngpus", 0)):
        if key in values:
            number = whole_number(values[key])
            if number is None or number < least:
                raise ContextError(f"must be an integer of {least} or more, got {brief(values[key])}", path=source,
                                   field=key)
            values[key] = number
    if "distributed" in values:  # the one place a context's launcher block is read (docs/distributed.md)
        values["distributed"] = check_block(values["distributed"], source=source)
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

    @property
    def distributed(self) -> dict[str, Any]:
        """The context's ``distributed`` block, checked (empty when none)."""
        return self.values.get("distributed") or {}

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
