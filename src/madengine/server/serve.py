"""Run the dashboard: bind the address, then uvicorn serves :func:`madengine.server.app.create_app`.

The socket is bound here, before uvicorn starts, so a port in use or an address the machine does not
have is one line and exit 2, and ``--port 0`` can report the port it got. An address other machines
can reach needs a token, or ``--no-auth`` said on purpose (:func:`~madengine.server.config.check_access`).
Stopping (Ctrl-C, SIGTERM) ends open pages' event streams after at most ``GRACE_S`` seconds.

uvicorn runs with its h11 parser, whatever else is installed, so every machine answers alike: it reads
a request head of up to ``MAX_HEAD`` bytes, and the application answers a URL longer than
:data:`~madengine.server.access.MAX_TARGET` with 414 (h11's own limit, 16 KiB, would drop the
connection with a 400 while the client is still sending, which the client sees as a reset).
"""

from __future__ import annotations

import socket
from typing import Any, Callable

from madengine.core.errors import InputError
from madengine.core.events import Reporter
from madengine.server.config import ServerConfig, check_access

GRACE_S = 1
MAX_HEAD = 1024 * 1024  #: bytes of a request's request line and headers h11 reads before it gives up


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


def uvicorn_config(app: Any) -> Any:
    """How uvicorn serves the dashboard (the command and the tests alike)."""
    import uvicorn

    return uvicorn.Config(app, http="h11", h11_max_incomplete_event_size=MAX_HEAD, log_level="warning",
                          access_log=False, lifespan="on", timeout_graceful_shutdown=GRACE_S)


def _startup_lines(config: ServerConfig, address: str, remote: bool) -> list[str]:
    lines = []
    if remote and not config.token:  # --no-auth (check_access refuses it otherwise)
        lines.append(f"madengine: warning: --no-auth: anyone on the network can read the results at --host "
                     f"{config.host}; no token is asked for")
    elif config.everywhere:
        lines.append(f"madengine: warning: --host {config.host} serves the results to every network this machine is on")
    lines.append(f"madengine: dashboard of {config.url.shown} (table {config.table}) at {address}"
                 + (" (open it once as ?token=TOKEN)" if config.token else "") + "; Ctrl-C stops it")
    return lines


def serve(config: ServerConfig, reporter: Reporter, ready: Callable[[str], None] | None = None) -> None:
    """Serve until stopped (blocking). ``ready`` gets the address once it listens."""
    import uvicorn

    from madengine.server.app import create_app

    sock = bind(config.host, config.port)
    try:
        remote = check_access(config, sock.getsockname()[0])
    except InputError:
        sock.close()
        raise
    address = address_of(sock)
    for line in _startup_lines(config, address, remote):
        reporter.message(line)
    server = uvicorn.Server(uvicorn_config(create_app(config)))
    if ready is not None:
        ready(address)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
