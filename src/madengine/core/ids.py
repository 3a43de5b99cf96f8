"""Identifiers every record carries: the run id and the machine's name."""

from __future__ import annotations

import datetime
import secrets
import socket


def new_run_id() -> str:
    """``20261123-104512-a1b2c3``: sortable by start time, unique across concurrent runs."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)


def machine_name() -> str:
    return socket.gethostname()
