"""The docker executor: runs each model's steps in a container, through the Engine API
(:mod:`madengine.execution.engine`).

The container's main process idles (``cat`` of the container's input, under the engine's init)
and every step is an ``exec`` in it, so pre-scripts, the model script and post-scripts (and every
repeat) share one container while each gets its own exit code, output and (for the model) timeout. A run that is
one step run once (no pre/post-scripts, no repeats) is a *one-shot* container instead: the step is
the container's own process, as ``docker run`` does, which saves the exec and its bookkeeping; its
duration is the engine's (StartedAt → FinishedAt), so container start-up never counts as the
model's time. A step that times out or is interrupted kills the container; the container is
removed at the end unless ``--keep-alive``.

Nothing outlives its run: the idle main process reads the container's input, which this process
holds open (an attached connection), so however this process ends, SIGKILL included, the input
ends and the container stops. Every container carries the run id and its owner
(:mod:`madengine.core.owner`), so the next run or ``madengine clean`` removes what a run whose
madengine process is gone left (:mod:`madengine.execution.leftovers`). ``--keep-alive``
containers are kept on purpose: they idle on ``sleep infinity`` and carry no owner.

The engine can hang (its process stopped, not dead): every call has a deadline
(:data:`~madengine.execution.engine.CALL_TIMEOUT`), a step's output must end within
:data:`ANSWER_GRACE` of its timeout, and the clean-up after a lost engine is bounded
(:data:`ENGINE_RETURN_WAIT`); the model then fails "docker engine not responding".
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

from madengine.core.errors import EngineNotResponding, EngineUnavailable, ExecutionError, InputError, ServiceError
from madengine.core.owner import OWNER_LABEL, RUN_LABEL, this_process
from madengine.core.redact import redact
from madengine.core.spec import CONTAINER_WORKSPACE, RunSpec, Step
from madengine.execution.build import last_line
from madengine.execution.dockeropts import device_mapping, engine_fields, parse_run_options
from madengine.execution.engine import CALL_TIMEOUT, Engine, EngineError, EngineTimeout, Stream
from madengine.execution.executor import ImageInfo, ImageSource, Target
from madengine.execution.proctree import run_cookie, running_ranks
from madengine.execution.provenance import Probe, ProbeCache, probe_docker
from madengine.execution.streams import LineSink, StepResult, deadline

#: how long a run that lost the engine waits for it to answer again, to remove its containers
ENGINE_RETURN_WAIT = 20.0
#: how long after a step's timeout the engine has to end it (kill the container, close its output)
#: before the model fails as "docker engine not responding"
ANSWER_GRACE = 15.0
#: each call of a kill, and of the clean-up after the engine was lost
KILL_TIMEOUT = 10.0
CLEANUP_CALL = 5.0
#: how often the engine is pinged while a step's output streams: an engine that does not answer a
#: ping in time (CALL_TIMEOUT) is not responding, whatever the step's timeout (none included)
HEARTBEAT = 15.0


def connect(environ: Mapping[str, str], *, timeout: float = 10.0,
            hint: str = "start dockerd (scripts/docker-up.sh) or use --executor local") -> Engine:
    """The engine ``DOCKER_HOST`` (in the command's ``environ``) names, once it answered a ping
    within ``timeout`` seconds; else :class:`ServiceError` saying what to do (``hint``)."""
    try:
        engine = Engine.from_env(environ)
        engine.bounded(timeout).ping()
    except InputError:  # DOCKER_HOST is not an engine's URL: the user's to fix (exit 2), not a dead engine
        raise
    except ImportError:
        raise ServiceError("the 'docker' Python package is not installed", hint="pip install docker") from None
    except Exception as exc:
        raise ServiceError(f"no Docker engine answers ({type(exc).__name__})", hint=hint) from None
    return engine


class DockerExecutor:
    name = "docker"

    def __init__(self, client: Engine | None, images: ImageSource, probes: ProbeCache | None = None) -> None:
        self.client = client
        self.images = images
        self.probes = probes or ProbeCache(None)
        self._containers: dict[str, _Container] = {}
        #: the ranks still running when a run's container was killed, by run key
        self._ranks: dict[str, tuple[int, ...]] = {}
        self._removals: list[threading.Thread] = []
        self._unremoved: list[_Container] = []
        #: the engine stopped answering during this run: clean-up does not wait on it call by call
        self._lost = False

    # -- images ------------------------------------------------------------------------------
    def targets(self, model: Any) -> list[Target]:
        return self.images.targets(model)

    def obtain_image(self, target: Target) -> ImageInfo:
        with self._calls():  # an engine that hangs or goes while the image is built fails the model
            return self.images.obtain(target)

    def workspace(self, spec: RunSpec) -> str:
        return CONTAINER_WORKSPACE

    def probe(self, spec: RunSpec) -> Probe:
        with self._calls():
            return probe_docker(self._engine(), spec, self._create_args(spec), self.probes, _labels(spec.run_id))

    # -- containers ---------------------------------------------------------------------------
    def _create_args(self, spec: RunSpec) -> dict[str, Any]:
        """The body of the engine's create call."""
        config = self._container_args(spec)
        if spec.one_shot:  # the step is the container's own process
            step = spec.steps[0]
            config["Cmd"] = list(step.argv)
            config["WorkingDir"] = CONTAINER_WORKSPACE + ("/" + step.cwd if step.cwd else "")
            config["Env"] = config["Env"] + [f"{key}={value}" for key, value in step.env.items()]
            config["HostConfig"]["LogConfig"] = {"Type": "json-file", "Config": {}}  # readable whatever the default
        elif _watched(spec):  # idles until its input ends: when this process closes it, or ends
            config.update(Cmd=["cat"], OpenStdin=True, StdinOnce=True, AttachStdin=True)
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
            "User": f"{os.getuid()}:{os.getgid()}", "Labels": _labels(spec.run_id, owned=not spec.keep_alive),
            "HostConfig": host_config,
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
        if spec.host_network:  # a serving model: its endpoint is reached from this host at the port it was given
            host_config["NetworkMode"] = "host"
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
        """Create and start the run's container; one that was created but could not start is
        removed again (the runner stops only what started)."""
        run_cookie(spec.env)  # every process in the container carries it: its ranks are found from here
        try:
            self._start(spec)
        except BaseException:
            self.stop(spec, keep_alive=False)
            raise

    def _start(self, spec: RunSpec) -> None:
        engine = self._engine()
        name = container_name(spec)
        try:
            with self._calls():
                container = _Container(engine.create_container(name, self._create_args(spec)), name)
                self._containers[spec.key] = container
                if _watched(spec):
                    container.watch = engine.attach_stdin(container.id)
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
        answer_by = _answer_by(started, timeout)
        try:
            with deadline(timeout, lambda: self._end_job(spec)) as timed_out, self._calls(timeout, timed_out):
                # the log follows from the container's start to its exit (attaching could miss output
                # written before it, and waits forever on a container that already ended)
                stream = engine.logs(container.id, answer_by)
                with self._heartbeat(stream):
                    for chunk in stream:
                        sink.feed(chunk)
                info = _ended(self._left(answer_by), container.id)
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
        try:
            with self._calls():
                exec_id = engine.exec_create(container.id, step.argv, workdir=workdir, environment=step.env or None)
                stream = engine.exec_start(exec_id, _answer_by(started, timeout))
        except EngineError as exc:
            return StepResult(None, 0.0, error=f"cannot start step: {last_line(redact(exc.message))}")
        with deadline(timeout, lambda: self._end_job(spec)) as timed_out, self._heartbeat(stream):
            try:
                for chunk in stream:
                    sink.feed(chunk)
            except KeyboardInterrupt as exc:
                self._end_job(spec)
                sink.close()
                return StepResult(None, time.monotonic() - started, sink.text(), interrupted=exc,
                                  ranks_running=self._ranks.pop(spec.key, ()))
            except Exception as exc:  # the stream breaks when the container is killed, or the engine goes
                if isinstance(exc, TimeoutError) or not timed_out.is_set():
                    if is_engine_gone(exc):
                        raise self._lose(exc, timeout) from None
                    raise
        sink.close()
        duration = time.monotonic() - started
        answer_by = _answer_by(started, timeout)
        if timed_out.is_set():
            with self._calls(timeout, timed_out):  # the kill went through: the engine answers in the time left
                self._left(answer_by).inspect_container(container.id)
            return StepResult(None, duration, sink.text(), timed_out=True, ranks_running=self._ranks.pop(spec.key, ()))
        with self._calls(timeout):
            info = self._finished(exec_id, answer_by)
            code = info.get("ExitCode") if info else None
            cause = self._oom(container, answer_by) if code == 137 else ""
        _end_group(info)
        return StepResult(code, duration, sink.text(), cause=cause)

    def _finished(self, exec_id: str, answer_by: float | None) -> dict[str, Any]:
        """``exec inspect`` once the step's main process has ended ({} if it never says so)."""
        for _ in range(100):
            info = self._left(answer_by).exec_inspect(exec_id)
            if not info.get("Running"):
                return info
            time.sleep(0.02)
        return {}

    def _oom(self, container: "_Container", answer_by: float | None) -> str:
        """'out of memory: ...' when the kernel's OOM killer struck in this container, else ''."""
        try:
            probe = self._left(answer_by).exec_create(container.id, ["cat", *_OOM_COUNTERS])
            text = b"".join(self._left(answer_by).exec_start(probe, answer_by or time.monotonic() + CALL_TIMEOUT)) \
                .decode("utf-8", "replace")
            limit = _memory_limit(self._left(answer_by).inspect_container(container.id))
        except EngineError:
            return ""
        kills = [int(line.split()[1]) for line in text.splitlines()
                 if line.startswith("oom_kill ") and line.split()[1].isdigit()]
        if not kills or max(kills) == 0:
            return ""
        where = f"at the container's memory limit of {_mib(limit)}" if limit else \
            "with no container memory limit (the host ran out)"
        return f"out of memory: the kernel's OOM killer stopped the model {where}"

    def _left(self, answer_by: float | None) -> Engine:
        """The engine for a call once a step's output has ended: a step whose output had to end by
        ``answer_by`` (its timeout + :data:`ANSWER_GRACE`) gives each call only the time left of
        that, else the model's FAILURE would wait a call's own deadline more (None: no timeout,
        each call its own deadline)."""
        engine = self._engine()
        if answer_by is None:
            return engine
        left = answer_by - time.monotonic()
        if left <= 0:
            raise EngineTimeout("the end of the step")
        return engine.bounded(left)

    def _end_job(self, spec: RunSpec) -> None:
        """Timeout or interrupt: note the ranks still running (seen from this host when the engine
        runs here), then kill the container, which ends every process in it."""
        if spec.launch is not None:
            self._ranks[spec.key] = running_ranks(None, run_cookie(spec.env))
        self._kill(spec)

    def _kill(self, spec: RunSpec) -> None:
        """Kill the run's container (a timeout, Ctrl-C); an engine that does not take the kill is
        lost: the clean-up after it does not wait on it call by call."""
        container = self._containers.get(spec.key)
        if container is not None:
            engine = self._engine().bounded(KILL_TIMEOUT)
            try:
                _ignore_gone(lambda: engine.kill(container.id))
            except Exception as exc:
                if not is_engine_gone(exc):
                    raise
                self._lost = True

    @contextlib.contextmanager
    def _heartbeat(self, stream: Stream) -> Iterator[None]:
        """While a step's output streams, ping the engine every :data:`HEARTBEAT` seconds; a ping it
        does not answer in time cancels the stream with that timeout (the model is then a FAILURE
        "docker engine not responding")."""
        done = threading.Event()
        engine = self._engine()

        def beat() -> None:
            while not done.wait(HEARTBEAT):
                try:
                    engine.ping()
                except Exception as exc:
                    if is_timeout(exc):
                        stream.cancel(exc)
                        return

        threading.Thread(target=beat, name="engine-heartbeat", daemon=True).start()
        try:
            yield
        finally:
            done.set()

    @contextlib.contextmanager
    def _calls(self, step_timeout: int | None = None, timed_out: threading.Event | None = None) -> Iterator[None]:
        """Engine calls whose failure to reach the engine means it went away (or hangs) during the
        run: :class:`EngineUnavailable` / :class:`EngineNotResponding`, and the clean-up after them
        does not wait on the engine call by call (:func:`engine_calls`)."""
        try:
            with engine_calls(step_timeout, timed_out):
                yield
        except EngineUnavailable:
            self._lost = True
            raise

    def _lose(self, exc: BaseException, step_timeout: int | None) -> EngineUnavailable:
        self._lost = True
        return unavailable(exc, step_timeout)

    def stop(self, spec: RunSpec, keep_alive: bool) -> None:
        """Remove the container in the background (the engine takes a while to tear it down, and
        the row can be written meanwhile); :meth:`close` waits for every removal."""
        container = self._containers.pop(spec.key, None)
        if container is None or keep_alive:
            return
        removal = threading.Thread(target=self._remove, args=(container,), name=f"remove-{spec.key}")
        removal.start()
        self._removals.append(removal)

    def _remove(self, container: "_Container") -> None:
        engine = self._engine()
        try:
            if self._lost:
                self._unremoved.append(container)  # close() removes it once the engine answers again
                return
            _ignore_gone(lambda: engine.remove(container.id))
        except Exception as exc:
            if not is_engine_gone(exc):
                raise
            self._lost = True
            self._unremoved.append(container)
        finally:
            container.unwatch()

    def close(self, engine_wait: float = ENGINE_RETURN_WAIT) -> list[str]:
        """Wait for every removal; containers the engine could not remove because it was gone are
        removed once it answers again (up to ``engine_wait`` seconds). Returns the names of any
        container still left behind."""
        while self._removals:
            self._removals.pop().join()
        deadline = time.monotonic() + engine_wait

        def engine() -> Engine:  # each call at most CLEANUP_CALL, and never past the deadline
            return self._engine().bounded(max(0.1, min(CLEANUP_CALL, deadline - time.monotonic())))

        def pause() -> None:
            time.sleep(max(0.0, min(0.5, deadline - time.monotonic())))

        while self._unremoved and time.monotonic() < deadline:
            try:
                engine().ping()
            except Exception:
                pause()
                continue
            for container in list(self._unremoved):
                try:
                    _ignore_gone(lambda gone=container: engine().remove(gone.id))
                    self._unremoved.remove(container)
                except Exception:
                    pause()
        return [container.name for container in self._unremoved]

    def abort(self, run_id: str) -> None:
        engine = self._engine().bounded(KILL_TIMEOUT)

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


def shm_for_ranks(ranks: int) -> int:
    """Bytes of ``/dev/shm`` a container (or pod) of ``ranks`` ranks gets: 1 GiB per rank, at least 2 GiB."""
    return max(SHM_LEAST, SHM_PER_RANK * ranks)


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
    size = shm_for_ranks(nproc_per_node)
    if memory:
        size = min(size, int(memory * SHM_HOST_SHARE))
    fields: dict[str, Any] = {"IpcMode": "private", "ShmSize": size}
    if nnodes > 1:
        fields["NetworkMode"] = "host"
    return fields


class _Container:
    """A container this executor created: the engine's id, the name it was given, and the
    connection to its input that keeps it alive (None for a one-shot or kept container)."""

    __slots__ = ("id", "name", "watch")

    def __init__(self, container_id: str, name: str) -> None:
        self.id = container_id
        self.name = name
        self.watch: Any = None

    def unwatch(self) -> None:
        if self.watch is not None:
            with contextlib.suppress(Exception):
                self.watch.close()
            self.watch = None


@contextlib.contextmanager
def engine_calls(step_timeout: int | None = None, timed_out: threading.Event | None = None) -> Iterator[None]:
    """Engine calls whose failure to reach the engine (refused, cut, no answer in time) means it went
    away or hangs: :class:`EngineUnavailable` / :class:`EngineNotResponding` (:func:`unavailable`).
    After a step's timeout (``timed_out`` set), a call the engine does not answer means it did not
    end the container."""
    try:
        yield
    except Exception as exc:
        if not is_engine_gone(exc):
            raise
        if timed_out is not None and timed_out.is_set() and is_timeout(exc):
            exc = EngineTimeout("the end of the step")
        raise unavailable(exc, step_timeout) from None


def _watched(spec: RunSpec) -> bool:
    """Whether the container's main process idles until this process is gone: all but a one-shot
    container (the model is its main process) and those ``--keep-alive`` keeps."""
    return not spec.one_shot and not spec.keep_alive


def _labels(run_id: str, owned: bool = True) -> dict[str, str]:
    """A container's labels: the run id, and (unless kept on purpose) the owner, by which a later
    run removes it once the owner is gone."""
    labels = {RUN_LABEL: run_id}
    owner = this_process()
    if owner is not None and owned:
        labels[OWNER_LABEL] = str(owner)
    return labels


def _answer_by(started: float, timeout: int | None) -> float | None:
    """When a step's output must have ended: its timeout, plus the engine's time to end it."""
    return started + timeout + ANSWER_GRACE if timeout else None


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


def is_timeout(exc: BaseException) -> bool:
    """An engine that took the call but did not answer in time (this client's or the SDK's, also
    when the SDK wraps the timeout in an error of its own: its version check at connection)."""
    requests_errors = sys.modules.get("requests.exceptions")
    seen: BaseException | None = exc
    for _ in range(8):  # a chain of causes, not a cycle
        if seen is None:
            return False
        if isinstance(seen, TimeoutError) or requests_errors is not None and isinstance(seen, requests_errors.Timeout):
            return True
        seen = seen.__cause__
    return False


def unavailable(exc: BaseException, step_timeout: int | None = None) -> EngineUnavailable:
    """The error of a run that lost its engine: gone (refused, cut) or not responding (hangs)."""
    if not is_timeout(exc):
        return EngineUnavailable(describe(exc))
    if isinstance(exc, EngineTimeout) and exc.seconds is None and step_timeout:
        return EngineNotResponding(f"the model's {step_timeout} s timeout passed and the engine did not end its "
                                   f"container within {ANSWER_GRACE:.0f} s more")
    return EngineNotResponding(last_line(redact(str(exc))) if isinstance(exc, EngineTimeout) else describe(exc))


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
