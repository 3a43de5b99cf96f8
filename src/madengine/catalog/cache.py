"""A cache of validated catalog files: a 10,000-model catalog loads without validating it again.

Validation is the hot loop of every ``discover`` and ``run``. Each static ``models.json`` is
validated once per change: the cache keeps its validated models under the file's stat (size,
mtime, ctime, inode, device), and the whole cache under the stat of the code that validates. A
write to the file changes its ctime, so an edit is always seen, even one that restores the mtime.

A model is stored as its state, the ``__dict__`` validation made (only the fields its entry sets:
the class attributes give the others), which the revived model takes as its ``__dict__`` as read,
and as the JSON of its entry (``to_dict()``), which ``discover --json`` prints for a model
selected unchanged (``Catalog.entry_json``). Its ``source`` is the file as named from the working
folder of the command that stored it; a command run from another folder names it again.

``get_models_json.py`` sources are never cached: they run the repository's code on every load.

The cache is ``<cache>/catalog/<hash of the root>.<python>.marshal`` (``<cache>``:
:func:`cache_root`; ``<python>``: e.g. ``cpython-311``), written by :mod:`marshal`, which Python
loads its own ``__pycache__`` with: it needs no import (orjson's cost ~9 ms), reads faster, and
keeps the field names interned, which attribute lookups on the revived models depend on. It
is as trusted as ``__pycache__``: only this user's commands write it, each a whole file.
``MADENGINE_CATALOG_CACHE=0`` turns it off. A missing, stale, corrupt or unwritable cache only
costs the validation it would have saved; it never changes a result or fails a command.
"""

from __future__ import annotations

import marshal
import os
import sys
import zlib
from pathlib import Path
from typing import Any, Callable, Mapping

from madengine.catalog.schema import Model, credential_urls
from madengine.core import jsonio
from madengine.core.cachedir import cache_root
from madengine.core.redact import register_url_secrets

_FORMAT = 6  # one more with every change of what an entry holds


def _file_key(stat: os.stat_result) -> list[int]:
    return [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino, stat.st_dev]


def _code_key() -> list[Any]:
    """The identity of the code that validates and writes the entries: an edited schema (an
    editable install) or another orjson (which wrote the entries' JSON) drops the cache."""
    key: list[Any] = [_FORMAT, marshal.version]
    here = os.path.dirname(os.path.abspath(__file__))
    code = [os.path.join(here, name) for name in ("schema.py", "sources.py", "cache.py")]
    for path in (*code, jsonio.__file__, jsonio.compact_writer() or ""):
        try:
            key.extend(_file_key(os.stat(path)))
        except OSError:  # run from a zip, without sources or without orjson: the name alone
            key.append(os.path.basename(path))
    return key


class CatalogCache:
    """The validated models of a catalog's static files, by file."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._code = _code_key() if path is not None else []
        self._files: dict[str, Any] = self._read() if path is not None else {}
        self._dirty = False

    @classmethod
    def for_root(cls, root: Path, environ: Mapping[str, str]) -> "CatalogCache":
        if environ.get("MADENGINE_CATALOG_CACHE", "1").strip().lower() in ("0", "false", "no", "off"):
            return cls(None)
        # two roots sharing a name only share a file: entries are keyed by each file's full path
        digest = zlib.crc32(str(root).encode("utf-8", "surrogateescape"))
        python = sys.implementation.cache_tag or "python"  # marshal's format is the interpreter's
        return cls(cache_root(environ) / "catalog" / f"{root.name[:40]}-{digest:08x}.{python}.marshal")

    def models(self, path: Path | str, shown: str,
               validate: Callable[[], list[Model]]) -> tuple[list[Model], list[str | None]]:
        """The validated models of ``path`` and the JSON of each entry (None: not kept): from the
        cache when the file is unchanged, else ``validate()`` (whose errors propagate) and kept."""
        stat_key = self._stat_key(path)
        if stat_key is None:
            models = validate()
            return models, [None] * len(models)
        key = str(path)
        cached = self._files.get(key)
        if type(cached) is dict and cached.get("stat") == stat_key:
            revived = _revived(cached, shown)
            if revived is not None:
                return revived
        models = validate()
        texts = [jsonio.compact(model.to_dict()) for model in models]
        self._files[key] = {"stat": stat_key, "urls": [u for m in models for u in credential_urls(m.url, m.extra)],
                            "models": [model.__dict__ for model in models], "json": texts}
        self._dirty = True
        return models, texts

    def _stat_key(self, path: Path | str) -> list[int] | None:
        """The key of the file's contents (None: the cache is off, or the file cannot be read, which
        the loader reports)."""
        if self.path is None:
            return None
        try:
            return _file_key(os.stat(path))
        except OSError:
            return None

    def save(self) -> None:
        """Write the cache when anything was validated; a failure to write is only a lost saving."""
        if self.path is None or not self._dirty:
            return
        import tempfile

        try:
            data = marshal.dumps({"code": self._code, "files": self._files})
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(prefix=".catalog-", dir=self.path.parent)
            try:
                with os.fdopen(handle, "wb") as out:
                    out.write(data)
                os.replace(temporary, self.path)  # concurrent commands each write a whole file
            except BaseException:
                os.unlink(temporary)
                raise
        except (OSError, ValueError):  # marshal: a value it cannot write, or nested too deeply
            pass
        self._dirty = False

    def _read(self) -> dict[str, Any]:
        assert self.path is not None
        try:
            with open(self.path, "rb") as handle:
                data = marshal.loads(handle.read())
        except (OSError, EOFError, ValueError, TypeError, MemoryError):  # what marshal says of bad data
            return {}
        if type(data) is not dict or data.get("code") != self._code or type(data.get("files")) is not dict:
            return {}
        return data["files"]


def _revived(entry: dict[str, Any], shown: str) -> tuple[list[Model], list[str | None]] | None:
    """The models of a file's stored entry and their texts (None: not what :meth:`CatalogCache.models`
    stores)."""
    states, urls, texts = entry.get("models"), entry.get("urls"), entry.get("json")
    if any(type(value) is not list for value in (states, urls, texts)) or len(texts) != len(states):
        return None
    models = []
    new = object.__new__
    try:
        if states and states[0]["source"] != shown:  # stored by a command run from another folder
            for state in states:
                state["source"] = shown
        for state in states:  # the hot loop of a cached load: the dict read becomes the model's state
            model = new(Model)
            model.__dict__ = state  # a TypeError unless a dict
            models.append(model)
    except (TypeError, KeyError):
        return None
    for url in urls:  # its password must stay masked, as on a validating load
        register_url_secrets(url)
    return models, texts
