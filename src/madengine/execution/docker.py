"""The docker executor: runs each model's steps in a container, through the Docker SDK for Python.

The container's main process idles (``sleep infinity`` under the engine's init) and every step
is an ``exec`` in it, so pre-scripts, the model script and post-scripts (and every repeat) share
one container while each gets its own exit code, output and (for the model) timeout. A run that is
one step run once (no pre/post-scripts, no repeats) is a *one-shot* container instead: the step is
the container's own process, as ``docker run`` does, which saves the exec and its bookkeeping; its
duration is the engine's (StartedAt → FinishedAt), so container start-up never counts as the
model's time. A step that times out or is interrupted kills the container; the container is
removed at the end unless ``--keep-alive``.
Images come from the :class:`~madengine.execution.executor.ImageSource` the executor is given.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

from madengine.core.errors import EngineUnavailable, ExecutionError, ServiceError
from madengine.core.redact import redact
from madengine.core.spec import CONTAINER_WORKSPACE, RunSpec, Step
from madengine.execution.build import last_line
from madengine.execution.dockeropts import parse_run_options
from madengine.execution.executor import ImageInfo, ImageSource, Target
from madengine.execution.streams import LineSink, StepResult, deadline

RUN_LABEL = "madengine.run"
#: how long a run that lost the engine waits for it to answer again, to remove its containers
ENGINE_RETURN_WAIT = 20.0


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
        self._unremoved: list[Any] = []

    # -- images ------------------------------------------------------------------------------
    def targets(self, model: Any) -> list[Target]:
        return self.images.targets(model)

    def obtain_image(self, target: Target) -> ImageInfo:
        return self.images.obtain(target)

    def workspace(self, spec: RunSpec) -> str:
        return CONTAINER_WORKSPACE

    # -- containers ---------------------------------------------------------------------------
    def _create_args(self, spec: RunSpec) -> dict[str, Any]:
        args = self._container_args(spec)
        if spec.one_shot:  # the step is the container's own process
            step = spec.steps[0]
            args.update(command=step.argv, working_dir=CONTAINER_WORKSPACE + ("/" + step.cwd if step.cwd else ""),
                        log_config={"type": "json-file"})  # readable whatever the engine's default driver
            args["environment"] = {**args["environment"], **step.env}
        return args

    def _container_args(self, spec: RunSpec) -> dict[str, Any]:
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
            with engine_calls():
                container = self.client.containers.create(spec.image, name=container_name(spec),
                                                          **self._create_args(spec))
                self._containers[spec.key] = container
                container.start()
        except ImageNotFound:
            raise ExecutionError(f"image {spec.image} is not present on this host") from None
        except APIError as exc:
            raise ExecutionError(f"container could not start: {last_line(redact(str(exc)))}") from None

    def run_step(self, spec: RunSpec, step: Step, timeout: int | None, sink: LineSink) -> StepResult:
        if spec.one_shot:
            return self._run_main(spec, timeout, sink)
        return self._run_exec(spec, step, timeout, sink)

    def _run_main(self, spec: RunSpec, timeout: int | None, sink: LineSink) -> StepResult:
        """A one-shot container: its output from the start, its exit code, the engine's timing."""
        container = self._containers[spec.key]
        api = self.client.api
        started = time.monotonic()
        try:
            with deadline(timeout, lambda: self._kill(spec)) as timed_out, engine_calls():
                # the log follows from the container's start to its exit (attaching could miss output
                # written before it, and waits forever on a container that already ended)
                for chunk in api.logs(container.id, stream=True, follow=True):
                    sink.feed(chunk)
                code = api.wait(container.id).get("StatusCode")
                state = api.inspect_container(container.id).get("State") or {}
        except KeyboardInterrupt as exc:
            self._kill(spec)
            sink.close()
            return StepResult(None, time.monotonic() - started, sink.text(), interrupted=exc)
        sink.close()
        duration = _engine_duration(state) or time.monotonic() - started
        if timed_out.is_set():
            return StepResult(None, duration, sink.text(), timed_out=True)
        cause = "out of memory: the kernel's OOM killer stopped the model" + self._limit(container) \
            if state.get("OOMKilled") else ""
        return StepResult(code, duration, sink.text(), cause=cause)

    def _limit(self, container: Any) -> str:
        limit = (self.client.api.inspect_container(container.id).get("HostConfig") or {}).get("Memory") or 0
        return f" at the container's memory limit of {_mib(limit)}" if limit else " (no container memory limit)"

    def _run_exec(self, spec: RunSpec, step: Step, timeout: int | None, sink: LineSink) -> StepResult:
        from docker.errors import APIError

        container = self._containers[spec.key]
        api = self.client.api
        workdir = CONTAINER_WORKSPACE + ("/" + step.cwd if step.cwd else "")
        started = time.monotonic()
        try:
            with engine_calls():
                exec_id = api.exec_create(container.id, step.argv, workdir=workdir,
                                          environment=step.env or None)["Id"]
                stream = api.exec_start(exec_id, stream=True)
        except APIError as exc:
            return StepResult(None, 0.0, error=f"cannot start step: {last_line(redact(str(exc)))}")
        with deadline(timeout, lambda: self._kill(spec)) as timed_out:
            try:
                for chunk in stream:
                    sink.feed(chunk)
            except KeyboardInterrupt as exc:
                self._kill(spec)
                sink.close()
                return StepResult(None, time.monotonic() - started, sink.text(), interrupted=exc)
            except Exception as exc:  # the stream breaks when the container is killed, or the engine goes
                if not timed_out.is_set():
                    if is_engine_gone(exc):
                        raise EngineUnavailable(describe(exc)) from None
                    raise
        sink.close()
        duration = time.monotonic() - started
        if timed_out.is_set():
            return StepResult(None, duration, sink.text(), timed_out=True)
        with engine_calls():
            info = self._finished(exec_id)
            code = info.get("ExitCode") if info else None
            cause = self._oom(container) if code == 137 else ""
        _end_group(info)
        return StepResult(code, duration, sink.text(), cause=cause)

    def _finished(self, exec_id: str) -> dict[str, Any]:
        """``exec inspect`` once the step's main process has ended ({} if it never says so)."""
        for _ in range(100):
            info = self.client.api.exec_inspect(exec_id)
            if not info.get("Running"):
                return info
            time.sleep(0.02)
        return {}

    def _oom(self, container: Any) -> str:
        """'out of memory: ...' when the kernel's OOM killer struck in this container, else ''."""
        from docker.errors import APIError

        try:
            probe = self.client.api.exec_create(container.id, ["cat", *_OOM_COUNTERS])["Id"]
            text = self.client.api.exec_start(probe).decode("utf-8", "replace")
            limit = (self.client.api.inspect_container(container.id).get("HostConfig") or {}).get("Memory") or 0
        except APIError:
            return ""
        kills = [int(line.split()[1]) for line in text.splitlines()
                 if line.startswith("oom_kill ") and line.split()[1].isdigit()]
        if not kills or max(kills) == 0:
            return ""
        where = f"at the container's memory limit of {_mib(limit)}" if limit else \
            "with no container memory limit (the host ran out)"
        return f"out of memory: the kernel's OOM killer stopped the model {where}"

    def _kill(self, spec: RunSpec) -> None:
        container = self._containers.get(spec.key)
        if container is not None:
            _best_effort(container.kill)

    def stop(self, spec: RunSpec, keep_alive: bool) -> None:
        """Remove the container in the background (the engine takes a while to tear it down, and
        the row can be written meanwhile); :meth:`close` waits for every removal."""
        container = self._containers.pop(spec.key, None)
        if container is None or keep_alive:
            return
        removal = threading.Thread(target=self._remove, args=(container,), name=f"remove-{spec.key}")
        removal.start()
        self._removals.append(removal)

    def _remove(self, container: Any) -> None:
        try:
            _ignore_gone(lambda: container.remove(force=True))
        except Exception as exc:
            if not is_engine_gone(exc):
                raise
            self._unremoved.append(container)

    def close(self, engine_wait: float = ENGINE_RETURN_WAIT) -> list[str]:
        """Wait for every removal; containers the engine could not remove because it was gone are
        removed once it answers again (up to ``engine_wait`` seconds). Returns the names of any
        container still left behind."""
        while self._removals:
            self._removals.pop().join()
        deadline = time.monotonic() + engine_wait
        while self._unremoved and time.monotonic() < deadline:
            try:
                self.client.ping()
            except Exception:
                time.sleep(0.5)
                continue
            for container in list(self._unremoved):
                try:
                    _ignore_gone(lambda: container.remove(force=True))
                    self._unremoved.remove(container)
                except Exception:
                    time.sleep(0.5)
        return [container.name for container in self._unremoved]

    def abort(self, run_id: str) -> None:
        def kill_all() -> None:
            for container in self.client.containers.list(filters={"label": f"{RUN_LABEL}={run_id}"}):
                _best_effort(container.kill)

        _best_effort(kill_all)


_OOM_COUNTERS = ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control")


def _engine_duration(state: dict[str, Any]) -> float | None:
    """Seconds between the engine's StartedAt and FinishedAt of a container's process."""
    import datetime

    def moment(text: str) -> datetime.datetime | None:
        if not text or text.startswith("0001"):
            return None
        head, _, fraction = text.rstrip("Z").partition(".")
        try:
            base = datetime.datetime.fromisoformat(head)
        except ValueError:
            return None
        return base + datetime.timedelta(microseconds=int((fraction + "000000")[:6]) if fraction else 0)

    begin, end = moment(state.get("StartedAt", "")), moment(state.get("FinishedAt", ""))
    return (end - begin).total_seconds() if begin and end and end >= begin else None


def _mib(size: int) -> str:
    return f"{size / (1 << 20):g} MiB"


def _end_group(info: dict[str, Any]) -> None:
    """Kill what the step's main process left in its process group (the exec's process is a
    session leader, so its host pid is the group's id): a step ends with its main process.
    Only possible when the engine runs on this host; elsewhere the container's removal does it."""
    pid = int(info.get("Pid") or 0)
    if pid > 0:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _best_effort(action: Any) -> None:
    """Kill a container: already stopped, gone, or an engine that no longer answers all mean there
    is nothing more to do here (the removal at the end, or :meth:`DockerExecutor.close`, follows)."""
    try:
        _ignore_gone(action)
    except Exception as exc:
        if not is_engine_gone(exc):
            raise


def is_engine_gone(exc: BaseException) -> bool:
    """A failure to reach the engine at all (not an answer from it)."""
    from docker.errors import APIError, DockerException
    from requests.exceptions import RequestException

    if isinstance(exc, APIError):
        return False
    return isinstance(exc, (RequestException, ConnectionError, DockerException, OSError))


def describe(exc: BaseException) -> str:
    return last_line(redact(f"{type(exc).__name__}: {exc}"))


@contextlib.contextmanager
def engine_calls() -> Iterator[None]:
    """Engine calls whose failure to connect means the engine went away during the run."""
    try:
        yield
    except Exception as exc:
        if is_engine_gone(exc):
            raise EngineUnavailable(describe(exc)) from None
        raise


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
