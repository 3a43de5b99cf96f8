"""The ``nas`` provider: SFTP (paramiko) from the first answering node of ``NAS_NODES``.

Host keys are always verified: against the node's ``KNOWN_HOSTS`` file (or the provider's
``known_hosts``), else the user's ``~/.ssh/known_hosts`` and ``/etc/ssh/ssh_known_hosts``; a host
not listed there is accepted only when its SHA256 fingerprint equals the configured
``HOST_KEY_FINGERPRINT`` (node) / ``host_key_fingerprint`` (provider). A file is copied only
when the mirror lacks it or its size or modification time differ.
"""

from __future__ import annotations

import base64
import hashlib
import os
import socket
import stat
import time
from pathlib import Path, PurePosixPath
from typing import Any

from madengine.core.redact import redact
from madengine.data.base import DataLog, FetchStats, unavailable
from madengine.data.config import ProviderConfig
from madengine.data.credentials import Credentials, NasNode
from madengine.data.mirror import Mirror, part_path, safe_relative

_CONNECT_TIMEOUT = 10
_MAX_DEPTH = 64
_SYSTEM_KNOWN_HOSTS = ("~/.ssh/known_hosts", "/etc/ssh/ssh_known_hosts")


def fingerprint(key: Any) -> str:
    """OpenSSH's ``SHA256:<base64>`` fingerprint of a paramiko key."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode("ascii").rstrip("=")


class NasSource:
    def __init__(self, config: ProviderConfig, credentials: Credentials) -> None:
        self.config = config
        self.nodes = credentials.nas_nodes()
        self._answering: list[NasNode] = []

    def check(self) -> str | None:
        try:
            import paramiko  # noqa: F401
        except ImportError:
            return "paramiko is not installed (pip install 'madengine[data]')"
        if not self.nodes:
            return "no NAS_NODES configured (environment variable or credential.json)"
        reasons = []
        self._answering = []
        for node in self.nodes:
            try:
                socket.create_connection((node.host, node.port), timeout=5).close()
                self._answering.append(node)
            except OSError as exc:
                reasons.append(f"{node.name} {node.host}:{node.port}: {exc.strerror or type(exc).__name__}")
        if not self._answering:
            return "no NAS node answers (" + "; ".join(reasons) + ")"
        return None

    def fetch(self, mirror: Mirror, log: DataLog) -> FetchStats:
        import paramiko

        errors = []
        for node in self._answering or self.nodes:
            try:
                client = self._connect(node)
            except (paramiko.SSHException, OSError) as exc:
                errors.append(f"{node.name}: {_describe(exc)}")
                continue
            try:
                log.line(f"    nas: copying {self.config.path} from {node.name} ({node.host}:{node.port})")
                return self._sync(client.open_sftp(), mirror, log)
            except (paramiko.SSHException, OSError) as exc:
                raise unavailable(self.config.dataname, "nas", f"copy from {node.name} failed: {_describe(exc)}") \
                    from None
            finally:
                client.close()
        raise unavailable(self.config.dataname, "nas", "; ".join(errors) or "no NAS node")

    def _connect(self, node: NasNode) -> Any:
        import paramiko

        client = paramiko.SSHClient()
        known_hosts = node.known_hosts or self.config.text("known_hosts")
        if known_hosts:
            client.load_host_keys(os.path.expanduser(known_hosts))
        else:
            for path in _SYSTEM_KNOWN_HOSTS:
                if os.path.isfile(os.path.expanduser(path)):
                    client.load_system_host_keys(os.path.expanduser(path))
        pinned = node.host_key_fingerprint or self.config.text("host_key_fingerprint")
        client.set_missing_host_key_policy(_PinnedFingerprint(pinned) if pinned else paramiko.RejectPolicy())
        try:
            client.connect(node.host, port=node.port, username=node.username, password=node.password or None,
                           key_filename=os.path.expanduser(node.key_file) if node.key_file else None,
                           look_for_keys=False, allow_agent=False, timeout=_CONNECT_TIMEOUT,
                           banner_timeout=_CONNECT_TIMEOUT, auth_timeout=_CONNECT_TIMEOUT)
        except BaseException:
            client.close()
            raise
        return client

    def _sync(self, sftp: Any, mirror: Mirror, log: DataLog) -> FetchStats:
        stats = FetchStats()
        remote = self.config.path
        try:
            attributes = sftp.stat(remote)
        except FileNotFoundError:
            raise unavailable(self.config.dataname, "nas", f"{remote} does not exist on the NAS") from None
        if stat.S_ISDIR(attributes.st_mode or 0):
            self._copy_folder(sftp, remote, mirror.path, stats, log, 0)
        else:
            self._copy_file(sftp, remote, mirror.path / PurePosixPath(remote).name, attributes, stats, log)
        return stats

    def _copy_folder(self, sftp: Any, remote: str, local: Path, stats: FetchStats, log: DataLog, depth: int) -> None:
        if depth > _MAX_DEPTH:
            raise unavailable(self.config.dataname, "nas", f"{remote}: folders nested deeper than {_MAX_DEPTH}")
        local.mkdir(parents=True, exist_ok=True)
        for entry in sorted(sftp.listdir_attr(remote), key=lambda e: e.filename):
            relative = safe_relative(entry.filename)
            if relative is None or len(relative.parts) != 1:
                continue
            path = f"{remote.rstrip('/')}/{entry.filename}"
            attributes = entry
            if stat.S_ISLNK(entry.st_mode or 0):
                try:
                    attributes = sftp.stat(path)
                except OSError:
                    continue  # a dangling link
            mode = attributes.st_mode or 0
            if stat.S_ISDIR(mode):
                self._copy_folder(sftp, path, local / relative, stats, log, depth + 1)
            elif stat.S_ISREG(mode):
                self._copy_file(sftp, path, local / relative, attributes, stats, log)

    def _copy_file(self, sftp: Any, remote: str, target: Path, attributes: Any, stats: FetchStats,
                   log: DataLog) -> None:
        size, mtime = int(attributes.st_size or 0), int(attributes.st_mtime or 0)
        try:
            info = target.stat()
            if info.st_size == size and int(info.st_mtime) == mtime:
                stats.unchanged += 1
                return
        except OSError:
            pass
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = part_path(target)
        started = time.monotonic()
        try:
            sftp.get(remote, str(partial))
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        os.utime(partial, (mtime, mtime))
        os.replace(partial, target)
        stats.fetched += 1
        stats.bytes_fetched += size
        log.line(f"    nas: {remote} ({size} bytes, {time.monotonic() - started:.2f} s)")


class _PinnedFingerprint:
    """Accepts an unknown host key only when it has the fingerprint the configuration trusts."""

    def __init__(self, expected: str) -> None:
        self.expected = expected.strip()
        if not self.expected.startswith("SHA256:"):
            self.expected = "SHA256:" + self.expected
        self.expected = self.expected.rstrip("=")

    def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
        import paramiko

        actual = fingerprint(key)
        if actual != self.expected:
            raise paramiko.SSHException(f"host key {actual} of {hostname} is neither in known_hosts nor the "
                                        "trusted HOST_KEY_FINGERPRINT")


def _describe(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return redact(text.splitlines()[0])
