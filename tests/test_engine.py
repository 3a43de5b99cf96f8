"""The standard-library Engine API client (execution/engine.py) against the real Docker engine, and
its HTTP reading against a real socket server that answers in the shapes the engine uses
(chunked, Content-Length, raw stream, cut short)."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
import uuid
from pathlib import Path

import pytest
from conftest import BASE_IMAGE
from socket_proxy import ProxyProcess

from madengine.core.errors import ServiceError
from madengine.execution.docker import connect, is_engine_gone
from madengine.execution.engine import Engine, EngineError, EngineTimeout, SdkEngine


def _frame(stream: int, data: bytes) -> bytes:
    return struct.pack(">BxxxI", stream, len(data)) + data


@pytest.fixture
def engine(docker_client) -> Engine:
    return connect({})


@pytest.fixture
def container(engine):
    created: list[str] = []
    yield created
    for container_id in created:
        try:
            engine.remove(container_id)
        except EngineError:
            pass


def _body(cmd: list[str]) -> dict:
    return {"Image": BASE_IMAGE, "Cmd": cmd, "Labels": {"madengine.test": "engine"},
            "HostConfig": {"Init": True, "LogConfig": {"Type": "json-file", "Config": {}}}}


def test_a_one_shot_container_output_exit_code_and_removal(engine, container):
    name = f"madengine-engine-test-{uuid.uuid4().hex[:8]}"
    container_id = engine.create_container(name, _body(["sh", "-c", "echo out; echo err >&2; exit 3"]))
    container.append(container_id)
    engine.start(container_id)
    output = b"".join(engine.logs(container_id))
    assert output.splitlines() == [b"out", b"err"] or sorted(output.splitlines()) == [b"err", b"out"]
    assert engine.wait(container_id)["StatusCode"] == 3
    assert engine.inspect_container(container_id)["Name"] == "/" + name
    assert container_id in engine.container_ids("madengine.test=engine")
    engine.remove(container_id)
    with pytest.raises(EngineError) as gone:
        engine.inspect_container(container_id)
    assert gone.value.not_found and not is_engine_gone(gone.value)


def test_exec_streams_both_outputs_and_reports_its_exit_code(engine, container):
    container_id = engine.create_container(f"madengine-engine-test-{uuid.uuid4().hex[:8]}",
                                           _body(["sleep", "infinity"]))
    container.append(container_id)
    engine.start(container_id)
    exec_id = engine.exec_create(container_id, ["sh", "-c", "echo \"$GREETING\"; pwd; echo oops >&2; exit 5"],
                                 workdir="/tmp", environment={"GREETING": "hello from exec"})
    output = b"".join(engine.exec_start(exec_id)).decode()
    assert "hello from exec" in output and "/tmp" in output and "oops" in output
    assert engine.exec_inspect(exec_id)["ExitCode"] == 5
    engine.kill(container_id)


def test_images_by_id_label_and_tag(engine, docker_client):
    attrs = engine.inspect_image(BASE_IMAGE)
    assert attrs["Id"].startswith("sha256:")
    tag = f"madengine-engine-test-{uuid.uuid4().hex[:8]}"
    try:
        engine.tag(attrs["Id"], tag)
        assert engine.inspect_image(tag)["Id"] == attrs["Id"]
    finally:
        docker_client.api.remove_image(tag)
    assert engine.image_ids("madengine.no-such-label=x") == []
    with pytest.raises(EngineError, match="No such image"):
        engine.inspect_image("madengine-no-such-image:never")


def test_a_missing_image_is_a_create_error(engine):
    with pytest.raises(EngineError) as missing:
        engine.create_container(f"madengine-engine-test-{uuid.uuid4().hex[:8]}",
                                {"Image": "madengine-no-such-image:never", "Cmd": ["true"]})
    assert missing.value.not_found and "image" in missing.value.message.lower()


def test_no_engine_is_a_service_error_and_a_gone_engine_an_os_error(tmp_path):
    with pytest.raises(ServiceError, match="no Docker engine answers"):
        connect({"DOCKER_HOST": f"unix://{tmp_path}/none.sock"})
    with pytest.raises(OSError) as refused:
        Engine(str(tmp_path / "none.sock")).ping()
    assert is_engine_gone(refused.value)


def test_docker_host_forms():
    assert Engine.from_env({}).address == "/var/run/docker.sock"
    assert Engine.from_env({"DOCKER_HOST": "unix:///run/user/1000/docker.sock"}).address == "/run/user/1000/docker.sock"
    assert Engine.from_env({"DOCKER_HOST": "tcp://10.0.0.5:2375"}).address == ("10.0.0.5", 2375)
    assert isinstance(Engine.from_env({"DOCKER_HOST": "ssh://me@build-host"}), SdkEngine)


def test_the_sdk_path_makes_the_same_calls(engine, container):
    """What an ssh:// DOCKER_HOST uses (no ssh engine here: the same adapter over the local socket)."""
    sdk = SdkEngine("unix:///var/run/docker.sock", environ={"DOCKER_HOST": "unix:///var/run/docker.sock"})
    sdk.ping()
    container_id = sdk.create_container(f"madengine-engine-test-{uuid.uuid4().hex[:8]}",
                                        _body(["sh", "-c", "echo via the sdk"]))
    container.append(container_id)
    sdk.start(container_id)
    assert b"".join(sdk.logs(container_id)).strip() == b"via the sdk"
    assert sdk.wait(container_id)["StatusCode"] == 0
    with pytest.raises(EngineError) as missing:
        sdk.inspect_image("madengine-no-such-image:never")
    assert missing.value.not_found


class _OneAnswer:
    """A Unix-socket server that answers every connection with the same bytes, then closes."""

    def __init__(self, path: Path, answer: bytes) -> None:
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        self.server.listen(4)
        self.answer = answer
        self.requests: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            with connection:
                self.requests.append(connection.recv(65536))
                for i in range(0, len(self.answer), 7):  # in small pieces: frames and chunks straddle reads
                    connection.sendall(self.answer[i:i + 7])

    def close(self) -> None:
        self.server.close()


def _answer(tmp_path, answer: bytes) -> tuple[Engine, _OneAnswer]:
    server = _OneAnswer(tmp_path / "engine.sock", answer)
    return Engine(str(tmp_path / "engine.sock")), server


def test_chunked_frames_straddling_reads_are_reassembled(tmp_path):
    payload = _frame(1, b"line one\n") + _frame(2, b"") + _frame(2, b"an error\n") + _frame(1, b"x" * 100)
    body = b"".join(b"%x\r\n%s\r\n" % (len(payload[i:i + 10]), payload[i:i + 10]) for i in range(0, len(payload), 10))
    engine, server = _answer(tmp_path, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + body + b"0\r\n\r\n")
    try:
        assert b"".join(engine.logs("c1")) == b"line one\nan error\n" + b"x" * 100
        request = server.requests[0].decode()
        assert request.startswith("GET /containers/c1/logs?follow=1&stdout=1&stderr=1 HTTP/1.1\r\n")
    finally:
        server.close()


def test_a_raw_stream_ends_with_the_connection(tmp_path):
    engine, server = _answer(tmp_path, b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.docker.raw-stream\r\n\r\n"
                             + _frame(1, b"done\n"))
    try:
        assert list(engine.exec_start("e1")) == [b"done\n"]
        request = server.requests[0]
        assert json.loads(request.split(b"\r\n\r\n", 1)[1]) == {"Detach": False, "Tty": False}
    finally:
        server.close()


@pytest.mark.parametrize("answer", [
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n" + _frame(1, b"12345678"),  # no last chunk
    b"HTTP/1.1 200 OK\r\n\r\n" + _frame(1, b"12345678")[:-3],  # a frame cut short
    b"",  # no answer at all
])
def test_an_answer_cut_short_is_a_gone_engine(tmp_path, answer):
    engine, server = _answer(tmp_path, answer)
    try:
        with pytest.raises(ConnectionError) as cut:
            b"".join(engine.logs("c1"))
        assert is_engine_gone(cut.value)
    finally:
        server.close()


def test_an_error_answer_carries_status_and_message(tmp_path):
    message = json.dumps({"message": "conflict: container is not running"}).encode()
    engine, server = _answer(tmp_path, b"HTTP/1.1 409 Conflict\r\nContent-Length: %d\r\n\r\n%s" % (len(message), message))
    try:
        with pytest.raises(EngineError) as conflict:
            engine.kill("c1")
        assert conflict.value.status == 409 and conflict.value.message == "conflict: container is not running"
    finally:
        server.close()


def _within(seconds: float, call) -> tuple[BaseException | None, float]:
    """What ``call`` raised and how long it took; fails if it is still running after ``seconds``
    (in a thread: a call that hangs must not hang the tests too)."""
    outcome: list = []

    def target() -> None:
        started = time.monotonic()
        try:
            call()
            outcome.append((None, time.monotonic() - started))
        except BaseException as exc:  # handed to the test
            outcome.append((exc, time.monotonic() - started))

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(seconds)
    assert outcome, f"the call still waits after {seconds} s"
    return outcome[0]


@pytest.mark.parametrize("client", ["stdlib", "sdk"])
def test_a_frozen_engine_answers_no_call_and_every_call_ends_by_its_deadline(tmp_path, engine, container, client):
    """The engine's socket still takes connections and requests, but its process is stopped
    (SIGSTOP of a proxy in front of the real engine): each call ends with EngineTimeout when its
    timeout has passed, and a container's output stream when its own deadline has."""
    proxy = ProxyProcess("/var/run/docker.sock", tmp_path / "engine.sock")
    try:
        frozen = Engine(str(tmp_path / "engine.sock")) if client == "stdlib" else \
            SdkEngine(f"unix://{tmp_path / 'engine.sock'}",
                      environ={"DOCKER_HOST": f"unix://{tmp_path / 'engine.sock'}"})
        frozen.timeout = 2.0
        container_id = frozen.create_container(f"madengine-engine-test-{uuid.uuid4().hex[:8]}",
                                               _body(["sh", "-c", "echo up; sleep 60"]))
        container.append(container_id)
        frozen.start(container_id)
        output = iter(frozen.logs(container_id, until=time.monotonic() + 4))
        assert next(output) == b"up\n"
        endless = frozen.logs(container_id)  # no deadline: only a cancel ends it
        reading = iter(endless)
        assert next(reading) == b"up\n"
        proxy.freeze()
        threading.Timer(1.0, endless.cancel, args=(EngineTimeout("GET /_ping", 30),)).start()
        error, took = _within(30, lambda: list(reading))
        assert isinstance(error, EngineTimeout) and "GET /_ping" in str(error) and took < 5, (error, took)
        for call in (frozen.ping, lambda: frozen.inspect_container(container_id), lambda: frozen.kill(container_id)):
            error, took = _within(30, call)
            assert isinstance(error, EngineTimeout) and is_engine_gone(error), error
            assert 1.5 <= took <= 5, took
        error, took = _within(30, lambda: list(output))
        assert isinstance(error, EngineTimeout) and "did not end by its deadline" in str(error), error
    finally:
        proxy.stop()
