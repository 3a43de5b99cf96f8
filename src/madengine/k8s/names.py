"""What Kubernetes accepts as a name, a label and a resource quantity, checked before anything is
sent: one reading for the ``k8s`` block, the renderer and the semantic checks of rendered manifests.

The rules are the API server's (apimachinery's validation and ``resource.Quantity``), written out
here because the schema that ``kubernetes-validate`` checks leaves them out. Pure: no I/O.
"""

from __future__ import annotations

import decimal
import hashlib
import re

#: a DNS-1123 label: names of namespaces, Services (DNS-1035: a letter first), Indexed Job hostnames
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
#: a label's name part, a label value (may be empty), an annotation/label key's name part
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
#: keys of a ConfigMap's or Secret's data
_DATA_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
#: an environment variable's name as the API server takes it
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
LABEL_MAX = 63
SUBDOMAIN_MAX = 253

#: ``resource.Quantity``: a signed decimal number, then a binary or decimal SI suffix or an exponent
_QUANTITY = re.compile(r"^(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
                       r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
#: quantities longer than this are refused (the API server's own limit is far larger, but no real
#: request needs more, and a bounded text keeps the Decimal arithmetic bounded)
_QUANTITY_MAX_CHARS = 64


def is_dns_label(text: str) -> bool:
    return isinstance(text, str) and len(text) <= LABEL_MAX and bool(_DNS_LABEL.match(text))


def is_dns_1035_label(text: str) -> bool:
    """A Service's name: a DNS label that starts with a letter."""
    return isinstance(text, str) and len(text) <= LABEL_MAX and bool(_DNS_1035_LABEL.match(text))


def is_dns_subdomain(text: str) -> bool:
    """Names of ConfigMaps, Secrets, Jobs, PVCs, ServiceAccounts: dot-separated DNS labels."""
    return isinstance(text, str) and 0 < len(text) <= SUBDOMAIN_MAX and \
        all(_DNS_LABEL.match(part) for part in text.split("."))


def is_label_value(text: str) -> bool:
    return isinstance(text, str) and len(text) <= LABEL_MAX and (text == "" or bool(_LABEL_NAME.match(text)))


def is_qualified_name(text: str, *, prefix_required: bool = False) -> bool:
    """A label key or extended resource name: ``[prefix/]name``, the prefix a DNS subdomain."""
    if not isinstance(text, str):
        return False
    prefix, slash, name = text.rpartition("/")
    if slash and not is_dns_subdomain(prefix):
        return False
    if prefix_required and not slash:
        return False
    return len(name) <= LABEL_MAX and bool(_LABEL_NAME.match(name))


def is_data_key(text: str) -> bool:
    """A key of a ConfigMap's or Secret's data."""
    return isinstance(text, str) and 0 < len(text) <= SUBDOMAIN_MAX and bool(_DATA_KEY.match(text)) and \
        text not in (".", "..")


def label_value(text: str) -> str:
    """``text`` as a label value: characters outside the rule become ``-``, cut to 63 with a
    short hash of the whole when anything changed (so two different texts stay apart)."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "-", text).strip("-_.")
    if cleaned == text and len(text) <= LABEL_MAX:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    head = cleaned[:LABEL_MAX - 9].rstrip("-_.")
    return f"{head}-{digest}" if head else digest


def dns_label(text: str, limit: int = LABEL_MAX) -> str:
    """``text`` as a DNS-1123 label of at most ``limit`` characters (lower-cased, other characters
    become ``-``); '' when nothing of it is usable."""
    cleaned = re.sub(r"[^a-z0-9-]+", "-", text.lower())
    cleaned = re.sub(r"-{2,}", "-", cleaned).strip("-")
    return cleaned[:limit].rstrip("-")


# -- quantities ----------------------------------------------------------------------------------
def parse_quantity(value: object) -> decimal.Decimal | None:
    """A resource quantity (``16Gi``, ``500m``, ``2``, ``1e3``, a plain number) as its exact
    value, or None when Kubernetes would refuse it. Booleans are not quantities."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return decimal.Decimal(value)
    if isinstance(value, float):
        text = repr(value)
    elif isinstance(value, str):
        text = value
    else:
        return None
    if len(text) > _QUANTITY_MAX_CHARS:
        return None
    match = _QUANTITY.match(text)
    if match is None:
        return None
    number = decimal.Decimal(match.group("number"))
    suffix = match.group("suffix") or ""
    context = decimal.Context(prec=100, Emax=10_000, Emin=-10_000)
    if suffix in _BINARY:
        return context.multiply(number, decimal.Decimal(_BINARY[suffix]))
    exponent = _DECIMAL[suffix] if suffix in _DECIMAL else int(suffix[1:])
    if abs(exponent) > 1000:
        return None
    return context.scaleb(number, exponent)


def quantity_text(value: object) -> str | None:
    """A quantity as the text a manifest carries (numbers written as Kubernetes reads them), or
    None when it is not one."""
    if parse_quantity(value) is None:
        return None
    if isinstance(value, float):
        return repr(value)
    return str(value)


def byte_quantity(count: int) -> str:
    """A number of bytes as the largest binary unit that divides it: ``17179869184`` → ``16Gi``."""
    for suffix in ("Ti", "Gi", "Mi", "Ki"):
        if count and count % _BINARY[suffix] == 0:
            return f"{count // _BINARY[suffix]}{suffix}"
    return str(count)


def times_quantity(text: str, factor: int) -> str:
    """A quantity ``factor`` times over, in its own unit: ``16Gi`` × 8 → ``128Gi``, ``500m`` × 3 → ``1500m``."""
    match = _QUANTITY.match(text)
    if match is None or factor < 0:
        raise ValueError(f"{text!r} is not a quantity")
    number = decimal.Decimal(match.group("number")) * factor
    return f"{number.normalize():f}{match.group('suffix') or ''}".replace("+", "")
