"""What ``madengine report serve`` was asked: the database, the runs folder, the address, the token."""

from __future__ import annotations

import dataclasses
import ipaddress
from pathlib import Path

from madengine.database.sql import DEFAULT_TABLE
from madengine.database.urls import DbUrl

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8050


@dataclasses.dataclass(frozen=True)
class ServerConfig:
    url: DbUrl
    table: str = DEFAULT_TABLE
    runs_dir: Path = Path("madengine_runs")  #: the only folder whose files (logs, artifacts, trace.json) are served
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT  #: 0: any free port (the one chosen is reported)
    token: str = dataclasses.field(default="", repr=False)  #: '' for none

    @property
    def loopback(self) -> bool:
        """Bound to this machine only (then requests must name a loopback host)."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    @property
    def everywhere(self) -> bool:
        """Bound to every address of the machine (0.0.0.0 or ::)."""
        try:
            return ipaddress.ip_address(self.host).is_unspecified
        except ValueError:
            return False
