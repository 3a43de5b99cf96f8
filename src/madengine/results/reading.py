"""perf.csv as typed records: what the Python API's ``read_results`` returns.

Each :class:`Result` has its numbers as numbers, its time as a datetime, its samples as a list and
its :class:`~madengine.results.identity.ResultIdentity`; columns it does not name are in ``extra``.
:meth:`Results.to_dataframe` gives a pandas DataFrame when pandas is installed.
"""

from __future__ import annotations

import dataclasses
import datetime
from pathlib import Path
from typing import Any

from madengine.core.errors import InputError
from madengine.results.identity import ResultIdentity
from madengine.results.parsing import as_number
from madengine.results.perfcsv import read_rows
from madengine.results.samples import row_samples

_NAMED = ("model", "status", "performance", "metric", "reason", "tag_configs", "executor", "backend", "gpu_vendor",
          "gpu_architecture", "n_gpus", "machine_name", "run_id", "started_at", "trace_id", "perf_n", "perf_stddev",
          "perf_cv", "perf_ci95_low", "perf_ci95_high", "perf_samples", "test_duration", "build_duration",
          "docker_image")


@dataclasses.dataclass(frozen=True)
class Result:
    """One row of perf.csv, typed."""

    model: str
    status: str
    performance: float | None
    metric: str
    reason: str
    identity: ResultIdentity
    run_id: str
    started_at: datetime.datetime | None
    samples: list[float]
    stddev: float | None
    cv: float | None
    ci95: tuple[float, float] | None
    test_duration: float | None
    build_duration: float | None
    machine_name: str
    docker_image: str
    trace_id: str
    extra: dict[str, str]

    @property
    def ok(self) -> bool:
        return self.status == "SUCCESS"

    def to_dict(self) -> dict[str, Any]:
        values = dataclasses.asdict(self)
        values["identity"] = dataclasses.asdict(self.identity)
        return values


class Results(list):
    """The results of a perf.csv, in file order (a list of :class:`Result`)."""

    def to_dataframe(self) -> Any:
        """A pandas DataFrame, one row per result (``pip install pandas``)."""
        try:
            import pandas
        except ImportError:
            raise InputError("pandas is not installed", hint="pip install pandas") from None
        rows = []
        for result in self:
            row = result.to_dict()
            identity = row.pop("identity")
            row.update({f"identity_{k}": v for k, v in identity.items() if k not in ("model", "metric")})
            row.update(row.pop("extra"))
            rows.append(row)
        return pandas.DataFrame(rows)


def _time(text: str) -> datetime.datetime | None:
    try:
        return datetime.datetime.fromisoformat(text) if text else None
    except ValueError:
        return None


def result_of(row: dict[str, str]) -> Result:
    low, high = as_number(row.get("perf_ci95_low", "")), as_number(row.get("perf_ci95_high", ""))
    return Result(
        model=row.get("model", ""), status=row.get("status", ""), performance=as_number(row.get("performance", "")),
        metric=row.get("metric", ""), reason=row.get("reason", ""), identity=ResultIdentity.from_row(row),
        run_id=row.get("run_id", ""), started_at=_time(row.get("started_at", "")), samples=row_samples(row),
        stddev=as_number(row.get("perf_stddev", "")), cv=as_number(row.get("perf_cv", "")),
        ci95=(low, high) if low is not None and high is not None else None,
        test_duration=as_number(row.get("test_duration", "")), build_duration=as_number(row.get("build_duration", "")),
        machine_name=row.get("machine_name", ""), docker_image=row.get("docker_image", ""),
        trace_id=row.get("trace_id", ""), extra={k: v for k, v in row.items() if k not in _NAMED})


def read_results(path: str | Path) -> Results:
    """Every row of the perf.csv at ``path`` as a :class:`Result`; InputError for a missing or
    malformed file."""
    return Results(result_of(row) for row in read_rows(Path(path)))
