"""Runs a serving model's script (its server) until madengine's load generator is done with it.

Copied into the work folder of a model with a ``serving`` block and run as its model step, inside
the container or on the host (standard library only):

    python3 serving_wrapper.py --done .madengine_serving/done -- <the model's command>

The server starts in a session of its own. When the ``--done`` file appears (madengine wrote the
load points' rows), the server's whole process group gets SIGTERM, then SIGKILL after the grace
period, and the step exits 0; madengine then ends whatever else of the run still lives (the
processes carrying the run's cookie, or the container). A server that exits before that is the
step's failure: its exit code (1 for 0), said on stderr. SIGTERM to the wrapper (a timeout, Ctrl-C)
ends the server's group the same way.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

POLL_S = 0.2
GRACE_S = 10.0


def end_group(server: subprocess.Popen) -> None:
    """SIGTERM to the server's process group, SIGKILL to what is left after the grace period."""
    for number, wait in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, GRACE_S)):
        try:
            os.killpg(server.pid, number)
        except (ProcessLookupError, PermissionError):
            break
        try:
            server.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        try:  # the leader is gone: what it left in its group gets the same signal once more
            os.killpg(server.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        break


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[0] != "--done" or argv[2] != "--":
        print("usage: serving_wrapper.py --done FILE -- COMMAND...", file=sys.stderr)
        return 2
    done, command = argv[1], argv[3:]
    server = subprocess.Popen(command, start_new_session=True)

    def stop(signum: int, frame: object) -> None:
        end_group(server)
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while not os.path.exists(done):
        code = server.poll()
        if code is not None:
            print(f"madengine: the server exited with code {code} before the benchmark ended", file=sys.stderr,
                  flush=True)
            return code if code > 0 else 1
        time.sleep(POLL_S)
    end_group(server)
    print("madengine: benchmark done; the server was stopped", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
