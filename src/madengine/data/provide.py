"""Making a model's data sets available before its script starts.

For each name in the model's ``data``, the providers of ``data.json`` (merged with the context's
``data``) are tried in :data:`~madengine.data.config.PROVIDER_ORDER`; the first whose source is
reachable delivers. ``local`` hands over a host path as it is; the others download on the host
into a mirror folder. The docker executor bind-mounts each folder (read-only unless
``"readwrite": "true"``) at the provider's ``home`` or ``/data_dlm_<position>``; the local
executor sees the host folders themselves. A data set no provider can deliver raises
``ExecutionError("data not available: ...")``, which the runner records as the model's FAILURE.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

from madengine.core.errors import ExecutionError
from madengine.core.redact import redact
from madengine.data.base import DataLog, FetchStats
from madengine.data.config import DEFAULT_DATA_FILE, DataConfig, ProviderConfig, load_data_config
from madengine.data.credentials import (AWS_S3, MINIO, Credentials, check_model_credentials, credential_file,
                                        load_credentials, needs_credentials)
from madengine.data.mirror import choose_mirror, human_size, tree_size

CONTAINER_DATA_HOME = "/data_dlm"


@dataclasses.dataclass
class Delivery:
    """One data set, ready: where it is on the host and where the model sees it."""

    dataname: str
    provider: str
    host_path: Path
    container_path: str
    read_only: bool
    size: int | None = None  # bytes; None for local folders (not walked: they may be huge)
    duration: float | None = None  # seconds spent fetching; None when nothing was fetched
    stats: FetchStats | None = None


class LocalSource:
    """The ``local`` provider: a host path (relative paths are relative to the model repository)."""

    def __init__(self, config: ProviderConfig, root: Path) -> None:
        self.config = config
        path = Path(config.path).expanduser()
        self.host_path = (path if path.is_absolute() else root / path).resolve()

    def check(self) -> str | None:
        return None if self.host_path.exists() else f"{self.host_path} does not exist"


def _source(config: ProviderConfig, credentials: Credentials, root: Path) -> Any:
    if config.type == "local":
        return LocalSource(config, root)
    if config.type == "custom":
        from madengine.data.custom import CustomSource

        return CustomSource(config, root)
    if config.type == "nas":
        from madengine.data.nas import NasSource

        return NasSource(config, credentials)
    from madengine.data.s3 import S3Source

    return S3Source(config, credentials)


def load_config(data_file: str | None, context: Any, root: Path) -> DataConfig:
    name = data_file or DEFAULT_DATA_FILE
    return load_data_config(name, context.get("data"), root, explicit=name != DEFAULT_DATA_FILE)


def deliver(dataname: str, position: int, providers: list[ProviderConfig], *, credentials: Credentials,
            root: Path, workdir: Path, force_mirror_local: str | None, log: DataLog) -> Delivery:
    """Try ``providers`` in order; the first reachable one delivers ``dataname``."""
    attempts = []
    for config in providers:
        source = _source(config, credentials, root)
        reason = source.check()
        if reason:
            attempts.append(f"{config.type}: {reason}")
            log.line(f"=== madengine data: '{dataname}': {config.type} not usable: {reason}")
            continue
        home = config.home or f"{CONTAINER_DATA_HOME}_{position}"
        if config.type == "local":
            log.message(f"'{dataname}' from local: {source.host_path} (no copy)")
            return Delivery(dataname, "local", source.host_path, home, read_only=not config.readwrite)
        mirror = choose_mirror(dataname, config.mirrorlocal, force_mirror_local, root, workdir)
        log.message(f"'{dataname}' from {config.type}: fetching {config.path} into "
                    f"{'mirror ' if mirror.persistent else ''}{mirror.path}")
        with mirror.locked():
            started = time.monotonic()
            stats = source.fetch(mirror, log)
            duration = time.monotonic() - started
        size = tree_size(mirror.path)
        log.message(f"'{dataname}' from {config.type}: {stats.summary()} in {duration:.2f} s; "
                    f"{human_size(size)} in {mirror.path}")
        return Delivery(dataname, config.type, mirror.path, home, read_only=not config.readwrite, size=size,
                        duration=duration, stats=stats)
    raise ExecutionError(redact(f"data not available: '{dataname}': " + "; ".join(attempts)))


def apply_deliveries(spec: Any, deliveries: list[Delivery], executor_name: str) -> None:
    """Mounts (docker), ``MAD_DATAHOME``/``MAD_DATANAME`` and the perf row's data columns."""
    from madengine.core.spec import Mount

    homes = []
    for delivery in deliveries:
        if executor_name == "docker":
            spec.mounts.append(Mount(str(delivery.host_path), delivery.container_path, delivery.read_only))
            homes.append(delivery.container_path)
        else:  # the host path itself: nothing is copied, and read-only cannot be enforced
            homes.append(str(delivery.host_path))
    spec.env["MAD_DATAHOME"] = ",".join(homes)
    spec.env["MAD_DATANAME"] = ",".join(d.dataname for d in deliveries)
    durations = [d.duration for d in deliveries if d.duration is not None]
    spec.row_values.update(
        dataname=",".join(d.dataname for d in deliveries),
        data_provider_type=",".join(d.provider for d in deliveries),
        data_size=",".join(human_size(d.size) if d.size is not None else "" for d in deliveries).strip(","),
        data_download_duration=round(sum(durations), 3) if durations else None,
    )


def provide_data(spec: Any, *, data_file: str | None, force_mirror_local: str | None, context: Any,
                 executor_name: str, reporter: Any, live_output: bool, root: Path,
                 environ: Mapping[str, str] | None = None) -> None:
    """Deliver every data set of ``spec.model`` and wire it into ``spec`` (a run extension).

    Every provider fetches on the host; the docker executor gets mounts, the local executor the
    host folders themselves.
    """
    config = load_config(data_file, context, root)
    credentials = load_credentials(credential_file(root), environ)
    live = (lambda line: reporter.output(spec.key, line)) if live_output else None
    log = DataLog(spec.log_path, reporter.message, live)
    deliveries = [
        deliver(name, position, config.providers(name, spec.model.name), credentials=credentials, root=root,
                workdir=spec.workdir, force_mirror_local=force_mirror_local, log=log)
        for position, name in enumerate(spec.model.data_names)
    ]
    apply_deliveries(spec, deliveries, executor_name)


def check_run_inputs(models: Iterable[Any], data_file: str | None, context: Any, root: Path,
                     environ: Mapping[str, str] | None = None) -> None:
    """Before anything runs: data names defined, data.json and credential.json well-formed, and
    every credential a selected model or data provider needs present and usable. Raises
    ConfigError / CredentialError (the CLI's one-line error, exit 2)."""
    models = list(models)
    data_models = [m for m in models if m.data_names]
    cred_models = [m for m in models if needs_credentials(m)]
    if not data_models and not cred_models:
        return
    credentials = load_credentials(credential_file(root), environ)
    if data_models:
        config = load_config(data_file, context, root)
        types = {p.type for m in data_models for n in m.data_names for p in config.providers(n, m.name)}
        if "aws" in types:
            credentials.s3(AWS_S3)
        if "minio" in types:
            credentials.s3(MINIO)
        if "nas" in types:
            credentials.nas_nodes()
    for model in cred_models:
        check_model_credentials(model, credentials)
