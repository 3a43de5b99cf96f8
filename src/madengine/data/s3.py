"""The ``aws`` (S3) and ``minio`` (S3-compatible) providers: boto3 on the host, into a mirror.

Credentials: ``MAD_AWS_S3`` / ``MAD_MINIO`` (``USERNAME`` = access key id, ``PASSWORD`` = secret
key, optional ``SESSION_TOKEN``, ``REGION``, ``AWS_ENDPOINT_URL_S3``; MinIO also
``MINIO_ENDPOINT``), else boto3's own chain (``AWS_*`` variables, ``~/.aws``). Region and endpoint
come from the provider config (``region``, ``endpoint``) or those credentials; nothing is
hard-coded. An object is downloaded only when the mirror lacks it or its size or ETag changed.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from pathlib import Path
from typing import Any

from madengine.core.errors import MadEngineError
from madengine.core.redact import redact
from madengine.data.base import DataLog, FetchStats, unavailable
from madengine.data.config import ProviderConfig, parse_s3_path
from madengine.data.credentials import AWS_S3, MINIO, Credentials
from madengine.data.mirror import Mirror, part_path, safe_relative

_MD5_ETAG = re.compile(r"^[0-9a-f]{32}$")
_SAVE_EVERY = 25  # objects between state saves, so an interrupted sync resumes where it stopped


class S3Source:
    def __init__(self, config: ProviderConfig, credentials: Credentials) -> None:
        self.config = config
        self.credentials = credentials
        self.bucket, self.prefix = parse_s3_path(config.path)
        self._client: Any = None

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def _settings(self) -> dict[str, Any]:
        name = MINIO if self.config.type == "minio" else AWS_S3
        creds = self.credentials.s3(name)
        endpoint = self.config.text("endpoint") or creds.get("AWS_ENDPOINT_URL_S3", "")
        if self.config.type == "minio":
            endpoint = self.config.text("endpoint") or creds.get("MINIO_ENDPOINT", "") or endpoint
        region = self.config.text("region") or creds.get("REGION", "") or creds.get("AWS_REGION", "")
        return {"endpoint": endpoint or None, "region": region or None,
                "key": creds.get("USERNAME") or creds.get("AWS_ACCESS_KEY_ID") or None,
                "secret": creds.get("PASSWORD") or creds.get("AWS_SECRET_ACCESS_KEY") or None,
                "token": creds.get("SESSION_TOKEN") or creds.get("AWS_SESSION_TOKEN") or None}

    def client(self) -> Any:
        if self._client is None:
            import boto3
            from botocore.config import Config

            settings = self._settings()
            if self.config.type == "minio" and not settings["endpoint"]:
                raise _NotReachable("no MinIO endpoint: set MINIO_ENDPOINT in MAD_MINIO or 'endpoint' in the "
                                    "provider config")
            session = boto3.session.Session(aws_access_key_id=settings["key"],
                                            aws_secret_access_key=settings["secret"],
                                            aws_session_token=settings["token"], region_name=settings["region"])
            config = Config(connect_timeout=10, read_timeout=120, retries={"max_attempts": 3, "mode": "standard"},
                            s3={"addressing_style": "path"} if settings["endpoint"] else None)
            self._client = session.client("s3", endpoint_url=settings["endpoint"], config=config)
        return self._client

    def check(self) -> str | None:
        """None when the path holds at least one object; else why not."""
        try:
            import boto3  # noqa: F401
        except ImportError:
            return "boto3 is not installed (pip install 'madengine[data]')"
        try:
            answer = self.client().list_objects_v2(Bucket=self.bucket, Prefix=self.prefix, MaxKeys=1)
        except _NotReachable as exc:
            return str(exc)
        except MadEngineError:
            raise
        except Exception as exc:
            return _describe(exc)
        if not answer.get("KeyCount") and not answer.get("Contents"):
            return f"nothing at {self.url}"
        return None

    def objects(self) -> list[tuple[str, Path, int, str]]:
        """(key, path in the mirror, size, ETag) of every object the path names."""
        paginator = self.client().get_paginator("list_objects_v2")
        listed: list[dict[str, Any]] = []
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix):
            listed.extend(page.get("Contents", []))
        base = self.prefix
        if base and not base.endswith("/"):
            exact = [o for o in listed if o["Key"] == base]
            if exact:  # the path names one object: it lands as <mirror>/<its base name>
                return [(base, Path(base.rsplit("/", 1)[-1]), int(exact[0]["Size"]), _etag(exact[0]))]
            base += "/"
            listed = [o for o in listed if o["Key"].startswith(base)]
        out = []
        for obj in listed:
            key = obj["Key"]
            if key.endswith("/"):
                continue  # folder marker
            relative = safe_relative(key[len(base):])
            if relative is not None:
                out.append((key, relative, int(obj["Size"]), _etag(obj)))
        return out

    def fetch(self, mirror: Mirror, log: DataLog) -> FetchStats:
        dataname, ptype = self.config.dataname, self.config.type
        stats = FetchStats()
        state = mirror.load_state()
        source = f"{self._settings()['endpoint'] or ptype}|{self.url}"
        known: dict[str, Any] = state.get("objects", {}) if state.get("source") == source else {}
        try:
            objects = self.objects()
        except Exception as exc:
            raise unavailable(dataname, ptype, f"listing {self.url} failed: {_describe(exc)}") from None
        if not objects:
            raise unavailable(dataname, ptype, f"no objects under {self.url}")
        try:
            for number, (key, relative, size, etag) in enumerate(objects, 1):
                target = mirror.path / relative
                if _unchanged(target, size, etag, known.get(str(relative))):
                    stats.unchanged += 1
                    known[str(relative)] = _record(target, size, etag)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                partial = part_path(target)
                started = time.monotonic()
                try:
                    self.client().download_file(self.bucket, key, str(partial))
                except Exception as exc:
                    partial.unlink(missing_ok=True)
                    raise unavailable(dataname, ptype, f"download of s3://{self.bucket}/{key} failed: "
                                                       f"{_describe(exc)}") from None
                os.replace(partial, target)
                known[str(relative)] = _record(target, size, etag)
                stats.fetched += 1
                stats.bytes_fetched += size
                log.line(f"    {ptype}: s3://{self.bucket}/{key} → {relative} ({size} bytes, "
                         f"{time.monotonic() - started:.2f} s)")
                if number % _SAVE_EVERY == 0:
                    mirror.save_state({"source": source, "objects": known})
        finally:
            mirror.save_state({"source": source, "objects": known})
        return stats


class _NotReachable(Exception):
    pass


def _etag(obj: dict[str, Any]) -> str:
    return str(obj.get("ETag", "")).strip('"')


def _record(path: Path, size: int, etag: str) -> dict[str, Any]:
    return {"size": size, "etag": etag, "mtime_ns": path.stat().st_mtime_ns}


def _unchanged(path: Path, size: int, etag: str, known: dict[str, Any] | None) -> bool:
    """Same size and ETag as last time (and untouched since), or, without a record, a plain-MD5
    ETag that matches the file's content."""
    try:
        info = path.stat()
    except OSError:
        return False
    if info.st_size != size:
        return False
    if known and known.get("etag") == etag and known.get("size") == size and known.get("mtime_ns") == info.st_mtime_ns:
        return True
    if _MD5_ETAG.match(etag):
        digest = hashlib.md5(usedforsecurity=False)
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest() == etag
    return False


def _describe(exc: Exception) -> str:
    """A short, secret-free reason for a boto3/botocore error."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict) and "Error" in response:
        error = response["Error"]
        code = error.get("Code", "")
        message = error.get("Message", "")
        return redact(f"{code}: {message}" if message else str(code))
    name = type(exc).__name__
    if name == "NoCredentialsError":
        return "no credentials (set MAD_AWS_S3 / MAD_MINIO or the AWS_* variables)"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return redact(f"{name}: {text}" if text else name)
