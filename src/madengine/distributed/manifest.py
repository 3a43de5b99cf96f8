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
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from madengine import __version__
from madengine.catalog import Catalog, Model, load_catalog, select_models
from madengine.catalog.schema import model_from_entry
from madengine.catalog.sources import model_root
from madengine.context import build_context, select_dockerfiles
from madengine.core.clock import utc_now
from madengine.core.errors import ConfigError, InputError, MadEngineError
from madengine.core.jsonio import read_json_file
from madengine.core.redact import redact
from madengine.distributed import transport
from madengine.core.events import Reporter
from madengine.execution.options import RunOptions
from madengine.core.ids import machine_name
from madengine.execution.plan import image_key
from madengine.core.ids import new_run_id
from madengine.execution.runner import Runner, choose_executor
from madengine.results import PerfRecord

FORMAT = "madengine-build-manifest"
FORMAT_VERSION = 1
DEFAULT_MANIFEST = "build_manifest.json"




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
    return {k: v for k, v in data.items() if k in names}


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
    for key in ("images", "failed"):
        if not isinstance(data.get(key, []), list):
            raise ConfigError(f"'{key}' must be a list", path=shown)
    images = [ManifestImage(**_fields(ManifestImage, i, shown)) for i in data.get("images", [])]
    failed = [FailedBuild(**_fields(FailedBuild, f, shown)) for f in data.get("failed", [])]
    return Manifest(
        build_id=str(data.get("build_id", "")), built_at=str(data.get("built_at", "")),
        madengine_version=str(data.get("madengine_version", "")), machine=str(data.get("machine", "")),
        model_repository=str(data.get("model_repository", "")), tags=list(data.get("tags", [])),
        context=dict(data.get("context", {})), registry=data.get("registry"), image_archive=data.get("image_archive"),
        images=images, failed=failed, path=path)


# -- build -------------------------------------------------------------------------------------
def _context_record(context: Any) -> dict[str, Any]:
    """What the manifest says about the build context: the summary and the (redacted) build args."""
    record = dict(context.summary())
    record["docker_build_arg"] = {k: redact(str(v)) for k, v in context.docker_build_arg.items()}
    return record


def _build_one(runner: Runner, model: Model, dockerfile: Any, registry: str | None,
               auth: transport.RegistryAuth | None, archive_dir: Path | None) -> ManifestImage | FailedBuild:
    key = image_key(model.name, dockerfile.stem)
    root = runner.root
    shown = _relative(dockerfile.path, root)
    build_args = runner.build_args(model)
    context_dir = (root / model.dockercontext) if model.dockercontext else dockerfile.path.parent
    try:
        build = runner.obtain_image(model, key, dockerfile.path, context_dir, build_args)
    except MadEngineError as exc:
        return FailedBuild(model.name, redact(str(exc)), key, shown, model_entry(model))
    entry = ManifestImage(
        model=model.name, image=key, image_id=build.image_id, dockerfile=shown, base_docker=build.base_docker,
        docker_sha=build.docker_sha, build_args={k: redact(str(v)) for k, v in build_args.items()},
        build_duration=round(build.duration, 3), built_at=utc_now(), model_entry=model_entry(model))
    client = runner.executor.client
    try:
        if registry:
            runner.reporter.message(f"madengine: pushing {key} to {registry}")
            entry.registry_image = transport.push(client, build.image_id, f"{registry}/{key}", runner.run_id, auth)
        if archive_dir is not None:
            name = transport.archive_name(key, build.image_id)
            runner.reporter.message(f"madengine: saving {key} to {archive_dir / name}")
            transport.save(client, build.image_id, archive_dir, name)
            entry.archive = name
    except MadEngineError as exc:
        return FailedBuild(model.name, f"built as {build.image_id[:19]} but {exc}", key, shown, model_entry(model))
    return entry


def build_models(options: RunOptions, reporter: Reporter | None = None, *,
                 manifest_path: str | Path = DEFAULT_MANIFEST,
                 auth: transport.RegistryAuth | None = None) -> Manifest:
    """Build every selected model's images (pushing or saving them when asked) and write the manifest.

    A model whose Dockerfiles cannot be selected or whose build, push or save fails is listed
    under ``failed`` with the reason; the other models go on.
    """
    reporter = reporter or Reporter()
    if not options.tags:
        raise InputError("no models selected", path="--tags", hint="e.g. --tags all, or see 'madengine discover'")
    registry = transport.check_registry(options.registry) if options.registry else None
    context = build_context(context_file=options.context_file, context_string=options.context_string)
    catalog = load_catalog()
    models = select_models(catalog, options.tags)
    executor = choose_executor(dataclasses.replace(options, executor="docker"), reporter)
    if registry:
        transport.login(executor.client, registry, auth)
    archive_dir = Path(options.image_archive).resolve() if options.image_archive else None
    build_id = new_run_id()
    runner = Runner(options, context, catalog, executor, reporter, build_id)
    manifest = Manifest(build_id=build_id, built_at=utc_now(), madengine_version=__version__, machine=machine_name(),
                        model_repository=str(catalog.root), tags=list(options.tags),
                        context=_context_record(context), registry=registry,
                        image_archive=str(archive_dir) if archive_dir else None)
    reporter.message(f"madengine: build {build_id}: {len(models)} model(s); manifest → {manifest_path}")
    for model in models:
        try:
            dockerfiles = select_dockerfiles(catalog.root, model.name, model.dockerfile, context.values)
        except MadEngineError as exc:
            manifest.failed.append(FailedBuild(model.name, redact(str(exc)), model_entry=model_entry(model)))
            continue
        for dockerfile in dockerfiles:
            outcome = _build_one(runner, model, dockerfile, registry, auth, archive_dir)
            if isinstance(outcome, FailedBuild):
                manifest.failed.append(outcome)
                reporter.message(f"madengine: {model.name}: build FAILED ({outcome.reason})")
            else:
                manifest.images.append(outcome)
                reporter.message(f"madengine: {model.name}: built {outcome.image} ({outcome.image_id[:19]})")
    write_manifest(manifest, Path(manifest_path))
    return manifest


# -- run ---------------------------------------------------------------------------------------
class ManifestRunner(Runner):
    """A Runner whose images come from a build manifest: looked up by id, loaded from the image
    archive or pulled from the registry when absent, never built."""

    def __init__(self, *args: Any, manifest: Manifest, auth: transport.RegistryAuth | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.manifest = manifest
        self.auth = auth

    def _run_docker(self, model: Model, gpu_ids: list[int]) -> Iterator[PerfRecord]:
        for failed in self.manifest.failures_of(model.name):
            yield self.failure(model, f"not built: {failed.reason}", docker_file=failed.dockerfile,
                               docker_image=failed.image)
        for entry in self.manifest.images_of(model.name):
            if self._interrupted:
                return
            try:
                build = self.obtain_image(model, entry.image, Path(entry.dockerfile), self.root, entry.build_args)
            except MadEngineError as exc:
                yield self.failure(model, str(exc), docker_file=entry.dockerfile, docker_image=entry.image,
                                   image_id=entry.image_id)
                continue
            # run by image id: the local name may since point at a rebuilt image
            for record in self._run_spec(model, entry.image, gpu_ids, image=entry.image_id,
                                         docker_file=entry.dockerfile, build=build):
                record.docker_image = entry.image
                yield record

    def obtain_image(self, model: Model, key: str, dockerfile: Path, context_dir: Path,
                     build_args: dict[str, str]) -> Any:
        from madengine.execution.docker import BuildInfo

        entry = self.manifest.image(key)
        archive_dir = self.options.image_archive or self.manifest.image_archive
        archive = Path(archive_dir) / entry.archive if archive_dir and entry.archive else None
        reference = entry.registry_image
        if reference and self.options.registry:
            reference = transport.relocate(reference, transport.check_registry(self.options.registry))
        started = time.monotonic()
        transport.ensure_image(self.executor.client, image=key, image_id=entry.image_id, archive=archive,
                               reference=reference, auth=self.auth)
        waited = time.monotonic() - started
        if waited > 1:
            self.reporter.message(f"madengine: {key} fetched in {waited:.1f} s")
        return BuildInfo(image=key, image_id=entry.image_id, base_docker=entry.base_docker,
                         docker_sha=entry.docker_sha, duration=entry.build_duration)


@dataclasses.dataclass
class ManifestPlan:
    options: RunOptions
    catalog: Catalog
    models: list[Model]
    make_runner: Callable[..., Runner]


def plan_manifest_run(options: RunOptions, environ: Mapping[str, str] | None = None) -> ManifestPlan:
    """The models and the Runner factory of ``run --manifest-file`` (``--tags`` filters the manifest)."""
    manifest = load_manifest(options.manifest_file or DEFAULT_MANIFEST)
    if options.executor == "local":
        raise InputError("a manifest run runs the manifest's images, which needs Docker", path="--executor",
                         hint="use --executor docker (or auto)")
    if options.executor == "auto":
        options = dataclasses.replace(options, executor="docker")
    models = manifest.models()
    root = model_root()
    if options.tags:
        chosen = {m.name for m in select_models(Catalog(root=root, models=models), options.tags)}
        models = [m for m in models if m.name in chosen]
    auth = transport.registry_auth(environ if environ is not None else os.environ)

    def make_runner(*args: Any) -> Runner:
        return ManifestRunner(*args, manifest=manifest, auth=auth)

    return ManifestPlan(options=options, catalog=Catalog(root=root, models=models), models=models,
                        make_runner=make_runner)


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)
