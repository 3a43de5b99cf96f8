"""The run-time context: detected host values overlaid with user overrides.

Order (later wins): detected values → ``--additional-context-file`` (JSON) →
``--additional-context`` (JSON or a Python dict literal, parsed with ``json`` then
``ast.literal_eval``; never ``eval``). Nested dicts merge key by key. Every key must be one of
:mod:`madengine.context.keys` or one the catalog's Dockerfile ``# CONTEXT`` headers name
(:class:`~madengine.context.dockerfiles.HeaderKeys`); free-form values go under ``extra``.
"""

from __future__ import annotations

import ast
import copy
import json
import re
from pathlib import Path
from typing import Any, Collection, Mapping

from madengine.context.detect import VENDORS, detect_gpus, detect_host_os
from madengine.context.keys import KEYS, PASS_THROUGH, unknown_key_hint, without_effect
from madengine.core.errors import ContextError
from madengine.core.jsonio import MAX_DEPTH, json_problem, read_json_file, too_deep
from madengine.core.values import MAX_TIMEOUT, brief, timeout_seconds, whole_number
from madengine.launch.spec import check_block

DEFAULT_GUEST_OS = "UBUNTU"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
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


def validate_context(values: dict[str, Any], source: str = "context",
                     catalog_keys: Collection[str] = ()) -> dict[str, Any]:
    """Check that every key is known (:mod:`madengine.context.keys`, or named by a Dockerfile header
    of the catalog: ``catalog_keys``) and holds a value of its type; normalise vendor/OS names,
    numbers and the GPU list. Returns ``values``."""
    for key, value in values.items():
        _check_key(key, value, source, catalog_keys)
    _check_variables(values, source)
    _check_names(values, source)
    _check_numbers(values, source)
    if "docker_gpus" in values:
        parse_gpu_list(values["docker_gpus"], source)
        values["docker_gpus"] = str(values["docker_gpus"]).strip()
    if "distributed" in values:  # the one place a context's launcher block is read (docs/distributed.md)
        values["distributed"] = check_block(values["distributed"], source=source)
    return values


_TYPE_NAMES = {dict: "a dict", list: "a list", str: "a string"}


def _check_key(key: str, value: Any, source: str, catalog_keys: Collection[str]) -> None:
    known = KEYS.get(key)
    if known is None:
        if key in catalog_keys:  # a catalog's own key: any value (a header compares it as it is)
            return
        raise ContextError("unknown context key", path=source, field=key, hint=unknown_key_hint(key, catalog_keys))
    if known.kind is not None and not isinstance(value, known.kind):
        got = brief(value) if known.kind is str else type(value).__name__
        raise ContextError(f"must be {_TYPE_NAMES[known.kind]}, got {got}", path=source, field=key)


def _check_variables(values: dict[str, Any], source: str) -> None:
    """``docker_build_arg`` and ``docker_env_vars``: valid names, scalar values (made strings)."""
    for key in ("docker_build_arg", "docker_env_vars"):
        table = values.get(key, {})
        for name, value in list(table.items()):
            if not _ENV_NAME.match(str(name)):
                raise ContextError(f"'{name}' is not a valid variable name", path=source, field=key)
            if isinstance(value, (dict, list)):
                raise ContextError(f"value of '{name}' must be a string or number", path=source, field=key)
            table[name] = "" if value is None else str(value)


def _check_names(values: dict[str, Any], source: str) -> None:
    if "gpu_vendor" in values:
        vendor = values["gpu_vendor"].upper()
        if vendor not in VENDORS:
            raise ContextError(f"unknown value {brief(values['gpu_vendor'])}", path=source, field="gpu_vendor",
                               hint="use one of " + ", ".join(VENDORS))
        values["gpu_vendor"] = vendor
    if "guest_os" in values:
        values["guest_os"] = values["guest_os"].upper()


def _check_numbers(values: dict[str, Any], source: str) -> None:
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


#: the highest GPU index a ``docker_gpus`` list may name (a typo like 0-99999999 must not fill memory)
MAX_GPU_INDEX = 4095


def parse_gpu_list(text: Any, source: str = "context") -> list[int]:
    """``'0,2-4'`` → ``[0, 2, 3, 4]`` (an int is one index); anything else is a :class:`ContextError`
    naming ``docker_gpus``."""
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        raise ContextError(f"must be a GPU list such as '0,2-4', got {brief(text)}", path=source,
                           field="docker_gpus")
    ids: set[int] = set()
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        low, sep, high = part.partition("-")
        first, last = _gpu_index(low), _gpu_index(high) if sep else _gpu_index(low)
        if first is None or last is None or first > last:
            raise ContextError(f"bad GPU list {brief(text)}", path=source, field="docker_gpus",
                               hint=f"write indices 0 to {MAX_GPU_INDEX} and ranges low-high, e.g. '0,2-4'")
        ids.update(range(first, last + 1))
    return sorted(ids)


def _gpu_index(text: str) -> int | None:
    text = text.strip()
    number = whole_number(text) if text[:1] not in "+-" else None
    return number if number is not None and 0 <= number <= MAX_GPU_INDEX else None


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
        """The values that describe where a result was measured, and the user's free-form ``extra``
        values (recorded with every row)."""
        keys = ("gpu_vendor", "gpu_architecture", "gpu_product_name", "gpu_driver_version", "system_ngpus", "host_os",
                "guest_os", PASS_THROUGH)
        return {k: self.values[k] for k in keys if k in self.values}

    def warnings(self) -> list[str]:
        """One line per key given that changes nothing here (accepted for compatibility)."""
        return [f"context key '{name}' has no effect here ({KEYS[name].meaning}); see docs/catalog-and-context.md"
                for name in without_effect(self.values)]


def detected_values() -> dict[str, Any]:
    gpus = detect_gpus()
    return {
        "gpu_vendor": gpus.vendor,
        "gpu_architecture": gpus.architecture,
        "gpu_product_name": gpus.product_name,
        "gpu_driver_version": gpus.driver_version,
        "system_ngpus": gpus.count,
        "host_os": detect_host_os(),
        "guest_os": DEFAULT_GUEST_OS,
    }


def user_values(context_file: str | Path | None, context_string: str | None,
                catalog_keys: Collection[str] = ()) -> dict[str, Any]:
    """The context the user gave: the file, then the string (later wins), each checked."""
    values: dict[str, Any] = {}
    if context_file:
        values = deep_merge(values, validate_context(load_context_file(context_file), str(context_file),
                                                     catalog_keys))
    if context_string:
        values = deep_merge(values, validate_context(parse_context_string(context_string), "--additional-context",
                                                     catalog_keys))
    return values


def build_context(*, context_file: str | Path | None = None, context_string: str | None = None,
                  detect: bool = True, catalog_keys: Collection[str] = ()) -> Context:
    """Detected values, then the context file, then the context string (later wins);
    ``catalog_keys``: the keys the catalog's Dockerfile headers name (valid context keys too)."""
    values: dict[str, Any] = detected_values() if detect else {"guest_os": DEFAULT_GUEST_OS}
    values = deep_merge(values, user_values(context_file, context_string, catalog_keys))
    return Context(validate_context(values, catalog_keys=catalog_keys))
