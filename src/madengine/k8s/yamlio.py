"""Rendered objects as YAML files, for review and GitOps (``madengine k8s render``, ``run
--executor k8s --dry-run``, and the run folder's record of what was sent).

Multi-line texts (the entry script, the model's scripts) are written as literal blocks, so a file
reads as the script it carries. Secrets hold credentials: their files are written only when asked,
and then readable by their owner only.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml


class _Dumper(yaml.SafeDumper):
    """Safe YAML; texts of several lines as ``|`` blocks."""


def _text(dumper: yaml.SafeDumper, value: str) -> Any:
    # PyYAML keeps a block only where it can hold the text exactly (else it quotes)
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _text)


def dump(obj: Mapping[str, Any]) -> str:
    return yaml.dump(dict(obj), Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True,
                     width=120)


def dump_all(objects: Iterable[Mapping[str, Any]]) -> str:
    return "".join(f"---\n{dump(obj)}" for obj in objects)


def write_objects(objects: Iterable[Mapping[str, Any]], folder: Path, *, include_secrets: bool = False) -> list[Path]:
    """One file per object, ``NN-<kind>-<name>.yaml`` in the order they are created."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for index, obj in enumerate(objects):
        secret = obj.get("kind") == "Secret"
        if secret and not include_secrets:
            continue
        path = folder / f"{index:02d}-{str(obj['kind']).lower()}-{obj['metadata']['name']}.yaml"
        text = dump(obj)
        if secret:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
            os.chmod(path, 0o600)
        else:
            path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def write_plan(job: Any, folder: Path, *, include_secrets: bool = False) -> list[Path]:
    """A job's objects under ``folder/<job name>/``."""
    return write_objects(job.objects, folder / job.name, include_secrets=include_secrets)


__all__ = ["dump", "dump_all", "write_objects", "write_plan"]
