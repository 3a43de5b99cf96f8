"""A forwarding proxy the tests can cut and restore: a service 'goes down' and 'comes back' at the
same address, over real sockets (a TCP port in front of MariaDB, a unix socket in front of the
Docker engine)."""

from __future__ import annotations

import socket
import threading
from pathlib import Path


class SocketProxy:
    """Forwards ``listen`` (a TCP port on 127.0.0.1 when None, or a unix-socket path) to ``target``
    (a ``(host, port)`` pair, or a unix-socket path) while started."""

    def __init__(self, target: tuple[str, int] | str, listen: Path | None = None) -> None:
        self.target = target
        self.path = listen
        self.port = 0
        if listen is None:
            probe = socket.socket()
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
            probe.close()
        self._listener: socket.socket | None = None
        self._sockets: list[socket.socket] = []

    def start(self) -> "SocketProxy":
        if self.path is None:
            listener = socket.socket()
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", self.port))
        else:
            listener = socket.socket(socket.AF_UNIX)
            listener.bind(str(self.path))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def _connect(self) -> socket.socket:
        if isinstance(self.target, tuple):
            return socket.create_connection(self.target)
        upstream = socket.socket(socket.AF_UNIX)
        upstream.connect(self.target)
        return upstream

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = self._connect()
            self._sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def stop(self) -> None:
        """Cut every connection and stop listening (a unix socket's file goes too)."""
        if self._listener is not None:
            self._listener.close()
            self._listener = None
            if self.path is not None:
                self.path.unlink(missing_ok=True)
        for s in self._sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        self._sockets.clear()


class ProxyProcess:
    """A :class:`SocketProxy` in a process of its own, so a test can freeze it (SIGSTOP): the
    service's socket then accepts connections and takes requests but never answers, as an engine
    whose process hangs does."""

    def __init__(self, target: str, listen: Path) -> None:
        import subprocess
        import sys

        self.path = listen
        self.proc = subprocess.Popen([sys.executable, __file__, target, str(listen)], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "ready"

    def freeze(self) -> None:
        import os
        import signal

        os.kill(self.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        import os
        import signal

        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        """Gone, frozen or not (SIGKILL ends a stopped process too): what it held is never sent on."""
        self.proc.kill()
        self.proc.wait()
        self.path.unlink(missing_ok=True)


if __name__ == "__main__":  # python socket_proxy.py TARGET_SOCKET LISTEN_SOCKET
    import sys

    SocketProxy(sys.argv[1], listen=Path(sys.argv[2])).start()
    print("ready", flush=True)
    threading.Event().wait()


class SocatProxy:
    """``socat`` forwarding a unix socket to the Docker engine's, one forked child per connection:
    the proxy of the field. Two ways to freeze it: :meth:`freeze_all` stops every socat process (no
    call is answered, no stream flows), :meth:`freeze_listener` stops only the listener, so new calls
    are never answered while the streams already open (a container's output) keep flowing."""

    def __init__(self, target: str, listen: Path) -> None:
        import shutil
        import subprocess
        import time

        assert shutil.which("socat"), "socat is not installed (apt-get install socat)"
        self.path = listen
        self.proc = subprocess.Popen(["socat", f"UNIX-LISTEN:{listen},fork,unlink-early,backlog=64",
                                      f"UNIX-CONNECT:{target}"], stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not listen.exists():
            assert self.proc.poll() is None and time.monotonic() < deadline, "socat did not start listening"
            time.sleep(0.02)

    def _children(self) -> list:
        import psutil

        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def freeze_listener(self) -> None:
        import os
        import signal

        os.kill(self.proc.pid, signal.SIGSTOP)

    def freeze_all(self) -> None:
        import os
        import signal

        os.kill(self.proc.pid, signal.SIGSTOP)  # first: it forks no child after this
        for child in self._children():
            child.send_signal(signal.SIGSTOP)

    def stop(self) -> None:
        """Every socat process killed (stopped or not): what it held is never sent on."""
        import signal

        for child in self._children():
            child.send_signal(signal.SIGKILL)
        self.proc.kill()
        self.proc.wait()
        self.path.unlink(missing_ok=True)
