"""``madengine doctor``: every check in order, and the verdict.

:func:`prepare` reads the request the way a run reads its own (``DOCKER_HOST``, the context, the
``k8s`` block, the tags): bad input is an :class:`~madengine.core.errors.InputError` (exit 2)
before any check runs. :meth:`Diagnosis.checks` then yields one :class:`Check` at a time, so the
CLI prints each line as it is known (the collective takes seconds).
"""

from __future__ import annotations

import dataclasses
import os
import platform
import sys
from pathlib import Path
from typing import Any, Iterator

from madengine.catalog import Model, load_catalog, select_models
from madengine.context import Context, build_context
from madengine.context.detect import AMD, CPU, NVIDIA, rocm_tool
from madengine.core.host import Host
from madengine.doctor import clusters, devices, engine, models, torchcheck, vendors
from madengine.doctor.checks import FAIL, PASS, WARN, Check, counts, failed_checks, not_needed, skipped
from madengine.execution.engine import docker_host
from madengine.k8s.settings import block_of, k8s_settings

EXECUTORS = ("auto", "docker", "local", "slurm", "k8s")
#: seconds the collective's ranks have, together, to start, run and end
COLLECTIVE_TIMEOUT = 180.0
OLDEST_PYTHON = (3, 10)


@dataclasses.dataclass(frozen=True)
class DoctorRequest:
    """What ``madengine doctor`` was asked. ``dev``/``sys_root`` are where device nodes and sysfs
    are read (a test's stand-in folders; ``/dev`` and ``/sys`` otherwise)."""

    tags: tuple[str, ...] = ()
    executor: str = "auto"
    context_file: str | None = None
    context_string: str | None = None
    collective: bool = True
    collective_timeout: float = COLLECTIVE_TIMEOUT
    dev: Path = Path("/dev")
    sys_root: str = "/sys"


@dataclasses.dataclass
class Diagnosis:
    request: DoctorRequest
    host: Host
    context: Context
    models: list[Model]
    root: Path | None
    results: list[Check] = dataclasses.field(default_factory=list)
    needs: set[str] | None = None  #: what the selected models need (None: no --tags, everything counts)

    def checks(self) -> Iterator[Check]:
        """Each check as it is known (kept in ``results``)."""
        for check in self._all_checks():
            if self.needs is not None:
                check = not_needed(check, self.needs)
            self.results.append(check)
            yield check

    def _all_checks(self) -> Iterator[Check]:
        request, environ, context = self.request, self.host.environ, self.context
        vendor, count = context.gpu_vendor, context.system_ngpus
        yield check_python()
        yield check_madengine()
        facts = engine.check_engine(environ, request.executor)
        executor = models.effective_executor(request.executor, facts.info is not None)
        if request.tags:
            self.needs = models.model_needs(executor, context, self.models)
        yield facts.check
        yield check_gpus(context, request.dev)
        yield check_driver(vendor, count, request.sys_root)
        yield devices.check_devices(vendor, count, request.dev)
        yield engine.check_gpu_runtime(facts, vendor, request.dev) if executor == "docker" else \
            skipped(engine.RUNTIME, f"not needed by the {executor} executor")
        torch = torchcheck.probe_torch(environ, vendor)
        yield torch.check
        yield torchcheck.run_collective(torch, environ, request.collective_timeout) if request.collective else \
            skipped(torchcheck.COLLECTIVE, "not run (--no-collective)")
        yield clusters.check_slurm(request.executor, context.values)
        yield clusters.check_kubeconfig(request.executor, context.values, environ)
        for model in self.models:
            assert self.root is not None
            yield models.check_model(model, context, executor, self.root, environ)

    def exit_code(self) -> int:
        return 1 if failed_checks(self.results) else 0

    def verdict(self) -> str:
        failed = failed_checks(self.results)
        tally = counts(self.results)
        what = "the selected models" if self.request.tags else "models"
        if failed:
            return (f"this host cannot run {what} yet: {tally[FAIL]} FAIL ({', '.join(c.name for c in failed)}), "
                    f"{tally[WARN]} WARN")
        return f"this host can run {what}: {tally[PASS]} PASS, {tally[WARN]} WARN, {tally['SKIP']} SKIP"

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict(), "exit_code": self.exit_code(), "counts": counts(self.results),
                "executor": self.request.executor, "tags": list(self.request.tags),
                "context": self.context.summary(), "checks": [check.to_dict() for check in self.results]}


def prepare(request: DoctorRequest, host: Host) -> Diagnosis:
    """Read the request's inputs (exit 2 when one is bad) before any check runs."""
    environ = host.environ
    docker_host(environ)
    context = build_context(context_file=request.context_file, context_string=request.context_string)
    if clusters.wants_k8s(request.executor, context.values):
        k8s_settings(block_of(context.values))
    selected: list[Model] = []
    root = None
    if request.tags:
        catalog = load_catalog(environ=environ)
        selected, root = select_models(catalog, list(request.tags)), catalog.root
    return Diagnosis(request, host, context, selected, root)


def check_python() -> Check:
    version = platform.python_version()
    if sys.version_info < OLDEST_PYTHON:
        return Check("python", FAIL, f"Python {version} ({sys.executable}) is older than madengine needs",
                     "install Python 3.10 or newer")
    return Check("python", PASS, f"Python {version} ({sys.executable})")


def check_madengine() -> Check:
    from madengine.core.version import __version__

    where = os.path.dirname(os.path.abspath(sys.modules["madengine"].__file__ or ""))
    return Check("madengine", PASS, f"madengine {__version__} ({where})", data={"version": __version__})


def check_gpus(context: Context, dev: Path) -> Check:
    """The GPUs as a run's context has them (detected, then the context's overrides)."""
    vendor, count = context.gpu_vendor, context.system_ngpus
    product = str(context.get("gpu_product_name") or "")
    data = {"gpu_vendor": vendor, "system_ngpus": count, "gpu_architecture": context.gpu_architecture,
            "gpu_product_name": product}
    if vendor in (AMD, NVIDIA):
        if not count:
            return Check("gpu", FAIL, f"gpu_vendor {vendor} but no GPU counted", "check the vendor tool "
                         "(nvidia-smi -L, amd-smi list) or the context's system_ngpus", need="gpu", data=data)
        return Check("gpu", PASS, f"{vendor}: {count} × {product or context.gpu_architecture} "
                     f"({context.gpu_architecture}), as runs detect them", data=data)
    return _cpu_host(context, dev, data)


def _cpu_host(context: Context, dev: Path, data: dict[str, Any]) -> Check:
    """A CPU host is fine, unless a GPU is there that the tools cannot see (a driver not loaded, a
    tool missing)."""
    answer = vendors.run_tool(["nvidia-smi", "-L"])
    if answer.found and answer.problem:
        return Check("gpu", FAIL, f"nvidia-smi is installed but fails ({answer.problem}): runs see a CPU host",
                     "load the NVIDIA driver (sudo modprobe nvidia) until nvidia-smi lists the GPUs",
                     need="gpu", data=data)
    nodes = devices.any_gpu_nodes(dev)
    if nodes:
        tool = "nvidia-smi (the driver's utilities)" if nodes == NVIDIA else "amd-smi or rocm-smi (ROCm)"
        return Check("gpu", WARN, f"{nodes} device nodes exist in {dev} but no tool counts the GPUs: runs see a "
                     "CPU host", f"install {tool}", need="gpu", data=data)
    if rocm_tool("amd-smi") or rocm_tool("rocm-smi"):
        return Check("gpu", WARN, "ROCm's tools are installed but find no AMD GPU: runs see a CPU host",
                     "load the amdgpu driver (sudo modprobe amdgpu) if this host has AMD GPUs", data=data)
    return Check("gpu", PASS, f"CPU host: no GPU ({context.gpu_architecture}, "
                 f"{context.get('gpu_product_name') or 'CPU'}); models run on the CPU", data=data)


def check_driver(vendor: str, count: int, sys_root: str) -> Check:
    """The driver and toolkit versions and each GPU, from the vendor tool's structured output."""
    if vendor == CPU or vendor not in (AMD, NVIDIA):
        return skipped("driver", "no GPU: no GPU driver to check")
    report, problem = vendors.read_nvidia() if vendor == NVIDIA else vendors.read_amd(sys_root)
    if report is None:
        fix = "check nvidia-smi -q -x" if vendor == NVIDIA else "check amd-smi static --json (or rocm-smi)"
        return Check("driver", FAIL, problem, fix, need="gpu")
    summary = f"{report.tool}: driver {report.driver or 'unknown'}" + (f", {report.toolkit}" if report.toolkit else "")
    summary += f": {report.products()}"
    if len(report.gpus) != count:
        return Check("driver", WARN, f"{summary}; the context counts {count} GPU(s)",
                     "check CUDA_VISIBLE_DEVICES / the context's system_ngpus", need="gpu", data=report.to_dict())
    if not report.driver:
        return Check("driver", WARN, summary, "the driver reports no version (a driver built into the kernel?)",
                     need="gpu", data=report.to_dict())
    return Check("driver", PASS, summary, data=report.to_dict())
