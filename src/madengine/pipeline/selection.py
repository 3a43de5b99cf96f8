"""Which models a command runs: from the catalog by tags, or from a build manifest."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from madengine.catalog import Catalog, Model, load_catalog, model_root, select_models
from madengine.core.errors import InputError

if TYPE_CHECKING:  # a run without --manifest-file never loads the manifest code
    from madengine.distributed.manifest import Manifest


@dataclasses.dataclass
class Selection:
    catalog: Catalog
    models: list[Model]
    manifest: "Manifest | None" = None


def no_models(what: str = "--tags") -> InputError:
    """The one error of a command given nothing to run (exit 2)."""
    return InputError("no models selected", path=what, hint="e.g. --tags all, or see 'madengine discover'")


def select(tags: Sequence[str], manifest_file: str | None = None, root: Path | None = None) -> Selection:
    """The models ``tags`` select from the catalog, or from the manifest (``--tags`` filters it)."""
    if manifest_file:
        from madengine.distributed.manifest import load_manifest, manifest_models

        manifest = load_manifest(manifest_file)
        root = root or model_root()
        models = manifest_models(manifest, root, tags)
        if not models:
            raise no_models("--tags" if tags else str(manifest_file))
        return Selection(Catalog(root=root, models=models), models, manifest)
    if not tags:
        raise no_models()
    catalog = load_catalog(root)
    models = select_models(catalog, list(tags))
    if not models:
        raise no_models()
    return Selection(catalog, models)
