"""The docker executor: runs each model's steps in a container, through the Engine API
(:mod:`madengine.execution.engine`).

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
from typing import Any, Iterator, Mapping

from madengine.core.errors import EngineUnavailable, ExecutionError, ServiceError
from madengine.core.redact import redact
from madengine.core.spec import CONTAINER_WORKSPACE, RunSpec, Step
from madengine.execution.build import last_line
from madengine.execution.dockeropts import device_mapping, engine_fields, parse_run_options
from madengine.execution.engine import CALL_TIMEOUT, Engine, EngineError
from madengine.execution.executor import ImageInfo, ImageSource, Target
from madengine.execution.proctree import COOKIE_VAR, end_step, new_cookie, running_ranks
from madengine.execution.provenance import Probe, ProbeCache, probe_docker
from madengine.execution.streams import LineSink, StepResult, deadline

RUN_LABEL = "madengine.run"
#: how long a run that lost the engine waits for it to answer again, to remove its containers
ENGINE_RETURN_WAIT = 20.0


def connect(environ: Mapping[str, str], *, timeout: float = 5.0,
            hint: str = "start dockerd (scripts/docker-up.sh) or use --executor local") -> Engine:
    """The engine ``DOCKER_HOST`` (in the command's ``environ``) names, once it answered a ping;
    else :class:`ServiceError` saying what to do (``hint``)."""
    try:
        engine = Engine.from_env(environ)
        engine.timeout = timeout
        engine.ping()
    except ImportError:
        raise ServiceError("the 'docker' Python package is not installed", hint="pip install docker") from None
    except Exception as exc:
        raise ServiceError(f"no Docker engine answers ({type(exc).__name__})", hint=hint) from None
    engine.timeout = max(timeout, CALL_TIMEOUT)
    return engine


class DockerExecutor:
    name = "docker"

    def __init__(self, client: Engine | None, images: ImageSource, probes: ProbeCache | None = None) -> None:
        self.client = client
        self.images = images
        self.probes = probes or ProbeCache(None)
        self._containers: dict[str, _Container] = {}
        #: the cookie of each run's step in flight (madengine.execution.proctree), by run key
        self._cookies: dict[str, str] = {}
        #: the ranks still running when a run's container was killed, by run key
        self._ranks: dict[str, tuple[int, ...]] = {}
        self._removals: list[threading.Thread] = []
        self._unremoved: list[_Container] = []

    # -- images ------------------------------------------------------------------------------
    def targets(self, model: Any) -> list[Target]:
        return self.images.targets(model)

    def obtain_image(self, target: Target) -> ImageInfo:
        return self.images.obtain(target)

    def workspace(self, spec: RunSpec) -> str:
        return CONTAINER_WORKSPACE

    def probe(self, spec: RunSpec) -> Probe:
        with engine_calls():
            return probe_docker(self._engine(), spec, self._create_args(spec), self.probes, {RUN_LABEL: spec.run_id})

    # -- containers ---------------------------------------------------------------------------
    def _create_args(self, spec: RunSpec) -> dict[str, Any]:
        """The body of the engine's create call."""
        config = self._container_args(spec)
        if spec.one_shot:  # the step is the container's own process
            step = spec.steps[0]
            config["Cmd"] = list(step.argv)
            config["WorkingDir"] = CONTAINER_WORKSPACE + ("/" + step.cwd if step.cwd else "")
            config["Env"] = config["Env"] + [f"{key}={value}" for key, value in step.env.items()] + \
                [f"{COOKIE_VAR}={self._cookies.setdefault(spec.key, new_cookie())}"]
            config["HostConfig"]["LogConfig"] = {"Type": "json-file", "Config": {}}  # readable whatever the default
        return config

    def _container_args(self, spec: RunSpec) -> dict[str, Any]:
        extra = parse_run_options(spec.model.additional_docker_run_options)
        volumes = {str(spec.workdir.resolve()): f"{CONTAINER_WORKSPACE}:rw"}
        for mount in spec.mounts:
            volumes[mount.host] = f"{mount.container}:{'ro' if mount.read_only else 'rw'}"
        for host, bind in extra.pop("volumes", {}).items():
            volumes[host] = f"{bind['bind']}:{bind['mode']}"
        environment = dict(spec.env)
        environment.update(extra.pop("environment", {}))
        host_config: dict[str, Any] = {"Binds": [f"{host}:{bind}" for host, bind in volumes.items()], "Init": True}
        config: dict[str, Any] = {
            "Image": spec.image, "Cmd": ["sleep", "infinity"], "WorkingDir": CONTAINER_WORKSPACE,
            "Env": [f"{key}={value}" for key, value in environment.items()],
            "User": f"{os.getuid()}:{os.getgid()}", "Labels": {RUN_LABEL: spec.run_id}, "HostConfig": host_config,
        }
        vendor = spec.env.get("MAD_GPU_VENDOR")
        gpus = extra.pop("gpus", None)
        if vendor == "NVIDIA" and (spec.gpu_ids or gpus):
            ids = [str(i) for i in spec.gpu_ids]
            host_config["DeviceRequests"] = [{"Driver": "", "Count": 0 if ids else -1, "DeviceIDs": ids or None,
                                              "Capabilities": [["gpu"]], "Options": {}}]
        elif vendor == "AMD" and spec.gpu_ids:
            devices = [device_mapping("/dev/kfd")]
            groups = set()
            for path in ("/dev/kfd", *_render_nodes(spec.gpu_ids)):
                if os.path.exists(path):
                    groups.add(os.stat(path).st_gid)
                    if path != "/dev/kfd":
                        devices.append(device_mapping(path))
            host_config["Devices"] = devices
            host_config["GroupAdd"] = [str(g) for g in sorted(groups)]
        if spec.launch is not None:  # the model's own options (below) win
            host_config.update(job_host_config(spec.launch.nproc_per_node, spec.launch.nnodes))
        top, fields = engine_fields(extra)
        for key in ("Devices", "GroupAdd", "CapAdd", "SecurityOpt"):
            if key in fields:
                fields[key] = list(host_config.get(key, [])) + fields[key]
        host_config.update(fields)
        config.update(top)
        if spec.cpus:  # a --parallel slot: the model's own CPUs
            host_config["CpusetCpus"] = ",".join(str(c) for c in spec.cpus)
        return config

    def start(self, spec: RunSpec) -> None:
        engine = self._engine()
        name = container_name(spec)
        try:
            with engine_calls():
                container = _Container(engine.create_container(name, self._create_args(spec)), name)
                self._containers[spec.key] = container
                engine.start(container.id)
        except EngineError as exc:
            if exc.not_found and "image" in exc.message.lower():
                raise ExecutionError(f"image {spec.image} is not present on this host") from None
            raise ExecutionError(f"container could not start: {last_line(redact(exc.message))}") from None

    def run_step(self, spec: RunSpec, step: Step, timeout: int | None, sink: LineSink) -> StepResult:
        if spec.one_shot:
            return self._run_main(spec, timeout, sink)
        return self._run_exec(spec, step, timeout, sink)

    def _run_main(self, spec: RunSpec, timeout: int | None, sink: LineSink) -> StepResult:
        """A one-shot container: its output from the start, its exit code, the engine's timing."""
        engine = self._engine()
        container = self._containers[spec.key]
        started = time.monotonic()
        try:
            with deadline(timeout, lambda: self._end_job(spec)) as timed_out, engine_calls():
                # the log follows from the container's start to its exit (attaching could miss output
                # written before it, and waits forever on a container that already ended)
                for chunk in engine.logs(container.id):
                    sink.feed(chunk)
                info = _ended(engine, container.id)
        except KeyboardInterrupt as exc:
            self._end_job(spec)
            sink.close()
            return StepResult(None, time.monotonic() - started, sink.text(), interrupted=exc,
                              ranks_running=self._ranks.pop(spec.key, ()))
        sink.close()
        state = info.get("State") or {}
        duration = _engine_duration(state) or time.monotonic() - started
        if timed_out.is_set():
            return StepResult(None, duration, sink.text(), timed_out=True, ranks_running=self._ranks.pop(spec.key, ()))
        cause = "out of memory: the kernel's OOM killer stopped the model" + _limit_text(_memory_limit(info)) \
            if state.get("OOMKilled") else ""
        return StepResult(state.get("ExitCode"), duration, sink.text(), cause=cause)

    def _run_exec(self, spec: RunSpec, step: Step, timeout: int | None, sink: LineSink) -> StepResult:
        engine = self._engine()
        container = self._containers[spec.key]
        workdir = CONTAINER_WORKSPACE + ("/" + step.cwd if step.cwd else "")
        started = time.monotonic()
        cookie = self._cookies[spec.key] = new_cookie()
        try:
            with engine_calls():
                exec_id = engine.exec_create(container.id, step.argv, workdir=workdir,
                                             environment={**step.env, COOKIE_VAR: cookie})
                stream = engine.exec_start(exec_id)
        except EngineError as exc:
            return StepResult(None, 0.0, error=f"cannot start step: {last_line(redact(exc.message))}")
        with deadline(timeout, lambda: self._end_job(spec)) as timed_out:
            try:
                for chunk in stream:
                    sink.feed(chunk)
            except KeyboardInterrupt as exc:
                self._end_job(spec)
                sink.close()
                return StepResult(None, time.monotonic() - started, sink.text(), interrupted=exc,
                                  ranks_running=self._ranks.pop(spec.key, ()))
            except Exception as exc:  # the stream breaks when the container is killed, or the engine goes
                if not timed_out.is_set():
                    if is_engine_gone(exc):
                        raise EngineUnavailable(describe(exc)) from None
                    raise
        sink.close()
        duration = time.monotonic() - started
        if timed_out.is_set():
            return StepResult(None, duration, sink.text(), timed_out=True, ranks_running=self._ranks.pop(spec.key, ()))
        with engine_calls():
            info = self._finished(exec_id)
            code = info.get("ExitCode") if info else None
            cause = self._oom(container) if code == 137 else ""
        _end_group(info)
        end_step(None, cookie, grace=0.0)  # what the step left in sessions of its own (a launcher's workers)
        return StepResult(code, duration, sink.text(), cause=cause)

    def _finished(self, exec_id: str) -> dict[str, Any]:
        """``exec inspect`` once the step's main process has ended ({} if it never says so)."""
        for _ in range(100):
            info = self._engine().exec_inspect(exec_id)
            if not info.get("Running"):
                return info
            time.sleep(0.02)
        return {}

    def _oom(self, container: "_Container") -> str:
        """'out of memory: ...' when the kernel's OOM killer struck in this container, else ''."""
        engine = self._engine()
        try:
            probe = engine.exec_create(container.id, ["cat", *_OOM_COUNTERS])
            text = b"".join(engine.exec_start(probe)).decode("utf-8", "replace")
            limit = _memory_limit(engine.inspect_container(container.id))
        except EngineError:
            return ""
        kills = [int(line.split()[1]) for line in text.splitlines()
                 if line.startswith("oom_kill ") and line.split()[1].isdigit()]
        if not kills or max(kills) == 0:
            return ""
        where = f"at the container's memory limit of {_mib(limit)}" if limit else \
            "with no container memory limit (the host ran out)"
        return f"out of memory: the kernel's OOM killer stopped the model {where}"

    def _end_job(self, spec: RunSpec) -> None:
        """Timeout or interrupt: note the ranks still running (seen from this host when the engine
        runs here), then kill the container, which ends every process in it."""
        cookie = self._cookies.get(spec.key)
        if cookie and spec.launch is not None:
            self._ranks[spec.key] = running_ranks(None, cookie)
        self._kill(spec)

    def _kill(self, spec: RunSpec) -> None:
        container = self._containers.get(spec.key)
        if container is not None:
            engine = self._engine()
            _best_effort(lambda: engine.kill(container.id))

    def stop(self, spec: RunSpec, keep_alive: bool) -> None:
        """Remove the container in the background (the engine takes a while to tear it down, and
        the row can be written meanwhile); :meth:`close` waits for every removal."""
        container = self._containers.pop(spec.key, None)
        self._cookies.pop(spec.key, None)
        if container is None or keep_alive:
            return
        removal = threading.Thread(target=self._remove, args=(container,), name=f"remove-{spec.key}")
        removal.start()
        self._removals.append(removal)

    def _remove(self, container: "_Container") -> None:
        engine = self._engine()
        try:
            _ignore_gone(lambda: engine.remove(container.id))
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
        engine = self._engine() if self._unremoved else None
        while self._unremoved and time.monotonic() < deadline:
            try:
                engine.ping()
            except Exception:
                time.sleep(0.5)
                continue
            for container in list(self._unremoved):
                try:
                    _ignore_gone(lambda gone=container: engine.remove(gone.id))
                    self._unremoved.remove(container)
                except Exception:
                    time.sleep(0.5)
        return [container.name for container in self._unremoved]

    def abort(self, run_id: str) -> None:
        engine = self._engine()

        def kill_all() -> None:
            for container in engine.container_ids(f"{RUN_LABEL}={run_id}"):
                _best_effort(lambda running=container: engine.kill(running))

        _best_effort(kill_all)

    def _engine(self) -> Engine:
        assert self.client is not None, "a DockerExecutor without an engine only builds container bodies"
        return self.client


#: /dev/shm of a distributed job's container: per rank, at least, and at most this share of the host's memory
SHM_PER_RANK = 1 << 30
SHM_LEAST = 2 << 30
SHM_HOST_SHARE = 0.5


def job_host_config(nproc_per_node: int, nnodes: int) -> dict[str, Any]:
    """The container of one node of a distributed job holds all its ranks. PyTorch's data-loader
    workers and its shared-memory transports (gloo, NCCL within a node) need more than docker's
    64 MiB ``/dev/shm``: a private IPC namespace (never the host's) with 1 GiB per rank, at least 2
    GiB, at most half the host's memory (a limit: only what is written takes memory). A job of
    several nodes uses the host's network, so the other nodes reach its rendezvous and its ranks;
    no capability or device is added."""
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        memory = 0
    size = max(SHM_LEAST, SHM_PER_RANK * nproc_per_node)
    if memory:
        size = min(size, int(memory * SHM_HOST_SHARE))
    fields: dict[str, Any] = {"IpcMode": "private", "ShmSize": size}
    if nnodes > 1:
        fields["NetworkMode"] = "host"
    return fields


class _Container:
    """A container this executor created: the engine's id and the name it was given."""

    __slots__ = ("id", "name")

    def __init__(self, container_id: str, name: str) -> None:
        self.id = container_id
        self.name = name


def _ended(engine: Engine, container: str) -> dict[str, Any]:
    """The inspection of a container whose output stream ended, once it is no longer running (the
    log stream can close a moment before the engine records the exit)."""
    info = engine.inspect_container(container)
    if (info.get("State") or {}).get("Running"):
        engine.wait(container)
        info = engine.inspect_container(container)
    return info


def _memory_limit(info: dict[str, Any]) -> int:
    """The container's memory limit in bytes (0: none) from its inspection."""
    return (info.get("HostConfig") or {}).get("Memory") or 0


def _limit_text(limit: int) -> str:
    return f" at the container's memory limit of {_mib(limit)}" if limit else " (no container memory limit)"


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
    """A failure to reach the engine at all (not an answer from it). The SDK's errors can only
    be raised once it is imported (builds, registry traffic), so only then are they looked at."""
    if isinstance(exc, EngineError):
        return False
    if isinstance(exc, OSError):
        return True
    sdk_errors = sys.modules.get("docker.errors")
    if sdk_errors is not None:
        if isinstance(exc, sdk_errors.APIError):
            return False
        if isinstance(exc, sdk_errors.DockerException):
            return True
    requests_errors = sys.modules.get("requests.exceptions")
    return requests_errors is not None and isinstance(exc, requests_errors.RequestException)


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
    try:
        action()
    except EngineError as exc:
        if exc.status in (404, 409):  # gone / not running / removal already in progress
            return
        raise


def container_name(spec: RunSpec) -> str:
    return f"container_{spec.key}_{spec.run_id[-6:]}" if spec.run_id else f"container_{spec.key}"


def _render_nodes(gpu_ids: list[int]) -> list[str]:
    nodes = sorted(Path("/dev/dri").glob("renderD*")) if Path("/dev/dri").is_dir() else []
    return [str(nodes[i]) for i in gpu_ids if i < len(nodes)]
