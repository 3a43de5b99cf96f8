"""What a metric name says about its direction: is a smaller figure the better one?

Below the reports and the database alike: a change is a regression or an improvement by it.
"""

from __future__ import annotations

import functools
import re

# Units and words of metrics where a smaller figure is the better one (times, latencies, losses).
_LOWER_WORDS = frozenset({
    "ms", "us", "ns", "s", "sec", "secs", "second", "seconds", "min", "mins", "minutes", "hours",
    "latency", "time", "duration", "elapsed", "runtime", "loss", "ttft", "tpot", "itl",
})
_DIVIDER = re.compile(r"/|(?:^|[^a-z])per(?:[^a-z]|$)")
_WORDS = re.compile(r"[^a-z0-9]+")


@functools.lru_cache(maxsize=4096)  # a report asks once per result: thousands of times per metric
def lower_is_better(metric: str) -> bool:
    """True for metrics where lower is better: names made of time units or words such as
    latency, time, seconds, ms, ``*_s``, loss.

    Only the numerator of a rate counts: ``samples_per_second`` and ``tokens/sec`` are
    higher-is-better, ``ms_per_token`` and ``time/step`` lower-is-better. Whole words are matched,
    not substrings, so ``items_per_second`` (which contains "ms" and "_s") stays a rate.
    """
    numerator = _DIVIDER.split(metric.strip().lower(), 1)[0]
    words = [word for word in _WORDS.split(numerator) if word]
    return any(word in _LOWER_WORDS or word.endswith(("latency", "time")) for word in words)
