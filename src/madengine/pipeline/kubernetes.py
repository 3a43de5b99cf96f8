"""``madengine run --executor k8s`` and ``madengine k8s render`` in the pipeline: the selection and
the recording of rows are the pipeline's, as for any run; the cluster is :mod:`madengine.k8s`'s.

Images of a catalog run are built here (the pipeline chooses image sources), and only when the
``k8s`` block says the nodes already hold them (``image_pull_policy: Never``); otherwise a run
takes a build manifest whose images were pushed (``madengine build --registry``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from madengine.catalog import model_root
from madengine.core.errors import MadEngineError
from madengine.core.events import FINISH, START, Progress, Reporter
from madengine.core.host import Host
from madengine.core.ids import new_run_id
from madengine.pipeline.requests import RunRequest
from madengine.pipeline.selection import Selection, select
from madengine.results import RunSummary
from madengine.tracing import names
from madengine.tracing.command import finish_tracer, start_tracer


def _request(request: RunRequest, host: Host, selection: Selection) -> Any:
    from madengine.k8s.run import K8sRun

    return K8sRun(run=request.run, catalog=selection.catalog, models=selection.models, build=request.build,
                  transport=request.transport, manifest=selection.manifest, command_line=host.command_line)


class _LocalBuilds:
    """Builds a catalog model's image on this host's Docker engine, once asked (``Never`` pull policy)."""

    def __init__(self, request: RunRequest, host: Host, reporter: Reporter, selection: Selection, run_dir: Path):
        self.request, self.host, self.reporter, self.selection, self.run_dir = request, host, reporter, selection, \
            run_dir
        self.images: Any = None

    def __call__(self, model: Any, image: Any, context: Any) -> str:
        """'' once built (or up to date), else the FAILURE reason."""
        from madengine.pipeline.executors import build_images, connect_docker

        if self.images is None:
            client = connect_docker(self.host.environ)
            self.images = build_images(client, self.request.build, root=self.selection.catalog.root, context=context,
                                       run_dir=self.run_dir, reporter=self.reporter)
        try:
            target = next(t for t in self.images.targets(model) if t.key == image.key)
            self.images.obtain(target)
        except (MadEngineError, StopIteration) as exc:
            return f"image build failed: {exc}" if str(exc) else "image build failed"
        return ""


class _ImageUsers:
    """An image's USER as this host's Docker engine has it; None when there is no engine or the
    image is not here (``k8s.run_as_non_root`` is then checked by the kubelet only)."""

    def __init__(self, environ: Any) -> None:
        self.environ = environ
        self.engine: Any = None
        self.tried = False

    def __call__(self, reference: str) -> str | None:
        from madengine.execution.engine import EngineError
        from madengine.pipeline.executors import connect_docker

        if not self.tried:
            self.tried = True
            try:
                self.engine = connect_docker(self.environ)
            except MadEngineError:
                self.engine = None
        if self.engine is None:
            return None
        try:
            return str((self.engine.inspect_image(reference).get("Config") or {}).get("User") or "")
        except (EngineError, MadEngineError, OSError):
            return None


def render_k8s(request: RunRequest, host: Host, reporter: Reporter, folder: Path,
               include_secrets: bool = False) -> list[Path]:
    """``madengine k8s render``: the selected models' objects as YAML files under ``folder``."""
    from madengine.k8s.run import render_to_folder

    options = request.run
    selection = select(options.tags, request.transport.manifest_file,
                       Path(options.root) if options.root else model_root(host.environ))
    return render_to_folder(_request(request, host, selection), host, folder, reporter,
                            include_secrets=include_secrets, inspect_user=_ImageUsers(host.environ))


def run_on_k8s(request: RunRequest, host: Host, reporter: Reporter, selection: Selection, record: Any,
               recorder: Any = None) -> RunSummary:
    """Every selected model as its own Kubernetes job; rows recorded as they come (``record``).
    Everything is checked (and the cluster reached) before the run starts: bad input is exit 2
    with nothing written."""
    from madengine.k8s.run import prepare_run, render_to_folder, run_on_k8s as run_jobs

    options = request.run
    run_id = new_run_id()
    run_dir = Path(options.runs_dir) / run_id
    summary = RunSummary(run_id=run_id, executor="k8s", perf_csv=Path(options.output), run_dir=run_dir)
    k8s_request = _request(request, host, selection)
    if request.slurm.dry_run:
        written = render_to_folder(k8s_request, host, run_dir / "k8s", reporter, run_id,
                                   inspect_user=_ImageUsers(host.environ))
        reporter.data("\n".join(str(path) for path in written))
        return summary
    prepared = prepare_run(k8s_request, host, run_id, inspect_user=_ImageUsers(host.environ))
    for warning in prepared.plan.context.warnings():
        reporter.message(f"madengine: warning: {warning}")
    tracer = start_tracer(options, host.environ, reporter.message, run_id)
    reporter.progress(Progress(START, total=len(selection.models)))
    started = time.monotonic()
    try:
        with tracer.span(names.SPAN_RUN, {names.ATTR_RUN_ID: run_id, names.ATTR_EXECUTOR: "k8s"}):
            run_jobs(prepared, host, reporter, summary, lambda row: record(summary, row, reporter, recorder),
                     build_image=None if selection.manifest is not None else
                     _LocalBuilds(request, host, reporter, selection, run_dir), trace_id=tracer.trace_id)
    finally:
        reporter.progress(Progress(FINISH, total=len(selection.models), seconds=time.monotonic() - started))
        summary.trace = finish_tracer(tracer, options, run_dir, host.environ, reporter.message)
    return summary


__all__ = ["render_k8s", "run_on_k8s"]
