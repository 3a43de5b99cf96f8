"""A result on its trace span: the model span of ``run``, ``bench`` and ``scorecard`` carries the row's
status, figure, metric, reason (and image or backend), and a FAILURE row marks the span failed."""

from __future__ import annotations

from typing import Any

from madengine.results.columns import Status
from madengine.results.record import PerfRecord
from madengine.tracing import names


def describe_span(span: Any, record: PerfRecord) -> None:
    span.set_attributes({names.ATTR_STATUS: record.status, names.ATTR_METRIC: record.metric})
    for key, value in ((names.ATTR_IMAGE, record.docker_image), (names.ATTR_BACKEND, record.backend),
                       (names.ATTR_PERFORMANCE, record.performance), (names.ATTR_REASON, record.reason)):
        if value not in (None, ""):
            span.set_attribute(key, value)
    if record.status == Status.FAILURE:
        span.set_error(record.reason)
