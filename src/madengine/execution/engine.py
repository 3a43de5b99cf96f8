"""The Docker Engine API calls of a run, made over the engine's socket with the standard library.

Importing the Docker SDK for Python costs about 0.15 s (requests, urllib3, charset_normalizer):
a third of a one-model run on a cached image. A run needs a dozen Engine API calls, which this
client makes itself: HTTP/1.1, one connection per call, on the Unix socket (``DOCKER_HOST`` unset
or ``unix://``) or TCP (``tcp://``, with TLS when ``DOCKER_TLS_VERIFY`` is set). Image builds,
pushes, pulls and saves stream tar archives and registry auth; they go through the SDK
(:attr:`Engine.sdk`), imported only when one of them happens, and so does every call when
``DOCKER_HOST`` is ``ssh://`` (the SDK's own transport).

An answer of the engine with an error status is an :class:`EngineError`; a failure to reach the
engine at all is an :class:`OSError` (refused, reset, closed mid-stream).
"""

from __future__ import annotations

import json
import os
import socket
import struct
from typing import Any, Iterator, Mapping
from urllib.parse import quote, urlencode

DEFAULT_SOCKET = "/var/run/docker.sock"
CALL_TIMEOUT = 60.0


class EngineError(Exception):
    """An error answer of the engine: its HTTP status and message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message

    @property
    def not_found(self) -> bool:
        return self.status == 404


class Engine:
    """A Docker engine reached at ``address`` (a socket path, or ``(host, port)``)."""

    def __init__(self, address: str | tuple[str, int], *, tls: Any = None, environ: Mapping[str, str] | None = None,
                 timeout: float = CALL_TIMEOUT) -> None:
        self.address = address
        self.tls = tls
        self.timeout = timeout
        self._environ = dict(environ or {})  # the command's: for the SDK (TLS, ssh) when one is needed
        self._sdk: Any = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> "Engine":
        """The engine ``DOCKER_HOST`` names (the local socket when unset)."""
        host = environ.get("DOCKER_HOST", "").strip()
        if not host or host.startswith("unix://"):
            return cls(host.removeprefix("unix://") or DEFAULT_SOCKET, environ=environ)
        if host.startswith("tcp://"):
            hostname, _, port = host[len("tcp://"):].rstrip("/").rpartition(":")
            tls = _tls_context(environ) if environ.get("DOCKER_TLS_VERIFY") else None
            return cls((hostname or "127.0.0.1", int(port or (2376 if tls else 2375))), tls=tls, environ=environ)
        return SdkEngine(host, environ=environ)

    # -- the SDK, for builds and registry traffic ---------------------------------------------
    @property
    def sdk(self) -> Any:
        """A Docker SDK client of the same engine (imported on first use)."""
        if self._sdk is None:
            docker = import_docker(self._environ)
            if isinstance(self.address, str):
                self._sdk = docker.DockerClient(base_url=f"unix://{self.address}", timeout=self.timeout)
            else:
                self._sdk = docker.from_env(environment=self._environ, timeout=self.timeout)
        return self._sdk

    # -- engine ----------------------------------------------------------------------------------
    def ping(self) -> None:
        self._call("GET", "/_ping", raw=True)

    # -- images ----------------------------------------------------------------------------------
    def inspect_image(self, name: str) -> dict[str, Any]:
        return self._call("GET", f"/images/{quote(name, safe='/:@')}/json")

    def image_ids(self, label: str) -> list[str]:
        """The ids of the images carrying ``label`` (``key=value``)."""
        images = self._call("GET", "/images/json", query={"filters": json.dumps({"label": [label]})})
        return [image["Id"] for image in images]

    def tag(self, image: str, repository: str, tag: str | None = None) -> None:
        query = {"repo": repository, **({"tag": tag} if tag else {})}
        self._call("POST", f"/images/{quote(image, safe='/:@')}/tag", query=query, raw=True)

    def remove_image(self, image: str) -> None:
        """Remove an image (never forced: the engine refuses with 409 while a container uses it)."""
        self._call("DELETE", f"/images/{quote(image, safe='/:@')}", raw=True)

    # -- containers ------------------------------------------------------------------------------
    def create_container(self, name: str, config: Mapping[str, Any]) -> str:
        return self._call("POST", "/containers/create", query={"name": name}, body=config)["Id"]

    def start(self, container: str) -> None:
        self._call("POST", f"/containers/{container}/start", raw=True)

    def logs(self, container: str) -> Iterator[bytes]:
        """The container's output from its start until it exits (stdout and stderr, as written)."""
        query = {"follow": "1", "stdout": "1", "stderr": "1"}
        return _frames(self._stream("GET", f"/containers/{container}/logs", query=query))

    def wait(self, container: str) -> dict[str, Any]:
        return self._call("POST", f"/containers/{container}/wait", timeout=None)

    def inspect_container(self, container: str) -> dict[str, Any]:
        return self._call("GET", f"/containers/{container}/json")

    def kill(self, container: str) -> None:
        self._call("POST", f"/containers/{container}/kill", raw=True)

    def remove(self, container: str) -> None:
        self._call("DELETE", f"/containers/{container}", query={"force": "1", "v": "1"}, raw=True)

    def container_ids(self, label: str) -> list[str]:
        found = self._call("GET", "/containers/json", query={"all": "1", "filters": json.dumps({"label": [label]})})
        return [container["Id"] for container in found]

    # -- exec ------------------------------------------------------------------------------------
    def exec_create(self, container: str, argv: list[str], *, workdir: str = "",
                    environment: Mapping[str, str] | None = None) -> str:
        body: dict[str, Any] = {"Cmd": list(argv), "AttachStdout": True, "AttachStderr": True}
        if workdir:
            body["WorkingDir"] = workdir
        if environment:
            body["Env"] = [f"{key}={value}" for key, value in environment.items()]
        return self._call("POST", f"/containers/{container}/exec", body=body)["Id"]

    def exec_start(self, exec_id: str) -> Iterator[bytes]:
        """The exec's output until its process ends (stdout and stderr, as written)."""
        return _frames(self._stream("POST", f"/exec/{exec_id}/start", body={"Detach": False, "Tty": False}))

    def exec_inspect(self, exec_id: str) -> dict[str, Any]:
        return self._call("GET", f"/exec/{exec_id}/json")

    # -- HTTP ------------------------------------------------------------------------------------
    def _call(self, method: str, path: str, *, query: Mapping[str, str] | None = None, body: Any = None,
              raw: bool = False, timeout: float | None = CALL_TIMEOUT) -> Any:
        response = _Response(self._send(method, path, query, body, timeout))
        data = response.read_all()  # which closes the connection, also when the answer is cut short
        if response.status >= 400:
            raise EngineError(response.status, _message(data))
        return data if raw else json.loads(data) if data else None

    def _stream(self, method: str, path: str, *, query: Mapping[str, str] | None = None,
                body: Any = None) -> Iterator[bytes]:
        response = _Response(self._send(method, path, query, body, None))
        if response.status >= 400:
            raise EngineError(response.status, _message(response.read_all()))
        return response.chunks()

    def _send(self, method: str, path: str, query: Mapping[str, str] | None, body: Any,
              timeout: float | None) -> socket.socket:
        payload = json.dumps(body).encode() if body is not None else b""
        target = path + ("?" + urlencode(query) if query else "")
        head = [f"{method} {target} HTTP/1.1", "Host: docker", "Connection: close", "User-Agent: madengine"]
        if body is not None:
            head += ["Content-Type: application/json", f"Content-Length: {len(payload)}"]
        elif method != "GET":
            head.append("Content-Length: 0")
        connection = self._connect(timeout)
        try:
            connection.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + payload)
        except BaseException:
            connection.close()
            raise
        return connection

    def _connect(self, timeout: float | None) -> socket.socket:
        if isinstance(self.address, str):
            connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            connection.settimeout(timeout)
            try:
                connection.connect(self.address)
            except BaseException:
                connection.close()
                raise
            return connection
        connection = socket.create_connection(self.address, timeout=timeout)
        if self.tls is not None:
            connection = self.tls.wrap_socket(connection, server_hostname=self.address[0])
        return connection


class _Response:
    """One HTTP/1.1 response read from a connection the engine closes after it."""

    def __init__(self, connection: socket.socket) -> None:
        self.connection = connection
        self.reader = connection.makefile("rb")
        status_line = self.reader.readline(65536)
        if not status_line:
            self.close()
            raise ConnectionError("the Docker engine closed the connection without answering")
        parts = status_line.split(None, 2)
        self.status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
        self.headers: dict[str, str] = {}
        while True:
            line = self.reader.readline(65536)
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            self.headers[name.strip().lower()] = value.strip()

    def read_all(self) -> bytes:
        return b"".join(self.chunks())

    def chunks(self) -> Iterator[bytes]:
        """The body as it arrives; a body cut short raises :class:`ConnectionError`."""
        try:
            if self.headers.get("transfer-encoding", "").lower() == "chunked":
                yield from self._chunked()
            elif "content-length" in self.headers:
                yield self._exactly(int(self.headers["content-length"]))
            else:  # a raw stream (an exec's output): until the engine closes the connection
                while True:
                    data = self.reader.read1(65536)
                    if not data:
                        return
                    yield data
        finally:
            self.close()

    def _chunked(self) -> Iterator[bytes]:
        while True:
            size_line = self.reader.readline(65536)
            if not size_line:
                raise ConnectionError("the Docker engine closed the connection mid-answer")
            size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                return
            yield self._exactly(size)
            self.reader.readline(65536)

    def _exactly(self, size: int) -> bytes:
        data = self.reader.read(size)
        if len(data) < size:
            raise ConnectionError("the Docker engine closed the connection mid-answer")
        return data

    def close(self) -> None:
        self.reader.close()
        self.connection.close()


def _frames(stream: Iterator[bytes]) -> Iterator[bytes]:
    """The payloads of the engine's multiplexed stream (8-byte header: stream, 0, 0, 0, size)."""
    pending = b""
    for data in stream:
        pending += data
        while len(pending) >= 8:
            size = struct.unpack(">I", pending[4:8])[0]
            if len(pending) < 8 + size:
                break
            if size:
                yield pending[8:8 + size]
            pending = pending[8 + size:]
    if pending:
        raise ConnectionError("the Docker engine's output stream ended mid-frame")


def _message(data: bytes) -> str:
    try:
        answer = json.loads(data)
    except ValueError:
        return data.decode("utf-8", "replace").strip()
    return str(answer.get("message", answer)) if isinstance(answer, dict) else str(answer)


def _tls_context(environ: Mapping[str, str]) -> Any:
    import ssl

    folder = environ.get("DOCKER_CERT_PATH") or os.path.join(os.path.expanduser("~"), ".docker")
    context = ssl.create_default_context(cafile=os.path.join(folder, "ca.pem"))
    context.load_cert_chain(os.path.join(folder, "cert.pem"), os.path.join(folder, "key.pem"))
    return context


def import_docker(environ: Mapping[str, str]) -> Any:
    """``import docker`` without its optional SSH transport unless DOCKER_HOST asks for ssh://.

    docker-py imports paramiko eagerly when it is installed (~0.2 s); it is kept out of that import
    (it stays importable for the data providers that need it)."""
    import sys

    block = "paramiko" not in sys.modules and not environ.get("DOCKER_HOST", "").startswith("ssh://")
    if block:
        sys.modules["paramiko"] = None  # type: ignore[assignment]  # makes docker's optional import fail
    try:
        import docker
    finally:
        if block and sys.modules.get("paramiko", 0) is None:
            del sys.modules["paramiko"]
    return docker


class SdkEngine(Engine):
    """The same calls through the SDK, for an engine this client cannot reach itself (ssh://)."""

    def __init__(self, host: str, *, environ: Mapping[str, str]) -> None:
        super().__init__(host, environ=environ)

    @property
    def sdk(self) -> Any:
        if self._sdk is None:
            self._sdk = import_docker(self._environ).from_env(environment=self._environ, timeout=self.timeout)
        return self._sdk

    def _call(self, method: str, path: str, *, query: Mapping[str, str] | None = None, body: Any = None,
              raw: bool = False, timeout: float | None = CALL_TIMEOUT) -> Any:
        response = self._request(method, path, query, body, stream=False)
        if raw:
            return response.content
        return response.json() if response.content else None

    def _stream(self, method: str, path: str, *, query: Mapping[str, str] | None = None,
                body: Any = None) -> Iterator[bytes]:
        api = self.sdk.api
        response = self._request(method, path, query, body, stream=True)
        return api._stream_raw_result(response, chunk_size=65536, decode=False) \
            if "chunked" in response.headers.get("Transfer-Encoding", "") else iter(api._read_from_socket(
                response, stream=True, tty=True))

    def _request(self, method: str, path: str, query: Mapping[str, str] | None, body: Any, stream: bool) -> Any:
        api = self.sdk.api
        # the SDK's APIClient is a requests Session bound to the engine's transport (ssh included)
        response = api.request(method, api.base_url + path, params=query or None,
                               data=json.dumps(body) if body is not None else None,
                               headers={"Content-Type": "application/json"} if body is not None else None,
                               stream=stream, timeout=None if stream else self.timeout)
        if response.status_code >= 400:
            raise EngineError(response.status_code, _message(response.content))
        return response
