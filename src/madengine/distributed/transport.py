"""How built images travel between hosts: a registry (push/pull by digest) or ``docker save``
archives in a shared folder.

Images are always identified by their image id (the digest of the image config), which a push
and pull or a save and load preserve; a run therefore checks that what arrived is exactly what
was built. Registry credentials come from ``MADENGINE_REGISTRY_USER`` /
``MADENGINE_REGISTRY_PASSWORD`` (or the password given on stdin to ``madengine build``), else
from the Docker client's own login (``~/.docker/config.json``); they go to the engine through
its API, never on a command line, and are registered for redaction.
"""

from __future__ import annotations

import dataclasses
import os
import re
import threading
from pathlib import Path
from typing import Any, Iterable, Mapping

from madengine.core.errors import CredentialError, ExecutionError, InputError, ServiceError
from madengine.core.redact import redact, register_secret, register_username

USER_ENV = "MADENGINE_REGISTRY_USER"
PASSWORD_ENV = "MADENGINE_REGISTRY_PASSWORD"
_REGISTRY = re.compile(r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9]+([._/-][a-z0-9]+)*)?$")
_lock = threading.Lock()


@dataclasses.dataclass
class RegistryAuth:
    username: str
    password: str

    def config(self) -> dict[str, str]:
        return {"username": self.username, "password": self.password}


def check_registry(registry: str) -> str:
    """``host[:port][/namespace]``, without a scheme or trailing slash; InputError otherwise."""
    value = registry.strip().rstrip("/")
    for scheme in ("https://", "http://"):
        if value.startswith(scheme):
            value = value[len(scheme):]
    if not _REGISTRY.match(value):
        raise InputError(f"'{registry}' is not a registry address", path="--registry",
                         hint="write host[:port][/namespace], e.g. registry.example.com:5000/team")
    return value


def registry_auth(environ: Mapping[str, str], password: str | None = None) -> RegistryAuth | None:
    """Credentials from the environment (or a password read from stdin); None to use docker's own."""
    username = environ.get(USER_ENV, "")
    password = password if password is not None else environ.get(PASSWORD_ENV)
    if password is None or password == "":
        if username and password == "":
            raise CredentialError("the registry password is empty", path=PASSWORD_ENV)
        return None
    if not username:
        raise CredentialError("a registry password was given but no user name", path=USER_ENV,
                              hint=f"set {USER_ENV}")
    register_secret(password)
    register_username(username)
    return RegistryAuth(username, password)


def registry_host(registry: str) -> str:
    return registry.split("/", 1)[0]


def login(client: Any, registry: str, auth: RegistryAuth | None) -> None:
    """Check the credentials now, so a wrong password fails before any build (exit 2)."""
    if auth is None:
        return
    try:
        client.sdk.login(username=auth.username, password=auth.password, registry=registry_host(registry),
                     reauth=True)
    except Exception as exc:
        text = redact(str(exc))
        if "401" in text or "unauthorized" in text.lower():
            raise CredentialError(f"the registry refused the login of '{auth.username}'",
                                  path=registry_host(registry), hint=f"check {USER_ENV}/{PASSWORD_ENV}") from None
        raise ServiceError(f"cannot reach registry {registry_host(registry)}: {_last_line(text)}") from None


def _stream_errors(chunks: Iterable[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """The first error of a push/pull progress stream, and the last ``aux`` it carried."""
    error, aux = "", {}
    for chunk in chunks:
        if "error" in chunk and not error:
            error = str(chunk.get("error") or chunk.get("errorDetail", {}).get("message", "")).strip()
        if "aux" in chunk:
            aux = chunk["aux"]
    return error, aux


def push(client: Any, image_id: str, repository: str, tag: str, auth: RegistryAuth | None) -> str:
    """Push ``image_id`` as ``repository:tag``; returns ``repository@sha256:...`` (what a run pulls)."""
    client.sdk.api.tag(image_id, repository, tag)
    try:
        try:
            chunks = client.sdk.api.push(repository, tag=tag, stream=True, decode=True,
                                     auth_config=auth.config() if auth else None)
            error, aux = _stream_errors(chunks)
        except Exception as exc:
            error, aux = str(exc), {}
    finally:
        try:  # the registry-named tag is only a vehicle; the manifest names the image by digest
            client.sdk.api.remove_image(f"{repository}:{tag}")
        except Exception:
            pass
    if error:
        raise ExecutionError(f"push of {repository}:{tag} failed: {_last_line(redact(error))}")
    digest = aux.get("Digest", "")
    if not digest:
        raise ExecutionError(f"push of {repository}:{tag} reported no digest")
    return f"{repository}@{digest}"


def pull(client: Any, reference: str, auth: RegistryAuth | None) -> None:
    repository, _, digest = reference.partition("@")
    try:
        chunks = client.sdk.api.pull(repository, tag=digest or "latest", stream=True, decode=True,
                                 auth_config=auth.config() if auth else None)
        error, _ = _stream_errors(chunks)
    except Exception as exc:
        error = str(exc)
    if error:
        raise ExecutionError(f"pull of {reference} failed: {_last_line(redact(error))}")


def archive_name(image: str, image_id: str) -> str:
    """Content-addressed, so a later build never overwrites what an earlier manifest refers to."""
    return f"{image}-{image_id.split(':')[-1][:12]}.tar"


def save(client: Any, image_id: str, folder: Path, name: str) -> Path:
    """``docker save`` of one image into ``folder/name`` (written whole, then renamed into place)."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / name
    if target.is_file():
        return target
    tmp = folder / f".{name}.{os.getpid()}.{threading.get_ident()}.part"
    try:
        with open(tmp, "wb") as handle:
            for chunk in client.sdk.images.get(image_id).save(named=True):
                handle.write(chunk)
        os.replace(tmp, target)
    except Exception as exc:
        tmp.unlink(missing_ok=True)
        raise ExecutionError(f"docker save of {image_id[:19]} into {folder} failed: {_last_line(str(exc))}") from None
    return target


def load(client: Any, path: Path) -> None:
    try:
        with open(path, "rb") as handle:
            client.sdk.images.load(handle)
    except OSError as exc:
        raise ExecutionError(f"cannot read image archive {path}: {exc.strerror}") from None
    except Exception as exc:
        raise ExecutionError(f"docker load of {path} failed: {_last_line(str(exc))}") from None


def has_image(client: Any, image_id: str) -> bool:
    try:
        client.inspect_image(image_id)
        return True
    except Exception:
        return False


def ensure_image(client: Any, *, image: str, image_id: str, archive: Path | None, reference: str,
                 auth: RegistryAuth | None) -> str:
    """Make ``image_id`` present on this host: already there, else loaded from ``archive``, else
    pulled from ``reference``. Raises ExecutionError naming every source that was tried."""
    with _lock:  # two parallel models of one image must not load or pull it twice at once
        if has_image(client, image_id):
            return image_id
        tried = [f"not on this host as {image_id[:19]}"]
        if archive is not None:
            if archive.is_file():
                load(client, archive)
                if has_image(client, image_id):
                    return image_id
                tried.append(f"archive {archive} holds a different image")
            else:
                tried.append(f"archive {archive} not found")
        if reference:
            pull(client, reference, auth)
            if has_image(client, image_id):
                return image_id
            tried.append(f"{reference} is a different image")
        if archive is None and not reference:
            tried.append("the manifest names no registry image or archive (give --registry or --image-archive)")
        raise ExecutionError(f"image {image} is missing: " + "; ".join(tried))


def relocate(reference: str, registry: str) -> str:
    """``old-host/ns/ci-x@sha256:..`` pulled through another registry address (``--registry``)."""
    repository, _, digest = reference.partition("@")
    name = repository.rsplit("/", 1)[-1]
    return f"{registry}/{name}@{digest}" if digest else f"{registry}/{name}"


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else text[:300]
