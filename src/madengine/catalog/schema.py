"""The typed, validated model schema.

A model entry is a JSON object from ``models.json`` (or a ``CustomModel``). Known fields are
checked and normalised here; unknown fields are kept in ``extra`` and passed through untouched.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from madengine.core.errors import CatalogError

_STRING_FIELDS = ("dockerfile", "dockercontext", "scripts", "data", "cred", "url", "multiple_results",
                  "skip_gpu_arch", "training_precision", "owner", "additional_docker_run_options", "onnx")


@dataclasses.dataclass
class Model:
    """One runnable model of the catalog.

    ``dockerfile``, ``scripts`` and ``onnx`` are relative to the model repository root (entries from
    ``scripts/<dir>/`` are re-rooted when loaded). ``scope`` is ``<dir>`` for those entries.
    ``tag_configs`` are the ``key=value`` pairs of the tags that selected the model.
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
    def data_names(self) -> list[str]:
        return [d.strip() for d in self.data.split(",") if d.strip()]

    @property
    def skip_archs(self) -> list[str]:
        return [a.strip() for a in self.skip_gpu_arch.split(",") if a.strip()]

    def to_dict(self) -> dict[str, Any]:
        """The entry as JSON (known fields, then pass-through fields)."""
        out: dict[str, Any] = {
            "name": self.name, "dockerfile": self.dockerfile, "scripts": self.scripts,
            "args": self.run_args, "n_gpus": self.n_gpus, "tags": list(self.tags),
        }
        if self.timeout is not None:
            out["timeout"] = self.timeout
        for name in _STRING_FIELDS:
            value = getattr(self, name)
            if value and name not in out:
                out[name] = value
        for key, value in self.extra.items():
            out.setdefault(key, value)
        if self.tag_configs:
            out["tag_configs"] = {k: v for k, v in self.tag_configs}
        return out


def _fail(source: str, name: str | None, field: str, message: str) -> CatalogError:
    where = f"model '{name}': {field}" if name else field
    return CatalogError(message, path=source, field=where)


def _as_tags(value: Any, source: str, name: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [t.strip() for t in value.split(",") if t.strip()]
    if isinstance(value, (list, tuple)) and all(isinstance(t, str) for t in value):
        return [t.strip() for t in value if t.strip()]
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
    if isinstance(value, bool):
        raise _fail(source, name, "n_gpus", "must be an integer (-1 means all GPUs)")
    try:
        number = int(str(value).strip())
    except ValueError:
        raise _fail(source, name, "n_gpus", f"must be an integer (-1 means all GPUs), got {value!r}") from None
    if number < -1:
        raise _fail(source, name, "n_gpus", f"must be -1 or more, got {number}")
    return str(number)


def _as_timeout(value: Any, source: str, name: str) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise _fail(source, name, "timeout", "must be a number of seconds")
    try:
        number = int(float(value))
    except (TypeError, ValueError):
        raise _fail(source, name, "timeout", f"must be a number of seconds, got {value!r}") from None
    if number < 0:
        raise _fail(source, name, "timeout", "must be 0 (never) or more")
    return number


KNOWN_FIELDS = frozenset({"name", "args", "n_gpus", "tags", "timeout", *_STRING_FIELDS})


def model_from_entry(entry: Any, *, source: str, index: int | None = None) -> Model:
    """Validate one catalog entry and return the :class:`Model`; raises :class:`CatalogError`."""
    if not isinstance(entry, Mapping):
        where = f"entry {index}" if index is not None else "entry"
        raise CatalogError(f"{where} must be a JSON object, got {type(entry).__name__}", path=source)
    name = entry.get("name")
    if not isinstance(name, str) or not name.strip():
        where = f"entry {index}" if index is not None else "entry"
        raise CatalogError(f"{where} has no 'name' (a non-empty string is required)", path=source)
    name = name.strip()
    values: dict[str, Any] = {}
    for field in _STRING_FIELDS:
        value = entry.get(field)
        if value is None:
            continue
        if isinstance(value, (int, float)) and not isinstance(value, bool) and field == "dockercontext":
            value = str(value)
        if not isinstance(value, str):
            raise _fail(source, name, field, f"must be a string, got {type(value).__name__}")
        values[field] = value.strip()
    if not values.get("scripts") and not values.get("onnx"):
        raise _fail(source, name, "scripts", "is required (a .sh/.py file or a directory with run.sh)")
    return Model(
        name=name,
        args=_as_args(entry.get("args"), source, name),
        n_gpus=_as_n_gpus(entry.get("n_gpus"), source, name),
        tags=_as_tags(entry.get("tags"), source, name),
        timeout=_as_timeout(entry.get("timeout"), source, name),
        extra={k: v for k, v in entry.items() if k not in KNOWN_FIELDS},
        source=source,
        **values,
    )
