"""madengine bench: benchmark ONNX models on ONNX Runtime, or the PyTorch models inside scripts, and
record the results in perf.csv. A thin layer over :func:`madengine.bench.run_bench` (``.onnx``) and
:func:`madengine.bench.pytorch.runner.run_scripts` (``.py``), the functions the Python API calls."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from madengine.bench.flags import ITERATIONS, MIN_TIME, ONNX_FLAGS, PRECISION, SCRIPT_FLAGS, SEED, THREADS, WARMUP
from madengine.cli.flags import add_flags, add_perf_csv_argument, add_trace_arguments, trace_settings
from madengine.cli.env import CliReporter, Environment
from madengine.cli.perf_html import write_html
from madengine.core.errors import ExitStatus, InputError
from madengine.cli.commands import SUMMARIES

DESCRIPTION = """\
Benchmark ONNX models on ONNX Runtime with generated inputs: warm-up runs, then timed runs
(a count, or a minimum time), at f32 unless --precision asks otherwise (a precision the provider
has no mode for is bad input, exit 2). Reports n, p50 (the headline: perf.csv's samples/s is the
median's), p90/p95/p99, min, max, mean, stddev, CV and the mean's throughput, appends one row per model
and provider to perf.csv (with the host's load at start and end), and prints a table (stdout; with
--json the JSON goes to stdout and the table to stderr).
Given Python scripts (SCRIPT.py[::HASH,...] or --all --search-dir DIR), runs each under a hook
that finds every torch.nn.Module it calls (--analyze-only prints them as a tree), exports each to
ONNX with the observed shapes and optimises it (build cache: --cache-dir, --rebuild), then
benchmarks it on ONNX Runtime and on PyTorch eager with the same inputs and checks their outputs
against each other (a mismatch is a FAILURE row). Needs the torch extra (pip install 'madengine[torch]').
Exit 0 all ran, 1 a model failed to load, export or run, mismatched, or a script found no model
(FAILURE row), 2 bad input (a missing file, a sha256 mismatch, an unresolved dynamic dimension, a
provider this onnxruntime lacks, a precision it cannot run, torch not installed)."""

EXAMPLES = """\
examples:
  madengine bench model.onnx --iterations 200 --threads 1
  madengine bench bert.onnx --axes batch=8 --axes seq=128 --provider cuda --json
  madengine bench --suite models.yaml --min-time 5 --profile
  madengine bench model.onnx --provider tensorrt --precision f32,fp16
  madengine bench my_script.py --analyze-only --max-depth 1
  madengine bench my_script.py::1a2b3c4d --script-args "--batch 8" --threads 1 --iterations 200
  madengine bench --all --search-dir scripts/ --labels test_group::daily --fp16
"""


def _rebuild(text: str) -> str:
    from madengine.bench.pytorch.parsing import parse_rebuild
    from madengine.core.errors import InputError

    try:
        return parse_rebuild(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def tolerance(text: str) -> float:
    """--atol/--rtol: a finite number of 0 or more (bench SCRIPT.py and scorecard)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError("must be a finite number of 0 or more")
    return value


def add_precision_argument(parser: argparse.ArgumentParser, help_text: str) -> None:
    """--precision P[,P...] of bench and scorecard (None when not given: f32): the names, checked by
    the command's core (exit 2 naming the valid ones)."""
    add_flags(parser, (dataclasses.replace(PRECISION, help=help_text),))


def add_timing_arguments(parser: argparse.ArgumentParser, *, threads_help: str) -> None:
    """--warmup, --iterations | --min-time, --threads, --seed: the harness's timing (bench and scorecard)."""
    add_flags(parser, (WARMUP,))
    add_flags(parser.add_mutually_exclusive_group(), (ITERATIONS, MIN_TIME))
    add_flags(parser, (dataclasses.replace(THREADS, help=threads_help), SEED))


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("bench", help=SUMMARIES["bench"],
                                   description=DESCRIPTION, epilog=EXAMPLES,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", metavar="MODEL.onnx|SCRIPT.py[::HASH,...]",
                        help="ONNX model files, or Python scripts (with the hashes of the models to take)")
    parser.add_argument("--suite", metavar="FILE",
                        help="model list (YAML or JSON): entries {set, name, version, path, sha256, shapes, $axes, "
                             "providers, batch_size}")
    add_flags(parser, ONNX_FLAGS)
    add_timing_arguments(parser, threads_help="intra-op threads (default: onnxruntime's, one per physical core)")
    parser.add_argument("--profile", action="store_true",
                        help="also profile each node (separate session) and print the per-operator table")
    parser.add_argument("--metric", choices=("throughput", "p50"), default="throughput",
                        help="perf.csv 'performance': samples/s at the median latency (throughput, default) or "
                             "p50 latency in ms")
    parser.add_argument("--no-cache", action="store_true", help="do not use or fill the prepared-model cache")
    add_perf_csv_argument(parser, "-o", "--output")
    parser.add_argument("--runs-dir", default="madengine_runs", metavar="DIR",
                        help="folder for per-run result JSON and profiles (default: madengine_runs)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    parser.add_argument("--no-html", action="store_true", help="do not write perf.html beside perf.csv")
    add_trace_arguments(parser)
    parser.add_argument("--cache-dir", metavar="DIR",
                        help="cache folder for builds and prepared models (default: $MADENGINE_CACHE_DIR, else "
                             "$XDG_CACHE_HOME/madengine, else ~/.cache/madengine)")
    _add_script_arguments(parser.add_argument_group("Python scripts (SCRIPT.py)"))
    parser.set_defaults(handler=handle)


def _add_script_arguments(scripts: argparse._ArgumentGroup) -> None:
    add_flags(scripts, SCRIPT_FLAGS)
    stop = scripts.add_mutually_exclusive_group()
    stop.add_argument("--analyze-only", action="store_true", help="print the models found (a tree) and stop")
    stop.add_argument("--build-only", action="store_true", help="stop after exporting and optimising the models")
    scripts.add_argument("--rebuild", type=_rebuild, default="if_needed", metavar="if_needed|always|never",
                         help="cached builds: rebuild when stale (if_needed, default), every time (always), or "
                              "never (a stale build is used, with a warning)")
    scripts.add_argument("--all", dest="all_scripts", action="store_true",
                         help="take every *.py in --search-dir (default: the current folder)")
    scripts.add_argument("--search-dir", metavar="DIR", help="folder of the scripts (for --all and relative names)")
    scripts.add_argument("--labels", action="append", default=[], metavar="KEY::VALUE[,VALUE]",
                         help="only scripts whose '# labels:' line has one of these values for KEY (repeat for more "
                              "keys; all must match)")
    scripts.add_argument("--atol", type=tolerance, metavar="X",
                         help="absolute tolerance of the ORT vs eager check (default 1e-3; 2e-2 with --fp16)")
    scripts.add_argument("--rtol", type=tolerance, metavar="X",
                         help="relative tolerance of the ORT vs eager check (default 1e-3; 2e-2 with --fp16)")


def handle(args: argparse.Namespace, env: Environment) -> ExitStatus:
    if _script_mode(args):
        return handle_scripts(args, env)
    _reject_script_flags(args)
    from madengine.bench import BenchRequest, run_bench

    environ = dict(env.environ)
    if args.cache_dir:
        environ["MADENGINE_CACHE_DIR"] = args.cache_dir
    request = BenchRequest(
        models=list(args.models), suite=args.suite,
        providers=[p for group in (args.provider or [["cpu"]]) for p in group],
        batch_size=args.batch_size, shapes=args.shape, axes=args.axes, warmup=args.warmup,
        iterations=args.iterations, min_time=args.min_time, threads=args.threads, seed=args.seed,
        profile=args.profile, metric=args.metric, output=Path(args.perf_csv), runs_dir=Path(args.runs_dir),
        precisions=args.precision or ["f32"], use_cache=not args.no_cache, command_line=env.host().command_line,
        environ=environ, load=env.host().load, **trace_settings(args))
    summary = run_bench(request, CliReporter(env))
    tables = render_tables(summary)
    env.result(tables, summary.to_json(), args.json)
    if summary.outcomes and not args.no_html:
        write_html(env, summary.perf_csv)
    env.message(f"madengine: {len(summary.outcomes) - len(summary.failed)} succeeded, {len(summary.failed)} failed; "
                f"rows in {summary.perf_csv}; results in {summary.run_dir}" + trace_note(summary))
    return ExitStatus.FAILED if summary.failed else ExitStatus.OK


def _is_script(text: str) -> bool:
    return text.endswith(".py") or ".py::" in text


#: flags of the .onnx mode that mean nothing for scripts (shapes come from the script's own calls)
_ONNX_ONLY = (("suite", "--suite"), ("batch_size", "--batch-size"), ("shape", "--shape"), ("axes", "--axes"),
              ("profile", "--profile"), ("no_cache", "--no-cache"), ("precision", "--precision"))
_SCRIPT_ONLY = (("script_args", "--script-args"), ("max_depth", "--max-depth"), ("analyze_only", "--analyze-only"),
                ("build_only", "--build-only"), ("fp16", "--fp16"), ("all_scripts", "--all"),
                ("search_dir", "--search-dir"), ("labels", "--labels"), ("atol", "--atol"), ("rtol", "--rtol"))


def _script_mode(args: argparse.Namespace) -> bool:
    scripts = [m for m in args.models if _is_script(m)]
    if scripts and len(scripts) != len(args.models):
        raise InputError("give either .onnx models or .py scripts, not both", path="MODEL",
                         hint="run madengine bench once for each")
    return bool(scripts) or args.all_scripts


def _reject_script_flags(args: argparse.Namespace) -> None:
    defaults = {"script_args": "", "max_depth": 0, "labels": []}
    for attribute, flag in _SCRIPT_ONLY:
        if getattr(args, attribute) not in (defaults.get(attribute), None, False):
            raise InputError("applies to Python scripts only", path=flag, hint="give SCRIPT.py, or --all")
    if args.rebuild != "if_needed" or args.opset != 18:
        raise InputError("applies to Python scripts only", path="--rebuild" if args.rebuild != "if_needed" else "--opset")


def handle_scripts(args: argparse.Namespace, env: Environment) -> ExitStatus:
    """``madengine bench SCRIPT.py ...``: the flags as a ScriptRequest, run_scripts, tree and tables."""
    from madengine.bench.pytorch.runner import ScriptRequest, run_scripts

    for attribute, flag in _ONNX_ONLY:
        if getattr(args, attribute) not in (None, False, []):
            raise InputError("applies to .onnx models only (a script's shapes come from its own calls)", path=flag)
    if any(a == "--seed" or a.startswith("--seed=") for a in env.argv or []):
        raise InputError("applies to .onnx models only (a script's inputs are its own)", path="--seed")
    providers = [p for group in (args.provider or [["cpu"]]) for p in group]
    if len(providers) != 1:
        raise InputError("give one provider for scripts", path="--provider")
    request = ScriptRequest(
        scripts=list(args.models), all_scripts=args.all_scripts, search_dir=args.search_dir, labels=args.labels,
        script_args=args.script_args, max_depth=args.max_depth, analyze_only=args.analyze_only,
        build_only=args.build_only, rebuild=args.rebuild, cache_dir=args.cache_dir, opset=args.opset, fp16=args.fp16,
        provider=providers[0], warmup=args.warmup, iterations=args.iterations, min_time=args.min_time,
        threads=args.threads, metric=args.metric, atol=args.atol, rtol=args.rtol, output=Path(args.perf_csv),
        runs_dir=Path(args.runs_dir), command_line=env.host().command_line, environ=dict(env.environ),
        load=env.host().load, **trace_settings(args))
    summary = run_scripts(request, CliReporter(env))
    text = "\n\n".join(render_tree(script) for script in summary.scripts)
    if not args.analyze_only and summary.records:
        text += "\n\n" + render_script_table(summary)
    env.result(text, summary.to_json(), args.json)
    if summary.records and not args.no_html:
        write_html(env, summary.perf_csv)
    found = sum(len(s.found) for s in summary.scripts)
    taken = sum(len(s.models) for s in summary.scripts)
    env.message(f"madengine: {len(summary.scripts)} script(s), {found} model(s) found"
                + ("" if args.analyze_only else f", {taken} taken; rows in {summary.perf_csv}; results in "
                   f"{summary.run_dir}; builds in {summary.cache_dir}") + trace_note(summary))
    return ExitStatus.OK if summary.ok else ExitStatus.FAILED


def trace_note(summary) -> str:
    """``; trace PATH`` for the last line when the command wrote a trace.json."""
    path = getattr(summary.trace, "path", None)
    return f"; trace {path}" if path else ""


def render_tree(script) -> str:
    """The models a script called, as a tree (sub-models under their model)."""
    from madengine.bench.pytorch.results import tree_json

    labels = " ".join(f"{k}::{','.join(v)}" for k, v in sorted(script.labels.items()))
    lines = [f"{script.path}" + (f"  [{labels}]" if labels else "") + f"  ({script.run_time_s:.2f} s)"]
    if script.error:
        lines.append(f"  the script raised: {script.error}")
    if not script.found:
        lines.append("  no PyTorch model found")

    def add(nodes: list, prefix: str) -> None:
        for index, node in enumerate(nodes):
            last = index == len(nodes) - 1
            lines.append(f"{prefix}{'└── ' if last else '├── '}{node['name']}  {node['class']}  hash {node['hash']}")
            inner = prefix + ("    " if last else "│   ")
            detail = (f"{node['parameters']:,} parameters ({_size(node['parameter_bytes'])}) · {node['calls']} call(s) "
                      f"({node['call_time_s'] * 1000:.2f} ms)")
            if node["built_at"]:
                detail = f"built at {_shown_path(node['built_at'])} · " + detail
            lines.append(f"{inner}    {detail}")
            inputs = ", ".join(_input_text(i) for i in node["inputs"]) or "none"
            lines.append(f"{inner}    inputs: {inputs}")
            if node["error"]:
                lines.append(f"{inner}    error: {node['error']}")
            add(node["children"], inner)

    add(tree_json(script.found), "")
    return "\n".join(lines)


def _input_text(item: dict) -> str:
    if "dtype" in item:
        return f"{item['name']}: {item['dtype']}[{', '.join(str(d) for d in item['shape'])}]"
    return f"{item['name']}={item['value']}"


def _shown_path(location: str) -> str:
    """file:line relative to the current folder when the file is under it."""
    import os

    path, _, line = location.rpartition(":")
    try:
        relative = os.path.relpath(path)
    except ValueError:
        return location
    return f"{relative if not relative.startswith('..') else path}:{line}"


def _size(count: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if count < 1000 or unit == "GB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1000
    return ""


def render_script_table(summary) -> str:
    """One line per model and backend: latency statistics, throughput, status (and the check)."""
    from madengine.cli.render import table

    rows = []
    for script in summary.scripts:
        for model in script.models:
            for result in model.results:
                stats, record = result.stats, result.record
                check = record.extra.get("correctness", "")
                status = record.status if record.ok else f"{record.status}: {record.reason}"
                if stats:
                    rows.append((record.model, model.info.name, result.backend, stats["batch_size"], stats["n"],
                                 _ms(stats["p50_ms"]), _ms(stats["p99_ms"]), _ms(stats["mean_ms"]), f"{stats['cv']:.1%}",
                                 f"{stats['median_samples_per_second']:.2f}", check, status))
                else:
                    rows.append((record.model, model.info.name, result.backend, "", "", "", "", "", "", "", check,
                                 status))
        for failure in script.failures:
            rows.append((failure.model, "", "", "", "", "", "", "", "", "", "", f"{failure.status}: {failure.reason}"))
    return table(("model", "name", "backend", "batch", "n", "p50_ms", "p99_ms", "mean_ms", "cv", "samples/s", "check",
                  "status"), rows, max_width=80)


PROFILE_ROWS = 20


def render_tables(summary) -> str:
    """The results table, then one per-operator table per profiled result."""
    from madengine.cli.render import table

    rows = []
    for outcome in summary.outcomes:
        record, stats = outcome.record, (outcome.result or {}).get("stats")
        if stats:
            rows.append((record.model, outcome.provider, record.training_precision, stats["batch_size"], stats["n"],
                         _ms(stats["p50_ms"]), f"{stats['median_samples_per_second']:.2f}", _ms(stats["min_ms"]),
                         _ms(stats["p90_ms"]), _ms(stats["p95_ms"]), _ms(stats["p99_ms"]), _ms(stats["max_ms"]),
                         _ms(stats["mean_ms"]), _ms(stats["stddev_ms"]), f"{stats['cv']:.1%}",
                         f"{stats['samples_per_second']:.2f}", record.status))
        else:
            rows.append((record.model, outcome.provider, "", "", "", "", "", "", "", "", "", "", "", "", "", "",
                         f"{record.status}: {record.reason}"))
    parts = [table(("model", "provider", "precision", "batch", "n", "p50_ms", "samples/s", "min_ms", "p90_ms", "p95_ms",
                    "p99_ms", "max_ms", "mean_ms", "std_ms", "cv", "mean samples/s", "status"), rows, max_width=60)]
    for outcome in summary.outcomes:
        profile = (outcome.result or {}).get("profile")
        if not profile:
            continue
        nodes = profile["nodes"]
        shown = [(r["op_type"], r["node"], r["calls"], f"{r['total_ms']:.3f}", f"{r['mean_ms']:.4f}",
                  f"{r['share']:.1%}") for r in nodes[:PROFILE_ROWS]]
        title = (f"\nper-operator profile: {outcome.record.model} [{outcome.provider}], {profile['runs']} profiled "
                 f"run(s), {profile['total_ms']:.3f} ms in kernels"
                 + (f" (top {PROFILE_ROWS} of {len(nodes)} nodes)" if len(nodes) > PROFILE_ROWS else ""))
        parts.append(title)
        parts.append(table(("op_type", "node", "calls", "total_ms", "mean_ms", "share"), shown, max_width=50))
    return "\n".join(parts)


def _ms(value: float) -> str:
    return f"{value:.4f}" if value < 10 else f"{value:.2f}"
