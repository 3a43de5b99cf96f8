"""Fast JSON for the catalog and machine output: orjson when installed, else the standard library.

Catalog loading and ``discover --json`` are on every command's start-up path; orjson parses and
writes 10,000-model catalogs several times faster. Errors are normalised to ``json.JSONDecodeError``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from madengine.core.errors import MadEngineError

try:
    import orjson as _orjson
except ImportError:  # pragma: no cover - the stdlib path is exercised where orjson is absent
    _orjson = None


def loads(data: bytes | str) -> Any:
    if _orjson is not None:
        try:
            return _orjson.loads(data)
        except _orjson.JSONDecodeError:
            pass  # re-parse with json for its line/column message
    return json.loads(data)


def dumps(value: Any, indent: bool = False) -> str:
    if _orjson is not None and not indent:
        try:
            return _orjson.dumps(value).decode()
        except TypeError:
            pass  # non-str keys or exotic types: fall back
    return json.dumps(value, indent=1 if indent else None)


def read_json_file(path: "str | Path", *, error: "type[MadEngineError] | None" = None, shown: str | None = None,
                   missing: str = "file not found", hint: str | None = None) -> Any:
    """Parse a JSON file; every way it can be unreadable becomes one typed error naming the file.

    ``error`` is the exception class to raise (default :class:`InputError`); ``missing`` the
    message for a file that does not exist; ``hint`` what to do about it.
    """
    from madengine.core.errors import InputError

    error = error or InputError
    shown = shown or str(path)
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except FileNotFoundError:
        raise error(missing, path=shown, hint=hint) from None
    except IsADirectoryError:
        raise error("is a folder, not a JSON file", path=shown) from None
    except OSError as exc:
        raise error(f"cannot read ({exc.strerror})", path=shown) from None
    try:
        return loads(raw)
    except json.JSONDecodeError as exc:
        raise error(f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}", path=shown,
                    hint="fix the JSON syntax") from None
    except UnicodeDecodeError:
        raise error("not UTF-8 text", path=shown) from None
