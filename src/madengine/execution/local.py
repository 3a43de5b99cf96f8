"""The local executor: the model's steps run as host processes in its work folder.

Each step runs in its own session; when its main process ends, what is left of its process group
is killed (a daemon a pre-script started in a session of its own lives on, for its post-script).
Every process of the run carries the run's cookie in its environment, so a timeout, Ctrl-C, SIGTERM
or an abort ends every process of the run and nothing else, the workers a launcher started in
sessions of their own included, and so does the run's end (:mod:`madengine.execution.proctree`).
Its processes also carry the run id (``MAD_RUN_ID``) and their owner (``MADENGINE_OWNER``,
:mod:`madengine.core.owner`), so what a madengine killed by SIGKILL left running is stopped by the
next run or ``madengine clean``.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import threading
import time
from typing import Any, Mapping

from madengine.core.owner import OWNER_ENV, this_process
from madengine.core.spec import RunSpec, Step
from madengine.execution.executor import ImageInfo, Target
from madengine.execution.provenance import Probe, ProbeCache, probe_local
from madengine.execution.plan import local_key
from madengine.execution.proctree import COOKIE_VAR, RankWatch, end_step, handle, run_cookie, running_ranks
from madengine.execution.streams import LineSink, StepResult, deadline

_KILL_GRACE = 5.0
#: how long the output pipe may stay open after the step's processes ended (see _pump)
_DRAIN = 5.0


class LocalExecutor:
    name = "local"

    def __init__(self, environ: Mapping[str, str], probes: ProbeCache | None = None) -> None:
        self.environ = environ
        self._running: dict[int, _Running] = {}
        self._lock = threading.Lock()
        self.probes = probes or ProbeCache(None)

    def targets(self, model: Any) -> list[Target]:
        return [Target(key=local_key(model.name))]

    def obtain_image(self, target: Target) -> ImageInfo | None:
        return None

    def workspace(self, spec: RunSpec) -> str:
        return str(spec.workdir.absolute())  # scripts run in the work folder: a relative path would miss

    def probe(self, spec: RunSpec) -> Probe:
        step = next((s for s in spec.steps if s.is_model), Step("model", []))
        env = self._env(spec, step)
        cpus = len(spec.cpus) if spec.cpus else len(os.sched_getaffinity(0))
        return probe_local(shutil.which("python3", path=env.get("PATH")), env, cpus, self.probes)

    def start(self, spec: RunSpec) -> None:
        spec.workdir.mkdir(parents=True, exist_ok=True)
        run_cookie(spec.env)

    def stop(self, spec: RunSpec, keep_alive: bool) -> None:
        """The run is over: whatever of it still runs (a launcher's workers left by a launcher that
        died, a daemon no post-script stopped) is ended."""
        end_step(None, run_cookie(spec.env), _KILL_GRACE)

    def close(self) -> list[str]:
        return []  # stop() ended every process of the run already

    def _env(self, spec: RunSpec, step: Step) -> dict[str, str]:
        env = dict(self.environ)
        env.update(spec.env)
        env.update(step.env)
        owner = this_process()
        if owner is not None:
            env[OWNER_ENV] = str(owner)
        if spec.gpu_ids:
            ids = ",".join(str(i) for i in spec.gpu_ids)
            vendor = spec.env.get("MAD_GPU_VENDOR")
            if vendor == "NVIDIA":
                env["CUDA_VISIBLE_DEVICES"] = ids
            elif vendor == "AMD":
                env["HIP_VISIBLE_DEVICES"] = ids
        return env

    def run_step(self, spec: RunSpec, step: Step, timeout: int | None, sink: LineSink) -> StepResult:
        cwd = spec.workdir / step.cwd
        started = time.monotonic()
        if spec.cpus:  # a --parallel slot: this thread's affinity, which the step's processes inherit
            os.sched_setaffinity(0, spec.cpus)
        cookie = run_cookie(spec.env)
        try:
            proc = subprocess.Popen(step.argv, cwd=cwd, env={**self._env(spec, step), COOKIE_VAR: cookie},
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        except OSError as exc:
            return StepResult(None, 0.0, error=f"cannot start {step.argv[0]}: {exc.strerror}")
        running = _Running(spec.run_id, proc, cookie, watch=spec.launch is not None)
        with self._lock:
            self._running[proc.pid] = running
        # the step ends with its main process: whatever it left in its process group (which may hold
        # the output pipe open) is killed then; _pump never waits on the pipe without end either
        threading.Thread(target=running.end_group_after, name=f"step-{proc.pid}", daemon=True).start()
        try:
            with deadline(timeout, running.end) as timed_out, running.watch or contextlib.nullcontext():
                _pump(proc, sink)
                proc.wait()
        except KeyboardInterrupt as exc:
            running.end(from_outside=True)
            sink.close()
            return StepResult(proc.returncode, time.monotonic() - started, sink.text(), interrupted=exc,
                              ranks_running=running.ranks)
        finally:
            with self._lock:
                self._running.pop(proc.pid, None)
            assert proc.stdout is not None
            proc.stdout.close()
        sink.close()
        code = proc.returncode
        return StepResult(code, time.monotonic() - started, sink.text(), timed_out=timed_out.is_set(),
                          cause=f"killed by {signal_name(-code)}" if code is not None and code < 0 else "",
                          ranks_running=running.ranks)

    def abort(self, run_id: str) -> None:
        with self._lock:
            steps = [running for running in self._running.values() if running.run_id == run_id]
        enders = [threading.Thread(target=running.end, kwargs={"from_outside": True}, daemon=True)
                  for running in steps]
        for ender in enders:  # every step at once: each waits its grace period
            ender.start()
        for ender in enders:
            ender.join()


class _Running:
    """A step's main process and the cookie of its run; :meth:`end` ends every process of the run."""

    def __init__(self, run_id: str, proc: subprocess.Popen, cookie: str, watch: bool) -> None:
        self.run_id = run_id
        self.proc = proc
        self.cookie = cookie
        self.main = handle(proc.pid)  # taken now: the pid may be another process's once this one ended
        #: the ranks of a distributed job's step, noted while it runs (a stop from outside may end them first)
        self.watch = RankWatch(self.main, cookie) if watch else None
        #: the ranks still running when the step was ended (named in a timeout's reason)
        self.ranks: tuple[int, ...] = ()
        self._ended = threading.Lock()

    def end(self, from_outside: bool = False) -> None:
        """Timeout, Ctrl-C, SIGTERM, abort: the ranks still running are noted, then every process of
        the run is ended (SIGTERM, then SIGKILL after the grace period). A stop from outside
        (``from_outside``) names the ranks the watch saw running just before it too."""
        if self._ended.acquire(blocking=False):  # the first caller notes the ranks
            self.ranks = self.watch.ranks_at_stop() if from_outside and self.watch is not None else \
                running_ranks(self.main, self.cookie)
        end_step(self.main, self.cookie, _KILL_GRACE)
        try:
            self.proc.wait(timeout=_KILL_GRACE)
        except subprocess.TimeoutExpired:
            pass

    def end_group_after(self) -> None:
        """Once the main process ended: kill what it left in its process group."""
        self.proc.wait()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _pump(proc: subprocess.Popen, sink: LineSink) -> None:
    """The step's output into ``sink`` until the pipe's end. Once the main process has ended (and
    what it left was killed) the end comes at once, unless a process out of reach holds the pipe:
    then after :data:`_DRAIN` seconds at most, never a wait without end."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    ended_at = None
    while True:
        ready, _, _ = select.select([fd], [], [], 0.25)
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                return
            sink.feed(chunk)
        elif proc.poll() is not None:
            ended_at = ended_at or time.monotonic()
            if time.monotonic() - ended_at >= _DRAIN:
                return


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
