"""Kubernetes objects a user writes into the ``k8s`` block (``affinity``), checked field by field
against the API's shape before anything is rendered: an unknown field, a missing required one, a
wrong type or an operator that does not fit its values is a one-line error naming the path
(``k8s.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey``).

A shape is a dict of field → (kind, required); a kind is ``str``, ``int`` (a weight: 1–100),
``"key"`` (a label key), ``"labels"`` (label key → value), a nested shape, or a one-item list of
a kind (a list of them). Pure: no I/O.
"""

from __future__ import annotations

from typing import Any, Mapping

from madengine.core.values import brief
from madengine.k8s.names import is_label_value, is_qualified_name

_NODE_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
_LABEL_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
_WEIGHT = (1, 100)

_NODE_REQUIREMENT = {"key": ("key", True), "operator": (_NODE_OPERATORS, True), "values": ([str], False)}
_NODE_TERM = {"matchExpressions": ([_NODE_REQUIREMENT], False), "matchFields": ([_NODE_REQUIREMENT], False)}
_LABEL_REQUIREMENT = {"key": ("key", True), "operator": (_LABEL_OPERATORS, True), "values": ([str], False)}
_LABEL_SELECTOR = {"matchLabels": ("labels", False), "matchExpressions": ([_LABEL_REQUIREMENT], False)}
_POD_TERM = {"labelSelector": (_LABEL_SELECTOR, False), "namespaceSelector": (_LABEL_SELECTOR, False),
             "namespaces": ([str], False), "topologyKey": ("key", True), "matchLabelKeys": (["key"], False),
             "mismatchLabelKeys": (["key"], False)}
_POD_AFFINITY = {"requiredDuringSchedulingIgnoredDuringExecution": ([_POD_TERM], False),
                 "preferredDuringSchedulingIgnoredDuringExecution": ([{"weight": (int, True),
                                                                       "podAffinityTerm": (_POD_TERM, True)}], False)}
AFFINITY = {
    "nodeAffinity": ({"requiredDuringSchedulingIgnoredDuringExecution": ({"nodeSelectorTerms": ([_NODE_TERM], True)},
                                                                        False),
                      "preferredDuringSchedulingIgnoredDuringExecution": ([{"weight": (int, True),
                                                                            "preference": (_NODE_TERM, True)}], False)},
                     False),
    "podAffinity": (_POD_AFFINITY, False),
    "podAntiAffinity": (_POD_AFFINITY, False),
}


class ShapeError(ValueError):
    """``path`` (below the checked value) and what is wrong there."""

    def __init__(self, path: str, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.path, self.message, self.hint = path, message, hint


def checked(value: Any, shape: Mapping[str, Any], path: str = "") -> dict[str, Any]:
    """``value`` as a plain JSON object of ``shape`` (ShapeError for the first field at fault)."""
    if not isinstance(value, Mapping):
        raise ShapeError(path, f"must be an object, got {brief(value)}")
    unknown = [key for key in value if key not in shape]
    if unknown:
        raise ShapeError(_join(path, str(unknown[0])), "unknown field", "known fields: " + ", ".join(shape))
    out: dict[str, Any] = {}
    for field, (kind, required) in shape.items():
        if value.get(field) is None:
            if required:
                raise ShapeError(_join(path, field), "is required")
            continue
        out[field] = _value(value[field], kind, _join(path, field))
    if "operator" in out:
        _check_values(out, path)
    return out


def _value(value: Any, kind: Any, path: str) -> Any:
    if isinstance(kind, list):
        if not isinstance(value, list):
            raise ShapeError(path, f"must be a list, got {brief(value)}")
        return [_value(item, kind[0], f"{path}[{index}]") for index, item in enumerate(value)]
    if isinstance(kind, dict):
        return checked(value, kind, path)
    if isinstance(kind, tuple):
        if value not in kind:
            raise ShapeError(path, f"unknown value {brief(value)}", "use one of " + ", ".join(kind))
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int) or not _WEIGHT[0] <= value <= _WEIGHT[1]:
            raise ShapeError(path, f"must be a whole number from {_WEIGHT[0]} to {_WEIGHT[1]}, got {brief(value)}")
        return value
    if kind == "labels":
        if not isinstance(value, Mapping) or not all(is_qualified_name(k) and isinstance(v, str) and
                                                     is_label_value(v) for k, v in value.items()):
            raise ShapeError(path, f"must be an object of label key: label value, got {brief(value)}")
        return dict(value)
    if kind == "key":
        if not is_qualified_name(value):
            raise ShapeError(path, f"{brief(value)} is not a label key")
        return value
    if not isinstance(value, str) or not value.isprintable():
        raise ShapeError(path, f"must be a string, got {brief(value)}")
    return value


def _check_values(requirement: dict[str, Any], path: str) -> None:
    """In/NotIn take values, Exists/DoesNotExist none, Gt/Lt one whole number (as the API server says)."""
    operator, values = requirement["operator"], requirement.get("values") or []
    if operator in ("In", "NotIn") and not values:
        raise ShapeError(_join(path, "values"), f"operator {operator} needs values")
    if operator in ("Exists", "DoesNotExist") and values:
        raise ShapeError(_join(path, "values"), f"operator {operator} takes no values")
    if operator in ("Gt", "Lt") and (len(values) != 1 or not values[0].lstrip("-").isdigit()):
        raise ShapeError(_join(path, "values"), f"operator {operator} takes one whole number")


def _join(path: str, field: str) -> str:
    return f"{path}.{field}" if path else field


__all__ = ["AFFINITY", "ShapeError", "checked"]
