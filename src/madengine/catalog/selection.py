"""Tag selection.

A tag is ``selector[:key=value[:key2=value2...]]``.

* ``all`` selects every model; otherwise a selector matches a model's name or one of its tags.
* ``<dir>/<filter>`` selects inside ``scripts/<dir>`` only: ``<dir>/all``, a tag of those models,
  or the model ``<dir>/<name>`` itself.
* ``key=value`` pieces become ``--key value`` on the model's args (a piece without ``=`` becomes
  ``--key``) and are also given to the run as environment variables and build arguments.
* ``precision=<name>`` must name a precision (:mod:`madengine.core.precision`: ``bf16``, ``fp32``,
  ...); it is the precision the run is declared at (the row's ``training_precision`` until the
  model reports what it computed in).
* Several tags (``--tags a b`` or ``--tags a,b``) select the union, de-duplicated, in catalog order.
* A tag that selects nothing is an error naming the tag, with close matches.
"""

from __future__ import annotations

import dataclasses
import shlex
from typing import Iterable

from madengine.catalog.schema import Model
from madengine.catalog.sources import Catalog
from madengine.core.errors import CatalogError, UnknownTagError
from madengine.core.precision import is_precision, valid_names

#: the tag config that declares the precision a model runs at
PRECISION_CONFIG = "precision"


@dataclasses.dataclass(frozen=True)
class TagSpec:
    text: str
    selector: str
    scope: str | None
    filter: str
    configs: tuple[tuple[str, str], ...]

    def select(self, models: list[Model]) -> list[Model]:
        """The models this tag matches, in catalog order: a name or tag, or inside ``scripts/<dir>``
        its ``all``, a tag or the model itself. One comprehension per case: a tag is tested
        against every model of a 10,000-model catalog."""
        selector, scope, filter_ = self.selector, self.scope, self.filter
        if scope is None:
            if selector == "all":
                return list(models)
            return [m for m in models if m.name == selector or selector in m.tags]
        if filter_ == "all":
            return [m for m in models if m.scope == scope]
        return [m for m in models if m.scope == scope and (filter_ in m.tags or m.name == selector)]


def split_tags(values: Iterable[str]) -> list[str]:
    """``['a,b', 'c']`` → ``['a', 'b', 'c']`` (blank pieces dropped)."""
    out: list[str] = []
    for value in values:
        out.extend(piece.strip() for piece in value.split(",") if piece.strip())
    return out


def parse_tag(text: str) -> TagSpec:
    pieces = text.split(":")
    selector = pieces[0].strip()
    if not selector:
        raise CatalogError(f"tag '{text}' has no model or tag name before ':'", path="--tags")
    configs = []
    for piece in pieces[1:]:
        piece = piece.strip()
        if not piece:
            raise CatalogError(f"tag '{text}' has an empty ':' piece", path="--tags",
                               hint="write name:key=value:key2=value2")
        key, sep, value = piece.partition("=")
        key = key.strip()
        if not key or not all(c.isalnum() or c in "-_." for c in key):
            raise CatalogError(f"tag '{text}' has a bad config key '{key}'", path="--tags",
                               hint="keys are letters, digits, '-', '_' or '.'")
        configs.append((key, _config_value(text, key, value.strip()) if sep or key == PRECISION_CONFIG else ""))
    scope = None
    filter_ = selector
    if selector.count("/") == 1:
        scope, filter_ = selector.split("/")
    return TagSpec(text=text, selector=selector, scope=scope, filter=filter_, configs=tuple(configs))


def _config_value(tag: str, key: str, value: str) -> str:
    """A tag config's value, checked now: it becomes the model's arguments (split like a shell
    line), an environment variable and a build argument, so an open quote or a control character
    is an error naming the tag before anything runs, never a FAILURE row later; so is a
    ``precision`` that names no precision."""
    if key == PRECISION_CONFIG and not is_precision(value):
        raise CatalogError(f"tag '{tag}': precision '{value}' is not a precision", path="--tags",
                           hint=f"valid: {valid_names()}")
    if not value.isprintable():
        raise CatalogError(f"tag '{tag}': the value of '{key}' holds a control character", path="--tags",
                           hint="write the value on one line, without escape sequences")
    try:
        shlex.split(value)
    except ValueError as exc:
        raise CatalogError(f"tag '{tag}': the value of '{key}' cannot be read as arguments ({exc})",
                           path="--tags", hint="close the quote, e.g. --tags \"m:x='a b'\"") from None
    return value


def _suggest(tag: str, catalog: Catalog) -> list[str]:
    vocabulary = {m.name for m in catalog.models}
    for model in catalog.models:
        vocabulary.update(model.tags)
    import difflib  # only for an unknown tag's message

    return difflib.get_close_matches(tag, sorted(vocabulary), n=3, cutoff=0.6)


def _copy(model: Model, configs: list[tuple[str, str]]) -> Model:
    copy = object.__new__(Model)
    copy.__dict__.update(model.__dict__)
    copy.tags, copy.extra, copy.tag_configs = list(model.tags), dict(model.extra), list(configs)
    declared = [value for key, value in configs if key == PRECISION_CONFIG]
    if declared:  # the run is declared at the precision asked for, not at models.json's
        copy.training_precision = declared[-1]
    return copy


def select_models(catalog: Catalog, tags: Iterable[str]) -> list[Model]:
    """The models selected by ``tags`` (see module docstring), in catalog order.

    Plain selections share the catalog's objects (nothing mutates models); a model with tag configs
    (or refreshed by ``update_model()``) is a copy, so the catalog stays as loaded."""
    specs = [parse_tag(t) for t in split_tags(tags)]
    models = catalog.models
    names: set[str] | None = set()  # None: every model is selected
    configs: dict[str, list[tuple[str, str]]] = {}  # only the names some tag gives configs
    for spec in specs:
        hits = spec.select(models)
        if not hits:
            raise UnknownTagError(spec.selector, _suggest(spec.selector, catalog))
        if names is not None:
            names = None if len(hits) == len(models) else names.union(m.name for m in hits)
        for model in hits if spec.configs else ():
            merged = configs.setdefault(model.name, [])
            merged.extend(c for c in spec.configs if c not in merged)
    selected = list(models) if names is None else [m for m in models if m.name in names]
    if not configs and not catalog.dynamic:
        return selected
    return [_configured(catalog, m, configs) for m in selected]


def _configured(catalog: Catalog, model: Model, configs: dict[str, list[tuple[str, str]]]) -> Model:
    """``model`` with its tag configs, refreshed when dynamic: a copy when either applies."""
    merged = configs.get(model.name)
    if merged is None and model.name not in catalog.dynamic:
        return model
    return catalog.refresh_dynamic(_copy(model, merged or []))


def list_catalog(catalog: Catalog) -> tuple[list[Model], list[CatalogError]]:
    """Every model of the catalog as ``discover`` lists it without tags: dynamic models refreshed by
    ``update_model()``; one that is invalid afterwards is left out and its error returned, so that
    one broken ``get_models_json.py`` model never hides the rest of the repository."""
    listed: list[Model] = []
    errors: list[CatalogError] = []
    for model in catalog.models:
        if model.name in catalog.dynamic:
            try:
                model = catalog.refresh_dynamic(_copy(model, []))
            except CatalogError as exc:
                errors.append(exc)
                continue
        listed.append(model)
    return listed, errors
