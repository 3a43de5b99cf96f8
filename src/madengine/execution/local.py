"""The local executor: the model's steps run as host processes in its work folder.

Each step runs in its own session (process group), so a timeout, Ctrl-C or an abort ends the
step's whole tree and nothing else.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from typing import Any, Mapping

from madengine.core.spec import RunSpec, Step
from madengine.execution.executor import ImageInfo, Target
from madengine.execution.provenance import Probe, ProbeCache, probe_local
from madengine.execution.plan import local_key
from madengine.execution.streams import LineSink, StepResult, deadline

_KILL_GRACE = 5.0


class LocalExecutor:
    name = "local"

    def __init__(self, environ: Mapping[str, str], probes: ProbeCache | None = None) -> None:
        self.environ = environ
        self._running: dict[int, tuple[str, subprocess.Popen]] = {}
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

    def stop(self, spec: RunSpec, keep_alive: bool) -> None:
        return None

    def close(self) -> None:
        return None

    def _env(self, spec: RunSpec, step: Step) -> dict[str, str]:
        env = dict(self.environ)
        env.update(spec.env)
        env.update(step.env)
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
        try:
            proc = subprocess.Popen(step.argv, cwd=cwd, env=self._env(spec, step), stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            return StepResult(None, 0.0, error=f"cannot start {step.argv[0]}: {exc.strerror}")
        with self._lock:
            self._running[proc.pid] = (spec.run_id, proc)
        # the step ends with its main process: whatever it left in its process group (which may
        # hold the output pipe open) is killed then
        threading.Thread(target=_end_group_after, args=(proc,), name=f"step-{proc.pid}", daemon=True).start()
        try:
            with deadline(timeout, lambda: kill_group(proc)) as timed_out:
                assert proc.stdout is not None
                for chunk in iter(lambda: proc.stdout.read1(65536), b""):
                    sink.feed(chunk)
                proc.wait()
        except KeyboardInterrupt as exc:
            kill_group(proc)
            sink.close()
            return StepResult(proc.returncode, time.monotonic() - started, sink.text(), interrupted=exc)
        finally:
            with self._lock:
                self._running.pop(proc.pid, None)
        sink.close()
        code = proc.returncode
        return StepResult(code, time.monotonic() - started, sink.text(), timed_out=timed_out.is_set(),
                          cause=f"killed by {signal_name(-code)}" if code is not None and code < 0 else "")

    def abort(self, run_id: str) -> None:
        with self._lock:
            procs = [proc for owner, proc in self._running.values() if owner == run_id]
        for proc in procs:
            _signal_group(proc, signal.SIGTERM)


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _end_group_after(proc: subprocess.Popen) -> None:
    proc.wait()
    _signal_group(proc, signal.SIGKILL)


def _signal_group(proc: subprocess.Popen, signum: int) -> bool:
    try:
        os.killpg(proc.pid, signum)
        return True
    except ProcessLookupError:
        return False


def kill_group(proc: subprocess.Popen, grace: float = _KILL_GRACE) -> None:
    """SIGTERM the step's whole process group, then SIGKILL what is left after ``grace``."""
    if not _signal_group(proc, signal.SIGTERM):
        return
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(proc, signal.SIGKILL)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
