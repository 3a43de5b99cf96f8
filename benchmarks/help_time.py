"""Wall time of `madengine --help` (and `--version`) as a process, next to a bare `python -c pass`.

Target: `madengine --help` well under 0.3 s. Heavy imports (docker, pandas, boto3, onnxruntime)
must not happen for it.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

from bytecode import compile_madengine


def wall(argv: list[str], repeats: int = 15) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    compile_madengine()
    bare = wall([sys.executable, "-c", "pass"])
    help_time = wall([sys.executable, "-m", "madengine", "--help"])
    heavy = subprocess.run([sys.executable, "-c", "import sys, madengine.cli as c; c.build_parser(); "
                            "print(sorted(m for m in ('docker', 'pandas', 'boto3', 'onnxruntime', 'numpy', 'jinja2') "
                            "if m in sys.modules))"], capture_output=True, text=True, check=True).stdout.strip()
    print(f"python -c pass         : {bare * 1000:7.1f} ms")
    print(f"madengine --help       : {help_time * 1000:7.1f} ms  (target ≤ 100 ms)  ratio to bare python {help_time / bare:.2f}")
    print(f"heavy modules imported : {heavy}")
    print("PASS" if help_time <= 0.1 and heavy == "[]" else "FAIL")


if __name__ == "__main__":
    main()
