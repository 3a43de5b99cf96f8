"""models.json entries with a ``serving`` block: the model's script starts a server, madengine
measures it and ends it.

    {"name": "serve_tiny", "scripts": "scripts/serving/run.sh", "dockerfile": "docker/pyt", ...,
     "serving": {"server": "transformers", "concurrency": [1, 4], "requests": 16, "input_len": 32,
                 "output_len": 16}}

:func:`check_blocks` refuses a bad block before anything is built (exit 2, naming the file, the
model and the field). For each run, :func:`serving_extension`:

* gives the script its endpoint: ``MAD_SERVING_PORT`` (the block's ``port``, else a free one),
  ``MAD_SERVING_HOST`` (127.0.0.1), ``MAD_SERVING_MODEL`` (the name to serve under), ``MAD_SERVING_URL``;
  a docker run shares the host's network so that the port is reached from here;
* runs the model step through ``serving_wrapper.py``, which ends the server's process group once the
  benchmark is done (and madengine ends the rest of the run's processes, or its container, as always);
* runs the load points beside the model step (:class:`Session`): it waits for readiness (``/health``
  or ``/v1/models``, at most ``ready_timeout``: 0.8 × the model's timeout unless given), runs every
  load point, writes one row per point to the run's results table (the ``multiple_results`` format,
  with status, reason and tag configs) and each point's requests to ``serving/`` in the run folder.

So each load point is one perf.csv row of the model (its tag configs name the load point), FAILURE
with its reason when the endpoint never answered or too many requests failed. Works on every
executor that runs the step on this host or in a container here (local, docker, and Slurm, whose
nodes run the same pipeline); a ``distributed`` block of several nodes is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import math
import os
import shutil
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Iterator
from urllib.parse import urlsplit

from madengine.core.errors import CatalogError, InputError
from madengine.core.values import seconds, whole_number
from madengine.serving import loadpoints as lp
from madengine.serving.plan import ServingPlan, check_plan, require_client

BLOCK = "serving"
FOLDER = ".madengine_serving"
RESULTS_TABLE = f"{FOLDER}/results.csv"
DONE_FILE = f"{FOLDER}/done"
WRAPPER = Path(__file__).resolve().parents[1] / "scripts" / "serving_wrapper.py"
REQUESTS_FOLDER = "serving"
READY_SHARE = 0.8  #: of the model's timeout, the readiness wait when the block gives none
NO_TIMEOUT_READY_S = 600.0  #: the readiness wait of a model without a timeout
JOIN_S = 60.0  #: how long the end of a model step waits for its benchmark to finish its rows
KEYS = ("port", "model", "server", "api", "path", "concurrency", "request_rate", "sweep", "slo", "requests",
        "input_len", "output_len", "dataset", "ignore_eos", "seed", "max_error_rate", "ready_timeout",
        "request_timeout")
SERVING_LAUNCHERS = ("vllm", "sglang", "sglang-disagg")


def check_blocks(models: list[Any], root: Path) -> None:
    """Every model's ``serving`` block, checked before anything is built (an InputError, exit 2)."""
    if any(model.extra.get(BLOCK) is not None for model in models):
        require_client(f"model '{next(m for m in models if m.extra.get(BLOCK) is not None).name}' (a serving block)")
    for model in models:
        if model.extra.get(BLOCK) is not None:
            plan_of(model, root, port=1, timeout=model.timeout)


def check_executor(models: list[Any], root: Path, executor: str) -> None:
    """The blocks, before a Slurm job is submitted (its tasks would find a bad one on their nodes),
    and the executors that can run a client beside the model (not Kubernetes: its pods run alone)."""
    serving = [m for m in models if m.extra.get(BLOCK) is not None]
    if serving and executor == "k8s":
        raise InputError(f"model '{serving[0].name}' has a serving block, which runs on the local, docker and Slurm "
                         "executors (no load generator runs beside a pod)", path="--executor",
                         hint="run it with another executor, or measure the pod's endpoint with madengine serve-bench")
    check_blocks(serving, root)


def plan_of(model: Any, root: Path, *, port: int, timeout: int | None) -> ServingPlan:
    """The :class:`ServingPlan` of a model's block, every field checked; ``port`` where the server
    listens (``port`` of the block wins)."""
    block = model.extra.get(BLOCK)
    where = _Where(model)
    if not isinstance(block, dict):
        raise where.error("", "must be a JSON object (e.g. {\"concurrency\": [1, 4]})")
    unknown = sorted(set(block) - set(KEYS))
    if unknown:
        raise where.error(unknown[0], "is not a field of the serving block", hint=f"fields: {', '.join(KEYS)}")
    _check_shape(model, where)
    port = _port(block.get("port"), where) or port
    path = _text(block, "path", where, "/v1")
    ready = _seconds(block, "ready_timeout", where)
    plan = ServingPlan(
        url=f"http://127.0.0.1:{port}/{path.strip('/')}".rstrip("/"), model=_text(block, "model", where, model.name),
        name=model.name, server=_text(block, "server", where, _launcher(model) or "openai"),
        api=_text(block, "api", where, "completions"),
        points=lp.load_points(_list(block, "concurrency", where, lp.parse_concurrencies),
                              _list(block, "request_rate", where, lp.parse_rates)),
        sweep=_sweep(block.get("sweep"), where), slo=_slo(block.get("slo"), where),
        requests=_whole(block, "requests", where, 16), input_len=_whole(block, "input_len", where, 32),
        output_len=_whole(block, "output_len", where, None),
        dataset=_dataset(block.get("dataset"), root, where), seed=_whole(block, "seed", where, 0),
        ignore_eos=_flag(block, "ignore_eos", where), max_error_rate=_share(block, "max_error_rate", where, 0.05),
        ready_timeout=ready if ready is not None else _default_ready(timeout),
        request_timeout=_seconds(block, "request_timeout", where) or 600.0,
        names={field: where.name(field) for field in (*KEYS, "url", "sweep")})
    check_plan(plan)
    return plan


class _Where:
    """Errors naming the file, the model and the block's field."""

    def __init__(self, model: Any) -> None:
        self.source = model.source or "models.json"
        self.model = model.name

    def name(self, field: str) -> str:
        return f"{self.source}: model '{self.model}': {BLOCK}.{field}"

    def error(self, field: str, message: str, hint: str | None = None) -> CatalogError:
        return CatalogError(message, path=self.source,
                            field=f"model '{self.model}': {BLOCK}" + (f".{field}" if field else ""), hint=hint)


def _check_shape(model: Any, where: _Where) -> None:
    distributed = model.extra.get("distributed")
    if isinstance(distributed, dict) and (whole_number(distributed.get("nnodes", 1)) or 1) > 1:
        raise where.error("", "with a distributed block of several nodes is not supported yet",
                          hint="serve on one node (nnodes 1), or measure the job's endpoint with madengine serve-bench")


def _launcher(model: Any) -> str:
    distributed = model.extra.get("distributed")
    launcher = str(distributed.get("launcher", "")).replace("_", "-") if isinstance(distributed, dict) else ""
    return launcher if launcher in SERVING_LAUNCHERS else ""


def _text(block: dict, key: str, where: _Where, default: str) -> str:
    value = block.get(key, default)
    if not isinstance(value, str) or not value.strip() or not value.isprintable():
        raise where.error(key, "must be a non-empty string")
    return value.strip()


def _port(value: Any, where: _Where) -> int | None:
    if value is None:
        return None
    number = whole_number(value)
    if number is None or not 1 <= number <= 65535:
        raise where.error("port", f"{value!r} is not a TCP port (1 to 65535)")
    return number


def _list(block: dict, key: str, where: _Where, parse: Callable[[str, str], list]) -> list:
    value = block.get(key)
    if value is None:
        return []
    if isinstance(value, list) and value and all(isinstance(v, (int, float, str)) and not isinstance(v, bool)
                                                 for v in value):
        value = ",".join(str(v) for v in value)
    if not isinstance(value, str):
        raise where.error(key, "must be a list (e.g. [1, 4]) or a comma-separated string")
    return parse(value, where.name(key))


def _whole(block: dict, key: str, where: _Where, default: int | None) -> Any:
    if key not in block:
        return default
    number = whole_number(block[key])
    if number is None:
        raise where.error(key, f"{block[key]!r} is not a whole number")
    return number


def _seconds(block: dict, key: str, where: _Where) -> float | None:
    if key not in block:
        return None
    value = seconds(block[key])
    if value is None:
        raise where.error(key, f"{block[key]!r} is not a number of seconds")
    return value


def _share(block: dict, key: str, where: _Where, default: float) -> float:
    value = block.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise where.error(key, f"{value!r} is not a share from 0 to 1")
    return float(value)


def _flag(block: dict, key: str, where: _Where) -> bool:
    value = block.get(key, False)
    if not isinstance(value, bool):
        raise where.error(key, "must be true or false")
    return value


def _slo(value: Any, where: _Where) -> lp.Slo:
    if value is None:
        return lp.Slo()
    if isinstance(value, dict):
        value = ",".join(f"{k}={v}" for k, v in value.items())
    if not isinstance(value, str):
        raise where.error("slo", "must be an object such as {\"ttft_ms\": 500, \"tpot_ms\": 50}")
    return lp.parse_slo(value, where.name("slo"))


def _sweep(value: Any, where: _Where) -> lp.RateSweep | None:
    if value is None or value is False:
        return None
    if value is True:
        return lp.RateSweep()
    if not isinstance(value, dict) or set(value) - {"start", "steps", "max_rate", "attainment"}:
        raise where.error("sweep", "must be true or an object of start, steps, max_rate, attainment")
    numbers = {}
    for key in ("start", "max_rate", "attainment"):
        if key in value:
            numbers[key] = lp.positive_number(str(value[key]), where.name(f"sweep.{key}"),
                                              maximum=1.0 if key == "attainment" else lp.MAX_RATE)
    if "steps" in value:
        steps = whole_number(value["steps"])
        if steps is None or not 0 <= steps <= 20:
            raise where.error("sweep.steps", f"{value['steps']!r} is not a whole number from 0 to 20")
        numbers["steps"] = steps
    return lp.RateSweep(**numbers)


def _dataset(value: Any, root: Path, where: _Where) -> Path | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise where.error("dataset", "must be the path of a ShareGPT JSON file (relative to the model repository)")
    path = Path(value) if os.path.isabs(value) else Path(root) / value
    if not path.is_file():
        raise where.error("dataset", f"{value} is not a file")
    return path


def _default_ready(timeout: int | None) -> float:
    return timeout * READY_SHARE if timeout else NO_TIMEOUT_READY_S


# -- the run -----------------------------------------------------------------------------------
def serving_extension(root: Path, executor_name: str, tracer: Any, message: Callable[[str], None]
                      ) -> Callable[[Any], None]:
    """The run extension of models with a ``serving`` block (see the module doc)."""
    def extend(spec: Any) -> None:
        if spec.model.extra.get(BLOCK) is None:
            return
        from madengine.launch.ports import free_port

        plan = plan_of(spec.model, root, port=free_port(), timeout=spec.timeout)
        prompts = check_plan(plan)
        spec.env.update(MAD_SERVING_PORT=str(urlsplit(plan.url).port), MAD_SERVING_HOST="127.0.0.1", MAD_SERVING_MODEL=plan.model,
                        MAD_SERVING_URL=plan.url)
        step = next((s for s in spec.steps if s.is_model), None)
        if step is None:
            raise InputError(f"model '{spec.model.name}' has a serving block but no script to start its server",
                             path=spec.model.source or "models.json", field=f"model '{spec.model.name}': scripts")
        folder = spec.workdir / FOLDER
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy2(WRAPPER, folder / WRAPPER.name)
        python = sys.executable if executor_name == "local" else "python3"
        here = step.cwd or "."
        step.argv = [python, os.path.relpath(f"{FOLDER}/{WRAPPER.name}", here), "--done",
                     os.path.relpath(DONE_FILE, here), "--", *step.argv]
        spec.results_table = RESULTS_TABLE
        spec.host_network = True
        spec.around_model.append(lambda run: Session(run, plan, prompts, tracer, message).running())

    return extend


class Session:
    """One run of a serving model's load points beside its model step (a thread of its own)."""

    def __init__(self, spec: Any, plan: ServingPlan, prompts: list, tracer: Any, message: Callable[[str], None]
                 ) -> None:
        self.spec, self.plan, self.prompts, self.tracer, self.message = spec, plan, prompts, tracer, message
        self.stopped = threading.Event()
        self.results: list = []
        self.sweep: Any = None
        self.error = ""

    @contextlib.contextmanager
    def running(self) -> Iterator["Session"]:
        folder = self.spec.workdir / FOLDER
        for leftover in (folder / "done", folder / "results.csv"):  # a repeat's: the next run writes its own
            leftover.unlink(missing_ok=True)
        thread = threading.Thread(target=self.tracer.bind(self._run), name=f"serving-{self.spec.key}", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.stopped.set()
            thread.join(JOIN_S)

    def _run(self) -> None:
        from madengine.serving.plan import run_plan

        try:
            self.sweep = asyncio.run(run_plan(self.plan, self.prompts, self.spec.artifacts_dir / REQUESTS_FOLDER,
                                              tracer=self.tracer, on_result=self.results.append,
                                              message=self.message, stopped=self.stopped))
        except Exception as exc:  # noqa: BLE001 - whatever broke, the rows say so and the server is ended
            self.error = f"the serving benchmark failed: {type(exc).__name__}: {exc}"
        finally:
            self._write_rows()
            (self.spec.workdir / DONE_FILE).touch()

    def _write_rows(self) -> None:
        from madengine.serving.bench import point_values, sweep_values

        rows = [point_values(self.plan, result) for result in self.results]
        if self.sweep is not None:
            rows.append(sweep_values(self.plan, self.sweep))
        if self.error or not rows:
            rows.append({"status": "FAILURE", "reason": self.error or "the serving benchmark was stopped",
                         "performance": None, "metric": "", "tag_configs": "", "extra": {}})
        table = [{"model": "", "performance": _cell(row["performance"]), "metric": row["metric"],
                  "status": row["status"], "reason": row["reason"], "tag_configs": row["tag_configs"],
                  **{k: _cell(v) for k, v in row["extra"].items()}} for row in rows]
        header = list(dict.fromkeys(key for row in table for key in row))
        path = self.spec.workdir / RESULTS_TABLE
        with open(path, "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=header)
            writer.writeheader()
            writer.writerows(table)


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    return str(value)
