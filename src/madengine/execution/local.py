"""The local executor: the model's steps run as host processes in its work folder."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

from madengine.execution.plan import RunSpec, Step
from madengine.execution.streams import LineSink, StepResult

_KILL_GRACE = 5.0


class LocalExecutor:
    name = "local"

    def workspace(self, spec: RunSpec) -> str:
        return str(spec.workdir)

    def start(self, spec: RunSpec) -> None:
        spec.workdir.mkdir(parents=True, exist_ok=True)

    def stop(self, spec: RunSpec, keep_alive: bool) -> None:
        return None

    def _env(self, spec: RunSpec, step: Step) -> dict[str, str]:
        env = dict(os.environ)
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
        try:
            proc = subprocess.Popen(step.argv, cwd=cwd, env=self._env(spec, step), stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            return StepResult(None, 0.0, error=f"cannot start {step.argv[0]}: {exc.strerror}")
        timed_out = threading.Event()

        def on_timeout() -> None:
            timed_out.set()
            _kill_group(proc)

        timer = threading.Timer(timeout, on_timeout) if timeout else None
        if timer:
            timer.daemon = True
            timer.start()
        try:
            assert proc.stdout is not None
            for chunk in iter(lambda: proc.stdout.read1(65536), b""):
                sink.feed(chunk)
            proc.wait()
        except KeyboardInterrupt:
            _kill_group(proc)
            sink.close()
            return StepResult(proc.returncode, time.monotonic() - started, sink.text(), interrupted=True)
        finally:
            if timer:
                timer.cancel()
        sink.close()
        return StepResult(proc.returncode, time.monotonic() - started, sink.text(), timed_out=timed_out.is_set())


def _kill_group(proc: subprocess.Popen, grace: float = _KILL_GRACE) -> None:
    """SIGTERM the step's whole process group, then SIGKILL what is left after ``grace``."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass

