"""``PerfRecord``: the one record type for a result, shared by every stage."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, Mapping

from madengine.core.redact import redact
from madengine.results.columns import ALL_COLUMNS, Status
from madengine.results.identity import tag_configs_text


WARNING_SEPARATOR = "; "


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value) if value == value else ""  # NaN → empty
    if isinstance(value, (list, tuple)):
        return ",".join(_cell(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return str(value)


@dataclasses.dataclass
class PerfRecord:
    """One result: one row of perf.csv.

    Standard columns are attributes; anything else (multiple_results extras, benchmark
    statistics) lives in ``extra`` and becomes columns at the end of perf.csv.
    """

    model: str
    status: str = Status.FAILURE
    performance: float | str | None = None
    metric: str = ""
    reason: str = ""
    n_gpus: str = ""
    training_precision: str = ""
    pipeline: str = ""
    args: str = ""
    tags: str = ""
    docker_file: str = ""
    base_docker: str = ""
    docker_sha: str = ""
    docker_image: str = ""
    git_commit: str = ""
    machine_name: str = ""
    gpu_architecture: str = ""
    relative_change: str = ""
    build_duration: float | str | None = None
    test_duration: float | str | None = None
    dataname: str = ""
    data_provider_type: str = ""
    data_size: str = ""
    data_download_duration: float | str | None = None
    build_number: str = ""
    additional_docker_run_options: str = ""
    run_id: str = ""
    executor: str = ""
    started_at: str = ""
    image_id: str = ""
    gpu_vendor: str = ""
    context: dict[str, Any] | str = ""
    madengine_version: str = ""
    command_line: str = ""
    artifacts: list[str] | str = ""
    tag_configs: str = ""
    backend: str = ""
    trace_id: str = ""
    perf_n: int | str = ""
    perf_mean: float | str | None = None
    perf_stddev: float | str | None = None
    perf_cv: float | str | None = None
    perf_min: float | str | None = None
    perf_max: float | str | None = None
    perf_ci95_low: float | str | None = None
    perf_ci95_high: float | str | None = None
    perf_samples: str = ""  # JSON text (madengine.results.samples.samples_text)
    warmup_runs: int | str = ""
    precision_source: str = ""
    framework_versions: dict[str, str] | str = ""
    thread_settings: dict[str, Any] | str = ""
    host_load_start: float | str | None = None
    host_load_end: float | str | None = None
    warnings: str = ""  # notes joined by WARNING_SEPARATOR
    launcher: str = ""
    world_size: int | str = ""
    nnodes: int | str = ""
    nproc_per_node: int | str = ""
    node_aggregation: str = ""
    node_n: int | str = ""
    node_cv: float | str | None = None
    node_performance: str = ""  # JSON text (madengine.results.aggregate.JobFigure.columns)
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == Status.SUCCESS

    def warning_list(self) -> list[str]:
        """The row's notes (a busy host, an unstable figure, ...), one per item."""
        return [note for note in str(self.warnings or "").split(WARNING_SEPARATOR) if note.strip()]

    def add_warnings(self, notes: list[str]) -> None:
        """Add notes to the row's ``warnings`` (each once)."""
        kept = self.warning_list()
        kept.extend(note for note in notes if note not in kept)
        self.warnings = WARNING_SEPARATOR.join(kept)

    def to_row(self) -> dict[str, str]:
        """The record as perf.csv cells: standard columns, then madengine's, then extras.

        Every cell passes through secret redaction: a row never carries a secret.
        """
        row: dict[str, str] = {}
        for name in ALL_COLUMNS:
            value = getattr(self, name)
            if name in ("build_duration", "test_duration", "data_download_duration") and isinstance(value, float):
                value = f"{value:.3f}"
            row[name] = redact(_cell(value))
        for name, value in self.extra.items():
            if name not in row:
                row[name] = redact(_cell(value))
        return row

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "PerfRecord":
        """Build a record from a perf.csv row (keys stripped of whitespace)."""
        fields = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        known: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in row.items():
            if key is None:
                continue
            name = key.strip()
            value = "" if value is None else value
            if name in fields:
                known[name] = value
            else:
                extra[name] = value
        known.setdefault("model", "")
        record = cls(**known)
        record.extra = extra
        return record

    def copy(self, **changes: Any) -> "PerfRecord":
        clone = dataclasses.replace(self, **changes)
        clone.extra = dict(self.extra if "extra" not in changes else changes["extra"])
        return clone


@dataclasses.dataclass(frozen=True)
class Provenance:
    """What every row of one invocation shares: which run, where, how it was started."""

    run_id: str
    executor: str
    command_line: str = ""
    gpu_vendor: str = ""
    gpu_architecture: str = ""
    context: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    machine_name: str = ""
    build_number: str = "0"
    pipeline: str = ""
    madengine_version: str = ""
    trace_id: str = ""

    @classmethod
    def of(cls, *, run_id: str, executor: str, command_line: str, environ: Mapping[str, str],
           context: Mapping[str, Any], machine_name: str = "", trace_id: str = "") -> "Provenance":
        """The provenance of an invocation: the CI build number and pipeline come from the
        environment (``BUILD_NUMBER``, ``pipeline``), as the original madengine recorded them."""
        from madengine.core.version import __version__

        return cls(run_id=run_id, executor=executor, command_line=command_line,
                   gpu_vendor=str(context.get("gpu_vendor", "")),
                   gpu_architecture=str(context.get("gpu_architecture", "")), context=dict(context),
                   machine_name=machine_name, build_number=environ.get("BUILD_NUMBER", "0"),
                   pipeline=environ.get("pipeline", ""), madengine_version=__version__, trace_id=trace_id)


class RecordFactory:
    """The one place result records are made: by ``run``, ``bench``, parallel slots and Slurm
    collection alike, so every row carries the same provenance columns."""

    def __init__(self, provenance: Provenance, clock: Callable[[], str]) -> None:
        self.provenance = provenance
        self.clock = clock

    def new(self, model: str, status: str, **values: Any) -> PerfRecord:
        """A record of ``model`` with the invocation's provenance; ``values`` set any field."""
        p = self.provenance
        record = PerfRecord(
            model=model, status=status, pipeline=p.pipeline, machine_name=p.machine_name,
            gpu_architecture=p.gpu_architecture, build_number=p.build_number, run_id=p.run_id,
            executor=p.executor, started_at=self.clock(), gpu_vendor=p.gpu_vendor, context=dict(p.context),
            madengine_version=p.madengine_version, command_line=p.command_line, trace_id=p.trace_id)
        for key, value in values.items():
            setattr(record, key, dict(value) if key == "extra" else value)
        if record.reason:
            record.reason = redact(record.reason)
        return record

    def for_model(self, model: Any, status: str, **values: Any) -> PerfRecord:
        """A record of a catalog model: its own columns (n_gpus, args, tags, ...) filled in."""
        columns = {"n_gpus": model.n_gpus, "training_precision": model.training_precision,
                   "precision_source": "declared" if model.training_precision else "", "args": model.run_args,
                   "tags": ",".join(model.tags), "tag_configs": tag_configs_text(model.tag_configs),
                   "additional_docker_run_options": model.additional_docker_run_options}
        columns.update(values)
        return self.new(model.name, status, **columns)

    def failure(self, model: Any, reason: str, **values: Any) -> PerfRecord:
        return self.for_model(model, Status.FAILURE, reason=reason, **values)
