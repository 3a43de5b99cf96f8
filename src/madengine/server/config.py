"""What ``madengine report serve`` was asked: the database, the runs folder, the address, who may read it."""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from pathlib import Path

from madengine.core.errors import InputError
from madengine.database.sql import DEFAULT_TABLE
from madengine.database.urls import DbUrl

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8050
SESSION_S = 12 * 3600  #: a session cookie's lifetime: a working day with the dashboard open
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
_NAME = re.compile(r"^[a-z0-9_]([a-z0-9_.-]{0,252})$")


@dataclasses.dataclass(frozen=True)
class ServerConfig:
    url: DbUrl
    table: str = DEFAULT_TABLE
    runs_dir: Path = Path("madengine_runs")  #: the only folder whose files (logs, artifacts, trace.json) are served
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT  #: 0: any free port (the one chosen is reported)
    token: str = dataclasses.field(default="", repr=False)  #: '' for none
    no_auth: bool = False  #: serve beyond this machine without a token, on purpose (--no-auth)
    allowed_hosts: tuple[str, ...] = ()  #: host names requests may use besides the defaults (normalized)
    session_s: float = SESSION_S

    @property
    def loopback(self) -> bool:
        """Bound to this machine only, as far as ``host`` says (:func:`check_access` looks at the bound address)."""
        if self.host.lower() == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host.strip("[]")).is_loopback
        except ValueError:
            return False

    @property
    def everywhere(self) -> bool:
        """Bound to every address of the machine (0.0.0.0 or ::)."""
        try:
            return ipaddress.ip_address(self.host.strip("[]")).is_unspecified
        except ValueError:
            return False


def check_access(config: ServerConfig, bound_address: str) -> bool:
    """Whether the dashboard, bound to ``bound_address``, can be reached from other machines; an
    InputError when it can, with no token and without ``--no-auth``."""
    try:
        remote = not ipaddress.ip_address(bound_address).is_loopback
    except ValueError:
        remote = True
    if remote and not config.token and not config.no_auth:
        raise InputError(f"{config.host} can be reached from other machines and no token is set", path="--host",
                         hint="set --token or MADENGINE_DASHBOARD_TOKEN; or pass --no-auth to let anyone on the "
                              "network read the results")
    return remote


def normalize_host(text: str) -> str:
    """A host name or IP address as the Host check compares it (lower case, no IPv6 brackets);
    an InputError naming --allowed-host for anything else (a port, a scheme, a path)."""
    name = text.strip().lower()
    bare = name[1:-1] if name.startswith("[") and name.endswith("]") else name
    try:
        return str(ipaddress.ip_address(bare))
    except ValueError:
        pass
    if not _NAME.match(name) or ".." in name:
        raise InputError(f"expected a host name or IP address (no scheme, port or path), got {text[:60]!r}",
                         path="--allowed-host")
    return name.rstrip(".")


def host_of_header(header: str) -> str:
    """The host a request's Host header names, as :func:`normalize_host` writes it; '' when it is malformed."""
    text = header.strip().lower()
    if text.startswith("["):
        name, closed, rest = text[1:].partition("]")
        if not closed or (rest and not rest.startswith(":")):
            return ""
        port = rest[1:]
    else:
        name, _, port = text.partition(":")
    if port and not (port.isascii() and port.isdigit() and len(port) <= 5):
        return ""
    try:
        return normalize_host(name)
    except InputError:
        return ""
