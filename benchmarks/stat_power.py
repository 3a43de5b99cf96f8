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

Single-sample verdicts against the history (issues 27 and 36), at CV 2 %:

* compare, one figure a side against 50 runs of history (``compare_groups`` with the references
  ``compare_runs`` reads from the database), A/A: a false faster/slower <= 1 %;
* the latest-run verdict the import stores (``madengine.database.series.advance``, the pass every
  ``update-table`` ends with: change points, then ``judge_latest`` against the whole stable segment),
  after 50, 400 and 1,000 steady runs imported at once and then runs appended one at a time:
  a false faster/slower <= 1 % per appended run at each length;
* the same after a 5 % step: ``slower`` by the third run after it >= 90 %, and how often the first
  run after it is called ``unchanged`` (the overview's word; it was 15-19 % when the mean of three runs
  could say it);
* reported beside them: one run after the step, one figure against the history (compare): no test of one
  figure can call a 2.4-sigma step at 1 % false alarms more than 57 % of the time (Neyman-Pearson).

``--caps`` prints, instead, the figures the reference's cap was chosen by (``judge_latest`` on plain series, no
change detection): false alarms and power at caps of 50..400 runs, on steady noise and on a slow drift
(the level a random walk of 0.1 % a run, 1/20 of the noise: what the change detection does not cut).

The history trials are ``--history-trials`` (default five times ``--trials``) histories per length;
their seeds are not the ones the method's levels and cap were chosen with (5, 7, 11, 99, 4242).

    python3 benchmarks/stat_power.py [--trials 1000] [--seed 12]
    python3 benchmarks/stat_power.py --caps [--trials 400] [--seed 11]
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections import Counter

from madengine.database.series import advance
from madengine.reports.compare import compare_groups, compare_rows, group_samples
from madengine.reports.regressions import find_regressions
from madengine.results.identity import ResultIdentity
from madengine.results.samples import sample_columns
from madengine.stats.changepoint import change_indexes
from madengine.stats.history import judge_latest, state_words

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


def imported_rows(values: list[float], start: int) -> list[dict[str, str]]:
    """What an import hands ``advance`` for runs ``start``.. of one result (``series.ROW_COLUMNS``)."""
    return [{"id": str(k), "status": "SUCCESS", "performance": repr(v), "perf_samples": "", "run_id": f"run{k:05d}",
             "relative_change": "", "started_at": f"2026-01-{1 + k // 1440:02d}T{k // 60 % 24:02d}:{k % 60:02d}:00Z"}
            for k, v in enumerate(values, start)]


KEY = ResultIdentity.from_row({"model": "m", "metric": METRIC, "executor": "docker"}).key()


def imported_verdicts(rng: random.Random, histories: int, history: int, after: int, step: float,
                      cv: float = 0.02) -> list[list[dict | None]]:
    """Per history: the verdicts the import stores for each of ``after`` runs ``step`` higher,
    appended one at a time (one ``update-table`` each) after ``history`` steady runs imported at once."""
    out = []
    for _ in range(histories):
        state = advance(None, KEY, imported_rows(noise(rng, history, cv), 0), None).state
        verdicts = []
        for k in range(after):
            state = advance(state, KEY, imported_rows(noise(rng, 1, cv, 1.0 + step), history + k), None).state
            verdicts.append(state.verdict)
        out.append(verdicts)
    return out


def alarm_share(verdicts: list[list[dict | None]]) -> float:
    """Faster/slower verdicts per judged run."""
    every = [v for run in verdicts for v in run]
    return sum(v is not None and v["verdict"] in ("faster", "slower") for v in every) / len(every)


def cap_figures(rng: random.Random, trials: int, cap: int, walk: float, cv: float = 0.02) -> tuple[float, float]:
    """``judge_latest`` with a reference of at most ``cap`` runs, on ``cap`` + 3 runs of history whose
    level walks by ``walk`` a run: (false faster/slower of the next run, slower by the 3rd run after a
    5 % step)."""
    false = found = 0
    for _ in range(trials):
        level, values = 0.0, []
        for _ in range(cap + 6):
            level += rng.gauss(0.0, walk) if walk else 0.0
            values.append(10.0 * math.exp(level + rng.gauss(0.0, cv)))
        verdict = judge_latest(values[:cap + 4], [], lower_is_better=True, cap=cap)
        false += verdict is not None and verdict.verdict in ("faster", "slower")
        stepped = values[:cap + 3] + [v * 1.05 for v in values[cap + 3:]]
        verdicts = (judge_latest(stepped[:cap + 3 + k], [], lower_is_better=True, cap=cap) for k in (1, 2, 3))
        found += any(v is not None and v.verdict == "slower" for v in verdicts)
    return false / trials, found / trials


def share(counts: Counter, *verdicts: str) -> float:
    return sum(counts[v] for v in verdicts) / sum(counts.values())


def detection_time(rng: random.Random, points: int = 500, repeats: int = 20) -> float:
    series = noise(rng, points, 0.02)
    start = time.process_time()  # CPU time: other work on the machine does not count
    for _ in range(repeats):
        change_indexes(series)
    return (time.process_time() - start) / repeats


def print_caps(rng: random.Random, trials: int) -> None:
    print(f"the reference's cap, {trials} trials a cell (judge_latest on plain series at CV 2 %; false faster/slower "
          f"of a run / slower by the 3rd run after a 5 % step):")
    for walk in (0.0, 0.001):
        cells = [f"{cap}: {f:.2%} / {p:.1%}" for cap in (50, 100, 200, 400)
                 for f, p in [cap_figures(rng, trials, cap, walk)]]
        print(f"  level walk {walk:.1%} a run:  " + ";  ".join(cells))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--history-trials", type=int, default=None, metavar="N",
                        help="histories per length for the import's verdicts (default: 5 x --trials)")
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--caps", action="store_true",
                        help="only the figures the reference's cap was chosen by (10 x --trials a cell)")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    t = args.trials
    histories = args.history_trials or 5 * t
    if args.caps:
        print_caps(rng, 10 * t)
        return 0
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
    states = Counter()
    for length in (50, 400, 1000):
        steady = imported_verdicts(rng, histories, length, 4, 0.0)
        checks.append((f"latest-run verdict, {length:,}-run history, steady: false faster/slower per run",
                       alarm_share(steady), "<=", 0.01))
        stepped = imported_verdicts(rng, histories, length, 3, 0.05)
        by_third = sum(any(v is not None and v["verdict"] == "slower" for v in run) for run in stepped) / len(stepped)
        checks.append((f"latest-run verdict, {length:,}-run history, 5 % step: slower by the 3rd run", by_third,
                       ">=", 0.90))
        first = [run[0] for run in stepped]
        checks.append((f"latest-run state, {length:,}-run history, 1st run after a 5 % step: unchanged",
                       sum(v is not None and v["verdict"] == "unchanged" for v in first) / len(first), "<=", 0.01))
        states.update(state_words(v).split(" (")[0] for v in first)
    plain = compare_trials(rng, t, 1, 0.02, 0.05)

    print(f"{t} trials each ({20 * t} for compare against the history; {histories} histories per length, 4 runs "
          f"appended to each, for the import's verdicts, as many with a step), seed {args.seed}")
    print(f"  A/A verdicts:            {dict(aa)}")
    print(f"  5 % slowdown, n=10:      {dict(slow)}")
    print(f"  5 % slowdown, n=3:       {dict(small)}")
    print(f"  step histories with more than one change: {extra:.1%}")
    print(f"  compare 1 a side, 5 % step, no history (two perf.csv files): {dict(plain)}")
    print(f"  compare 1 a side vs 50-run history, 5 % step: {dict(one_step)}: slower {share(one_step, 'slower'):.1%} "
          f"(one figure at 0.8 % false alarms; the best test at 1 % reaches 57 %)")
    print(f"  the overview's state of the 1st run after a 5 % step (all lengths): {dict(states)}")
    ok = True
    for name, value, relation, target in checks:
        met = {"<=": value <= target, ">=": value >= target, "==": value == target}[relation]
        ok &= met
        print(f"{name:78s} {value:7.2%}  (target {relation} {target:.0%}) {'met' if met else 'MISSED'}")
    print(f"change-point detection of one 500-point series: {detection_time(rng) * 1000:.1f} ms CPU")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
