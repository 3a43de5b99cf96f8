"""Model files named by URL in a suite (``url: s3://bucket/key.onnx``), fetched before anything runs.

The existing data providers do the fetching (:func:`madengine.data.provide.deliver`): ``s3://`` by
the ``aws`` provider, ``minio://`` by ``minio``, with their credentials (``MAD_AWS_S3`` /
``MAD_MINIO`` in credential.json or the environment, else boto3's chain). Files land in a
persistent mirror, ``<madengine cache>/models/<model name>/``, and are downloaded again only when
the object changed (size or ETag), as data sets are. The caller checks the sha256 afterwards.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Mapping

from madengine.bench.cache import cache_root
from madengine.bench.suite import URL_SCHEMES, ModelEntry


def models_folder(environ: Mapping[str, str]) -> Path:
    return cache_root(environ) / "models"


def fetch_model(entry: ModelEntry, *, log_path: Path, environ: Mapping[str, str],
                message: Callable[[str], None]) -> Path:
    """Fetch ``entry.url`` into the models mirror; returns (and sets) ``entry.path``.

    Raises ExecutionError ("data not available: ...") when no provider could deliver it."""
    from madengine.data.base import DataLog
    from madengine.data.config import ProviderConfig
    from madengine.data.credentials import load_credentials
    from madengine.data.provide import deliver

    scheme = entry.url.partition("://")[0].lower()
    config = ProviderConfig(dataname=entry.name, type=URL_SCHEMES[scheme], values={"path": entry.url},
                            source=entry.source or "suite")
    delivery = deliver(entry.name, 0, [config], credentials=load_credentials(environ=environ), root=Path.cwd(),
                       workdir=log_path.parent, force_mirror_local=str(models_folder(environ)),
                       log=DataLog(log_path, message))
    entry.path = delivery.host_path / entry.path.name
    return entry.path
