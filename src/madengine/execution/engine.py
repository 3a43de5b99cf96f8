"""The Docker Engine API calls of a run, made over the engine's socket with the standard library.

Importing the Docker SDK for Python costs about 0.15 s (requests, urllib3, charset_normalizer):
a third of a one-model run on a cached image. A run needs a dozen Engine API calls, which this
client makes itself: HTTP/1.1, one connection per call, on the Unix socket (``DOCKER_HOST`` unset
or ``unix://``) or TCP (``tcp://``, with TLS when ``DOCKER_TLS_VERIFY`` is set). Image builds,
pushes, pulls and saves stream tar archives and registry auth; they go through the SDK
(:attr:`Engine.sdk`), imported only when one of them happens, and so does every call when
``DOCKER_HOST`` is ``ssh://`` (the SDK's own transport).

An answer of the engine with an error status is an :class:`EngineError`; a failure to reach the
engine at all is an :class:`OSError` (refused, reset, closed mid-stream). Every call has a deadline:
an engine that accepts the connection but never answers (its process hangs) is an
:class:`EngineTimeout` once the call's ``timeout`` has passed; a stream (a container's output) may
be given a deadline of its own (``until``), else it lasts as long as the container writes.
"""

from __future__ import annotations

import copy
import json
import os
import queue
import re
import socket
import struct
import sys
import threading
import time
from typing import Any, Callable, Iterator, Mapping
from urllib.parse import quote, urlencode

from madengine.core.errors import InputError

DEFAULT_SOCKET = "/var/run/docker.sock"
#: seconds an engine has to answer one call (a stream: to start answering) before it counts as not responding
CALL_TIMEOUT = 30.0
#: the SDK's socket timeout for builds, pushes, pulls and saves (a build step may be silent for a while)
SDK_TIMEOUT = 60.0


#: the schemes of an engine's URL in ``DOCKER_HOST`` (the Docker CLI's, less Windows' npipe)
DOCKER_HOST_SCHEMES = ("unix", "tcp", "http", "https", "ssh")
_HOST_URL = re.compile(r"^(?P<scheme>[a-z]+)://(?P<rest>\S+)$")
_TCP_ADDRESS = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]*)(?::(?P<port>\d{1,5}))?/?$")


def docker_host(environ: Mapping[str, str]) -> str:
    """``DOCKER_HOST`` of the command's environment ('' when unset), once it is an engine's URL:
    ``unix:///path``, ``tcp://host:port``, ``http(s)://host:port`` or ``ssh://[user@]host``."""
    host = environ.get("DOCKER_HOST", "").strip()
    if not host:
        return ""
    match = _HOST_URL.match(host)
    hint = "e.g. unix:///var/run/docker.sock, tcp://10.0.0.5:2375 or ssh://me@build-host; unset it for the local engine"
    if match is None or match.group("scheme") not in DOCKER_HOST_SCHEMES:
        raise InputError(f"'{host}' is not a Docker engine URL", path="DOCKER_HOST", hint=hint)
    scheme, rest = match.group("scheme"), match.group("rest")
    if scheme == "unix" and not rest.startswith("/"):
        raise InputError(f"'{host}' does not name a socket path (unix:// then an absolute path)", path="DOCKER_HOST",
                         hint=hint)
    if scheme in ("tcp", "http", "https"):
        address = _TCP_ADDRESS.match(rest)
        if address is None or (address.group("port") and not 0 < int(address.group("port")) < 65536):
            raise InputError(f"'{host}' is not host:port", path="DOCKER_HOST", hint=hint)
    return host


class EngineTimeout(TimeoutError):
    """The engine took the call but did not answer it in time: its process is not responding."""

    def __init__(self, call: str, seconds: float | None = None) -> None:
        call = re.sub(r"\b([0-9a-f]{12})[0-9a-f]{52}\b", r"\1", call)  # container and exec ids, short
        super().__init__(f"no answer to {call} within {seconds:.0f} s" if seconds is not None
                         else f"the output of {call} did not end by its deadline")
        self.call = call
        self.seconds = seconds


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
        self.timeout = timeout  # of each call
        self._environ = dict(environ or {})  # the command's: for the SDK (TLS, ssh) when one is needed
        self._sdk: Any = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> "Engine":
        """The engine ``DOCKER_HOST`` names (the local socket when unset); InputError (exit 2)
        naming ``DOCKER_HOST`` when it is not an engine's URL."""
        host = docker_host(environ)
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
                self._sdk = docker.DockerClient(base_url=f"unix://{self.address}", timeout=SDK_TIMEOUT)
            else:
                self._sdk = docker.from_env(environment=self._environ, timeout=SDK_TIMEOUT)
        return self._sdk

    def bounded(self, seconds: float) -> "Engine":
        """The same engine with calls limited to ``seconds`` (clean-up after a lost engine, the
        calls after a step's output, which have only what is left of the step's deadline)."""
        other = copy.copy(self)
        other.timeout = min(self.timeout, seconds)
        return other

    # -- engine ----------------------------------------------------------------------------------
    def ping(self) -> None:
        self._call("GET", "/_ping", raw=True)

    def version(self) -> dict[str, Any]:
        """The engine's ``/version``: Version, ApiVersion, Os, Arch, ..."""
        return self._call("GET", "/version")

    def info(self) -> dict[str, Any]:
        """The engine's ``/info`` (as ``docker info``): Driver, DockerRootDir, Runtimes, ..."""
        return self._call("GET", "/info")

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

    def logs(self, container: str, until: float | None = None) -> "Stream":
        """The container's output from its start until it exits (stdout and stderr, as written);
        :class:`EngineTimeout` if it has not ended by ``until`` (``time.monotonic()``; None: never)."""
        query = {"follow": "1", "stdout": "1", "stderr": "1"}
        return self._stream("GET", f"/containers/{container}/logs", query=query, until=until)

    def attach_stdin(self, container: str) -> Any:
        """A connection to the container's standard input, held open until it is closed (or this
        process ends, however it ends): a container created with ``OpenStdin`` and ``StdinOnce``
        then sees its input end."""
        path = f"/containers/{container}/attach"
        connection = self._send("POST", path, {"stream": "1", "stdin": "1"}, None, self.timeout, upgrade=True)
        try:
            response = _Response(connection, f"POST {path}", self.timeout)
        except TimeoutError:
            raise EngineTimeout(f"POST {path}", self.timeout) from None
        if response.status >= 400:
            raise EngineError(response.status, _message(response.read_all()))
        connection.settimeout(None)
        return response

    def wait(self, container: str) -> dict[str, Any]:
        """The exit of a container that is ending (within the call's timeout)."""
        return self._call("POST", f"/containers/{container}/wait")

    def inspect_container(self, container: str) -> dict[str, Any]:
        return self._call("GET", f"/containers/{container}/json")

    def kill(self, container: str) -> None:
        self._call("POST", f"/containers/{container}/kill", raw=True)

    def remove(self, container: str) -> None:
        self._call("DELETE", f"/containers/{container}", query={"force": "1", "v": "1"}, raw=True)

    def container_ids(self, label: str) -> list[str]:
        return [container["Id"] for container in self.containers(label)]

    def containers(self, label: str) -> list[dict[str, Any]]:
        """The engine's summaries (Id, Names, Labels, State, ...) of every container carrying ``label``
        (``key`` or ``key=value``), running or not."""
        return self._call("GET", "/containers/json", query={"all": "1", "filters": json.dumps({"label": [label]})})

    # -- exec ------------------------------------------------------------------------------------
    def exec_create(self, container: str, argv: list[str], *, workdir: str = "",
                    environment: Mapping[str, str] | None = None) -> str:
        body: dict[str, Any] = {"Cmd": list(argv), "AttachStdout": True, "AttachStderr": True}
        if workdir:
            body["WorkingDir"] = workdir
        if environment:
            body["Env"] = [f"{key}={value}" for key, value in environment.items()]
        return self._call("POST", f"/containers/{container}/exec", body=body)["Id"]

    def exec_start(self, exec_id: str, until: float | None = None) -> "Stream":
        """The exec's output until its process ends (stdout and stderr, as written);
        :class:`EngineTimeout` if it has not ended by ``until`` (``time.monotonic()``; None: never)."""
        return self._stream("POST", f"/exec/{exec_id}/start", body={"Detach": False, "Tty": False}, until=until)

    def exec_inspect(self, exec_id: str) -> dict[str, Any]:
        return self._call("GET", f"/exec/{exec_id}/json")

    # -- HTTP ------------------------------------------------------------------------------------
    def _call(self, method: str, path: str, *, query: Mapping[str, str] | None = None, body: Any = None,
              raw: bool = False) -> Any:
        seconds = self.timeout
        call = f"{method} {path}"
        try:
            response = _Response(self._send(method, path, query, body, seconds), call, seconds)
            data = response.read_all()  # which closes the connection, also when the answer is cut short
        except TimeoutError:
            raise EngineTimeout(call, seconds) from None
        if response.status >= 400:
            raise EngineError(response.status, _message(data))
        return data if raw else json.loads(data) if data else None

    def _stream(self, method: str, path: str, *, query: Mapping[str, str] | None = None,
                body: Any = None, until: float | None = None) -> "Stream":
        call = f"{method} {path}"
        # the engine starts answering a stream at once: its head has the call's deadline, or what
        # is left of the stream's own when that comes first
        seconds = self.timeout if until is None else min(self.timeout, until - time.monotonic())
        if seconds <= 0:
            raise EngineTimeout(call)  # its deadline passed before it began
        try:
            response = _Response(self._send(method, path, query, body, seconds), call, seconds)
        except TimeoutError:
            raise EngineTimeout(call, seconds) from None
        if response.status >= 400:
            raise EngineError(response.status, _message(response.read_all()))
        return Stream(_until(response.chunks(until), call), response.abort)

    def _send(self, method: str, path: str, query: Mapping[str, str] | None, body: Any,
              timeout: float | None, upgrade: bool = False) -> socket.socket:
        payload = json.dumps(body).encode() if body is not None else b""
        target = path + ("?" + urlencode(query) if query else "")
        head = [f"{method} {target} HTTP/1.1", "Host: docker", "User-Agent: madengine"]
        head += ["Connection: Upgrade", "Upgrade: tcp"] if upgrade else ["Connection: close"]
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


def _until(chunks: Iterator[bytes], call: str) -> Iterator[bytes]:
    """A stream's chunks; a read that runs past ``until`` is :class:`EngineTimeout`."""
    try:
        yield from chunks
    except TimeoutError:  # only a stream with a deadline has a socket timeout
        raise EngineTimeout(call) from None


class Stream:
    """A container's output as it arrives (stdout and stderr, as written). :meth:`cancel`, from
    another thread, ends it: the reader then gets the reason it was given (an engine that stopped
    answering while it streamed)."""

    def __init__(self, chunks: Iterator[bytes], abort: Callable[[], None]) -> None:
        self._chunks = chunks
        self._abort = abort
        self.cancelled: BaseException | None = None

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from _frames(self._chunks)
        except Exception:
            if self.cancelled is None:
                raise
        if self.cancelled is not None:
            raise self.cancelled

    def cancel(self, reason: BaseException) -> None:
        self.cancelled = reason
        self._abort()


class _Response:
    """One HTTP/1.1 response read from a connection the engine closes after it. Its head must
    arrive within ``seconds``; so must the body of a call (a stream's body has its own deadline).
    A read past a deadline raises :class:`TimeoutError`."""

    def __init__(self, connection: socket.socket, call: str, seconds: float | None) -> None:
        self.connection = connection
        self.call = call
        self.until = time.monotonic() + seconds if seconds is not None else None
        self.reader = connection.makefile("rb")
        try:
            self._head()
        except BaseException:
            self.close()
            raise

    def _arm(self) -> None:
        """The socket's timeout for the next read: what is left until the deadline."""
        if self.until is None:
            return
        left = self.until - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no answer to {self.call} in time")
        self.connection.settimeout(left)

    def _head(self) -> None:
        self._arm()
        status_line = self.reader.readline(65536)
        if not status_line:
            raise ConnectionError("the Docker engine closed the connection without answering")
        parts = status_line.split(None, 2)
        self.status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
        self.headers: dict[str, str] = {}
        while True:
            self._arm()
            line = self.reader.readline(65536)
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            self.headers[name.strip().lower()] = value.strip()

    def read_all(self) -> bytes:
        return b"".join(self.chunks(self.until))

    def chunks(self, until: float | None) -> Iterator[bytes]:
        """The body as it arrives, until ``until`` (``time.monotonic()``; None: as long as it takes);
        a body cut short raises :class:`ConnectionError`."""
        self.until = until
        if until is None:
            self.connection.settimeout(None)
        try:
            if self.headers.get("transfer-encoding", "").lower() == "chunked":
                yield from self._chunked()
            elif "content-length" in self.headers:
                yield self._exactly(int(self.headers["content-length"]))
            else:  # a raw stream (an exec's output): until the engine closes the connection
                while True:
                    self._arm()
                    data = self.reader.read1(65536)
                    if not data:
                        return
                    yield data
        finally:
            self.close()

    def _chunked(self) -> Iterator[bytes]:
        while True:
            self._arm()
            size_line = self.reader.readline(65536)
            if not size_line:
                raise ConnectionError("the Docker engine closed the connection mid-answer")
            size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                return
            yield self._exactly(size)
            self._arm()
            self.reader.readline(65536)

    def _exactly(self, size: int) -> bytes:
        self._arm()
        data = self.reader.read(size)
        if len(data) < size:
            raise ConnectionError("the Docker engine closed the connection mid-answer")
        return data

    def close(self) -> None:
        self.reader.close()
        self.connection.close()

    def abort(self) -> None:
        """End the connection under a reader blocked on it in another thread (closing it would
        wait for that read): the read returns at once."""
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


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
            self._sdk = import_docker(self._environ).from_env(environment=self._environ, timeout=SDK_TIMEOUT)
        return self._sdk

    def _call(self, method: str, path: str, *, query: Mapping[str, str] | None = None, body: Any = None,
              raw: bool = False) -> Any:
        response = self._request(method, path, query, body, stream=False)
        if raw:
            return response.content
        return response.json() if response.content else None

    def _stream(self, method: str, path: str, *, query: Mapping[str, str] | None = None,
                body: Any = None, until: float | None = None) -> Stream:
        api = self.sdk.api
        response = self._request(method, path, query, body, stream=True)
        chunks = api._stream_raw_result(response, chunk_size=65536, decode=False) \
            if "chunked" in response.headers.get("Transfer-Encoding", "") else iter(api._read_from_socket(
                response, stream=True, tty=True))
        pump = _Pump(chunks, response.close)
        return Stream(pump.until(until, f"{method} {path}"), pump.abort)

    def attach_stdin(self, container: str) -> Any:
        try:
            return self.sdk.api.attach_socket(container, params={"stdin": 1, "stream": 1})
        except Exception as exc:
            _raise_sdk(exc, f"POST /containers/{container}/attach", self.timeout)
            raise

    def _request(self, method: str, path: str, query: Mapping[str, str] | None, body: Any, stream: bool) -> Any:
        api = self.sdk.api
        # the SDK's APIClient is a requests Session bound to the engine's transport (ssh included)
        try:
            response = api.request(method, api.base_url + path, params=query or None,
                                   data=json.dumps(body) if body is not None else None,
                                   headers={"Content-Type": "application/json"} if body is not None else None,
                                   stream=stream, timeout=self.timeout)
        except Exception as exc:
            _raise_sdk(exc, f"{method} {path}", self.timeout)
            raise
        if response.status_code >= 400:
            raise EngineError(response.status_code, _message(response.content))
        return response


def _raise_sdk(exc: BaseException, call: str, seconds: float) -> None:
    """An SDK (requests) timeout as the :class:`EngineTimeout` this client raises itself."""
    requests_errors = sys.modules.get("requests.exceptions")
    if isinstance(exc, TimeoutError) or requests_errors is not None and isinstance(exc, requests_errors.Timeout):
        raise EngineTimeout(call, seconds) from None


class _Pump:
    """The SDK's stream read by a helper thread, so that the reader can stop waiting whatever the
    transport underneath (ssh included): at a deadline, or when the stream is cancelled."""

    _END = object()

    def __init__(self, chunks: Iterator[bytes], close: Callable[[], None]) -> None:
        self.handoff: queue.Queue = queue.Queue()
        self.close = close
        threading.Thread(target=self._pump, args=(chunks,), name="engine-stream", daemon=True).start()

    def _pump(self, chunks: Iterator[bytes]) -> None:
        try:
            for chunk in chunks:
                self.handoff.put(chunk)
            self.handoff.put(self._END)
        except BaseException as exc:  # handed to the reader
            self.handoff.put(exc)

    def abort(self) -> None:
        self.handoff.put(ConnectionAbortedError("the stream was cancelled"))
        self._close_aside()

    def _close_aside(self) -> None:
        # closed in a thread of its own: closing waits for the read the helper thread is blocked in
        threading.Thread(target=self.close, name="engine-stream-close", daemon=True).start()

    def until(self, until: float | None, call: str) -> Iterator[bytes]:
        """The chunks; :class:`EngineTimeout` if the stream has not ended by ``until``."""
        while True:
            try:
                item = self.handoff.get(timeout=None if until is None else max(0.0, until - time.monotonic()))
            except queue.Empty:
                self._close_aside()
                raise EngineTimeout(call) from None
            if item is self._END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
