"""The least a namespace must allow madengine (``madengine k8s rbac``): a Role and its RoleBinding,
and the ServiceAccount they bind when the subject is one (CI running in the cluster).

What a run does, verb by verb: create, read, replace and delete its ConfigMaps, Secrets and
Services; create, read and delete Jobs; list and watch pods and read their logs. Listing nodes
(to refuse a GPU count no node can give) is cluster-wide, which no Role can grant: ``--node-read``
adds a ClusterRole and ClusterRoleBinding for it; without them a run skips that check.
"""

from __future__ import annotations

from typing import Any

from madengine.core.errors import InputError
from madengine.k8s.names import is_dns_label, is_dns_subdomain

RULES = [
    {"apiGroups": [""], "resources": ["configmaps", "secrets", "services"],
     "verbs": ["get", "create", "update", "delete"]},
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "create", "delete"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
]
NODE_RULES = [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}]
SUBJECT_KINDS = ("ServiceAccount", "User", "Group")
_LABELS = {"app.kubernetes.io/name": "madengine", "app.kubernetes.io/managed-by": "madengine"}


def rbac_objects(namespace: str, subject: str, *, kind: str = "ServiceAccount", name: str = "madengine",
                 node_read: bool = False) -> list[dict[str, Any]]:
    """The RBAC objects for ``subject`` (a ServiceAccount of ``namespace``, a User or a Group)."""
    if not is_dns_label(namespace):
        raise InputError(f"{namespace!r} is not a namespace name (a DNS-1123 label)", path="--namespace")
    if not is_dns_subdomain(name):
        raise InputError(f"{name!r} is not a Role name (a DNS-1123 subdomain)", path="--name")
    if kind not in SUBJECT_KINDS:
        raise InputError(f"unknown subject kind {kind!r}", path="--subject-kind", hint="use " + ", ".join(SUBJECT_KINDS))
    if not subject or (kind == "ServiceAccount" and not is_dns_subdomain(subject)) or not subject.isprintable():
        raise InputError(f"{subject!r} is not a {kind} name", path="--subject")
    meta = {"name": name, "namespace": namespace, "labels": dict(_LABELS)}
    who: dict[str, Any] = {"kind": kind, "name": subject}
    if kind == "ServiceAccount":
        who["namespace"] = namespace
    else:
        who["apiGroup"] = "rbac.authorization.k8s.io"
    objects: list[dict[str, Any]] = []
    if kind == "ServiceAccount":
        objects.append({"apiVersion": "v1", "kind": "ServiceAccount",
                        "metadata": {"name": subject, "namespace": namespace, "labels": dict(_LABELS)}})
    objects += [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta, "rules": RULES},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta, "subjects": [who],
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}}]
    if node_read:
        cluster_meta = {"name": f"{name}-{namespace}-node-read", "labels": dict(_LABELS)}
        objects += [
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": cluster_meta,
             "rules": NODE_RULES},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": cluster_meta,
             "subjects": [who], "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                            "name": cluster_meta["name"]}}]
    return objects


__all__ = ["NODE_RULES", "RULES", "rbac_objects"]
