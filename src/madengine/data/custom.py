"""The ``custom`` provider: a script of the model repository fetches the data into the mirror.

The script runs on the host as ``bash <script> <args...>`` (an argv list, no shell string) in the
mirror folder, with ``MAD_DATAHOME`` (the mirror) and ``MAD_DATANAME`` set, under a time limit
(``timeout``, default 1200 s). Its output goes to the model's run.log. In a persistent mirror a
successful fetch is remembered, and later runs reuse the mirror without running the script again.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import threading
from pathlib import Path

from madengine.data.base import DataLog, FetchStats, unavailable
from madengine.data.config import ProviderConfig
from madengine.data.mirror import Mirror, tree_size

DEFAULT_TIMEOUT = 1200


class CustomSource:
    def __init__(self, config: ProviderConfig, root: Path) -> None:
        self.config = config
        self.root = root.resolve()

    @property
    def script(self) -> Path:
        return (self.root / self.config.path).resolve()

    def check(self) -> str | None:
        script = self.script
        if not script.is_relative_to(self.root):
            return f"script {self.config.path} is outside the model repository"
        if not script.is_file():
            return f"script {self.config.path} not found in the model repository"
        return None

    def argv(self) -> list[str]:
        args = self.config.values.get("args", "")
        return ["bash", str(self.script), *(shlex.split(args) if isinstance(args, str) else args)]

    def fetch(self, mirror: Mirror, log: DataLog) -> FetchStats:
        state = mirror.load_state()
        if mirror.persistent and state.get("complete") and state.get("argv") == self.argv()[1:]:
            return FetchStats(reused=True)
        mirror.save_state({})  # a run interrupted from here on is not complete
        exit_code, timed_out = self._run(mirror.path, log)
        if timed_out:
            raise unavailable(self.config.dataname, "custom", f"script {self.config.path} ran longer than "
                                                              f"{self._timeout():g} s and was killed")
        if exit_code != 0:
            raise unavailable(self.config.dataname, "custom",
                              f"script {self.config.path} exited with code {exit_code}")
        mirror.save_state({"complete": True, "argv": self.argv()[1:]})
        size = tree_size(mirror.path)
        return FetchStats(fetched=sum(len(files) for _d, _s, files in os.walk(mirror.path)), bytes_fetched=size)

    def _timeout(self) -> float:
        return float(self.config.values.get("timeout", DEFAULT_TIMEOUT))

    def _run(self, folder: Path, log: DataLog) -> tuple[int | None, bool]:
        env = dict(os.environ, MAD_DATAHOME=str(folder), MAD_DATANAME=self.config.dataname)
        log.line(f"    custom: {' '.join(shlex.quote(a) for a in self.argv())} (in {folder})")
        try:
            process = subprocess.Popen(self.argv(), cwd=folder, env=env, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            raise unavailable(self.config.dataname, "custom", f"cannot start bash: {exc.strerror}") from None
        expired = threading.Event()

        def kill() -> None:
            expired.set()
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

        timer = threading.Timer(self._timeout(), kill)
        timer.daemon = True
        timer.start()
        try:
            assert process.stdout is not None
            for raw in process.stdout:
                log.line("    custom| " + raw.decode("utf-8", "replace").rstrip("\r\n"))
            process.wait()
        except BaseException:
            kill()
            process.wait()
            raise
        finally:
            timer.cancel()
        return process.returncode, expired.is_set()
