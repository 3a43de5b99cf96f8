"""``data.json``: where each data set lives, merged with the context's ``data`` key.

Shape: ``{"<dataname>": {"<provider type>": {config}, ...}, ...}``. The context ``data`` key has
the same shape; for each data name its provider entries replace the file's entries of the same
type and add new types. Providers are tried in :data:`PROVIDER_ORDER`, whatever the file order.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path, PurePosixPath
from typing import Any, Mapping
from urllib.parse import urlsplit

from madengine.core.errors import ConfigError
from madengine.core.jsonio import read_json_file
from madengine.core.values import MAX_TIMEOUT, brief, seconds
from madengine.data.credentials import register_entry_secrets

#: the order providers are tried in: a script the model repository ships, a host folder, then
#: the network sources from the nearest (an on-site MinIO or NAS) to the farthest (AWS S3)
PROVIDER_ORDER = ("custom", "local", "minio", "nas", "aws")
DEFAULT_DATA_FILE = "data.json"
#: provider settings that name places and options; the value of any other setting (a password, a
#: key, a token a provider might take) is registered as a secret, and so is every URL's password
PLAIN_SETTINGS = frozenset({"path", "home", "mirrorlocal", "readwrite", "region", "endpoint", "known_hosts",
                            "host_key_fingerprint", "timeout", "args"})
_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off", "")


@dataclasses.dataclass(frozen=True)
class ProviderConfig:
    """One provider entry of one data name."""

    dataname: str
    type: str
    values: Mapping[str, Any]
    source: str  # the file (or "context 'data'") that defined it, for messages

    @property
    def where(self) -> str:
        return f"{self.dataname}.{self.type}"

    def text(self, key: str, default: str = "") -> str:
        value = self.values.get(key)
        return default if value is None else str(value)

    @property
    def path(self) -> str:
        return self.text("path")

    @property
    def readwrite(self) -> bool:
        return _flag(self.values.get("readwrite"))

    @property
    def home(self) -> str:
        return self.text("home")

    @property
    def mirrorlocal(self) -> str:
        return self.text("mirrorlocal")

    def error(self, message: str, key: str | None = None, hint: str | None = None) -> ConfigError:
        return ConfigError(message, path=self.source, field=f"{self.where}.{key}" if key else self.where, hint=hint)


def _flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in _TRUE if value is not None else False


@dataclasses.dataclass
class DataConfig:
    """Every data name's providers, validated."""

    entries: dict[str, dict[str, ProviderConfig]]
    path: str  # data.json as shown in messages

    def providers(self, name: str, model: str = "") -> list[ProviderConfig]:
        """The providers of ``name`` in the order they are tried; unknown names are errors."""
        entry = self.entries.get(name)
        if entry is None:
            known = ", ".join(sorted(self.entries)) or "none"
            asker = f" (model '{model}' asks for it)" if model else ""
            raise ConfigError(f"data '{name}' is not defined{asker}", path=self.path,
                              hint=f"defined data names: {known}; add it to data.json or the context 'data' key")
        return [entry[t] for t in PROVIDER_ORDER if t in entry]


def data_config_path(file_name: str, root: Path) -> Path:
    path = Path(file_name).expanduser()
    return path if path.is_absolute() else root / path


def load_data_config(file_name: str, context_data: Any, root: Path, explicit: bool = False) -> DataConfig:
    """Read ``file_name`` (relative to the model repository ``root``) and merge the context's
    ``data`` over it. A missing default file means no entries; a missing named file is an error."""
    path = data_config_path(file_name, root)
    shown = _shown(path, root)
    file_entries: Any = {}
    if path.exists():  # a folder of that name is an error, not an absent file
        file_entries = read_json_file(path, error=ConfigError, shown=shown)
    elif explicit:
        raise ConfigError("data config file not found", path=shown, hint="check --data-config-file-name")
    entries = _validated(file_entries, shown)
    if context_data is not None:
        for name, providers in _validated(context_data, "context 'data'").items():
            entries.setdefault(name, {}).update(providers)
    return DataConfig(entries=entries, path=shown)


def _validated(data: Any, source: str) -> dict[str, dict[str, ProviderConfig]]:
    if not isinstance(data, Mapping):
        raise ConfigError("must hold a JSON object keyed by data name", path=source)
    out: dict[str, dict[str, ProviderConfig]] = {}
    for name, providers in data.items():
        if not isinstance(providers, Mapping) or not providers:
            raise ConfigError("must be an object of provider configs, e.g. {\"local\": {\"path\": \"/data\"}}",
                              path=source, field=str(name))
        out[str(name)] = {}
        for ptype, values in providers.items():
            if ptype not in PROVIDER_ORDER:
                raise ConfigError(f"unknown provider type '{ptype}'", path=source, field=f"{name}.{ptype}",
                                  hint="known: " + ", ".join(PROVIDER_ORDER))
            if not isinstance(values, Mapping):
                raise ConfigError("must be an object", path=source, field=f"{name}.{ptype}")
            register_entry_secrets(values, plain=PLAIN_SETTINGS)  # before a check can quote a value
            config = ProviderConfig(str(name), ptype, dict(values), source)
            _check_provider(config)
            out[str(name)][ptype] = config
    return out


def _check_provider(config: ProviderConfig) -> None:
    values = config.values
    for key in ("path", "home", "mirrorlocal", "region", "endpoint", "known_hosts"):
        if key in values and not isinstance(values[key], str):
            raise config.error("must be a string", key)
    if not config.path.strip():
        raise config.error("needs a non-empty 'path'", "path")
    readwrite = values.get("readwrite")
    if readwrite is not None and not isinstance(readwrite, bool) and str(readwrite).strip().lower() not in _TRUE + _FALSE:
        raise config.error("must be \"true\" or \"false\"", "readwrite")
    if config.home and not PurePosixPath(config.home).is_absolute():
        raise config.error("must be an absolute path inside the container", "home")
    if config.type == "local" and config.mirrorlocal:
        raise config.error("the local provider copies nothing, so it cannot mirror", "mirrorlocal",
                           hint="remove 'mirrorlocal' from the local entry")
    if config.type == "custom":
        args = values.get("args", "")
        if not isinstance(args, str) and not (isinstance(args, list) and all(isinstance(a, str) for a in args)):
            raise config.error("must be a string or a list of strings", "args")
    if "timeout" in values:
        timeout = seconds(values["timeout"])
        if not timeout:  # None (not a finite number in range) or 0
            raise config.error(f"must be a positive number of seconds up to {MAX_TIMEOUT}, got "
                               f"{brief(values['timeout'])}", "timeout")
    if config.type in ("aws", "minio"):
        try:
            parse_s3_path(config.path)
        except ValueError as exc:
            raise config.error(str(exc), "path") from None


def parse_s3_path(path: str) -> tuple[str, str]:
    """``s3://bucket/prefix`` (or ``bucket/prefix``) → (bucket, prefix)."""
    text = path.strip()
    if "://" in text:
        parts = urlsplit(text)
        if parts.scheme.lower() not in ("s3", "minio"):
            raise ValueError("must be s3://<bucket>/<prefix>")
        bucket, prefix = parts.netloc, parts.path.lstrip("/")
    else:
        bucket, _, prefix = text.lstrip("/").partition("/")
    if not bucket:
        raise ValueError("names no bucket (write s3://<bucket>/<prefix>)")
    return bucket, prefix


def _shown(path: Path, root: Path) -> str:
    for base in (Path.cwd(), root):
        try:
            return str(path.resolve().relative_to(base.resolve()))
        except ValueError:
            continue
    return str(path)
