"""Which cluster a run talks to: the kubeconfig file and context of the ``k8s`` block, checked
before the Kubernetes client is loaded, so that a missing file or context is one line (exit 2).

The file is read as data (``yaml.safe_load``); nothing in it is executed here. Credentials in it
(tokens, client keys, exec plugins) are the client's business and never leave this module.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Mapping

from madengine.core.errors import ConfigError
from madengine.k8s.settings import K8sSettings

#: what a pod sees when madengine itself runs in a cluster
IN_CLUSTER_HOST = "KUBERNETES_SERVICE_HOST"
DEFAULT_NAMESPACE = "default"


@dataclasses.dataclass(frozen=True)
class ClusterTarget:
    """The cluster of a run: kubeconfig files (``os.pathsep``-separated, as ``$KUBECONFIG``) and
    context, or the pod's own service account (``in_cluster``); and the namespace the jobs go to."""

    kubeconfig: str
    context: str
    namespace: str
    in_cluster: bool = False


def _bad(field: str, message: str, hint: str | None = None) -> ConfigError:
    return ConfigError(message, path="context", field=f"k8s.{field}", hint=hint)


def _files(settings: K8sSettings, environ: Mapping[str, str]) -> tuple[list[Path], str]:
    """The kubeconfig files and where they were named (the block, $KUBECONFIG or the default)."""
    if settings.kubeconfig:
        return [Path(os.path.expanduser(settings.kubeconfig))], "k8s.kubeconfig"
    if environ.get("KUBECONFIG"):
        return [Path(os.path.expanduser(p)) for p in environ["KUBECONFIG"].split(os.pathsep) if p], "$KUBECONFIG"
    home = environ.get("HOME") or os.path.expanduser("~")
    return [Path(home) / ".kube" / "config"], "default"


def _read(path: Path) -> Mapping[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise _bad("kubeconfig", f"{path}: cannot be read ({getattr(exc, 'strerror', None) or exc})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise _bad("kubeconfig", f"{path}: not a YAML kubeconfig{where}") from None
    if not isinstance(data, Mapping):
        raise _bad("kubeconfig", f"{path}: not a kubeconfig (no contexts)")
    return data


def _contexts(data: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    out = {}
    for entry in data.get("contexts") or []:
        if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
            body = entry.get("context")
            out[entry["name"]] = body if isinstance(body, Mapping) else {}
    return out


def resolve_cluster(settings: K8sSettings, environ: Mapping[str, str]) -> ClusterTarget:
    """The cluster ``settings`` name; ConfigError (exit 2) naming the key when the kubeconfig or
    its context is missing. With no kubeconfig anywhere, a pod's own account (in-cluster)."""
    files, named = _files(settings, environ)
    existing = [path for path in files if path.is_file()]
    if not existing:
        if named == "default" and environ.get(IN_CLUSTER_HOST) and not settings.context:
            return ClusterTarget("", "", settings.namespace or DEFAULT_NAMESPACE, in_cluster=True)
        shown = ", ".join(str(p) for p in files)
        raise _bad("kubeconfig", f"kubeconfig {shown} not found" if named != "default" else
                   f"no kubeconfig: k8s.kubeconfig is not set, $KUBECONFIG is not set and {shown} does not exist",
                   hint="give k8s.kubeconfig the path of your cluster's kubeconfig")
    contexts: dict[str, Mapping[str, Any]] = {}
    current = ""
    for path in existing:
        data = _read(path)
        for name, body in _contexts(data).items():
            contexts.setdefault(name, body)
        current = current or str(data.get("current-context") or "")
    chosen = settings.context or current
    if not chosen:
        raise _bad("context", f"{existing[0]} has no current-context and k8s.context is not set",
                   hint="set k8s.context to one of: " + (", ".join(sorted(contexts)) or "(none)"))
    if chosen not in contexts:
        raise _bad("context", f"kubeconfig {', '.join(map(str, existing))} has no context '{chosen}'",
                   hint="its contexts: " + (", ".join(sorted(contexts)) or "(none)"))
    namespace = settings.namespace or str(contexts[chosen].get("namespace") or "") or DEFAULT_NAMESPACE
    return ClusterTarget(os.pathsep.join(str(p) for p in existing), chosen, namespace)


__all__ = ["ClusterTarget", "resolve_cluster"]
