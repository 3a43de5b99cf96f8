"""Docker image builds: skipped when nothing that goes into the image changed.

Every image madengine builds carries a label with a content hash of the inputs that reach the
build: the Dockerfile text, the files of the build context Docker is sent (names, modes and
contents; ``.dockerignore`` applied as the Docker SDK applies it), the build args the Dockerfile
declares (:func:`madengine.execution.dockerfile.consumed_args`: a tag config such as ``iters=5``
whose ``ITERS`` no ``ARG`` declares is not passed and not hashed, so switching it reuses the image)
and the ids of the images it starts from. Before building, the hash is computed again; an image
that already carries it is used as it is (or tagged with the new name), so a run on an unchanged
model costs no build call at all. ``--clean-docker-cache`` and ``--rebuild`` always build;
``--pull`` always builds (a newer base image may be waiting); a base image absent from the host is
built (and pulled) once without the shortcut.

An image whose name a build (or a tag) takes over is removed when nothing else names it, unless a
container uses it: rebuilds leave no untagged images behind. One a container of this run still
holds is tried again when the run ends (:meth:`DockerBuilder.close`).

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
from madengine.execution.dockerfile import PREDEFINED_ARGS, consumed_args, from_images
from madengine.execution.engine import Engine, EngineError
from madengine.execution.executor import ImageInfo
from madengine.execution.streams import LineSink
from madengine.results.parsing import strip_ansi

INPUTS_LABEL = "madengine.build-inputs"
_CHUNK = 1 << 20


@dataclasses.dataclass(frozen=True)
class BuildInputs:
    dockerfile: Path
    context_dir: Path
    #: the build args that reach the build (declared by the Dockerfile)
    build_args: Mapping[str, str]
    #: offered build args the Dockerfile does not declare: neither passed nor hashed (said in build.log)
    unused_args: tuple[str, ...] = ()


def build_inputs(dockerfile: Path, context_dir: Path, offered: Mapping[str, str]) -> BuildInputs:
    """The inputs of a build of ``dockerfile``: of the ``offered`` build args, those it declares."""
    text = Path(dockerfile).read_text(encoding="utf-8", errors="replace")
    passed, unused = consumed_args(text, offered)
    return BuildInputs(Path(dockerfile), Path(context_dir), passed, tuple(unused))


def base_image(dockerfile_text: str, build_args: Mapping[str, str]) -> str:
    """The image a Dockerfile builds FROM, with ``${ARG}`` resolved from build args and ARG defaults."""
    images = from_images(dockerfile_text, build_args)
    return images[0] if images else ""


def context_files(root: Path, dockerfile: Path) -> list[str]:
    """The entries of the build context Docker is sent, relative to ``root``, in a fixed order:
    every file and link (links to folders included, not followed), less what ``.dockerignore``
    excludes (by the Docker SDK's own matcher, imported only when there is such a file)."""
    entries = []
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files) + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            entries.append(os.path.relpath(os.path.join(folder, name), root))
    ignore = Path(root) / ".dockerignore"
    if not ignore.is_file():
        return entries
    from docker.utils.build import exclude_paths

    patterns = [line.strip() for line in ignore.read_text(encoding="utf-8", errors="replace").splitlines()]
    patterns = [p for p in patterns if p and not p.startswith("#")]
    inside = os.path.relpath(Path(dockerfile).resolve(), Path(root).resolve())
    sent = exclude_paths(str(root), patterns, dockerfile=None if inside.startswith("..") else inside)
    return [entry for entry in entries if entry in sent]


def _hash_files(digest: Any, root: Path, entries: list[str]) -> None:
    """Names, kinds, executable bits and contents of ``entries`` under ``root``."""
    for entry in entries:
        path = os.path.join(root, entry)
        digest.update(entry.encode("utf-8", "surrogateescape") + b"\0")
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
    """The content hash of everything that reaches the build: the Dockerfile, the declared build
    args (Docker's proxy args, which it keeps out of its own cache, are left out), the ids of the
    images it starts from (``base_id``) and the context as sent."""
    digest = hashlib.sha256(b"madengine-build-inputs-v1\0")
    digest.update(dockerfile_text.encode() + b"\0")
    for key, value in sorted(inputs.build_args.items()):
        if key not in PREDEFINED_ARGS:
            digest.update(f"{key}={value}\0".encode())
    digest.update(base_id.encode() + b"\0")
    _hash_files(digest, Path(inputs.context_dir), context_files(Path(inputs.context_dir), Path(inputs.dockerfile)))
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
        #: images whose name was taken over while a container still used them: tried again at close
        self._replaced: dict[str, Path] = {}

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
        if inputs.unused_args:
            _log(log_path, f"=== madengine: build args the Dockerfile declares no ARG for, so neither passed nor "
                           f"part of the build inputs: {', '.join(sorted(inputs.unused_args))}\n")
        base, base_attrs, base_id = self._starting_images(text, inputs.build_args)
        digest = inputs_digest(text, inputs, base_id) if base_id else ""
        info = ImageInfo(image=image, image_id="", base_docker=base, docker_sha=_repo_digest(base_attrs))
        previous = self._attrs(image).get("Id", "")
        if digest and not self.always_build:
            found = self._up_to_date(image, digest)
            if found:
                _log(log_path, f"=== madengine: {image} is up to date (image {found.image_id}; build inputs "
                               f"{digest[:12]} unchanged): build skipped; --rebuild forces one\n")
                self._drop_replaced(previous, found.image_id, log_path)
                return dataclasses.replace(info, image_id=found.image_id, how=found.how,
                                           duration=time.monotonic() - started)
        image_id = self._build_now(image, inputs, log_path, live, {INPUTS_LABEL: digest} if digest else {})
        self._drop_replaced(previous, image_id, log_path)
        return dataclasses.replace(info, image_id=image_id, duration=time.monotonic() - started)

    def _starting_images(self, text: str, build_args: Mapping[str, str]) -> tuple[str, dict[str, Any], str]:
        """The first FROM image, its inspection, and the ids of every image the build starts from
        ('' when one is not on the host: a real build pulls it; 'scratch' when there is none)."""
        starts = from_images(text, build_args)
        if not starts:
            return "scratch", {}, "scratch"
        attrs = self._attrs(starts[0])
        ids = [attrs.get("Id", "")] + [self._attrs(other).get("Id", "") for other in starts[1:]]
        return starts[0], attrs, ",".join(ids) if all(ids) else ""

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

    # -- images a name was taken from --------------------------------------------------------
    def _drop_replaced(self, previous: str, current: str, log_path: Path) -> None:
        """Remove the image ``previous`` that a name now pointing at ``current`` was taken from,
        when no other name refers to it; one a container uses is kept (tried again at close)."""
        if not previous or previous == current:
            return
        outcome = self._remove_unnamed(previous)
        if outcome == "in use":
            self._replaced[previous] = log_path
        if outcome:
            _log(log_path, f"=== madengine: the image this name pointed at before ({previous[:19]}) "
                           f"{_REMOVAL_TEXT[outcome]}\n")

    def _remove_unnamed(self, image_id: str) -> str:
        """'removed', 'in use' (a container uses it: kept) or '' (still named, or gone already)."""
        attrs = self._attrs(image_id)
        if not attrs or attrs.get("RepoTags"):
            return ""
        try:
            self.client.remove_image(image_id)
        except EngineError as exc:
            return "in use" if exc.status == 409 else ""
        return "removed"

    def close(self) -> None:
        """Try again to remove the replaced images containers held (those of this run are gone now);
        an image a container still uses stays."""
        for image_id, log_path in list(self._replaced.items()):
            if self._remove_unnamed(image_id) == "removed":
                _log(log_path, f"=== madengine: the replaced image {image_id[:19]} was removed once its "
                               f"container had gone\n")
            del self._replaced[image_id]

    def _build_now(self, image: str, inputs: BuildInputs, log_path: Path, live: Callable[[str], None] | None,
                   labels: dict[str, str]) -> str:
        sdk = self.client.sdk  # imported here: only a build streams a tar archive to the engine
        from docker.errors import APIError, DockerException

        log_path.parent.mkdir(parents=True, exist_ok=True)
        error = said = ""
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
                        said = step_said(chunk["stream"], said)
                    if "error" in chunk:
                        error = chunk["error"].strip()
                        sink.feed(("ERROR: " + error + "\n").encode())
            except (APIError, DockerException) as exc:
                error = str(exc)
                sink.feed(("ERROR: " + error + "\n").encode())
            sink.close()
        if error:
            raise BuildError(f"build of {image} failed: {build_failure(redact(error), redact(said))}",
                             log_path=str(log_path))
        return self._attrs(image)["Id"]

    def _reuse(self, done: "ImageInfo | BuildError", image: str, log_path: Path) -> ImageInfo:
        if isinstance(done, BuildError):
            _log(log_path, f"=== madengine: the same build failed earlier in this run: {done.message}\n")
            raise BuildError(f"build of {image} failed: the identical build failed earlier in this run "
                             f"({done.message})", log_path=str(log_path))
        started = time.monotonic()
        previous = self._attrs(image).get("Id", "")
        self.client.tag(done.image_id, image)
        self._drop_replaced(previous, done.image_id, log_path)
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


_REMOVAL_TEXT = {"removed": "had no other name and was removed",
                 "in use": "has no other name but a container uses it: kept for now"}


def _repo_digest(attrs: Mapping[str, Any]) -> str:
    digests = attrs.get("RepoDigests") or []
    return digests[0].split("@", 1)[-1] if digests else attrs.get("Id", "")


def _log(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as log:
        log.write(text)


#: what the builder itself writes around a step's own output
_BUILDER_LINE = re.compile(r"^(Step \d+/\d+ :|\s*---> |Removing intermediate container|Successfully (built|tagged) )")
_STEP_EXIT = re.compile(r"The command .* returned a non-zero code: (\d+)\s*$", re.DOTALL)


def step_said(text: str, said: str) -> str:
    """The last line the running step itself printed, after the build output ``text``: a new
    ``Step N/M`` forgets the previous step's."""
    for line in strip_ansi(text).splitlines():
        stripped = line.strip()
        if line.startswith("Step "):
            said = ""
        elif stripped and not _BUILDER_LINE.match(line):
            said = stripped
    return said


def build_failure(error: str, said: str) -> str:
    """One line saying why a build failed: for a step that exited non-zero, what that step said last
    (``no wheels in the build context: run scripts/pyt-wheels.sh``) and its exit code, not the
    builder's ``The command '/bin/sh -c <the whole RUN line>' returned ...``; else the error's last line."""
    step = _STEP_EXIT.search(error.strip())
    if step and said:
        return f"{said[:300]} (a RUN step exited with code {step.group(1)})"
    return last_line(error)


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else text[:300]
