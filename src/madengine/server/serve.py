"""Run the dashboard: bind the address, then uvicorn serves :func:`madengine.server.app.create_app`.

The socket is bound here, before uvicorn starts, so a port in use or an address the machine does not
have is one line and exit 2, and ``--port 0`` can report the port it got. Stopping (Ctrl-C,
SIGTERM) ends open pages' event streams after at most ``GRACE_S`` seconds.
"""

from __future__ import annotations

import socket
from typing import Callable

from madengine.core.errors import InputError
from madengine.core.events import Reporter
from madengine.server.config import ServerConfig

GRACE_S = 1


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (an InputError naming --host/--port when it cannot be)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise InputError(f"cannot listen on {host!r} ({exc.strerror})", path="--host") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        what = "is in use" if exc.errno in (98, 48) else f"cannot be used ({exc.strerror})"
        raise InputError(f"port {port} on {host} {what}", path="--port", hint="choose another --port (0: any free one)") from None
    sock.set_inheritable(True)
    return sock


def address_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


def serve(config: ServerConfig, reporter: Reporter, ready: Callable[[str], None] | None = None) -> None:
    """Serve until stopped (blocking). ``ready`` gets the address once it listens."""
    import uvicorn

    from madengine.server.app import create_app

    sock = bind(config.host, config.port)
    address = address_of(sock)
    if config.everywhere:
        reporter.message(f"madengine: warning: --host {config.host} serves the results to every network this machine "
                         "is on" + ("" if config.token else "; anyone who reaches it reads them (set --token or "
                                                             "MADENGINE_DASHBOARD_TOKEN)"))
    reporter.message(f"madengine: dashboard of {config.url.shown} (table {config.table}) at {address}"
                     + (" (open it once as ?token=TOKEN)" if config.token else "") + "; Ctrl-C stops it")
    server = uvicorn.Server(uvicorn.Config(create_app(config), log_level="warning", access_log=False, lifespan="on",
                                           timeout_graceful_shutdown=GRACE_S))
    if ready is not None:
        ready(address)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
