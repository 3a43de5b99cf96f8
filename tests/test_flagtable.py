"""One table per group of flags builds both the parser and the argv that says the same again: what a
run's options are written back as (a Slurm task's ``madengine run``, a benchmark's perf.csv ``args``
cell) parses back to the same options, for any options (Hypothesis)."""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from madengine.bench.flags import ONNX_FLAGS, SCRIPT_FLAGS, TIMING_FLAGS, args_cell, assignment, timing_values
from madengine.catalog import Catalog
from madengine.cli import build_parser
from madengine.cli.commands.run import run_request
from madengine.core.flagtable import (Flag, argv, boolean, duration, flag_values, names_list, option_values, timeout,
                                     whole)
from madengine.core.values import MAX_TIMEOUT
from madengine.distributed.options import TRANSPORT_FLAGS, SlurmOptions, TransportOptions
from madengine.distributed.slurm import SlurmRun, SlurmSettings, task_command
from madengine.execution.options import EXECUTORS, IMAGE_FLAGS, RUN_OPTION_FLAGS, BuildOptions, RunOptions


def parse_run(words: list[str]):
    return build_parser(["run"]).parse_args(["run", *words])


# -- the argv writer ---------------------------------------------------------------------------------
FLAGS = (Flag(("--name", "-n"), "name", "h"), Flag(("--on",), "on", "h", switch=True),
         Flag(("--count",), "count", "h", default=3), Flag(("--always",), "always", "h", default=1, always=True),
         Flag(("--item",), "item", "h", repeat=True, default=[]))


def test_what_is_written_and_what_is_not():
    assert argv(FLAGS, {"name": "x", "on": True, "count": 3, "always": 1, "item": ["a", "b"]}) == \
        ["--name", "x", "--on", "--always", "1", "--item", "a", "--item", "b"]
    assert argv(FLAGS, {"name": None, "on": False, "count": 4, "item": []}) == ["--count", "4"]
    assert argv(FLAGS, {}) == []  # a key that is not given is not written
    # a value a parser would read as an option goes with its flag; one with a space is a value anyway
    assert argv(FLAGS, {"name": "-x", "item": ["--a b"]}) == ["--name=-x", "--item", "--a b"]


PARSERS = (whole(0), whole(1), timeout, boolean, duration, names_list("provider"), assignment)


@given(st.text(max_size=30))
def test_every_flag_parser_takes_any_text_or_says_why(text):
    for parse in PARSERS:
        try:
            parse(text)
        except ValueError as exc:  # argparse's usage error (exit 2) shows this message
            assert str(exc) and "Traceback" not in str(exc)


def test_what_the_flag_parsers_say():
    assert (timeout("-1"), timeout("0"), timeout("30")) == (None, 0, 30)
    assert (boolean("Yes"), boolean("off")) == (True, False)
    assert duration("2.5") == 2.5 and names_list("provider")(" cpu, ,cuda ") == ["cpu", "cuda"]
    for parse, text, message in ((whole(1), "0", "must be 1 or more"), (whole(0), "x", "'x' is not a whole number"),
                                 (timeout, "-2", "must be -1 (model/default), 0 (never)"),
                                 (duration, "inf", "is not a number of seconds"), (boolean, "maybe", "not true/false"),
                                 (names_list("provider"), ",", "names no provider"),
                                 (assignment, "x", "is not NAME=VALUE")):
        try:
            parse(text)
        except ValueError as exc:
            assert message in str(exc), (text, exc)
        else:
            raise AssertionError(f"{text!r} was taken")


def test_a_bad_flag_value_is_one_line_and_exit_2(cli):
    result = cli("run", "--tags", "x", "--timeout", "soon")
    assert result.code == 2 and result.stderr.count("\n") == 1
    assert "argument --timeout: 'soon' is not a whole number of seconds" in result.stderr


# -- madengine run: any options, written back and parsed again ---------------------------------------
words = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=12)
maybe_word = st.none() | words
run_options = st.builds(
    RunOptions, timeout=st.none() | st.integers(0, MAX_TIMEOUT), live_output=st.booleans(),
    context_file=maybe_word, context_string=maybe_word, generate_sys_env_details=st.booleans(),
    keep_alive=st.booleans(), keep_model_dir=st.booleans(), skip_model_run=st.booleans(),
    disable_skip_gpu_arch=st.booleans(), executor=st.sampled_from(EXECUTORS), data_config_file_name=words,
    tools_json_file_name=maybe_word, force_mirror_local=maybe_word, runs_dir=words.map(Path),
    repeat=st.none() | st.integers(1, 10**6), warmup_runs=st.integers(0, 10**6), trace=st.booleans(),
    trace_file=st.none() | words.map(Path))
build_options = st.builds(BuildOptions, no_cache=st.booleans(), pull=st.booleans(), rebuild=st.booleans())
transport_options = st.builds(TransportOptions, manifest_file=maybe_word, registry=maybe_word, image_archive=maybe_word)


@settings(max_examples=300, deadline=None)
@given(run_options, build_options, transport_options)
def test_any_run_options_parse_back_to_themselves(run, build, transport):
    if run.trace_file is not None:  # --trace FILE and --no-trace are one choice of two
        run = dataclasses.replace(run, trace=True)
    written = argv((*RUN_OPTION_FLAGS, *IMAGE_FLAGS, *TRANSPORT_FLAGS), {
        **flag_values(RUN_OPTION_FLAGS, run), **flag_values(IMAGE_FLAGS, build),
        **flag_values(TRANSPORT_FLAGS, transport)})
    args = parse_run(written)
    assert RunOptions(**option_values(RUN_OPTION_FLAGS, args)) == run
    assert option_values(IMAGE_FLAGS, args) == {"no_cache": build.no_cache, "pull": build.pull,
                                                "rebuild": build.rebuild}
    assert TransportOptions(**option_values(TRANSPORT_FLAGS, args)) == transport


def test_a_slurm_task_runs_the_run_it_was_given(tmp_path):
    """The task's command line, parsed by madengine run's own parser, is the submitted run with the
    task's executor, runs folder, context file and live output."""
    given = parse_run(["--tags", "m", "--executor", "slurm", "--timeout", "0", "--repeat", "3", "--warmup-runs", "1",
                       "--keep-alive", "--keep-model-dir", "--generate-sys-env-details", "--no-trace",
                       "--data-config-file-name=-odd.json", "--tools-config", "tools/t.json", "--pull",
                       "--clean-docker-cache", "--manifest-file", "m.json", "--registry", "reg:5000/ns",
                       "-c", "{'a': 1}"])
    request = run_request(given)
    job_dir = tmp_path / "job"
    settings_ = SlurmSettings(executor="local", madengine_command=["madengine"])
    command = task_command(SlurmRun(run=request.run, build=request.build, transport=request.transport,
                                    slurm=SlurmOptions(), catalog=Catalog(root=tmp_path, models=[]), models=[]),
                           settings_, job_dir, job_dir / "context.json")
    assert command[:2] == ["madengine", "run"] and "--no-html" in command
    task = run_request(parse_run(["--tags", "m", *command[2:]]))
    assert task.run == dataclasses.replace(request.run, executor="local", live_output=True, runs_dir=job_dir / "runs",
                                           context_file=str(job_dir / "context.json"), context_string=None)
    assert task.build == dataclasses.replace(request.build, live_output=True)
    assert task.transport == dataclasses.replace(request.transport, manifest_file=str(Path("m.json").resolve()))


# -- a benchmark's args cell ---------------------------------------------------------------------------
def test_a_bench_cell_is_what_bench_parses():
    cell = args_cell((*ONNX_FLAGS, *TIMING_FLAGS), {
        "provider": "cpu", "precision": "fp16", "batch_size": 8, "shape": ["input ids=1,128"], "axes": ["seq=128"],
        **timing_values(10, None, 2.5, 4), "seed": 7})
    assert cell == ("--provider cpu --precision fp16 --batch-size 8 --shape 'input ids=1,128' --axes seq=128 "
                    "--warmup 10 --min-time 2.5 --threads 4 --seed 7")
    args = build_parser(["bench"]).parse_args(["bench", "m.onnx", *shlex.split(cell)])
    assert (args.provider, args.precision, args.batch_size, args.shape, args.axes) == \
        ([["cpu"]], ["fp16"], 8, ["input ids=1,128"], ["seq=128"])
    assert (args.warmup, args.iterations, args.min_time, args.threads, args.seed) == (10, None, 2.5, 4, 7)
    # the defaults are stated too: a cell says every setting its figure depends on
    assert args_cell(TIMING_FLAGS, {**timing_values(10, None, None, None), "seed": 0}) == \
        "--warmup 10 --min-time 1 --seed 0"


def test_a_script_cell_is_what_bench_parses():
    cell = args_cell((ONNX_FLAGS[0], *TIMING_FLAGS, *SCRIPT_FLAGS), {
        "provider": "cpu", **timing_values(1, 3, None, 1), "opset": 18, "fp16": True, "max_depth": 1,
        "script_args": shlex.join(["--batch", "8", "--name", "it's"])})
    assert cell.startswith("--provider cpu --warmup 1 --iterations 3 --threads 1 --opset 18 --fp16 --max-depth 1 "
                           "--script-args ")
    args = build_parser(["bench"]).parse_args(["bench", "s.py", *shlex.split(cell)])
    assert shlex.split(args.script_args) == ["--batch", "8", "--name", "it's"]
    assert (args.opset, args.fp16, args.max_depth, args.iterations) == (18, True, 1, 3)
