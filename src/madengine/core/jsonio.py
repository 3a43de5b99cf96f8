"""Fast JSON for the catalog and machine output: orjson when installed, else the standard library.

Catalog loading and ``discover --json`` are on every command's start-up path; orjson parses and
writes 10,000-model catalogs several times faster. Errors are normalised to ``json.JSONDecodeError``.
orjson is imported on first use: its imports (uuid, platform, json) cost ~9 ms, which a command
that reads no JSON (a cached ``discover``) does not need.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from madengine.core.errors import MadEngineError

_UNSET = object()
_orjson_module: Any = _UNSET


def _orjson() -> Any:
    """The orjson module, imported on first use, or None where it is not installed."""
    global _orjson_module
    if _orjson_module is _UNSET:
        try:
            import orjson
        except ImportError:  # pragma: no cover - the stdlib path is exercised where orjson is absent
            orjson = None
        _orjson_module = orjson
    return _orjson_module


def compact_writer() -> str | None:
    """The file of the orjson that :func:`compact` would use, found without importing it (None:
    not installed): texts kept from :func:`compact` are what it writes while this is unchanged."""
    import importlib.util

    spec = importlib.util.find_spec("orjson")
    return spec.origin if spec is not None else None


#: deepest nesting accepted in a configuration document: far beyond any real one, and shallow enough
#: for every recursive consumer (deepcopy, merges, secret registration, JSON writers)
MAX_DEPTH = 64


def loads(data: bytes | str) -> Any:
    fast = _orjson()
    if fast is not None:
        try:
            return fast.loads(data)
        except fast.JSONDecodeError as exc:
            if "depth limit" in str(exc):
                raise RecursionError("JSON nested too deeply") from None
            # else re-parse with json for its line/column message
    import json  # the standard library only where orjson is absent or for its messages

    return json.loads(data)


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` nests lists/dicts more than ``limit`` levels (checked without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = item.values()
        elif not isinstance(item, (list, tuple)):
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in item if isinstance(child, (dict, list, tuple)))
    return False


def dumps(value: Any, indent: bool = False) -> str:
    fast = None if indent else _orjson()
    if fast is not None:
        try:
            return fast.dumps(value).decode()
        except TypeError:
            pass  # non-str keys or exotic types: fall back
    import json

    return json.dumps(value, indent=1 if indent else None)


def compact(value: Any) -> str | None:
    """``value`` as :func:`dumps` writes it with orjson, or None without orjson or when orjson
    refuses it: texts from here join into the array :func:`dumps` writes (:func:`joined`)."""
    fast = _orjson()
    if fast is None:
        return None
    try:
        return fast.dumps(value).decode()
    except TypeError:
        return None


def joined(texts: list[str | None]) -> str | None:
    """``dumps`` of the list of values whose :func:`compact` texts these are, or None when one is
    missing. Texts kept from an earlier process are only valid while :func:`compact_writer` is
    the same (the catalog cache keeps it in its key)."""
    if not all(texts):
        return None
    try:
        return "[" + ",".join(texts) + "]"  # type: ignore[arg-type]
    except TypeError:  # not texts after all (a damaged cache): the caller writes the values
        return None


def json_problem(exc: BaseException) -> tuple[str, str]:
    """The one-line message and hint for JSON text that ``json.loads`` refused with ``exc``.

    Beyond syntax errors that covers what the parser raises on valid-looking text: a number of
    more than Python's 4,300-digit conversion limit (``ValueError``) and nesting deeper than the
    recursion limit (``RecursionError``).
    """
    import json

    if isinstance(exc, json.JSONDecodeError):
        return f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}", "fix the JSON syntax"
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text", "save the file as UTF-8"
    if isinstance(exc, RecursionError):
        return "malformed JSON: nested too deeply to read", "flatten the structure"
    if "digits" in str(exc):  # the int-conversion limit
        return "malformed JSON: a number has too many digits", "write a shorter number"
    return f"malformed JSON: {str(exc).split(';')[0]}", "fix the value"


def parse_json(data: bytes | str, *, shown: str, error: "type[MadEngineError] | None" = None,
               max_depth: int | None = MAX_DEPTH) -> Any:
    """Parse JSON text; every way it can be malformed becomes one typed error naming ``shown``
    (``error``, default :class:`InputError`). Nesting deeper than ``max_depth`` is refused (None:
    the caller checks the values it keeps, as the model catalog does for speed)."""
    from madengine.core.errors import InputError

    try:
        value = loads(data)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        message, hint = json_problem(exc)
        raise (error or InputError)(message, path=shown, hint=hint) from None
    if max_depth is not None and too_deep(value, max_depth):
        raise (error or InputError)(f"malformed JSON: nested more than {max_depth} levels deep", path=shown,
                                    hint="flatten the structure")
    return value


def read_json_file(path: "str | Path", *, error: "type[MadEngineError] | None" = None, shown: str | None = None,
                   missing: str = "file not found", hint: str | None = None,
                   max_depth: int | None = MAX_DEPTH, limit: int | None = None) -> Any:
    """Parse a JSON file; every way it can be unreadable becomes one typed error naming the file.

    ``error`` is the exception class to raise (default :class:`InputError`); ``missing`` the
    message for a file that does not exist; ``hint`` what to do about it; ``max_depth`` as in
    :func:`parse_json`. The file must be a regular file of at most ``limit`` bytes (default
    :data:`~madengine.core.inputfile.MAX_CONFIG_BYTES`): :func:`~madengine.core.inputfile.read_input`.
    """
    from madengine.core.inputfile import MAX_CONFIG_BYTES, read_input

    shown = shown or str(path)
    raw = read_input(path, limit=limit or MAX_CONFIG_BYTES, shown=shown, error=error, missing=missing, hint=hint)
    return parse_json(raw, shown=shown, error=error, max_depth=max_depth)
