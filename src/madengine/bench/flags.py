"""The flags of ``madengine bench`` that define a measurement: the parser is built from them and a
row's perf.csv ``args`` cell is written by them (:func:`args_cell`), one
:mod:`madengine.core.flagtable` table.

Cell values are those of one measurement (one provider, one precision, the entry's shapes), not
the request's lists; the timing flags are written even at their defaults, so a cell states every
setting its figure depends on.
"""

from __future__ import annotations

import shlex
from typing import Any, Mapping, Sequence

from madengine.bench.harness.engine import DEFAULT_MIN_TIME, DEFAULT_WARMUP
from madengine.core.flagtable import Flag, argv, duration, names_list, whole


def assignment(text: str) -> str:
    """``NAME=VALUE`` (--shape, --axes)."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip() or not value.strip():
        raise ValueError(f"'{text}' is not NAME=VALUE")
    return text


def _seconds_text(value: float) -> str:
    return f"{value:g}"


PROVIDER = Flag(("--provider",), "provider", "execution provider: cpu (default), cuda, tensorrt, rocm, migraphx, "
                "openvino, ... (repeat or comma-separate for several)", parse=names_list("provider"), repeat=True,
                metavar="NAME")
PRECISION = Flag(("--precision",), "precision", "what the provider may compute in: f32 (default), tf32 (cuda), fp16 "
                 "(tensorrt), or the model's own type; several make one row per precision",
                 parse=names_list("precision"), metavar="P,...")
#: a .onnx model's workload
ONNX_FLAGS = (
    PROVIDER,
    PRECISION,
    Flag(("--batch-size",), "batch_size", "batch size: fills a dynamic dimension 0; samples/s = inferences/s × N "
         "(default: dimension 0 of the first input)", parse=whole(1), metavar="N"),
    Flag(("--shape",), "shape", "whole shape of one input (command-line models)", parse=assignment, repeat=True,
         default=[], metavar="NAME=D0,D1,..."),
    Flag(("--axes",), "axes", "size of one named dynamic axis (command-line models)", parse=assignment, repeat=True,
         default=[], metavar="NAME=N"),
)

WARMUP = Flag(("--warmup",), "warmup", f"un-timed runs first (default {DEFAULT_WARMUP})", parse=whole(0),
              default=DEFAULT_WARMUP, metavar="N", always=True)
#: one of the two: a count of timed runs, or a time
ITERATIONS = Flag(("--iterations", "-n"), "iterations", "timed runs: exactly N", parse=whole(1), metavar="N")
MIN_TIME = Flag(("--min-time",), "min_time", "timed runs: for at least SECONDS and 10 runs (default: 1 second)",
                parse=duration, metavar="SECONDS", show=_seconds_text)
THREADS = Flag(("--threads",), "threads", "intra-op threads", parse=whole(1), metavar="N")
SEED = Flag(("--seed",), "seed", "seed of the generated inputs (default 0)", parse=whole(0), default=0, always=True)
#: the harness's timing (bench and scorecard), in the order a cell states it
TIMING_FLAGS = (WARMUP, ITERATIONS, MIN_TIME, THREADS, SEED)

#: a script's models: how they are exported and called
SCRIPT_FLAGS = (
    Flag(("--opset",), "opset", "ONNX opset of the export (default 18)", parse=whole(7), default=18, metavar="N",
         always=True),
    Flag(("--fp16",), "fp16", "convert the ONNX model to float16 (inputs and outputs stay float32)", switch=True),
    Flag(("--max-depth",), "max_depth", "also take sub-modules called down to N levels inside a model (default 0)",
         parse=whole(0), default=0, metavar="N"),
    Flag(("--script-args",), "script_args", "the script's arguments, one string split like a shell: --script-args "
         "\"--batch 8\"", default="", metavar="ARGS"),
)


def timing_values(warmup: int, iterations: int | None, min_time: float | None, threads: int | None) -> dict[str, Any]:
    """The timing of one measurement as the cell states it: a count of runs, else a time (the
    default one when none was asked)."""
    return {"warmup": warmup, "iterations": iterations, "threads": threads,
            "min_time": None if iterations is not None else (min_time if min_time is not None else DEFAULT_MIN_TIME)}


def args_cell(flags: Sequence[Flag], values: Mapping[str, Any]) -> str:
    """The perf.csv ``args`` cell: the flags of ``values`` as one shell-quoted line."""
    return shlex.join(argv(flags, values))
