"""Fuzz every parser of user input with 10,000 derandomized Hypothesis cases and print the counts.

Per parser (tests/fuzz_targets.py): cases run, typed errors (MadEngineError: the CLI's one-line exit 2),
and escapes (any other exception: a bug; or a typed error whose message is not one short line), with
the first few escapes' exception and location.
Target: 0 escapes. ``python benchmarks/fuzz_inputs.py [CASES] [PARSER-SUBSTRING]``.
"""

from __future__ import annotations

import collections
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from hypothesis import HealthCheck, given, settings  # noqa: E402

from fuzz_targets import TARGETS  # noqa: E402
from madengine.core.errors import MadEngineError  # noqa: E402
from madengine.core.values import PART_LIMIT  # noqa: E402

LONGEST_LINE = 4 * PART_LIMIT + 20  #: an error's four parts (file, field, message, hint) and separators


def fuzz(name: str, cases: int, workdir: Path) -> tuple[collections.Counter, dict[str, str], float]:
    strategy, run = TARGETS[name]
    counts: collections.Counter = collections.Counter()
    escapes: dict[str, str] = {}

    @settings(max_examples=cases, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def check(value):
        counts["cases"] += 1
        try:
            run(value, workdir)
        except MadEngineError as exc:
            counts["typed errors"] += 1
            line = str(exc)
            if not line.isprintable() or len(line) > LONGEST_LINE:  # the CLI's line must stay one short line
                counts["escapes"] += 1
                escapes.setdefault("message not one short line", f"{line[:120]!r} from {value!r:.160}")
        except Exception as exc:  # an escape: count it, remember where it came from, go on
            counts["escapes"] += 1
            frame = traceback.extract_tb(exc.__traceback__)[-1]
            where = f"{type(exc).__name__} at {Path(frame.filename).name}:{frame.lineno}"
            escapes.setdefault(where, f"{str(exc)[:120]!r} from {value!r:.160}")
        else:
            counts["accepted"] += 1

    started = time.perf_counter()
    check()
    return counts, escapes, time.perf_counter() - started


def main() -> int:
    cases = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    only = sys.argv[2] if len(sys.argv) > 2 else ""
    total_escapes = 0
    print(f"{'parser':<28} {'cases':>7} {'accepted':>9} {'typed errors':>13} {'escapes':>8} {'seconds':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in TARGETS:
            if only not in name:
                continue
            workdir = Path(tmp) / f"w{len(name)}{abs(hash(name))}"
            workdir.mkdir()
            counts, escapes, took = fuzz(name, cases, workdir)
            total_escapes += counts["escapes"]
            print(f"{name:<28} {counts['cases']:>7} {counts['accepted']:>9} {counts['typed errors']:>13} "
                  f"{counts['escapes']:>8} {took:>8.1f}", flush=True)
            for where, example in escapes.items():
                print(f"    escape: {where}: {example}")
    print("PASS" if total_escapes == 0 else f"FAIL: {total_escapes} escape(s)")
    return 0 if total_escapes == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
