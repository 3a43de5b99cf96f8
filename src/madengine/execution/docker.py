"""The docker executor: runs each model's steps in a container, through the Docker SDK for Python.

The container's main process idles (``sleep infinity`` under the engine's init) and every step
is an ``exec`` in it, so pre-scripts, the model script and post-scripts share one container while
each gets its own exit code, output and (for the model) timeout. A step that times out or is
interrupted kills the container; the container is removed at the end unless ``--keep-alive``.
Images come from the :class:`~madengine.execution.executor.ImageSource` the executor is given.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from madengine.core.errors import ExecutionError, ServiceError
from madengine.core.redact import redact
from madengine.core.spec import CONTAINER_WORKSPACE, RunSpec, Step
from madengine.execution.build import last_line
from madengine.execution.dockeropts import parse_run_options
from madengine.execution.executor import ImageInfo, ImageSource, Target
from madengine.execution.streams import LineSink, StepResult

RUN_LABEL = "madengine.run"


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


def connect(timeout: float = 5.0, hint: str = "start dockerd (scripts/docker-up.sh) or use --executor local"):
    """A Docker client that answered a ping, or :class:`ServiceError` saying what to do (``hint``)."""
    try:
        docker = _import_docker()
    except ImportError:
        raise ServiceError("the 'docker' Python package is not installed", hint="pip install docker") from None
    try:
        client = docker.from_env(timeout=max(timeout, 60))
        client.ping()
        return client
    except Exception as exc:
        raise ServiceError(f"no Docker engine answers ({type(exc).__name__})", hint=hint) from None


class DockerExecutor:
    name = "docker"

    def __init__(self, client: Any, images: ImageSource) -> None:
        self.client = client
        self.images = images
        self._containers: dict[str, Any] = {}
        self._removals: list[threading.Thread] = []

    # -- images ------------------------------------------------------------------------------
    def targets(self, model: Any) -> list[Target]:
        return self.images.targets(model)

    def obtain_image(self, target: Target) -> ImageInfo:
        return self.images.obtain(target)

    def workspace(self, spec: RunSpec) -> str:
        return CONTAINER_WORKSPACE

    # -- containers ---------------------------------------------------------------------------
    def _create_args(self, spec: RunSpec) -> dict[str, Any]:
        from docker.types import DeviceRequest, Ulimit

        extra = parse_run_options(spec.model.additional_docker_run_options)
        volumes = {str(spec.workdir.resolve()): {"bind": CONTAINER_WORKSPACE, "mode": "rw"}}
        for mount in spec.mounts:
            volumes[mount.host] = {"bind": mount.container, "mode": "ro" if mount.read_only else "rw"}
        volumes.update(extra.pop("volumes", {}))
        environment = dict(spec.env)
        environment.update(extra.pop("environment", {}))
        args: dict[str, Any] = {
            "command": ["sleep", "infinity"], "detach": True, "init": True,
            "working_dir": CONTAINER_WORKSPACE, "volumes": volumes, "environment": environment,
            "user": f"{os.getuid()}:{os.getgid()}", "labels": {RUN_LABEL: spec.run_id},
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
        if spec.cpus:  # a --parallel slot: the model's own CPUs
            args["cpuset_cpus"] = ",".join(str(c) for c in spec.cpus)
        return args

    def start(self, spec: RunSpec) -> None:
        from docker.errors import APIError, ImageNotFound

        try:
            container = self.client.containers.create(spec.image, name=container_name(spec), **self._create_args(spec))
            self._containers[spec.key] = container
            container.start()
        except ImageNotFound:
            raise ExecutionError(f"image {spec.image} is not present on this host") from None
        except APIError as exc:
            raise ExecutionError(f"container could not start: {last_line(redact(str(exc)))}") from None

    def run_step(self, spec: RunSpec, step: Step, timeout: int | None, sink: LineSink) -> StepResult:
        container = self._containers[spec.key]
        api = self.client.api
        workdir = CONTAINER_WORKSPACE + ("/" + step.cwd if step.cwd else "")
        started = time.monotonic()
        try:
            exec_id = api.exec_create(container.id, step.argv, workdir=workdir, environment=step.env or None)["Id"]
            stream = api.exec_start(exec_id, stream=True)
        except Exception as exc:
            return StepResult(None, 0.0, error=f"cannot start step: {last_line(redact(str(exc)))}")
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
        if container is not None:
            _ignore_gone(container.kill)

    def stop(self, spec: RunSpec, keep_alive: bool) -> None:
        """Remove the container in the background (the engine takes a while to tear it down, and
        the row can be written meanwhile); :meth:`close` waits for every removal."""
        container = self._containers.pop(spec.key, None)
        if container is None or keep_alive:
            return
        removal = threading.Thread(target=_ignore_gone, args=(lambda: container.remove(force=True),),
                                   name=f"remove-{spec.key}")
        removal.start()
        self._removals.append(removal)

    def close(self) -> None:
        while self._removals:
            self._removals.pop().join()

    def abort(self, run_id: str) -> None:
        for container in self.client.containers.list(filters={"label": f"{RUN_LABEL}={run_id}"}):
            _ignore_gone(container.kill)


def _ignore_gone(action: Any) -> None:
    """Kill or remove a container that may already have stopped or gone (its own removal, a race
    with the engine's init): those answers mean the work is done, anything else is raised."""
    from docker.errors import APIError, NotFound

    try:
        action()
    except NotFound:
        return
    except APIError as exc:
        if exc.status_code == 409:  # not running / removal already in progress
            return
        raise


def container_name(spec: RunSpec) -> str:
    return f"container_{spec.key}_{spec.run_id[-6:]}" if spec.run_id else f"container_{spec.key}"


def _render_nodes(gpu_ids: list[int]) -> list[str]:
    nodes = sorted(Path("/dev/dri").glob("renderD*")) if Path("/dev/dri").is_dir() else []
    return [str(nodes[i]) for i in gpu_ids if i < len(nodes)]
