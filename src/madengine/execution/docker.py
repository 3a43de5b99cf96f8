"""The docker executor: builds ``ci-*`` images and runs each model's steps in a container,
through the Docker SDK for Python.

The container's main process idles (``sleep infinity`` under the engine's init) and every step
is an ``exec`` in it, so pre-scripts, the model script and post-scripts share one container while
each gets its own exit code, output and (for the model) timeout. A step that times out or is
interrupted kills the container; the container is removed at the end unless ``--keep-alive``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from madengine.core.errors import BuildError, ExecutionError, ServiceError
from madengine.core.redact import redact
from madengine.execution.dockeropts import parse_run_options
from madengine.execution.plan import CONTAINER_WORKSPACE, RunSpec, Step
from madengine.execution.streams import LineSink, StepResult

_FROM = re.compile(r"^\s*FROM\s+(?:--platform=\S+\s+)?(\S+)", re.IGNORECASE | re.MULTILINE)
_ARG_DEFAULT = re.compile(r"^\s*ARG\s+(\w+)\s*=\s*(\S+)", re.IGNORECASE | re.MULTILINE)


@dataclasses.dataclass
class BuildInfo:
    image: str
    image_id: str
    base_docker: str
    docker_sha: str
    duration: float


def _import_docker():
    """``import docker`` without its optional SSH transport unless DOCKER_HOST asks for ssh://.

    docker-py imports paramiko eagerly when it is installed (~0.2 s); madengine talks to the local
    engine over its socket, so paramiko is kept out of that import (it stays importable for the
    data providers that need it).
    """
    block = "paramiko" not in sys.modules and not os.environ.get("DOCKER_HOST", "").startswith("ssh://")
    if block:
        sys.modules["paramiko"] = None  # type: ignore[assignment]  # makes docker's optional import fail
    try:
        import docker
    finally:
        if block and sys.modules.get("paramiko", 0) is None:
            del sys.modules["paramiko"]
    return docker


def connect(timeout: float = 5.0):
    """A Docker client that answered a ping, or :class:`ServiceError`."""
    try:
        docker = _import_docker()
    except ImportError:
        raise ServiceError("the 'docker' Python package is not installed", hint="pip install docker") from None
    try:
        client = docker.from_env(timeout=max(timeout, 60))
        client.ping()
        return client
    except Exception as exc:
        raise ServiceError(f"no Docker engine answers ({type(exc).__name__})",
                           hint="start dockerd (scripts/docker-up.sh) or use --executor local") from None


def base_image(dockerfile_text: str, build_args: dict[str, str]) -> str:
    """The image a Dockerfile builds FROM, with ``${ARG}`` resolved from build args and ARG defaults."""
    match = _FROM.search(dockerfile_text)
    if not match:
        return ""
    image = match.group(1)
    defaults = dict(_ARG_DEFAULT.findall(dockerfile_text))
    values = {**defaults, **build_args}
    return re.sub(r"\$\{?(\w+)\}?", lambda m: values.get(m.group(1), m.group(0)), image)


class DockerExecutor:
    name = "docker"

    def __init__(self, client: Any, *, pull: bool = False, no_cache: bool = False) -> None:
        self.client = client
        self.pull = pull
        self.no_cache = no_cache
        self._containers: dict[str, Any] = {}
        #: builds done in this run, by what determines their result (see ``build``)
        self._builds: dict[tuple, "BuildInfo | BuildError"] = {}
        self._build_locks: dict[tuple, threading.Lock] = {}
        self._memo_lock = threading.Lock()

    def workspace(self, spec: RunSpec) -> str:
        return CONTAINER_WORKSPACE

    # -- build -------------------------------------------------------------------------------
    def build(self, image: str, dockerfile: Path, context_dir: Path, build_args: dict[str, str],
              log_path: Path, live: Callable[[str], None] | None) -> BuildInfo:
        """Build ``image``; within one run, an identical build (same Dockerfile text, context folder
        and build args) is done once and its image tagged with the other names.

        Catalogs commonly give many models one Dockerfile: each would otherwise pay a full (cached)
        build in the engine.
        """
        text = dockerfile.read_text(encoding="utf-8", errors="replace")
        key = (str(dockerfile.resolve()), hashlib.sha256(text.encode()).hexdigest(), str(Path(context_dir).resolve()),
               tuple(sorted(build_args.items())))
        with self._memo_lock:
            lock = self._build_locks.setdefault(key, threading.Lock())
        with lock:  # a parallel run building the same thing waits for the first build
            done = self._builds.get(key)
            if done is None:
                try:
                    done = self._build_now(image, dockerfile, text, context_dir, build_args, log_path, live)
                except BuildError as exc:
                    self._builds[key] = exc
                    raise
                self._builds[key] = done
                return done
        return self._reuse(done, image, log_path)

    def _reuse(self, done: "BuildInfo | BuildError", image: str, log_path: Path) -> BuildInfo:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "a", encoding="utf-8") as log:
            if isinstance(done, BuildError):
                log.write(f"=== madengine: the same build failed earlier in this run: {done.message}\n")
                raise BuildError(f"build of {image} failed: the identical build failed earlier in this run "
                                 f"({done.message})", log_path=str(log_path))
            started = time.monotonic()
            self.client.api.tag(done.image_id, image)
            log.write(f"=== madengine: same Dockerfile, build context and build args as {done.image} earlier in "
                      f"this run: tagged its image {done.image_id} as {image}\n")
        return dataclasses.replace(done, image=image, duration=time.monotonic() - started)

    def _build_now(self, image: str, dockerfile: Path, text: str, context_dir: Path, build_args: dict[str, str],
                   log_path: Path, live: Callable[[str], None] | None) -> BuildInfo:
        from docker.errors import APIError, DockerException

        base = base_image(text, build_args)
        started = time.monotonic()
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "a", encoding="utf-8") as log:
            sink = LineSink(log, live, keep=False)
            error = ""
            try:
                stream = self.client.api.build(
                    path=str(context_dir), dockerfile=str(dockerfile.resolve()), tag=image,
                    buildargs=build_args, nocache=self.no_cache, pull=self.pull, rm=True, forcerm=True,
                    decode=True)
                for chunk in stream:
                    if "stream" in chunk:
                        sink.feed(chunk["stream"].encode())
                    if "error" in chunk:
                        error = chunk["error"].strip()
                        sink.feed(("ERROR: " + error + "\n").encode())
            except (APIError, DockerException) as exc:
                error = str(exc)
                sink.feed(("ERROR: " + error + "\n").encode())
            sink.close()
        if error:
            raise BuildError(f"build of {image} failed: {_last_line(redact(error))}", log_path=str(log_path))
        image_obj = self.client.images.get(image)
        return BuildInfo(image=image, image_id=image_obj.id, base_docker=base,
                         docker_sha=self._digest(base), duration=time.monotonic() - started)

    def _digest(self, name: str) -> str:
        if not name:
            return ""
        try:
            attrs = self.client.images.get(name).attrs
        except Exception:
            return ""
        digests = attrs.get("RepoDigests") or []
        return digests[0].split("@", 1)[-1] if digests else attrs.get("Id", "")

    def image_id(self, image: str) -> str:
        from docker.errors import ImageNotFound

        try:
            return self.client.images.get(image).id
        except ImageNotFound:
            raise ExecutionError(f"image {image} is not present on this host") from None

    # -- run ---------------------------------------------------------------------------------
    def _create_args(self, spec: RunSpec) -> dict[str, Any]:
        from docker.types import DeviceRequest, Ulimit

        extra = parse_run_options(spec.model.additional_docker_run_options)
        extra.update(parse_run_options(spec.row_values.get("context_docker_options", "")))
        volumes = {str(spec.workdir.resolve()): {"bind": CONTAINER_WORKSPACE, "mode": "rw"}}
        for mount in spec.mounts:
            volumes[mount.host] = {"bind": mount.container, "mode": "ro" if mount.read_only else "rw"}
        volumes.update(extra.pop("volumes", {}))
        environment = dict(spec.env)
        environment.update(extra.pop("environment", {}))
        args: dict[str, Any] = {
            "command": ["sleep", "infinity"], "detach": True, "init": True,
            "working_dir": CONTAINER_WORKSPACE, "volumes": volumes, "environment": environment,
            "user": f"{os.getuid()}:{os.getgid()}", "labels": {"madengine.run": spec.env.get("MAD_RUN_ID", "")},
        }
        vendor = spec.env.get("MAD_GPU_VENDOR")
        gpus = extra.pop("gpus", None)
        if vendor == "NVIDIA" and (spec.gpu_ids or gpus):
            ids = [str(i) for i in spec.gpu_ids]
            args["device_requests"] = [DeviceRequest(device_ids=ids, capabilities=[["gpu"]])] if ids else \
                [DeviceRequest(count=-1, capabilities=[["gpu"]])]
        elif vendor == "AMD" and spec.gpu_ids:
            devices = ["/dev/kfd:/dev/kfd:rwm"]
            groups = set()
            for path in ("/dev/kfd", *_render_nodes(spec.gpu_ids)):
                if os.path.exists(path):
                    groups.add(os.stat(path).st_gid)
                    if path != "/dev/kfd":
                        devices.append(f"{path}:{path}:rwm")
            args["devices"] = devices
            args["group_add"] = [str(g) for g in sorted(groups)]
        if "ulimits" in extra:
            extra["ulimits"] = [Ulimit(name=n, soft=s, hard=h) for n, s, h in extra["ulimits"]]
        for key in ("devices", "group_add", "cap_add", "security_opt"):
            if key in extra:
                args[key] = list(args.get(key, [])) + extra.pop(key)
        args.update(extra)
        return args

    def start(self, spec: RunSpec) -> None:
        from docker.errors import APIError, ImageNotFound

        name = container_name(spec)
        try:
            container = self.client.containers.create(spec.image, name=name, **self._create_args(spec))
            self._containers[spec.key] = container
            container.start()
        except ImageNotFound:
            raise ExecutionError(f"image {spec.image} is not present on this host") from None
        except APIError as exc:
            raise ExecutionError(f"container could not start: {_last_line(redact(str(exc)))}") from None

    def run_step(self, spec: RunSpec, step: Step, timeout: int | None, sink: LineSink) -> StepResult:
        container = self._containers[spec.key]
        api = self.client.api
        workdir = CONTAINER_WORKSPACE + ("/" + step.cwd if step.cwd else "")
        started = time.monotonic()
        try:
            exec_id = api.exec_create(container.id, step.argv, workdir=workdir, environment=step.env or None)["Id"]
            stream = api.exec_start(exec_id, stream=True)
        except Exception as exc:
            return StepResult(None, 0.0, error=f"cannot start step: {_last_line(redact(str(exc)))}")
        timed_out = threading.Event()

        def on_timeout() -> None:
            timed_out.set()
            self._kill(spec)

        timer = threading.Timer(timeout, on_timeout) if timeout else None
        if timer:
            timer.daemon = True
            timer.start()
        try:
            for chunk in stream:
                sink.feed(chunk)
        except KeyboardInterrupt:
            self._kill(spec)
            sink.close()
            return StepResult(None, time.monotonic() - started, sink.text(), interrupted=True)
        except Exception:  # the stream breaks when the container is killed
            if not timed_out.is_set():
                raise
        finally:
            if timer:
                timer.cancel()
        sink.close()
        duration = time.monotonic() - started
        if timed_out.is_set():
            return StepResult(None, duration, sink.text(), timed_out=True)
        return StepResult(self._exit_code(exec_id), duration, sink.text())

    def _exit_code(self, exec_id: str) -> int | None:
        for _ in range(100):
            info = self.client.api.exec_inspect(exec_id)
            if not info.get("Running"):
                return info.get("ExitCode")
            time.sleep(0.02)
        return None

    def _kill(self, spec: RunSpec) -> None:
        container = self._containers.get(spec.key)
        if container is None:
            return
        try:
            container.kill()
        except Exception:
            pass

    def stop(self, spec: RunSpec, keep_alive: bool) -> None:
        container = self._containers.pop(spec.key, None)
        if container is None or keep_alive:
            return
        try:
            container.remove(force=True)
        except Exception:
            pass


def container_name(spec: RunSpec) -> str:
    run_id = spec.env.get("MAD_RUN_ID", "")
    return f"container_{spec.key}_{run_id[-6:]}" if run_id else f"container_{spec.key}"


def _render_nodes(gpu_ids: list[int]) -> list[str]:
    nodes = sorted(Path("/dev/dri").glob("renderD*")) if Path("/dev/dri").is_dir() else []
    return [str(nodes[i]) for i in gpu_ids if i < len(nodes)]


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else text[:300]
