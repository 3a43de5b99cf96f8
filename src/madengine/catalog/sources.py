"""Loading the model catalog from its three sources.

1. ``<root>/models.json``: entries used as they are.
2. ``<root>/scripts/<dir>/models.json``: names become ``<dir>/<name>``; ``dockerfile``,
   ``scripts`` and ``onnx`` are re-rooted to ``scripts/<dir>/<value>``.
3. ``<root>/scripts/<dir>/get_models_json.py``: ``list_models()`` returns ``CustomModel`` objects;
   names become ``<dir>/<name>``; ``update_model()`` is called when a model is selected.

``root`` is ``MODEL_DIR`` when set, else the current directory; nothing is copied.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import importlib.util
import operator
import os
import posixpath
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping

from madengine.catalog.schema import Model, model_from_entry
from madengine.core import jsonio
from madengine.core.errors import CatalogError

if TYPE_CHECKING:
    from madengine.catalog.cache import CatalogCache
    from madengine.catalog.custom import CustomModel

_REROOTED = ("dockerfile", "scripts", "onnx")


@dataclasses.dataclass
class Catalog:
    root: Path
    models: list[Model]
    #: name → the CustomModel behind a dynamic entry (for ``update_model()`` on selection)
    dynamic: dict[str, CustomModel] = dataclasses.field(default_factory=dict)
    #: the JSON of each model's entry (``to_dict()``) as loaded, in the order of ``models``, where
    #: the cache kept it (else None): ``discover --json`` prints it for a model it selected as
    #: loaded instead of rendering 10,000 entries again (a model changed since no longer matches)
    entry_json: list[str | None] = dataclasses.field(default_factory=list, repr=False, compare=False)

    def refresh_dynamic(self, model: Model) -> Model:
        """Call ``update_model()`` of a dynamic entry and rebuild the entry from it."""
        custom = self.dynamic.get(model.name)
        if custom is None:
            return model
        source = model.source
        try:
            custom.update_model()
        except (Exception, SystemExit) as exc:  # the repository's own code failed
            raise CatalogError(f"update_model() of '{model.name}' raised {type(exc).__name__}: {exc}",
                               path=source, hint="fix the model repository's get_models_json.py") from None
        fresh = _custom_to_model(custom, model.scope, source)  # validated now, with what update_model() set
        fresh.tag_configs = list(model.tag_configs)
        return fresh


def model_root(environ: Mapping[str, str] | None = None) -> Path:
    """The model repository root: ``MODEL_DIR`` when set, else the current directory."""
    return Path((os.environ if environ is None else environ).get("MODEL_DIR") or ".").resolve()


def _read_json(path: Path | str, root: Path) -> Any:
    # no document-wide depth walk on the start-up path: model_from_entry checks the only fields
    # that may nest (unknown ones)
    return jsonio.read_json_file(path, error=CatalogError, shown=_shown(path, root), max_depth=None)


def _shown(path: Path | str, root: Path) -> str:
    """``path`` relative to the working folder when inside it (``Path.relative_to``, on strings:
    this names each of a hundred files on every start-up)."""
    text, cwd = os.fspath(path), os.getcwd()
    if text == cwd:
        return "."
    inside = cwd if cwd.endswith(os.sep) else cwd + os.sep
    return text[len(inside):] if text.startswith(inside) else text


#: what ``Path.exists()`` reads as an absent file rather than an error
_ABSENT = (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP)


def _exists(path: str) -> bool:
    """``Path(path).exists()`` without making a Path (two per folder on every start-up)."""
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno in _ABSENT:
            return False
        raise
    return True


def _entries(data: Any, shown: str) -> list[Any]:
    if not isinstance(data, list):
        raise CatalogError(f"must hold a JSON array of model objects, got {type(data).__name__}", path=shown)
    return data


@functools.lru_cache(maxsize=4096)
def _rerooted_path(scope: str, value: str) -> str:
    return posixpath.normpath(posixpath.join("scripts", scope, value))


def _reroot(model: Model, scope: str, *, rename: bool = True) -> Model:
    if rename:
        model.name = f"{scope}/{model.name}"
    model.scope = scope
    for field in _REROOTED:
        value = getattr(model, field)
        if value:
            setattr(model, field, _rerooted_path(scope, value))
    return model


def _custom_entry(custom: Any, scope: str, source: str) -> dict[str, Any]:
    """``custom.to_dict()`` with the scoped name, so that messages name the model as tags do."""
    from madengine.catalog.custom import CustomModel  # dynamic sources only

    if not isinstance(custom, CustomModel):
        raise CatalogError(f"list_models() returned a {type(custom).__name__}, not a CustomModel", path=source,
                           hint="return madengine.utils.discover_models.CustomModel objects")
    try:
        entry = custom.to_dict()
    except (Exception, SystemExit) as exc:  # a subclass's own fields or to_dict()
        raise CatalogError(f"to_dict() of a CustomModel raised {type(exc).__name__}: {exc}", path=source,
                           hint="fix the model repository's get_models_json.py") from None
    if not isinstance(entry, dict):
        raise CatalogError(f"to_dict() of a CustomModel returned {type(entry).__name__}, not a dict", path=source)
    name = entry.get("name")
    if type(name) is str and name.strip():
        entry["name"] = f"{scope}/{name.strip()}"
    return entry


def _custom_to_model(custom: Any, scope: str, source: str) -> Model:
    """The validated model of a ``CustomModel`` (after ``update_model()`` for a selected one)."""
    return _reroot(model_from_entry(_custom_entry(custom, scope, source), source=source), scope, rename=False)


def _unrefreshed(custom: Any, scope: str, source: str) -> Model:
    """A dynamic model as listed, before ``update_model()``.

    ``update_model()`` may set ``scripts``, ``dockerfile`` or any other field (the original tool's
    documented pattern), so the entry is validated only once the model is selected and refreshed;
    until then it needs only a name (and, to be selectable by them, its tags).
    """
    entry = _custom_entry(custom, scope, source)
    try:
        return _reroot(model_from_entry(entry, source=source), scope, rename=False)
    except CatalogError:
        name = entry.get("name")
        if type(name) is not str or not name.strip() or not name.isprintable():
            raise  # nothing could ever select it
    try:
        tags = model_from_entry({"name": name, "tags": entry.get("tags"), "onnx": "-"}, source=source).tags
    except CatalogError:
        tags = []
    return _reroot(Model(name=name.strip(), tags=tags, source=source), scope, rename=False)


def _load_dynamic(path: Path, scope: str, root: Path) -> list[tuple[Model, CustomModel]]:
    shown = _shown(path, root)
    module_name = f"_madengine_models_{scope.replace('-', '_').replace('.', '_')}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise CatalogError("cannot be imported", path=shown)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
        list_models = getattr(module, "list_models", None)
        if not callable(list_models):
            raise CatalogError("defines no list_models() function", path=shown,
                               hint="define list_models() returning a list of CustomModel")
        result = list_models()
    except CatalogError:
        raise
    except (Exception, SystemExit) as exc:  # arbitrary code of the model repository (sys.exit() included)
        raise CatalogError(f"raised {type(exc).__name__}: {exc}", path=shown,
                           hint="fix the model repository's get_models_json.py") from None
    finally:
        sys.modules.pop(module_name, None)
    if not isinstance(result, (list, tuple)):
        raise CatalogError(f"list_models() returned {type(result).__name__}, not a list", path=shown,
                           hint="return a list of CustomModel objects")
    return [(_unrefreshed(custom, scope, shown), custom) for custom in result]


def _static_models(path: Path | str, root: Path, scope: str | None) -> list[Model]:
    shown = _shown(path, root)
    models = [model_from_entry(entry, source=shown, index=index)
              for index, entry in enumerate(_entries(_read_json(path, root), shown))]
    return models if scope is None else [_reroot(model, scope) for model in models]


def load_catalog(root: Path | None = None, environ: Mapping[str, str] | None = None) -> Catalog:
    """Read every source under ``root`` into a :class:`Catalog` (raises :class:`CatalogError`).

    ``environ`` (default ``os.environ``) gives ``MODEL_DIR`` when ``root`` is None and the cache
    of validated files (:mod:`madengine.catalog.cache`)."""
    from madengine.core.gcpause import collector_paused

    environ = os.environ if environ is None else environ
    root = Path(root) if root is not None else model_root(environ)
    if not root.is_dir():
        raise CatalogError("model repository folder not found", path=str(root), hint="check MODEL_DIR")
    with collector_paused():
        return _load(root, environ)


def _load(root: Path, environ: Mapping[str, str]) -> Catalog:
    from madengine.catalog.cache import CatalogCache

    cache = CatalogCache.for_root(root.resolve(), environ)
    catalog = Catalog(root=root, models=[])
    root_json = root / "models.json"
    scripts_dir = root / "scripts"
    if root_json.exists():  # a folder of that name is an error, not an absent file
        _add_static(catalog, cache, root_json, None)
    elif not scripts_dir.is_dir():
        raise CatalogError("no models.json and no scripts/ folder here", path=str(root),
                           hint="run from a model repository or set MODEL_DIR to one")
    if scripts_dir.is_dir():
        for scope, json_path, py_path in _scoped_sources(scripts_dir, root):
            if json_path is not None:
                _add_static(catalog, cache, json_path, scope)
            elif py_path is not None:
                for model, custom in _load_dynamic(Path(py_path), scope, root):
                    catalog.models.append(model)
                    catalog.entry_json.append(None)
                    catalog.dynamic[model.name] = custom
    _check_unique(catalog.models)
    cache.save()
    return catalog


def _add_static(catalog: Catalog, cache: CatalogCache, path: Path | str, scope: str | None) -> None:
    root = catalog.root
    models, texts = cache.models(path, _shown(path, root), functools.partial(_static_models, path, root, scope))
    catalog.models.extend(models)
    catalog.entry_json.extend(texts)


def _scoped_sources(scripts_dir: Path, root: Path) -> Iterator[tuple[str, str | None, str | None]]:
    """``(dir, its models.json, its get_models_json.py)`` for each ``scripts/<dir>`` in name order
    (hidden and ``_`` folders left out), None for a file it lacks; a folder with both is an error.
    The paths are strings: a hundred folders are looked at on every start-up."""
    with os.scandir(scripts_dir) as entries:
        scopes = sorted(e.name for e in entries if e.is_dir() and not e.name.startswith((".", "_")))
    for scope in scopes:
        folder = os.path.join(scripts_dir, scope)
        json_path, py_path = os.path.join(folder, "models.json"), os.path.join(folder, "get_models_json.py")
        has_json, has_py = _exists(json_path), _exists(py_path)
        if has_json and has_py:
            raise CatalogError("has both models.json and get_models_json.py", path=_shown(folder, root),
                               hint="keep one of the two")
        yield scope, json_path if has_json else None, py_path if has_py else None


def _check_unique(models: list[Model]) -> None:
    """Every name once (a set first: the loop that names the two files only when one is not)."""
    if len(set(map(operator.attrgetter("name"), models))) == len(models):
        return
    seen: dict[str, str] = {}
    for model in models:
        if model.name in seen:
            raise CatalogError(f"model name '{model.name}' is defined twice (also in {seen[model.name]})",
                               path=model.source, hint="model names must be unique")
        seen[model.name] = model.source
