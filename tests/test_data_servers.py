"""Real servers for the data-provider and credential tests (no tests in this module).

* S3: moto's standalone server (``ThreadedMotoServer``) on a free loopback port, used through
  boto3 over real HTTP (MinIO is the same protocol at another endpoint).
* SSH: a real OpenSSH ``sshd`` with a generated host key and config on a free loopback port,
  key authentication for the current user (root in CI); it serves SFTP (the NAS provider) and
  git over SSH.
* Git over HTTP: ``git http-backend`` behind a small HTTP server that demands basic auth.

Fixtures here are module-scoped; test modules import the ones they use.
"""

from __future__ import annotations

import base64
import getpass
import hmac
import os
import shutil
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from conftest import FIXTURES, require_service

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
DATATESTS = FIXTURES / "repo" / "scripts" / "datatests"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def install_datatests(repo: Path) -> Path:
    """Turn the fixture's models.template.json into the tmp copy's scripts/datatests/models.json."""
    folder = repo / "scripts" / "datatests"
    shutil.copy(folder / "models.template.json", folder / "models.json")
    return folder


# -- S3 ------------------------------------------------------------------------------------------
class S3Server:
    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing")

    def put_tree(self, bucket: str, files: dict[str, bytes]) -> None:
        client = self.client()
        try:
            client.create_bucket(Bucket=bucket)
        except client.exceptions.BucketAlreadyOwnedByYou:
            pass
        for key, body in files.items():
            client.put_object(Bucket=bucket, Key=key, Body=body)

    def stop(self) -> None:
        self._server.stop()


@pytest.fixture(scope="module")
def s3_server():
    try:
        server = S3Server()
    except Exception as exc:  # moto[server] missing or the port cannot be bound
        require_service("moto S3 server", False, f"pip install 'moto[server]' ({type(exc).__name__})")
    yield server
    server.stop()


# -- sshd ----------------------------------------------------------------------------------------
class SshServer:
    """An sshd on a loopback port: generated host key, one authorized client key."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o700)
        self.user = getpass.getuser()
        self.host_key = folder / "host_ed25519"
        self.client_key = folder / "client_ed25519"
        for key in (self.host_key, self.client_key):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "madengine-test", "-f", str(key)],
                           check=True, capture_output=True)
        shutil.copy(str(self.client_key) + ".pub", folder / "authorized_keys")
        self.port = free_port()
        self.known_hosts = folder / "known_hosts"
        public = Path(str(self.host_key) + ".pub").read_text().split()
        self.known_hosts.write_text(f"[127.0.0.1]:{self.port} {public[0]} {public[1]}\n")
        fingerprint = subprocess.run(["ssh-keygen", "-l", "-f", str(self.host_key) + ".pub"], check=True,
                                     capture_output=True, text=True).stdout.split()[1]
        self.fingerprint = fingerprint
        config = folder / "sshd_config"
        config.write_text("\n".join([
            f"Port {self.port}", "ListenAddress 127.0.0.1", f"HostKey {self.host_key}",
            f"PidFile {folder / 'sshd.pid'}", f"AuthorizedKeysFile {folder / 'authorized_keys'}",
            "PermitRootLogin prohibit-password", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
            "PubkeyAuthentication yes", "UsePAM no", "StrictModes no", "Subsystem sftp internal-sftp",
            "MaxStartups 50", "LogLevel VERBOSE", ""]))
        self._made_privsep = False
        if not Path("/run/sshd").is_dir() and os.geteuid() == 0:
            Path("/run/sshd").mkdir(mode=0o755)
            self._made_privsep = True
        self.log = folder / "sshd.log"
        with open(self.log, "w") as log:
            self.process = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL)
        if not wait_for_port(self.port) or self.process.poll() is not None:
            self.stop()
            raise RuntimeError(f"sshd did not start: {self.log.read_text()[-500:]}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._made_privsep:
            shutil.rmtree("/run/sshd", ignore_errors=True)


@pytest.fixture(scope="module")
def sshd_server(tmp_path_factory):
    usable = Path(SSHD).is_file() and shutil.which("ssh-keygen") is not None
    require_service("OpenSSH server", usable, "apt-get install openssh-server (scripts/ci.d/30-sshd.sh)")
    try:
        server = SshServer(tmp_path_factory.mktemp("sshd"))
    except RuntimeError as exc:
        require_service("OpenSSH server", False, str(exc))
    yield server
    server.stop()


# -- git -----------------------------------------------------------------------------------------
def make_bare_repo(folder: Path, files: dict[str, str]) -> Path:
    """A bare repository ``folder/models.git`` with one commit holding ``files``."""
    work = folder / "work"
    bare = folder / "models.git"
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com"}
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True, env=env)
    for name, text in files.items():
        (work / name).write_text(text)
    subprocess.run(["git", "-C", str(work), "add", "-A"], check=True, env=env)
    subprocess.run(["git", "-C", str(work), "commit", "-q", "-m", "models"], check=True, env=env)
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True, env=env)
    return bare


class GitHttpServer:
    """``git http-backend`` over HTTP on a loopback port, behind basic auth."""

    def __init__(self, project_root: Path, username: str, password: str) -> None:
        self.project_root = project_root
        self.expected = "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()
        self.username = username
        self.failed_logins = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep pytest output clean
                pass

            def do_GET(self) -> None:
                server.handle(self)

            def do_POST(self) -> None:
                server.handle(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, name: str = "models.git") -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        if not hmac.compare_digest(request.headers.get("Authorization", ""), self.expected):
            if request.headers.get("Authorization"):
                self.failed_logins += 1
            request.send_response(401)
            request.send_header("WWW-Authenticate", 'Basic realm="madengine-test"')
            request.send_header("Content-Length", "0")
            request.end_headers()
            return
        body = _request_body(request)
        path, _, query = request.path.partition("?")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_PROJECT_ROOT": str(self.project_root),
               "GIT_HTTP_EXPORT_ALL": "1", "PATH_INFO": path, "QUERY_STRING": query,
               "REQUEST_METHOD": request.command, "CONTENT_TYPE": request.headers.get("Content-Type", ""),
               "CONTENT_LENGTH": str(len(body)), "REMOTE_USER": self.username, "REMOTE_ADDR": "127.0.0.1"}
        if request.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = request.headers["Git-Protocol"]
        if request.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = request.headers["Content-Encoding"]
        output = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True).stdout
        separator = b"\r\n\r\n" if b"\r\n\r\n" in output else b"\n\n"
        head, _, payload = output.partition(separator)
        status, headers = 200, []
        for line in head.decode("latin-1").splitlines():
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = int(value.strip().split()[0])
            elif key:
                headers.append((key, value.strip()))
        request.send_response(status)
        for key, value in headers:
            request.send_header(key, value)
        request.send_header("Content-Length", str(len(payload)))
        request.end_headers()
        request.wfile.write(payload)

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


def _request_body(request: BaseHTTPRequestHandler) -> bytes:
    if request.headers.get("Transfer-Encoding", "").lower() == "chunked":
        chunks = []
        while True:
            size = int(request.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                request.rfile.readline()
                return b"".join(chunks)
            chunks.append(request.rfile.read(size))
            request.rfile.readline()
    length = int(request.headers.get("Content-Length") or 0)
    return request.rfile.read(length) if length else b""
