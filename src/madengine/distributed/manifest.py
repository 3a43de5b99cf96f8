"""The build/run split: ``madengine build`` builds the selected models' images once and writes an
immutable build manifest; ``madengine run --manifest-file`` runs exactly those images (checked
by image id) on any host, without rebuilding.

The manifest is written once, whole, by the build and never modified by a run. Build args in it
pass through secret redaction (build args must never carry credentials: those reach the model at
run time through its ``cred`` entry). A build that failed is listed with its reason, and a run
of that manifest records a FAILURE row for it, so a broken build is never silently skipped.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from madengine.core.version import __version__
from madengine.catalog import Catalog, Model, select_models
from madengine.catalog.schema import model_from_entry
from madengine.core.errors import ConfigError, InputError
from madengine.core.events import Reporter
from madengine.core.ids import machine_name
from madengine.core.jsonio import read_json_file
from madengine.core.redact import redact
from madengine.distributed import transport
from madengine.distributed.options import TransportOptions
from madengine.execution.executor import ImageInfo, Target
from madengine.execution.plan import image_key

FORMAT = "madengine-build-manifest"
FORMAT_VERSION = 1




@dataclasses.dataclass
class ManifestImage:
    """One built image: what a run needs to find it (id, registry digest, archive) and to run it."""

    model: str
    image: str
    image_id: str
    dockerfile: str
    base_docker: str = ""
    docker_sha: str = ""
    build_args: dict[str, str] = dataclasses.field(default_factory=dict)
    build_duration: float = 0.0
    built_at: str = ""
    registry_image: str = ""  # repository@sha256:... that a run pulls (with --registry)
    archive: str = ""  # file name in the image archive folder (with --image-archive)
    model_entry: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class FailedBuild:
    model: str
    reason: str
    image: str = ""
    dockerfile: str = ""
    model_entry: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Manifest:
    build_id: str
    built_at: str
    madengine_version: str
    machine: str
    model_repository: str
    tags: list[str]
    context: dict[str, Any]
    registry: str | None = None
    image_archive: str | None = None
    images: list[ManifestImage] = dataclasses.field(default_factory=list)
    failed: list[FailedBuild] = dataclasses.field(default_factory=list)
    path: Path | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "format_version": FORMAT_VERSION, "build_id": self.build_id,
            "built_at": self.built_at, "madengine_version": self.madengine_version, "machine": self.machine,
            "model_repository": self.model_repository, "tags": self.tags, "context": self.context,
            "registry": self.registry, "image_archive": self.image_archive,
            "images": [dataclasses.asdict(i) for i in self.images],
            "failed": [dataclasses.asdict(f) for f in self.failed],
            "summary": {"built": len(self.images), "failed": len(self.failed)},
        }

    def images_of(self, model_name: str) -> list[ManifestImage]:
        return [i for i in self.images if i.model == model_name]

    def failures_of(self, model_name: str) -> list[FailedBuild]:
        return [f for f in self.failed if f.model == model_name]

    def image(self, key: str) -> ManifestImage:
        for entry in self.images:
            if entry.image == key:
                return entry
        raise InputError(f"the manifest has no image '{key}'", path=str(self.path or "manifest"))

    def models(self) -> list[Model]:
        """The models of the manifest (built or failed), in build order, each once."""
        seen: dict[str, Model] = {}
        for entry in [*self.images, *self.failed]:
            if entry.model not in seen:
                seen[entry.model] = model_of_entry(entry.model_entry, entry.model, str(self.path or "manifest"))
        return list(seen.values())


# -- model entries -------------------------------------------------------------------------------
def model_entry(model: Model) -> dict[str, Any]:
    """The catalog entry as built: the model's own ``args`` with the tag configs kept apart."""
    entry = model.to_dict()
    entry["args"] = model.args
    return entry


def model_of_entry(entry: Mapping[str, Any], name: str, source: str) -> Model:
    if not isinstance(entry, Mapping) or not entry:
        raise ConfigError(f"model '{name}' has no model_entry", path=source)
    values = dict(entry)
    configs = values.pop("tag_configs", {}) or {}
    model = model_from_entry(values, source=source)
    model.tag_configs = [(str(k), str(v)) for k, v in dict(configs).items()]
    return model


# -- reading and writing -------------------------------------------------------------------------
def write_manifest(manifest: Manifest, path: Path) -> Path:
    """Write the manifest whole (temporary file renamed into place): readers never see half of it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(manifest.to_json(), indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    manifest.path = path
    return path


def _fields(cls: type, data: Mapping[str, Any], shown: str) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    required = {f.name for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}  # type: ignore[misc]
    if not isinstance(data, Mapping):
        raise ConfigError(f"an entry must be an object, got {type(data).__name__}", path=shown)
    missing = sorted(required - set(data))
    if missing:
        raise ConfigError(f"an entry lacks {', '.join(missing)}", path=shown)
    values = {k: v for k, v in data.items() if k in names}
    for field in dataclasses.fields(cls):
        if field.name in values:
            _check_type(values[field.name], _kind(field), f"{cls.__name__.lower()}.{field.name}", shown)
    return values


def _kind(field: dataclasses.Field) -> type:
    """What a manifest field holds, from its default: text, a number or an object."""
    if field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return dict
    return float if isinstance(field.default, float) else str


def _check_type(value: Any, kind: type, where: str, shown: str) -> None:
    if kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    elif kind is dict:
        ok = isinstance(value, dict) and all(isinstance(k, str) for k in value)
    else:
        ok = isinstance(value, str)
    if not ok:
        what = {float: "a number", dict: "an object", str: "a string"}[kind]
        raise ConfigError(f"{where} must be {what}, got {type(value).__name__}", path=shown,
                          hint="rebuild the manifest with 'madengine build'")


def load_manifest(path: str | Path) -> Manifest:
    """Read and check a build manifest (InputError when missing, ConfigError when malformed)."""
    path = Path(path)
    shown = str(path)
    data = read_json_file(path, error=ConfigError, missing="build manifest not found",
                          hint="create it with 'madengine build'")
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ConfigError("not a madengine build manifest (no \"format\": \"madengine-build-manifest\")", path=shown)
    if data.get("format_version") != FORMAT_VERSION:
        raise ConfigError(f"format_version {data.get('format_version')!r} is not supported (expected "
                          f"{FORMAT_VERSION})", path=shown, hint="rebuild with this madengine version")
    for key in ("images", "failed", "tags"):
        if not isinstance(data.get(key, []), list):
            raise ConfigError(f"'{key}' must be a list", path=shown)
    if not all(isinstance(tag, str) for tag in data.get("tags", [])):
        raise ConfigError("'tags' must be a list of strings", path=shown)
    if not isinstance(data.get("context", {}), dict):
        raise ConfigError("'context' must be an object", path=shown)
    for key in ("registry", "image_archive"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise ConfigError(f"'{key}' must be a string or null", path=shown)
    images = [ManifestImage(**_fields(ManifestImage, i, shown)) for i in data.get("images", [])]
    failed = [FailedBuild(**_fields(FailedBuild, f, shown)) for f in data.get("failed", [])]
    return Manifest(
        build_id=str(data.get("build_id", "")), built_at=str(data.get("built_at", "")),
        madengine_version=str(data.get("madengine_version", "")), machine=str(data.get("machine", "")),
        model_repository=str(data.get("model_repository", "")), tags=list(data.get("tags", [])),
        context=dict(data.get("context", {})), registry=data.get("registry"), image_archive=data.get("image_archive"),
        images=images, failed=failed, path=path)


# -- build -------------------------------------------------------------------------------------
def context_record(context: Any) -> dict[str, Any]:
    """What the manifest says about the build context: the summary and the (redacted) build args."""
    record = dict(context.summary())
    record["docker_build_arg"] = {k: redact(str(v)) for k, v in context.docker_build_arg.items()}
    return record


def new_manifest(build_id: str, built_at: str, root: Path, tags: list[str], context: Any,
                 transport: TransportOptions) -> Manifest:
    archive = Path(transport.image_archive).resolve() if transport.image_archive else None
    return Manifest(build_id=build_id, built_at=built_at, madengine_version=__version__, machine=machine_name(),
                    model_repository=str(root), tags=list(tags), context=context_record(context),
                    registry=transport.registry, image_archive=str(archive) if archive else None)


class Publisher:
    """Sends built images where other hosts find them: a registry (by digest) and/or an archive folder."""

    def __init__(self, client: Any, manifest: Manifest, reporter: Reporter, run_id: str,
                 auth: transport.RegistryAuth | None) -> None:
        self.client = client
        self.registry = manifest.registry
        self.archive_dir = Path(manifest.image_archive) if manifest.image_archive else None
        self.reporter = reporter
        self.run_id = run_id
        self.auth = auth
        if self.registry:
            transport.login(client, self.registry, auth)

    def publish(self, entry: ManifestImage) -> None:
        """Push and/or save ``entry``'s image, recording where it went; a MadEngineError if it fails."""
        if self.registry:
            self.reporter.message(f"madengine: pushing {entry.image} to {self.registry}")
            entry.registry_image = transport.push(self.client, entry.image_id, f"{self.registry}/{entry.image}",
                                                  self.run_id, self.auth)
        if self.archive_dir is not None:
            name = transport.archive_name(entry.image, entry.image_id)
            self.reporter.message(f"madengine: saving {entry.image} to {self.archive_dir / name}")
            transport.save(self.client, entry.image_id, self.archive_dir, name)
            entry.archive = name


def built_entry(model: Model, target: Target, image: ImageInfo, built_at: str) -> ManifestImage:
    return ManifestImage(
        model=model.name, image=target.key, image_id=image.image_id, dockerfile=target.docker_file,
        base_docker=image.base_docker, docker_sha=image.docker_sha,
        build_args={k: redact(str(v)) for k, v in target.source.build_args.items()},
        build_duration=round(image.duration, 3), built_at=built_at, model_entry=model_entry(model))


def failed_entry(model: Model, reason: str, target: Target | None = None) -> FailedBuild:
    return FailedBuild(model.name, redact(reason), target.key if target else "", target.docker_file if target else "",
                       model_entry(model))


# -- run ---------------------------------------------------------------------------------------
class ManifestImages:
    """The image source of ``run --manifest-file``: each image looked up by id, loaded from the
    image archive or pulled from the registry when absent, never built. A failed build is a
    target that cannot run (its FAILURE row says why)."""

    def __init__(self, manifest: Manifest, client: Any, transport_options: TransportOptions, reporter: Reporter,
                 auth: transport.RegistryAuth | None) -> None:
        self.manifest = manifest
        self.client = client
        self.options = transport_options
        self.reporter = reporter
        self.auth = auth

    def targets(self, model: Model) -> list[Target]:
        failed = [Target(key=f.image or image_key(model.name, "unbuilt"), docker_file=f.dockerfile,
                         failure=f"not built: {f.reason}") for f in self.manifest.failures_of(model.name)]
        built = [Target(key=e.image, docker_file=e.dockerfile, source=e, obtaining="fetching image")
                 for e in self.manifest.images_of(model.name)]
        return failed + built

    def obtain(self, target: Target) -> ImageInfo:
        entry: ManifestImage = target.source
        archive_dir = self.options.image_archive or self.manifest.image_archive
        archive = Path(archive_dir) / entry.archive if archive_dir and entry.archive else None
        reference = entry.registry_image
        if reference and self.options.registry:
            reference = transport.relocate(reference, transport.check_registry(self.options.registry))
        started = time.monotonic()
        transport.ensure_image(self.client, image=entry.image, image_id=entry.image_id, archive=archive,
                               reference=reference, auth=self.auth)
        waited = time.monotonic() - started
        if waited > 1:
            self.reporter.message(f"madengine: {entry.image} fetched in {waited:.1f} s")
        # run by image id: the local name may since point at a rebuilt image
        return ImageInfo(image=entry.image, image_id=entry.image_id, base_docker=entry.base_docker,
                         docker_sha=entry.docker_sha, duration=entry.build_duration, how="manifest")


def manifest_models(manifest: Manifest, root: Path, tags: Sequence[str]) -> list[Model]:
    """The models of ``run --manifest-file`` (``--tags`` filters the manifest)."""
    models = manifest.models()
    if tags:
        chosen = {m.name for m in select_models(Catalog(root=root, models=models), list(tags))}
        models = [m for m in models if m.name in chosen]
    return models
