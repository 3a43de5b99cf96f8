"""The network interface a node of a multi-node job talks through: the one that routes to the
rendezvous address. NCCL and Gloo pick an interface of their own otherwise, and on a node with
several networks (a management network, a container bridge, InfiniBand) the ranks may then look
for each other on networks that do not meet, and hang at rendezvous.

:func:`rendezvous_interface` is what an executor calls for a node it places (a Slurm node here; a
Kubernetes pod on the host's network the same way): the interface to set ``NCCL_SOCKET_IFNAME``
and ``GLOO_SOCKET_IFNAME`` to, unless the user set either. Linux only (the
interface names come from the kernel); elsewhere nothing is detected and nothing is set.
"""

from __future__ import annotations

import fcntl
import ipaddress
import socket
import struct
from pathlib import Path
from typing import Iterable, Mapping

#: the variables NCCL and Gloo read their interface from
SOCKET_IFNAME_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
_SIOCGIFADDR = 0x8915
_IF_INET6 = Path("/proc/net/if_inet6")
_ANY_PORT = 9  # connect() of a UDP socket needs a port; nothing is sent to it


def source_address(address: str) -> str | None:
    """The address of this host the kernel sends from to reach ``address`` (a name or an IP):
    connecting a UDP socket picks the route and sends nothing. None when no route reaches it or the
    name does not resolve."""
    try:
        candidates = socket.getaddrinfo(address, _ANY_PORT, type=socket.SOCK_DGRAM)
    except (OSError, UnicodeError):
        return None
    for family, kind, proto, _, target in candidates:
        try:
            with socket.socket(family, kind, proto) as sock:
                sock.connect(target)
                return str(sock.getsockname()[0]).split("%")[0]
        except OSError:
            continue
    return None


def _ipv4_interfaces() -> Iterable[tuple[str, str]]:
    """(interface name, its IPv4 address) of every interface that has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, name in socket.if_nameindex():
            request = struct.pack("256s", name.encode()[:15])
            try:
                reply = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, request)
            except OSError:  # no IPv4 address
                continue
            yield name, socket.inet_ntoa(reply[20:24])


def _ipv6_interfaces() -> Iterable[tuple[str, str]]:
    """(interface name, one of its IPv6 addresses), from the kernel's table."""
    try:
        lines = _IF_INET6.read_text(encoding="ascii").splitlines()
    except OSError:
        return
    for line in lines:
        fields = line.split()
        if len(fields) == 6:
            yield fields[5], str(ipaddress.IPv6Address(bytes.fromhex(fields[0])))


def interface_of(local_address: str) -> str | None:
    """The name of the interface that holds ``local_address`` (an address of this host)."""
    try:
        wanted = ipaddress.ip_address(local_address)
    except ValueError:
        return None
    pairs = _ipv4_interfaces() if wanted.version == 4 else _ipv6_interfaces()
    return next((name for name, address in pairs if ipaddress.ip_address(address) == wanted), None)


def route_interface(address: str) -> str | None:
    """The interface this host reaches ``address`` through: for an address of this host's own (the
    rendezvous node itself), the interface that holds it, which is where the other nodes reach it;
    ``lo`` for a loopback address. None when it cannot tell (no route, a name that does not resolve,
    not Linux)."""
    local = source_address(address)
    return interface_of(local) if local else None


def rendezvous_interface(master_addr: str, *given: Mapping[str, str]) -> str:
    """The interface for ``NCCL_SOCKET_IFNAME`` and ``GLOO_SOCKET_IFNAME`` (:data:`SOCKET_IFNAME_VARS`):
    the one that routes to ``master_addr``. Empty when the user set either variable in one of
    ``given`` (their choice of network stands, whole) or when the interface cannot be told; empty
    too for a host name this host maps to its own loopback (``127.0.1.1 node0`` in /etc/hosts):
    the other nodes reach that node on another network, and NCCL and Gloo then choose better."""
    if any(values.get(name) for values in given for name in SOCKET_IFNAME_VARS):
        return ""
    local = source_address(master_addr)
    if local is None or (ipaddress.ip_address(local).is_loopback and not _means_loopback(master_addr)):
        return ""
    return interface_of(local) or ""


def _means_loopback(address: str) -> bool:
    """Whether ``address`` says loopback by itself (``localhost``, ``127.0.0.1``, ``::1``), the same on
    every node, unlike a name that resolves to loopback on one host only."""
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address.lower().rstrip(".") == "localhost"
