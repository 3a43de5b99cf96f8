"""When a streamed token reached this machine: the kernel's receive time of a socket read.

A single-threaded client reads a token when its event loop gets to it: after the other streams'
tokens of the same burst, after a garbage collection, after the kernel ran something else on its
core. Timed there, a token is late by all of that, and the inter-token latency of a stream moves
with its place in the queue. The kernel stamps every packet as it arrives (``SO_TIMESTAMPNS``):
a TCP read returns the stamp of the last byte it read, whatever the reader was doing meanwhile.

:func:`arrival_socket` makes the client's sockets (aiohttp's ``socket_factory``); each read keeps
``arrived``, on ``time.monotonic_ns``'s clock: the kernel's stamp where the platform gives one
(Linux on the architectures of the asm-generic socket options), else the read's own time (still
before the stream's reader, queued behind other streams, runs). :func:`socket_of` finds a
response's socket. Bytes that wait in the socket for a read (a reader late by more than a
stream's inter-token gap) come out in one read with one stamp, the last one's.
"""

from __future__ import annotations

import platform
import socket
import struct
import sys
import time
import weakref
from typing import Any

#: Linux's SO_TIMESTAMPNS (asm-generic/socket.h: also its SCM_ type); other architectures number it
#: differently, and Python's socket module does not name it
SO_TIMESTAMPNS = 35
KERNEL_STAMPS = sys.platform == "linux" and platform.machine() in ("x86_64", "aarch64", "riscv64")
_TIMESPEC = struct.Struct("@qq")  # struct timespec on these 64-bit architectures
_ANCILLARY = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0

_sockets: weakref.WeakValueDictionary[int, ArrivalSocket] = weakref.WeakValueDictionary()
_keeper: list[socket.socket] = []  #: a socket asking for stamps as long as the process lives


class ArrivalSocket(socket.socket):
    """A client socket whose reads keep when their last byte arrived (``arrived``, monotonic ns;
    ``from_kernel``: the kernel's stamp, not the read's time)."""

    arrived = 0
    from_kernel = False
    stamped = False  #: the kernel stamps its packets (SO_TIMESTAMPNS is on)

    def recv(self, size: int, flags: int = 0) -> bytes:  # type: ignore[override]
        if not self.stamped:
            data = super().recv(size, flags)
            self.arrived = time.monotonic_ns()
            return data
        data, ancillary, _, _ = self.recvmsg(size, _ANCILLARY, flags)
        self._take(ancillary)
        return data

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:  # type: ignore[override]
        if not self.stamped:
            count = super().recv_into(buffer, nbytes, flags)
            self.arrived = time.monotonic_ns()
            return count
        view = memoryview(buffer)
        count, ancillary, _, _ = self.recvmsg_into([view[:nbytes] if nbytes else view], _ANCILLARY, flags)
        self._take(ancillary)
        return count

    def _take(self, ancillary: list) -> None:
        now = time.monotonic_ns()
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) == _TIMESPEC.size:
                seconds, nanoseconds = _TIMESPEC.unpack(data)
                stamp = seconds * 1_000_000_000 + nanoseconds - _REAL_TIME.offset(now)
                self.arrived, self.from_kernel = min(stamp, now), True
                return
        self.arrived, self.from_kernel = now, False


class _RealTimeOffset:
    """The real-time clock (the kernel's stamps) minus the monotonic one. NTP's rate corrections
    move both alike: only a step of the real-time clock changes it, so it is measured once a
    second, each time the tightest of a few readings between two real-time ones (a read of it
    interrupted by the scheduler would be off by the interruption)."""

    TRIES = 3
    EVERY_NS = 1_000_000_000

    def __init__(self) -> None:
        self.value, self.measured = 0, None

    def offset(self, now: int) -> int:
        if self.measured is None or now - self.measured >= self.EVERY_NS:
            self.value, self.measured = self._measure(), now
        return self.value

    def _measure(self) -> int:
        readings = []
        for _ in range(self.TRIES):
            before = time.clock_gettime_ns(time.CLOCK_REALTIME)
            monotonic = time.monotonic_ns()
            after = time.clock_gettime_ns(time.CLOCK_REALTIME)
            readings.append((after - before, (before + after) // 2 - monotonic))
        return min(readings)[1]


_REAL_TIME = _RealTimeOffset()


def arrival_socket(addr_info: tuple) -> ArrivalSocket:
    """aiohttp's ``socket_factory``: an :class:`ArrivalSocket` for ``addr_info``, stamped by the
    kernel where it can be."""
    family, kind, proto = addr_info[:3]
    sock = ArrivalSocket(family, kind, proto)
    if KERNEL_STAMPS and _ANCILLARY:
        try:
            _keep_stamping()
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            sock.stamped = True
        except OSError:
            pass
    _sockets[sock.fileno()] = sock
    return sock


def _keep_stamping() -> None:
    """The kernel stamps packets while a socket asks for it, switching on a moment after the first
    asks and off after the last one closed (the packets between come unstamped: their reads' own
    time stands in). One socket kept asking for the process's life spares the load points after
    the first that wait, their connections being new ones."""
    if not _keeper:
        keeper = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        keeper.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        _keeper.append(keeper)


def socket_of(response: Any) -> ArrivalSocket | None:
    """The :class:`ArrivalSocket` an aiohttp response streams from (None: another socket)."""
    connection = getattr(response, "connection", None)
    transport = connection.transport if connection is not None else None
    raw = transport.get_extra_info("socket") if transport is not None else None
    if raw is None:
        return None
    found = _sockets.get(raw.fileno())
    return found if found is not None and found.fileno() == raw.fileno() else None  # not a closed one's number
