"""What to benchmark: model files from the command line and model list files (suites).

A suite file is YAML or JSON (by extension; ``.yaml``/``.yml`` are YAML, anything else is tried
as JSON then YAML): a list of entries, or a mapping whose ``models`` key holds that list. An
entry follows the Relax scorecard's model list::

    - set: vision            # optional; the perf.csv model name is <set>/<name>@<version>
      name: mlp              # optional; default: the file's stem
      version: 1             # optional
      path: models/mlp.onnx  # the file, relative to the suite file's folder; or instead:
      url: s3://bucket/mlp.onnx  # fetched through the data providers (s3://, minio://) into the cache
      sha256: 3f1c...        # optional; verified before anything runs
      shapes: {x: [8, 64]}   # optional; input → dims (a list or "8,64"); may hold $axes too
      $axes: {batch: 8}      # optional; dynamic axis → size
      providers: [cpu, cuda] # optional; one result per provider (default: --provider)
      batch_size: 8          # optional; default: --batch-size
      backends: [openvino-cpu, openvino-cpu:bf16]  # optional; madengine scorecard's cells for this model
      tolerance: {atol: 1e-3, rtol: 1e-3}       # optional; scorecard's output check (default 1e-4 both)
      reference: onnx-reference                  # optional; scorecard's reference (onnxruntime-cpu-opt-disabled)

``madengine bench`` ignores the three scorecard keys.
Keys the Relax scorecard uses for its own runners (``configs``, ``tuning_steps``, ...) are
accepted and ignored, so its lists load as they are; any other key is an error (a typo would
otherwise be silently ignored).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Mapping

from madengine.bench.harness import HarnessInputError
from madengine.bench.harness import precision as numerics
from madengine.bench.harness.inputs import parse_dims
from madengine.core.errors import ConfigError, InputError

KNOWN_KEYS = frozenset({"set", "name", "version", "path", "url", "sha256", "shapes", "$axes", "providers",
                        "batch_size", "backends", "tolerance", "reference"})
URL_SCHEMES = {"s3": "aws", "minio": "minio"}  # URL scheme → the data provider that fetches it
IGNORED_RELAX_KEYS = frozenset({"configs", "tuning_steps", "tuning-steps", "requires-toposort", "requires_toposort",
                                "cuda-sm", "cuda_sm", "dtypes", "files", "input_scale"})


@dataclasses.dataclass
class ModelEntry:
    """One model to benchmark (from the command line or a suite file)."""

    name: str
    path: Path
    sha256: str = ""
    shapes: dict[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)
    axes: dict[str, int] = dataclasses.field(default_factory=dict)
    providers: list[str] = dataclasses.field(default_factory=list)
    batch_size: int | None = None
    set: str = ""
    version: str = ""
    source: str = ""  # the suite file, or "" for a command-line model
    url: str = ""  # fetched into ``path`` (see madengine.bench.fetch) before anything runs
    backends: list[str] = dataclasses.field(default_factory=list)  # scorecard: this model's backends
    tolerance: dict[str, float] = dataclasses.field(default_factory=dict)  # scorecard: atol / rtol
    reference: str = ""  # scorecard: the backend whose outputs are right


def entry_from_path(path: str, shapes: dict[str, tuple[int, ...]], axes: dict[str, int]) -> ModelEntry:
    """A command-line model: ``model.onnx``, or ``model.onnx:batch=4:seq=128`` with axis sizes of its
    own (over ``--axes``, which applies to every command-line model)."""
    path, own = split_model_axes(path)
    file = Path(path)
    return ModelEntry(name=file.stem, path=file, shapes=dict(shapes), axes={**axes, **own})


def split_model_axes(text: str) -> tuple[str, dict[str, int]]:
    """``'m.onnx:batch=4'`` → ``('m.onnx', {'batch': 4})``; a path without ``:NAME=N`` parts is as it is."""
    from madengine.bench.harness.inputs import parse_axes

    path, *parts = text.split(":")
    if not parts or not all("=" in part for part in parts):
        return text, {}
    return path, parse_axes(parts)


def load_suite(path: str | Path) -> list[ModelEntry]:
    """The entries of a suite file; raises :class:`ConfigError` naming the file and entry."""
    path = Path(path)
    document = _read(path)
    if isinstance(document, Mapping):
        unknown = [k for k in document if k != "models"]
        if "models" not in document or unknown:
            raise ConfigError("a suite mapping needs one key, 'models' (a list of entries)", path=str(path))
        document = document["models"]
    if not isinstance(document, list) or not document:
        raise ConfigError("a suite is a non-empty list of model entries", path=str(path))
    return [_entry(item, index, path) for index, item in enumerate(document)]


def _read(path: Path) -> Any:
    from madengine.core.inputfile import read_input

    data = read_input(path, error=ConfigError, missing="suite file not found")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"cannot read the suite file ({exc})", path=str(path)) from None
    if path.suffix.lower() not in (".yaml", ".yml"):
        try:
            return json.loads(text)
        except ValueError as exc:
            if path.suffix.lower() == ".json":
                raise ConfigError(f"malformed JSON ({exc})", path=str(path)) from None
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"malformed YAML ({' '.join(str(exc).split())})", path=str(path)) from None


def _entry(item: Any, index: int, suite: Path) -> ModelEntry:
    where = f"entry {index}"
    if not isinstance(item, Mapping):
        raise ConfigError(f"must be a mapping, got {type(item).__name__}", path=str(suite), field=where)
    unknown = sorted(set(item) - KNOWN_KEYS - IGNORED_RELAX_KEYS)
    if unknown:
        raise ConfigError(f"unknown key(s) {', '.join(unknown)}", path=str(suite), field=where,
                          hint="known: " + ", ".join(sorted(KNOWN_KEYS)))
    model_path, url = _text(item, "path", suite, where), _text(item, "url", suite, where)
    if not model_path and not url:
        raise ConfigError("'path' is required (the .onnx file, relative to the suite file), or a 'url'",
                          path=str(suite), field=where)
    if model_path and url:
        raise ConfigError("give 'path' or 'url', not both (a url is fetched into madengine's cache)",
                          path=str(suite), field=where)
    file = Path(model_path or _url_file_name(url, suite, where))
    if not file.is_absolute() and model_path:
        file = suite.parent / file
    set_name, version = _text(item, "set", suite, where), _text(item, "version", suite, where)
    name = _text(item, "name", suite, where) or file.stem
    where = f"model '{name}'"
    shapes_value = item.get("shapes") or {}
    if not isinstance(shapes_value, Mapping):
        raise ConfigError("'shapes' must map input names to dims", path=str(suite), field=where)
    axes_value = dict(shapes_value.get("$axes") or {})
    axes_value.update(item.get("$axes") or {})
    return ModelEntry(
        name=_display_name(set_name, name, version), path=file,
        sha256=_text(item, "sha256", suite, where).lower(),
        shapes=shapes_from({k: v for k, v in shapes_value.items() if k != "$axes"}, suite, where),
        axes=axes_from(axes_value, suite, where), providers=providers_from(item.get("providers"), suite, where),
        batch_size=_batch(item.get("batch_size"), suite, where), set=set_name, version=version, source=str(suite),
        url=url, backends=backends_from(item.get("backends"), suite, where),
        tolerance=tolerance_from(item.get("tolerance"), suite, where),
        reference=reference_from(item.get("reference"), suite, where))


def _url_file_name(url: str, suite: Path, where: str) -> str:
    """The file name a URL's object lands under (its last path part); only provider schemes."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in URL_SCHEMES:
        raise ConfigError(f"url '{url}' is not fetchable", path=str(suite), field=where,
                          hint="use " + " or ".join(f"{s}://bucket/key.onnx" for s in URL_SCHEMES)
                               + " (fetched by the data providers), or 'path' for a local file")
    name = rest.rstrip("/").rsplit("/", 1)[-1]
    if "/" not in rest.strip("/") or not name:
        raise ConfigError(f"url '{url}' names no object (write {scheme}://bucket/key.onnx)", path=str(suite),
                          field=where)
    return name


def backends_from(value: Any, suite: str | Path, where: str) -> list[str]:
    """A model's scorecard cells: known backend ids, each optionally at a precision of its own
    (``openvino-cpu:bf16``, ``openvino-cpu:fp32`` → ``openvino-cpu:f32``; see
    madengine.bench.backends.split_cell)."""
    from madengine.bench.backends import BACKEND_IDS, split_cell

    names = providers_from(value, suite, where, key="backends")
    unknown = [n for n in names if n.partition(":")[0].strip() not in BACKEND_IDS]
    if unknown:
        raise ConfigError(f"unknown backend(s) {', '.join(unknown)}", path=str(suite), field=f"{where}: backends",
                          hint="known: " + ", ".join(BACKEND_IDS))
    cells = []
    for name in names:
        try:
            backend, precision = split_cell(name)
            cells.append(f"{backend}:{precision}" if precision else backend)
        except ValueError as exc:
            raise ConfigError(str(exc), path=str(suite), field=f"{where}: backends") from None
    return cells


def tolerance_from(value: Any, suite: str | Path, where: str) -> dict[str, float]:
    """``{atol: x, rtol: y}`` (either may be left out: the default applies)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not set(value) <= {"atol", "rtol"} or not value:
        raise ConfigError("'tolerance' must map atol and/or rtol to numbers", path=str(suite), field=where,
                          hint="e.g. tolerance: {atol: 1e-3, rtol: 1e-3}")
    out = {}
    for key, number in value.items():
        if isinstance(number, str):
            try:
                number = float(number)
            except ValueError:
                pass
        if isinstance(number, bool) or not isinstance(number, (int, float)) or not 0 <= number < float("inf"):
            raise ConfigError(f"tolerance.{key} must be a finite number of 0 or more, got {number!r}",
                              path=str(suite), field=where)
        out[str(key)] = float(number)
    return out


def reference_from(value: Any, suite: str | Path, where: str) -> str:
    from madengine.bench.backends import REFERENCES

    if value is None:
        return ""
    if value not in REFERENCES:
        raise ConfigError(f"reference must be one of {', '.join(REFERENCES)}, got {value!r}", path=str(suite),
                          field=where)
    return str(value)


def _display_name(set_name: str, name: str, version: str) -> str:
    text = f"{set_name}/{name}" if set_name else name
    return f"{text}@{version}" if version else text


def _text(item: Mapping, key: str, suite: Path, where: str) -> str:
    value = item.get(key)
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ConfigError(f"'{key}' must be a string", path=str(suite), field=where)
    return str(value).strip()


def shapes_from(value: Mapping, suite: str | Path, where: str) -> dict[str, tuple[int, ...]]:
    shapes = {}
    for name, dims in value.items():
        try:
            if isinstance(dims, str):
                shapes[str(name)] = parse_dims(dims, what=f"shapes.{name}")
            elif isinstance(dims, list) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                for d in dims):
                shapes[str(name)] = tuple(dims)
            else:
                raise HarnessInputError("must be a list of whole numbers (or \"d0,d1,...\")", field=f"shapes.{name}")
        except HarnessInputError as exc:
            raise ConfigError(str(exc), path=str(suite), field=where) from None
    return shapes


def axes_from(value: Any, suite: str | Path, where: str) -> dict[str, int]:
    if not isinstance(value, Mapping):
        raise ConfigError("'$axes' must map axis names to sizes", path=str(suite), field=where)
    axes = {}
    for name, size in value.items():
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ConfigError(f"$axes.{name} must be a whole number, got {size!r}", path=str(suite), field=where)
        axes[str(name)] = size
    return axes


def providers_from(value: Any, suite: str | Path, where: str, key: str = "providers") -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = [p for p in value.split(",")]
    if not isinstance(value, list) or not all(isinstance(p, str) and p.strip() for p in value):
        raise ConfigError(f"'{key}' must be a list of {key[:-1]} names", path=str(suite), field=where)
    return [p.strip() for p in value]


def _batch(value: Any, suite: Path, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"'batch_size' must be a whole number of 1 or more, got {value!r}", path=str(suite),
                          field=where)
    return value


def chosen_precisions(names: list[str]) -> list[str]:
    """``--precision``'s names, checked (an unknown one is bad input naming the valid ones)."""
    try:
        return numerics.parse_list(",".join(names))
    except HarnessInputError as exc:
        raise InputError(exc.message, path="--precision", hint=exc.hint) from None
