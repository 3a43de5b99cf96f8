"""Fast JSON for the catalog and machine output: orjson when installed, else the standard library.

Catalog loading and ``discover --json`` are on every command's start-up path; orjson parses and
writes 10,000-model catalogs several times faster. Errors are normalised to ``json.JSONDecodeError``.
"""

from __future__ import annotations

import json
from typing import Any

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
