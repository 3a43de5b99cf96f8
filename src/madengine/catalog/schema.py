"""The typed, validated model schema.

A model entry is a JSON object from ``models.json`` (or a ``CustomModel``). Known fields are
checked and normalised here; unknown fields are kept in ``extra`` and passed through untouched.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from madengine.core.errors import CatalogError
from madengine.core.jsonio import MAX_DEPTH, too_deep
from madengine.core.redact import register_url_secrets
from madengine.core.values import MAX_TIMEOUT, brief, timeout_seconds, whole_number

_STRING_FIELDS = ("dockerfile", "dockercontext", "scripts", "data", "cred", "url", "multiple_results",
                  "skip_gpu_arch", "training_precision", "owner", "additional_docker_run_options", "onnx")
_OPTIONAL_STRING_FIELDS = tuple(f for f in _STRING_FIELDS if f not in ("dockerfile", "scripts"))


@dataclasses.dataclass
class Model:
    """One runnable model of the catalog.

    ``dockerfile``, ``scripts`` and ``onnx`` are relative to the model repository root (entries from
    ``scripts/<dir>/`` are re-rooted when loaded). ``scope`` is ``<dir>`` for those entries.
    ``tag_configs`` are the ``key=value`` pairs of the tags that selected the model.

    A model of the catalog loader (validated, or revived from its cache) keeps only the fields its
    entry sets in ``__dict__`` (the class attributes give the defaults): read fields as attributes.
    """

    name: str
    dockerfile: str = ""
    scripts: str = ""
    args: str = ""
    n_gpus: str = "1"
    tags: list[str] = dataclasses.field(default_factory=list)
    timeout: int | None = None
    data: str = ""
    cred: str = ""
    url: str = ""
    multiple_results: str = ""
    skip_gpu_arch: str = ""
    training_precision: str = ""
    owner: str = ""
    additional_docker_run_options: str = ""
    dockercontext: str = ""
    onnx: str = ""
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    scope: str = ""
    source: str = ""
    tag_configs: list[tuple[str, str]] = dataclasses.field(default_factory=list)

    @property
    def run_args(self) -> str:
        """``args`` with the tag configs appended as ``--key value``."""
        parts = [self.args] if self.args else []
        for key, value in self.tag_configs:
            parts.append(f"--{key} {value}" if value != "" else f"--{key}")
        return " ".join(parts)

    @property
    def tagged_name(self) -> str:
        """The model as the user selected it, tag configs included: ``numpy_matmul:size=64``."""
        return self.name + "".join(f":{k}={v}" if v != "" else f":{k}" for k, v in self.tag_configs)

    @property
    def data_names(self) -> list[str]:
        return [d.strip() for d in self.data.split(",") if d.strip()]

    @property
    def skip_archs(self) -> list[str]:
        return [a.strip() for a in self.skip_gpu_arch.split(",") if a.strip()]

    def to_dict(self) -> dict[str, Any]:
        """The entry as JSON (known fields, then pass-through fields)."""
        # a model of the catalog loader holds only the fields its entry sets (class docstring): an
        # absent one reads as its default here
        state = self.__dict__
        get = state.get
        configs = state["tag_configs"]
        out: dict[str, Any] = {
            "name": state["name"], "dockerfile": get("dockerfile", ""), "scripts": get("scripts", ""),
            "args": self.run_args if configs else get("args", ""), "n_gpus": get("n_gpus", "1"),
            "tags": list(state["tags"]),
        }
        timeout = get("timeout")
        if timeout is not None:
            out["timeout"] = timeout
        for name in _OPTIONAL_STRING_FIELDS:
            value = get(name)  # default ""
            if value:
                out[name] = value
        if state["extra"]:
            for key, value in state["extra"].items():
                out.setdefault(key, value)
        if configs:
            out["tag_configs"] = dict(configs)
        return out


def credential_urls(url: str, extra: Mapping[str, Any]) -> list[str]:
    """The texts of a model entry that may carry ``user:password@`` (its ``url``, and any other text
    field naming a URL, such as ``registry_url``)."""
    found = [url] if "@" in url else []
    return found + [v for v in extra.values() if type(v) is str and "@" in v and "://" in v]


def _fail(source: str, name: str | None, field: str, message: str) -> CatalogError:
    where = f"model '{name}': {field}" if name else field
    return CatalogError(message, path=source, field=where)


def _as_tags(value: Any, source: str, name: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [t.strip() for t in value.split(",") if t.strip()]
    if isinstance(value, list) and all(type(t) is str for t in value):
        return [t.strip() for t in value if t and not t.isspace()]
    raise _fail(source, name, "tags", "must be a list of strings (or a comma-separated string)")


def _as_args(value: Any, source: str, name: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, (list, tuple)) and all(isinstance(a, (str, int, float)) for a in value):
        return " ".join(str(a) for a in value)
    raise _fail(source, name, "args", "must be a string of arguments")


def _as_n_gpus(value: Any, source: str, name: str) -> str:
    if value is None or value == "":
        return "1"
    number = whole_number(value)
    if number is None:
        raise _fail(source, name, "n_gpus", f"must be an integer (-1 means all GPUs), got {brief(value)}")
    if number < -1:
        raise _fail(source, name, "n_gpus", f"must be -1 or more, got {number}")
    return str(number)


def _as_timeout(value: Any, source: str, name: str) -> int | None:
    if value is None or value == "":
        return None
    number = timeout_seconds(value)
    if number is None:
        raise _fail(source, name, "timeout", f"must be 0 (never) to {MAX_TIMEOUT} seconds, got {brief(value)}")
    return number


KNOWN_FIELDS = frozenset({"name", "args", "n_gpus", "tags", "timeout", *_STRING_FIELDS})
_STRING_FIELD_SET = frozenset(_STRING_FIELDS)


def model_from_entry(entry: Any, *, source: str, index: int | None = None) -> Model:
    """Validate one catalog entry and return the :class:`Model`; raises :class:`CatalogError`.

    Written as one pass over the entry's keys because catalogs of 10,000 models are loaded on
    every ``discover``/``run``: this is the hot loop of start-up.
    """
    if type(entry) is not dict:
        if not isinstance(entry, Mapping):
            where = f"entry {index}" if index is not None else "entry"
            raise CatalogError(f"{where} must be a JSON object, got {type(entry).__name__}", path=source)
        entry = dict(entry)
    name = entry.get("name")
    if type(name) is not str or not name.strip():
        where = f"entry {index}" if index is not None else "entry"
        raise CatalogError(f"{where} has no 'name' (a non-empty string is required)", path=source)
    name = name.strip()
    if not name.isprintable():  # a newline or escape sequence would break logs, image names and perf.csv
        raise CatalogError(f"model name {brief(name)} has control characters", path=source,
                           hint="use letters, digits, '_', '-', '.' or '/'")
    # filled directly, much cheaper than the dataclass __init__, and with only the fields the entry
    # sets: the class attributes give the others, and the catalog cache stores the state as it is
    state: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    tags: list[str] = []
    for field, value in entry.items():
        if field in _STRING_FIELD_SET:
            if value is None:
                continue
            if type(value) is not str:
                raise _fail(source, name, field, f"must be a string, got {type(value).__name__}")
            state[field] = value.strip()
        elif field == "tags":
            tags = _as_tags(value, source, name)
        elif field == "args":
            state["args"] = value.strip() if type(value) is str else _as_args(value, source, name)
        elif field == "n_gpus":
            fast = type(value) is str and value.isascii() and value.isdigit() and len(value) < 10
            state["n_gpus"] = value if fast else _as_n_gpus(value, source, name)
        elif field == "timeout":
            fast = type(value) is int and 0 <= value <= MAX_TIMEOUT
            state["timeout"] = value if fast else _as_timeout(value, source, name)
        elif field != "name":
            if type(value) in (dict, list) and too_deep(value, MAX_DEPTH - 2):
                raise _fail(source, name, field, f"nested more than {MAX_DEPTH} levels deep")
            extra[field] = value
    for url in credential_urls(state.get("url", ""), extra):  # user:password@: secrets from now on
        register_url_secrets(url)
    if not state.get("scripts") and not state.get("onnx"):
        raise _fail(source, name, "scripts", "is required (a .sh/.py file or a directory with run.sh)")
    state["name"] = name
    state["tags"] = tags
    state["extra"] = extra
    state["source"] = source
    state["tag_configs"] = []
    model = object.__new__(Model)
    model.__dict__ = state
    return model
