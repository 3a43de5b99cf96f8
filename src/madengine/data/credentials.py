"""Credentials for models (``cred``), git clones, and data providers.

Minimal foundation version: a model without ``cred`` clones anonymously.
"""

from __future__ import annotations

from typing import Callable

from madengine.catalog.schema import Model
from madengine.core.errors import CredentialError


def git_environment(model: Model) -> tuple[dict[str, str] | None, str, Callable[[], None]]:
    """(environment for git, URL to clone, cleanup) for cloning ``model.url``."""
    if model.cred:
        raise CredentialError(f"credential '{model.cred}' cannot be applied yet", field=f"model '{model.name}'")
    return None, model.url, lambda: None


def apply_model_credentials(spec) -> None:
    raise CredentialError(f"credential '{spec.model.cred}' cannot be applied yet", field=f"model '{spec.model.name}'")
