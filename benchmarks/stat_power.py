"""Statistical power and false alarms of `report compare` and `report regressions`, measured.

Every figure goes through the functions the CLI calls, on perf.csv-shaped rows:
``madengine.reports.compare.compare_rows`` (what ``report compare`` runs after reading its inputs)
and ``madengine.reports.regressions.find_regressions`` (what ``report regressions`` runs). Noise is
log-normal with the given coefficient of variation; everything is seeded.

Targets (issue 12, "Measured, not assumed"):

* compare, A/A, CV 2 %, n = 10 a side: false ``faster``/``slower`` <= 1 %
* compare, 5 % slowdown, CV 2 %, n = 10: ``slower`` >= 95 %
* compare, 5 % slowdown, CV 10 %, n = 3: never ``faster``, a wrong verdict (faster or unchanged) <= 5 %
* regressions, 60 runs, one 5 % step at CV 2 % (at a run drawn from 10..50): found within ±1 run >= 90 %
* regressions, 60 runs, no step: a false change <= 5 %

Single-sample verdicts against the history (issue 27), 50 runs of history at CV 2 %, through
``compare_groups`` with the references ``compare_runs`` reads from the database and through
``judge_latest`` (the verdict an import stores for a result's latest run, which the overview shows):

* compare, one figure a side, A/A: a false faster/slower <= 1 %;
* the latest-run verdict on steady noise: a false faster/slower <= 1 % per run;
* the latest-run verdict after a 5 % step: detected (slower) by the third run after it >= 90 %;
* reported beside them: one run after the step, one figure against the history (compare): no test of one
  figure can call a 2.4-sigma step at 1 % false alarms more than 57 % of the time (Neyman-Pearson).

The history trials are twenty times ``--trials`` (they are cheap); their seeds are not the ones the
method's levels were chosen with.

    python3 benchmarks/stat_power.py [--trials 1000] [--seed 12]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter

from madengine.reports.compare import compare_groups, compare_rows, group_samples
from madengine.reports.regressions import find_regressions
from madengine.results.identity import ResultIdentity
from madengine.results.samples import sample_columns
from madengine.stats.changepoint import change_indexes
from madengine.stats.history import judge_latest

METRIC = "latency_ms"  # lower is better: a slowdown is a larger figure


def repeated_row(run_id: str, samples: list[float]) -> dict[str, str]:
    """The perf.csv row `run --repeat N` writes: performance = median, every sample in perf_samples."""
    columns = sample_columns(samples)
    return {"model": "m", "metric": METRIC, "status": "SUCCESS", "run_id": run_id, "executor": "docker",
            **{k: str(v) for k, v in columns.items()}}


def noise(rng: random.Random, n: int, cv: float, level: float = 1.0) -> list[float]:
    return [10.0 * level * rng.lognormvariate(0.0, cv) for _ in range(n)]


def compare_trials(rng: random.Random, trials: int, n: int, cv: float, slowdown: float) -> Counter:
    verdicts: Counter = Counter()
    for _ in range(trials):
        old = [repeated_row("old", noise(rng, n, cv))]
        new = [repeated_row("new", noise(rng, n, cv, 1.0 + slowdown))]
        [result] = compare_rows(old, new).comparisons
        verdicts[result.verdict] += 1
    return verdicts


def history_rows(values: list[float]) -> list[dict[str, str]]:
    return [{"model": "m", "metric": METRIC, "status": "SUCCESS", "performance": repr(v), "run_id": f"run{i:03d}",
             "started_at": f"2026-01-01T{i // 60:02d}:{i % 60:02d}:00Z", "executor": "docker"}
            for i, v in enumerate(values)]


def regression_trials(rng: random.Random, trials: int, runs: int = 60, cv: float = 0.02, step: float = 0.05
                      ) -> tuple[float, float, float]:
    """(share of step histories whose step is found within ±1 run, share of flat histories with any
    change, share of step histories with more than one change)."""
    found = false = extra = 0
    for _ in range(trials):
        at = rng.randint(10, 50)
        values = [v * (1.0 + step if i >= at else 1.0) for i, v in enumerate(noise(rng, runs, cv))]
        changes = find_regressions(history_rows(values)).changes
        found += any(abs(c.index - at) <= 1 for c in changes)
        extra += len(changes) > 1
        false += bool(find_regressions(history_rows(noise(rng, runs, cv))).changes)
    return found / trials, false / trials, extra / trials


def history_compare_trials(rng: random.Random, trials: int, step: float, history: int = 50, cv: float = 0.02
                           ) -> Counter:
    """``compare --old-run --new-run`` with one figure a side: the new figure against the old run's
    history (its stable segment of ``history`` runs, the old run last), as compare_runs does."""
    verdicts: Counter = Counter()
    identity = ResultIdentity.from_row(repeated_row("x", [1.0]))
    for _ in range(trials):
        past = noise(rng, history, cv)
        old = group_samples([repeated_row("old", past[-1:])])
        new = group_samples([repeated_row("new", noise(rng, 1, cv, 1.0 + step))])
        [result] = compare_groups(old, new, references={identity: past}).comparisons
        verdicts[result.verdict] += 1
    return verdicts


def latest_verdict_trials(rng: random.Random, trials: int, step: float, after: int = 3, history: int = 50,
                          cv: float = 0.02) -> tuple[float, float]:
    """The verdict an import stores for a series' latest run (judge_latest), on ``history`` steady runs
    followed by ``after`` runs ``step`` higher: (share with any faster/slower verdict among those runs,
    share with a slower one)."""
    alarmed = slower = 0
    for _ in range(trials):
        values = noise(rng, history, cv) + noise(rng, after, cv, 1.0 + step)
        verdicts = [judge_latest(values[:history + k], [], lower_is_better=True) for k in range(1, after + 1)]
        alarmed += any(v is not None and v.verdict in ("faster", "slower") for v in verdicts)
        slower += any(v is not None and v.verdict == "slower" for v in verdicts)
    return alarmed / trials, slower / trials


def share(counts: Counter, *verdicts: str) -> float:
    return sum(counts[v] for v in verdicts) / sum(counts.values())


def detection_time(rng: random.Random, points: int = 500, repeats: int = 20) -> float:
    series = noise(rng, points, 0.02)
    start = time.process_time()  # CPU time: other work on the machine does not count
    for _ in range(repeats):
        change_indexes(series)
    return (time.process_time() - start) / repeats


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=12)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    t = args.trials
    checks = []

    aa = compare_trials(rng, t, 10, 0.02, 0.0)
    false_calls = share(aa, "faster", "slower")
    checks.append(("compare A/A, CV 2 %, n=10: false faster/slower", false_calls, "<=", 0.01))
    slow = compare_trials(rng, t, 10, 0.02, 0.05)
    checks.append(("compare 5 % slowdown, CV 2 %, n=10: slower", share(slow, "slower"), ">=", 0.95))
    small = compare_trials(rng, t, 3, 0.10, 0.05)
    checks.append(("compare 5 % slowdown, CV 10 %, n=3: faster", share(small, "faster"), "==", 0.0))
    checks.append(("compare 5 % slowdown, CV 10 %, n=3: wrong (faster/unchanged)",
                   share(small, "faster", "unchanged"), "<=", 0.05))
    found, false, extra = regression_trials(rng, t)
    checks.append(("regressions 60 runs, 5 % step, CV 2 %: found within ±1 run", found, ">=", 0.90))
    checks.append(("regressions 60 runs, no step: false change", false, "<=", 0.05))
    h = 20 * t
    one_aa = history_compare_trials(rng, h, 0.0)
    checks.append(("compare 1 a side vs 50-run history, A/A: false faster/slower", share(one_aa, "faster", "slower"),
                   "<=", 0.01))
    one_step = history_compare_trials(rng, h, 0.05)
    steady, _ = latest_verdict_trials(rng, h, 0.0, after=1)
    checks.append(("latest-run verdict, 50-run history, steady: false faster/slower", steady, "<=", 0.01))
    _, by_third = latest_verdict_trials(rng, h, 0.05, after=3)
    checks.append(("latest-run verdict, 5 % step, CV 2 %: slower by the 3rd run after", by_third, ">=", 0.90))
    plain = compare_trials(rng, t, 1, 0.02, 0.05)

    print(f"{t} trials each ({20 * t} for the history verdicts), seed {args.seed}")
    print(f"  A/A verdicts:            {dict(aa)}")
    print(f"  5 % slowdown, n=10:      {dict(slow)}")
    print(f"  5 % slowdown, n=3:       {dict(small)}")
    print(f"  step histories with more than one change: {extra:.1%}")
    print(f"  compare 1 a side, 5 % step, no history (two perf.csv files): {dict(plain)}")
    print(f"  compare 1 a side vs 50-run history, 5 % step: {dict(one_step)}: slower {share(one_step, 'slower'):.1%} "
          f"(one figure at 0.8 % false alarms; the best test at 1 % reaches 57 %)")
    ok = True
    for name, value, relation, target in checks:
        met = {"<=": value <= target, ">=": value >= target, "==": value == target}[relation]
        ok &= met
        print(f"{name:64s} {value:7.2%}  (target {relation} {target:.0%}) {'met' if met else 'MISSED'}")
    print(f"change-point detection of one 500-point series: {detection_time(rng) * 1000:.1f} ms CPU")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
