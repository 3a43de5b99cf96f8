"""madengine's Python API: the functions the command line is a thin layer over.

``import madengine`` stays light: these names are loaded from here the first time they are used
(``madengine.__getattr__``). Every function takes keyword options named like the CLI's flags,
returns typed results (dataclasses with ``to_json()``) and raises
:class:`madengine.core.errors.MadEngineError` subclasses for bad input (``InputError``...); it never
prints (pass a :class:`madengine.core.events.Reporter` to follow progress) and never exits.

Models of a catalog and their results:

* :func:`discover` — the models tags select;
* :func:`run` — build and run them, as ``madengine run`` does (a :class:`RunSummary`);
* :func:`bench` — benchmark ONNX models on ONNX Runtime, as ``madengine bench`` does;
* :func:`read_results` — a perf.csv as typed :class:`Result` records (``to_dataframe()`` with pandas).

Benchmarks of PyTorch models (``madengine bench SCRIPT.py``):

* :func:`benchmark_model` — one ``nn.Module`` on one input;
* :func:`benchmark_script` — every model a script calls.

Every function takes the model repository and the output locations as parameters and never
writes into the current folder unless asked to. See docs/api.md for examples.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Mapping, Sequence

from madengine.bench.entry import bench
from madengine.bench.pytorch.results import (
    BackendResult, BuildInfo, ModelInfo, ModelResult, ScriptBenchSummary, ScriptResult, TensorInfo,
)
from madengine.core.errors import InputError
from madengine.core.events import Reporter
from madengine.results import RunSummary
from madengine.results.reading import Result, Results

__all__ = ["BackendResult", "BuildInfo", "ModelInfo", "ModelResult", "Result", "Results", "RunSummary",
           "ScriptBenchSummary", "ScriptResult", "TensorInfo", "bench", "benchmark_model", "benchmark_script",
           "discover", "read_results", "run"]


def discover(tags: Sequence[str] = (), *, root: str | Path | None = None) -> list[Any]:
    """The models of the catalog under ``root`` (default: ``MODEL_DIR``, else the current folder)
    that ``tags`` select; every model without tags. Each is a :class:`madengine.catalog.Model`."""
    from madengine.catalog import load_catalog, select_models

    catalog = load_catalog(Path(root) if root is not None else None)
    return select_models(catalog, list(tags)) if tags else list(catalog.models)


def run(tags: Sequence[str], *, perf_csv: str | Path, root: str | Path | None = None,
        runs_dir: str | Path | None = None, executor: str = "auto", repeat: int | None = None, warmup_runs: int = 0,
        timeout: int | None = None, context: Mapping[str, Any] | None = None, parallel: int = 1,
        live_output: bool = False, keep_model_dir: bool = False, trace: bool = True,
        environ: Mapping[str, str] | None = None, reporter: Reporter | None = None) -> "RunSummary":
    """Build and run the models ``tags`` select in the catalog under ``root``, as ``madengine run``;
    every result is appended to ``perf_csv``; logs go to ``runs_dir`` (default: ``madengine_runs``
    beside ``perf_csv``). ``context`` overrides the detected context (``--additional-context``).
    Returns the :class:`RunSummary` (records, counts, ``to_json()``); a failed model is a FAILURE
    record, never an exception."""
    import json
    import os

    from madengine.core.host import Host
    from madengine.distributed.options import ParallelOptions
    from madengine.execution.options import RunOptions
    from madengine.pipeline import RunRequest
    from madengine.pipeline import run as run_pipeline

    perf_csv = Path(perf_csv)
    options = RunOptions(tags=tuple(tags), timeout=timeout, live_output=live_output,
                         context_string=json.dumps(dict(context)) if context else None, keep_model_dir=keep_model_dir,
                         output=perf_csv, executor=executor, runs_dir=Path(runs_dir) if runs_dir is not None
                         else perf_csv.parent / "madengine_runs", root=Path(root) if root is not None else None,
                         repeat=repeat, warmup_runs=warmup_runs, trace=trace)
    host = Host(environ=os.environ if environ is None else environ, argv=("api.run", *tags))
    return run_pipeline(RunRequest(run=options, parallel=ParallelOptions(workers=parallel)), host, reporter)


def read_results(perf_csv: str | Path) -> "Results":
    """The rows of ``perf_csv`` as typed :class:`Result` records (a :class:`Results` list with
    ``to_dataframe()``)."""
    from madengine.results.reading import read_results as read

    return read(perf_csv)


def benchmark_model(model: Any, inputs: Any, *, name: str | None = None, provider: str = "cpu", fp16: bool = False,
                    opset: int = 18, rebuild: str = "if_needed", cache_dir: str | Path | None = None,
                    build_only: bool = False, warmup: int = 10, iterations: int | None = None,
                    min_time: float | None = None, threads: int | None = None, metric: str = "throughput",
                    atol: float | None = None, rtol: float | None = None, output: str | Path | None = None,
                    runs_dir: str | Path = "madengine_runs", reporter: Reporter | None = None) -> ModelResult:
    """Export ``model`` called on ``inputs`` to ONNX (build cache), benchmark it on ONNX Runtime and
    on PyTorch eager, and check ORT's outputs against eager's.

    ``inputs``: a tensor, a tuple of positional arguments, or a dict of keyword arguments.
    ``name``: the perf.csv model name before ``::<hash>`` (default: the model's class name).
    ``output``: a perf.csv to append the rows to (default: none). The other options are those of
    ``madengine bench SCRIPT.py`` (docs/bench.md).
    """
    from madengine.bench.pytorch.runner import ScriptRequest, run_model

    args, kwargs = _call_arguments(inputs)
    request = ScriptRequest(provider=provider, fp16=fp16, opset=opset, rebuild=rebuild,
                            cache_dir=str(cache_dir) if cache_dir else None, build_only=build_only, warmup=warmup,
                            iterations=iterations, min_time=min_time, threads=threads, metric=metric, atol=atol,
                            rtol=rtol, output=Path(output) if output else None, runs_dir=Path(runs_dir),
                            command_line="madengine.benchmark_model")
    _, result = run_model(model, args, kwargs, name or type(model).__name__, request, reporter)
    return result


def benchmark_script(path: str | Path, *, models: Sequence[str] = (), script_args: str | Sequence[str] = "",
                     max_depth: int = 0, analyze_only: bool = False, build_only: bool = False,
                     provider: str = "cpu", fp16: bool = False, opset: int = 18, rebuild: str = "if_needed",
                     cache_dir: str | Path | None = None, warmup: int = 10, iterations: int | None = None,
                     min_time: float | None = None, threads: int | None = None, metric: str = "throughput",
                     atol: float | None = None, rtol: float | None = None, output: str | Path | None = None,
                     runs_dir: str | Path = "madengine_runs", reporter: Reporter | None = None) -> ScriptResult:
    """Run the script at ``path`` under the analysis hook, then build, benchmark and check every
    model it called (or only the hashes in ``models``), as ``madengine bench SCRIPT.py`` does.

    ``script_args``: the script's arguments, a list or one string split like a shell.
    ``analyze_only`` / ``build_only`` stop after those steps. ``output``: a perf.csv to append the
    rows to (default: none).
    """
    from madengine.bench.pytorch.runner import ScriptRequest, run_scripts

    spec = str(path) + ("::" + ",".join(models) if models else "")
    arguments = script_args if isinstance(script_args, str) else shlex.join(list(script_args))
    request = ScriptRequest(scripts=[spec], script_args=arguments, max_depth=max_depth, analyze_only=analyze_only,
                            build_only=build_only, provider=provider, fp16=fp16, opset=opset, rebuild=rebuild,
                            cache_dir=str(cache_dir) if cache_dir else None, warmup=warmup, iterations=iterations,
                            min_time=min_time, threads=threads, metric=metric, atol=atol, rtol=rtol,
                            output=Path(output) if output else None, runs_dir=Path(runs_dir),
                            command_line="madengine.benchmark_script")
    summary = run_scripts(request, reporter)
    return summary.scripts[0]


def _call_arguments(inputs: Any) -> tuple[tuple, dict]:
    if isinstance(inputs, Mapping):
        return (), dict(inputs)
    if isinstance(inputs, (tuple, list)):
        return tuple(inputs), {}
    if inputs is None:
        raise InputError("no inputs: give a tensor, a tuple of arguments or a dict of keyword arguments",
                         path="inputs")
    return (inputs,), {}
