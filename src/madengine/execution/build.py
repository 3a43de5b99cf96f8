"""Docker image builds: skipped when nothing that goes into the image changed.

Every image madengine builds carries a label with a content hash of its build inputs: the
Dockerfile text, every file of the build context (names, modes and contents), the build args and
the id of the base image. Before building, the hash is computed again; an image that already
carries it is used as it is (or tagged with the new name), so a run on an unchanged model costs
no build call at all. ``--clean-docker-cache`` and ``--rebuild`` always build; ``--pull`` always
builds (a newer base image may be waiting); a base image absent from the host is built (and
pulled) once without the shortcut.

Within one run, an identical build (same Dockerfile text, context folder and build args) is done
once and its image tagged with the other names: catalogs commonly give many models one Dockerfile.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import stat
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from madengine.core.errors import BuildError
from madengine.core.redact import redact
from madengine.execution.engine import Engine, EngineError
from madengine.execution.executor import ImageInfo
from madengine.execution.streams import LineSink

INPUTS_LABEL = "madengine.build-inputs"
_FROM = re.compile(r"^\s*FROM\s+(?:--platform=\S+\s+)?(\S+)", re.IGNORECASE | re.MULTILINE)
_ARG_DEFAULT = re.compile(r"^\s*ARG\s+(\w+)\s*=\s*(\S+)", re.IGNORECASE | re.MULTILINE)
_CHUNK = 1 << 20


@dataclasses.dataclass(frozen=True)
class BuildInputs:
    dockerfile: Path
    context_dir: Path
    build_args: Mapping[str, str]


def base_image(dockerfile_text: str, build_args: Mapping[str, str]) -> str:
    """The image a Dockerfile builds FROM, with ``${ARG}`` resolved from build args and ARG defaults."""
    match = _FROM.search(dockerfile_text)
    if not match:
        return ""
    image = match.group(1)
    values = {**dict(_ARG_DEFAULT.findall(dockerfile_text)), **build_args}
    return re.sub(r"\$\{?(\w+)\}?", lambda m: values.get(m.group(1), m.group(0)), image)


def _hash_tree(digest: Any, root: Path) -> None:
    """Names, kinds, executable bits and contents of every entry under ``root``, in a fixed order."""
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files) + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            path = os.path.join(folder, name)
            digest.update(os.path.relpath(path, root).encode("utf-8", "surrogateescape") + b"\0")
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                digest.update(b"L" + os.readlink(path).encode("utf-8", "surrogateescape") + b"\0")
                continue
            digest.update(b"X" if info.st_mode & 0o111 else b"F")
            with open(path, "rb") as handle:
                for chunk in iter(lambda: handle.read(_CHUNK), b""):
                    digest.update(chunk)
            digest.update(b"\0")


def inputs_digest(dockerfile_text: str, inputs: BuildInputs, base_id: str) -> str:
    """The content hash of everything a build's result depends on."""
    digest = hashlib.sha256(b"madengine-build-inputs-v1\0")
    digest.update(dockerfile_text.encode() + b"\0")
    for key, value in sorted(inputs.build_args.items()):
        digest.update(f"{key}={value}\0".encode())
    digest.update(base_id.encode() + b"\0")
    _hash_tree(digest, Path(inputs.context_dir))
    return digest.hexdigest()


class DockerBuilder:
    """Builds (or finds up to date) the images of one run; thread-safe for ``--parallel``."""

    def __init__(self, client: Engine, *, pull: bool = False, no_cache: bool = False, rebuild: bool = False) -> None:
        self.client = client
        self.pull = pull
        self.no_cache = no_cache
        self.always_build = pull or no_cache or rebuild
        self._done: dict[tuple, "ImageInfo | BuildError"] = {}
        self._locks: dict[tuple, threading.Lock] = {}
        self._locks_lock = threading.Lock()

    def build(self, image: str, inputs: BuildInputs, log_path: Path,
              live: Callable[[str], None] | None) -> ImageInfo:
        text = Path(inputs.dockerfile).read_text(encoding="utf-8", errors="replace")
        key = (str(Path(inputs.dockerfile).resolve()), hashlib.sha256(text.encode()).hexdigest(),
               str(Path(inputs.context_dir).resolve()), tuple(sorted(inputs.build_args.items())))
        with self._locks_lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:  # a parallel slot building the same thing waits for the first build
            done = self._done.get(key)
            if done is None:
                try:
                    done = self._obtain(image, inputs, text, log_path, live)
                except BuildError as exc:
                    self._done[key] = exc
                    raise
                self._done[key] = done
                return done
        return self._reuse(done, image, log_path)

    # -- one build -------------------------------------------------------------------------
    def _obtain(self, image: str, inputs: BuildInputs, text: str, log_path: Path,
                live: Callable[[str], None] | None) -> ImageInfo:
        started = time.monotonic()
        base = base_image(text, inputs.build_args)
        base_attrs = self._attrs(base)
        base_id = base_attrs.get("Id", "")
        digest = inputs_digest(text, inputs, base_id) if base_id else ""
        info = ImageInfo(image=image, image_id="", base_docker=base, docker_sha=_repo_digest(base_attrs))
        if digest and not self.always_build:
            found = self._up_to_date(image, digest)
            if found:
                _log(log_path, f"=== madengine: {image} is up to date (image {found.image_id}; build inputs "
                               f"{digest[:12]} unchanged): build skipped; --rebuild forces one\n")
                return dataclasses.replace(info, image_id=found.image_id, how=found.how,
                                           duration=time.monotonic() - started)
        image_id = self._build_now(image, inputs, log_path, live, {INPUTS_LABEL: digest} if digest else {})
        return dataclasses.replace(info, image_id=image_id, duration=time.monotonic() - started)

    def _up_to_date(self, image: str, digest: str) -> ImageInfo | None:
        """An image built from the same inputs: ``image`` itself, or another name to tag."""
        attrs = self._attrs(image)
        if ((attrs.get("Config") or {}).get("Labels") or {}).get(INPUTS_LABEL) == digest:
            return ImageInfo(image=image, image_id=attrs["Id"], how="up to date")
        same = self.client.image_ids(f"{INPUTS_LABEL}={digest}")
        if not same:
            return None
        self.client.tag(same[0], image)
        return ImageInfo(image=image, image_id=same[0], how="tagged")

    def _build_now(self, image: str, inputs: BuildInputs, log_path: Path, live: Callable[[str], None] | None,
                   labels: dict[str, str]) -> str:
        sdk = self.client.sdk  # imported here: only a build streams a tar archive to the engine
        from docker.errors import APIError, DockerException

        log_path.parent.mkdir(parents=True, exist_ok=True)
        error = ""
        with open(log_path, "a", encoding="utf-8") as log:
            sink = LineSink(log, live, keep=False)
            try:
                stream = sdk.api.build(
                    path=str(inputs.context_dir), dockerfile=str(Path(inputs.dockerfile).resolve()), tag=image,
                    buildargs=dict(inputs.build_args), nocache=self.no_cache, pull=self.pull, rm=True,
                    forcerm=True, decode=True, labels=labels)
                for chunk in stream:
                    if "stream" in chunk:
                        sink.feed(chunk["stream"].encode())
                    if "error" in chunk:
                        error = chunk["error"].strip()
                        sink.feed(("ERROR: " + error + "\n").encode())
            except (APIError, DockerException) as exc:
                error = str(exc)
                sink.feed(("ERROR: " + error + "\n").encode())
            sink.close()
        if error:
            raise BuildError(f"build of {image} failed: {last_line(redact(error))}", log_path=str(log_path))
        return self._attrs(image)["Id"]

    def _reuse(self, done: "ImageInfo | BuildError", image: str, log_path: Path) -> ImageInfo:
        if isinstance(done, BuildError):
            _log(log_path, f"=== madengine: the same build failed earlier in this run: {done.message}\n")
            raise BuildError(f"build of {image} failed: the identical build failed earlier in this run "
                             f"({done.message})", log_path=str(log_path))
        started = time.monotonic()
        self.client.tag(done.image_id, image)
        _log(log_path, f"=== madengine: same Dockerfile, build context and build args as {done.image} earlier in "
                       f"this run: tagged its image {done.image_id} as {image}\n")
        return dataclasses.replace(done, image=image, how="tagged", duration=time.monotonic() - started)

    def _attrs(self, name: str) -> dict[str, Any]:
        """``docker image inspect`` of ``name``; {} when the host has no such image."""
        if not name:
            return {}
        try:
            return self.client.inspect_image(name)
        except EngineError:  # not found, or not a valid reference (an unresolved ${ARG})
            return {}


def _repo_digest(attrs: Mapping[str, Any]) -> str:
    digests = attrs.get("RepoDigests") or []
    return digests[0].split("@", 1)[-1] if digests else attrs.get("Id", "")


def _log(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as log:
        log.write(text)


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else text[:300]
