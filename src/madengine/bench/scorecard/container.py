"""``madengine scorecard --image IMAGE``: each cell in a fresh container of IMAGE, through the docker executor.

Per cell: a work folder ``<run dir>/cells/<key>/`` holding the inputs (``inputs.npz``) is mounted
as the container's workspace, the model file and a copy of the portable cell code (the harness and
the backends) are mounted read-only, and ``python3 -m madengine.bench.backends.cell`` runs in it as
the host's user; it writes ``cell.json`` and ``outputs.npz`` there, and the host checks the
outputs. The image needs ``python3`` with ``numpy`` and the packages of the backends it should
run (``onnxruntime``; ``onnx`` for TVM and the reference evaluator; ``openvino``; ``apache-tvm``):
a backend whose package is missing in the image is an UNSUPPORTED cell saying so. The image is
never pulled. NVIDIA backends get the host's GPUs (``--gpus all``).

This module is the only place the scorecard touches the executor API.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Mapping

from madengine.bench.harness.engine import no_phase
from madengine.bench.harness.precision import DEFAULT
from madengine.core.errors import InputError
from madengine.tracing import names

CELL_CODE = "/opt/madengine_cell"
MODEL_FOLDER = "/opt/madengine_model"


class ContainerCells:
    """Runs cells in containers of ``image`` (a :data:`~madengine.bench.scorecard.runner.CellRunner`)."""

    def __init__(self, image: str, run_dir: Path, run_id: str, options: Mapping[str, Any],
                 environ: Mapping[str, str]) -> None:
        from madengine.execution.docker import DockerExecutor, connect
        from madengine.execution.engine import EngineError

        client = connect(environ)  # the command's DOCKER_HOST
        try:
            client.inspect_image(image)
        except EngineError:
            raise InputError(f"image {image} is not present on this host", path="--image",
                             hint="build it (or docker pull it) first; the scorecard never pulls") from None
        self.executor = DockerExecutor(client, images=None)  # cells name their image; none is built
        self.image, self.run_dir, self.run_id, self.options = image, Path(run_dir).resolve(), run_id, dict(options)
        self.code = self.run_dir / "madengine_cell"
        _copy_cell_code(self.code)

    def run(self, backend: str, model: Path, feeds: Any, shapes: Any, *, timed: bool, batch_size: int,
            key: str, phase: Any = no_phase, precision: str = DEFAULT) -> tuple[dict[str, Any], dict[str, Any]]:
        """One cell in its container; ``phase`` (a trace span per phase) sees the container start
        and the cell's step (the phases inside the container are not traced)."""
        from madengine.bench.backends.cell import ERROR, load_named, save_named
        from madengine.execution.streams import LineSink

        from madengine.bench.runner import unused_folder

        workdir = unused_folder(self.run_dir / "cells" / key)
        save_named(workdir / "inputs.npz", feeds)
        spec = self._spec(key, backend, Path(model).resolve(), workdir)
        step = self._step(backend, Path(model).name, timed, batch_size, precision)
        with open(workdir / "cell.log", "a", encoding="utf-8") as log:
            sink = LineSink(log, None, keep=True)
            try:
                with phase(names.SPAN_CONTAINER_START):
                    self.executor.start(spec)
                with phase(names.SPAN_MODEL_STEP):
                    result = self.executor.run_step(spec, step, None, sink)
            except Exception as exc:  # ExecutionError (container could not start) or an engine error
                return _error(backend, f"container of {self.image}: {exc}"), {}
            finally:
                self.executor.stop(spec, keep_alive=False)
        if result.interrupted is not None:
            raise result.interrupted
        if result.error:
            return _error(backend, f"container of {self.image}: {result.error}"), {}
        answer_file = workdir / "cell.json"
        if result.exit_code != 0 or not answer_file.is_file():
            tail = " | ".join(line for line in result.output.strip().splitlines()[-3:]) if result.output else ""
            return _error(backend, f"the cell exited with code {result.exit_code} in {self.image}: {tail[-400:]} "
                                   f"(log: {workdir / 'cell.log'})", ERROR), {}
        answer = json.loads(answer_file.read_text(encoding="utf-8"))
        if answer.get("outcome") == "unsupported" and "is not installed" in answer.get("reason", ""):
            answer["reason"] += f" in image {self.image}"
        outputs = load_named(workdir / "outputs.npz") if answer.get("outcome") == "ran" else {}
        return answer, outputs

    def close(self) -> None:
        self.executor.close()

    def _spec(self, key: str, backend: str, model: Path, workdir: Path) -> Any:
        from madengine.bench.backends import get_backend
        from madengine.catalog.schema import Model
        from madengine.core.spec import Mount, RunSpec

        nvidia = get_backend(backend).device_vendor == "NVIDIA"
        env = {"PYTHONPATH": CELL_CODE, "MAD_RUN_ID": self.run_id, "PYTHONDONTWRITEBYTECODE": "1"}
        if nvidia:
            env["MAD_GPU_VENDOR"] = "NVIDIA"
        return RunSpec(key=key, model=Model(name=key, additional_docker_run_options="--gpus all" if nvidia else ""),
                       workdir=workdir, log_path=workdir / "cell.log", artifacts_dir=workdir, env=env, steps=[],
                       image=self.image, mounts=[Mount(str(self.code), CELL_CODE, True),
                                                 Mount(str(model), f"{MODEL_FOLDER}/{model.name}", True)])

    def _step(self, backend: str, model_name: str, timed: bool, batch_size: int, precision: str) -> Any:
        from madengine.core.spec import Step

        argv = ["python3", "-m", "madengine.bench.backends.cell", f"{MODEL_FOLDER}/{model_name}", "--backend",
                backend, "--inputs", "inputs.npz", "--result", "cell.json", "--outputs", "outputs.npz",
                "--batch-size", str(batch_size), "--warmup", str(self.options["warmup"]), "--precision", precision]
        if not timed:
            argv.append("--untimed")
        for flag, name in (("--threads", "threads"), ("--iterations", "iterations"), ("--min-time", "min_time")):
            if self.options.get(name) is not None:
                argv += [flag, str(self.options[name])]
        return Step("scorecard-cell", argv, is_model=True)


def _copy_cell_code(target: Path) -> None:
    """The portable cell code as a ``madengine`` package of its own: the harness (the same copy
    models.json runs use), the backends, and empty package files above them."""
    from madengine.bench.models_json import copy_harness

    bench = target / "madengine" / "bench"
    copy_harness(bench / "harness")
    backends = bench / "backends"
    backends.mkdir(parents=True, exist_ok=True)
    for path in (Path(__file__).resolve().parents[1] / "backends").glob("*.py"):
        shutil.copy2(path, backends / path.name)
    for package in (target / "madengine", bench):
        (package / "__init__.py").write_text('"""madengine scorecard cell code (portable copy)."""\n', encoding="utf-8")


def _error(backend: str, reason: str, outcome: str = "error") -> dict[str, Any]:
    """A cell that never answered from its container (what ran there, and where, is unknown)."""
    return {"backend": backend, "outcome": outcome, "reason": reason, "operator": None, "environment": {}}
