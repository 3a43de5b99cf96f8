"""Rendezvous ports on this host: a free one for a job that names none, and the check that a port
a job names is not taken (run where the port is bound: node rank 0, before anything starts)."""

from __future__ import annotations

import errno
import socket

from madengine.core.errors import LaunchError


def free_port() -> int:
    """A TCP port nothing listens on now (the kernel's choice), for a one-node job's rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def port_taken(port: int) -> bool:
    """Whether a listener holds ``port`` on this host (any address). A port in TIME_WAIT is free:
    the rendezvous store binds with SO_REUSEADDR too."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("", port))
        except OSError as exc:
            return exc.errno in (errno.EADDRINUSE, errno.EACCES)
    return False


def check_port_free(port: int, *, source: str = "distributed") -> None:
    """Raise :class:`LaunchError` (exit 2) when ``port`` is taken on this host."""
    if port_taken(port):
        raise LaunchError(f"master_port {port} is taken on this host (something listens on it)", path=source,
                          field="distributed.master_port",
                          hint="choose another master_port, or leave it out and madengine picks a free one")
