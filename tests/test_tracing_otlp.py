"""OTLP export against a real OTLP/HTTP receiver (tests/otlp_receiver.py), propagation to a real child
process, and the ways an export must never get in the run's way (closed port, refusing collector,
no OpenTelemetry packages)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from madengine import tracing
from madengine.core.redact import MASK
from madengine.tracing import names, otlp
from madengine.tracing.validate import check_trace

SRC = str(Path(__file__).resolve().parents[1] / "src")


def closed_port() -> int:
    """A port nothing listens on: bound, then released (connections to it are refused)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def traced_run(tracer) -> dict[str, tracing.Span]:
    """The span tree the run path emits for one model, made through the public API."""
    spans = {}
    with tracer.span(names.SPAN_RUN, {names.ATTR_EXECUTOR: "local", names.ATTR_RUN_ID: "r1"}) as spans["run"]:
        with tracer.span(names.SPAN_CONTEXT_DETECTION) as spans["context"]:
            pass
        with tracer.span(names.SPAN_MODEL, {names.ATTR_MODEL: "numpy_matmul", names.ATTR_IMAGE: "ci-numpy"}) as model:
            spans["model"] = model
            for repeat in (1, 2):
                with tracer.span(names.SPAN_MODEL_STEP, {names.ATTR_REPEAT: repeat}) as spans[f"step{repeat}"]:
                    tracer.add_event("output", {"line": "performance: 12.5 GFLOPS"})
            model.set_attributes({names.ATTR_STATUS: "SUCCESS", names.ATTR_PERFORMANCE: 12.5,
                                  names.ATTR_METRIC: "GFLOPS", names.ATTR_EXIT_CODE: 0})
        with pytest.raises(RuntimeError):
            with tracer.span(names.SPAN_RECORDING) as spans["recording"]:
                raise RuntimeError("perf.csv is locked")
    return spans


def test_spans_reach_a_real_receiver_with_structure_and_attributes(otlp_receiver, tmp_path):
    tracer = tracing.Tracer(resource={names.ATTR_RUN_ID: "r1"})
    spans = traced_run(tracer)
    now = tracer.now_ns()
    tracer.add_counter("cpu_monitor.cpu_percent", [now, now + 10], [50.0, 150.0], unit="%", parent=spans["model"])
    environ = {**otlp_receiver.environ, "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=ci,team=perf%20lab"}
    result = tracing.flush(tracer, tmp_path / "trace.json", environ=environ)
    assert result.warnings == [] and result.exported == 6
    received = {s.span_id: s for s in otlp_receiver.wait_for(6)}
    assert len(received) == 6 and {s.trace_id for s in received.values()} == {tracer.trace_id}
    for key, span in spans.items():
        got = received[span.span_id]
        assert got.name == span.name and got.parent_span_id == span.parent_id, key
        assert (got.start_ns, got.end_ns) == (span.start_ns, span.end_ns)
    assert received[spans["run"].span_id].parent_span_id == ""
    model = received[spans["model"].span_id]
    assert model.attributes == {names.ATTR_MODEL: "numpy_matmul", names.ATTR_IMAGE: "ci-numpy",
                                names.ATTR_STATUS: "SUCCESS", names.ATTR_PERFORMANCE: 12.5,
                                names.ATTR_METRIC: "GFLOPS", names.ATTR_EXIT_CODE: 0}
    counter = [e for e in model.events if e[0] == "counter_track"][0][2]
    assert counter["counter.name"] == "cpu_monitor.cpu_percent" and counter["counter.max"] == 150.0
    step = received[spans["step2"].span_id]
    assert step.attributes == {names.ATTR_REPEAT: 2} and step.events[0][2] == {"line": "performance: 12.5 GFLOPS"}
    recording = received[spans["recording"].span_id]
    assert recording.status_code == 2 and recording.status_message == "RuntimeError: perf.csv is locked"
    assert model.scope == "madengine"
    assert model.resource["service.name"] == "madengine" and model.resource[names.ATTR_RUN_ID] == "r1"
    assert model.resource["deployment.environment"] == "ci" and model.resource["team"] == "perf lab"


def test_each_span_is_exported_once_across_flushes(otlp_receiver):
    tracer = tracing.Tracer()
    with tracer.span("first"):
        pass
    assert tracing.flush(tracer, None, environ=otlp_receiver.environ).exported == 1
    with tracer.span("second"):
        pass
    assert tracing.flush(tracer, None, environ=otlp_receiver.environ).exported == 1
    assert sorted(s.name for s in otlp_receiver.wait_for(2)) == ["first", "second"]


def test_standard_variables_are_honoured(otlp_receiver):
    tracer = tracing.Tracer()
    with tracer.span("x"):
        pass
    environ = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{otlp_receiver.endpoint}/v1/traces",
               "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1",  # the signal's own variable wins
               "OTEL_EXPORTER_OTLP_HEADERS": "x-api-key=s3cr3t-key-value,x-team=perf",
               "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip", "OTEL_SERVICE_NAME": "nightly-bench"}
    assert tracing.flush(tracer, None, environ=environ).exported == 1
    span = otlp_receiver.wait_for(1)[0]
    assert span.resource["service.name"] == "nightly-bench"
    headers = otlp_receiver.requests[0]
    assert headers["x-api-key"] == "s3cr3t-key-value" and headers["content-encoding"] == "gzip"


@pytest.mark.parametrize("extra", [{"OTEL_SDK_DISABLED": "true"}, {"OTEL_TRACES_EXPORTER": "none"}, {}])
def test_no_export_unless_asked(otlp_receiver, extra):
    tracer = tracing.Tracer()
    with tracer.span("x"):
        pass
    environ = {**otlp_receiver.environ, **extra} if extra else {}
    result = tracing.flush(tracer, None, environ=environ)
    assert result.exported == 0 and result.warnings == [] and otlp_receiver.requests == []


def test_unsupported_protocol_is_one_warning(otlp_receiver):
    tracer = tracing.Tracer()
    with tracer.span("x"):
        pass
    environ = {**otlp_receiver.environ, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
    result = tracing.flush(tracer, None, environ=environ)
    assert len(result.warnings) == 1 and "grpc is not supported" in result.warnings[0]
    assert otlp_receiver.requests == []


def _import_the_exporter() -> None:
    """The exporter's libraries imported before a timed flush: a cold import on a loaded machine
    takes seconds that say nothing about the export."""
    import requests  # noqa: F401
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: F401
    from opentelemetry.sdk.trace import ReadableSpan  # noqa: F401


def test_exporter_down_completes_at_once_with_one_warning(tmp_path):
    tracer = tracing.Tracer()
    traced_run(tracer)
    warnings: list[str] = []
    # a long timeout: the closed port must be noticed at once, not waited out (no retries of a refusal);
    # the bound is half the timeout, so a slow or loaded machine passes and waiting it out does not
    environ = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{closed_port()}", "OTEL_EXPORTER_OTLP_TIMEOUT": "120"}
    _import_the_exporter()
    started = time.monotonic()
    result = tracing.flush(tracer, tmp_path / "trace.json", environ=environ, warn=warnings.append)
    elapsed = time.monotonic() - started
    assert elapsed < 60, f"a closed port took {elapsed:.1f} s"
    assert len(warnings) == 1 and "connection refused" in warnings[0] and str(tmp_path / "trace.json") in warnings[0]
    assert result.path is not None and check_trace(json.loads(result.path.read_text())) == []
    with tracer.span("later"):
        pass
    assert tracing.flush(tracer, tmp_path / "trace.json", environ=environ, warn=warnings.append).warnings == []
    assert len(warnings) == 1  # said once: the next flush does not try (and wait) again


def test_refusing_collector_is_bounded_by_the_timeout(otlp_receiver):
    otlp_receiver.fail_with = 503  # retryable: the SDK retries with backoff until the timeout
    tracer = tracing.Tracer()
    with tracer.span("x"):
        pass
    environ = {**otlp_receiver.environ, "OTEL_EXPORTER_OTLP_TIMEOUT": "1",
               "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20tok-123456"}
    _import_the_exporter()
    started = time.monotonic()
    result = tracing.flush(tracer, None, environ=environ)
    # given 1 s (and a second): 5 times that leaves a loaded machine room; a retry loop the timeout
    # does not bound (backoff 1, 2, 4, 8 s) takes longer
    assert time.monotonic() - started < 10
    assert len(result.warnings) == 1 and "HTTP 503 Service Unavailable" in result.warnings[0]
    assert "tok-123456" not in result.warnings[0]
    otlp_receiver.fail_with = 400
    tracer = tracing.Tracer()
    with tracer.span("x"):
        pass
    result = tracing.flush(tracer, None, environ=otlp_receiver.environ)
    assert len(result.warnings) == 1 and "HTTP 400 Bad Request" in result.warnings[0]


def test_settings_from_the_environment():
    assert otlp.settings_from_environ({}) is None
    settings = otlp.settings_from_environ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"})
    assert settings.endpoint == "http://c:4318/v1/traces" and settings.timeout_s == otlp.DEFAULT_TIMEOUT_S
    for bad in ({"OTEL_EXPORTER_OTLP_TIMEOUT": "soon"}, {"OTEL_EXPORTER_OTLP_TIMEOUT": "0"},
                {"OTEL_EXPORTER_OTLP_COMPRESSION": "zstd"}, {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"}):
        with pytest.raises(otlp.OtlpSettingsError):
            otlp.settings_from_environ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", **bad})


CHILD = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    from madengine import tracing
    from madengine.tracing import names

    tracer = tracing.Tracer.from_environ(os.environ)
    with tracer.span(names.SPAN_RUN, {names.ATTR_SLURM_TASK_ID: 0}):
        with tracer.span(names.SPAN_MODEL, {names.ATTR_MODEL: "child_model"}):
            pass
    result = tracing.flush(tracer, Path(sys.argv[1]), environ=os.environ, warn=print)
    print(tracer.trace_id)
""")


def test_a_child_process_continues_the_trace(otlp_receiver, tmp_path):
    parent = tracing.Tracer()
    with parent.span(names.SPAN_RUN):
        with parent.span(names.SPAN_SLURM_TASK) as task:
            env = {**os.environ, "PYTHONPATH": SRC, **otlp_receiver.environ, **parent.child_environ()}
            child = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "task" / "trace.json")], env=env,
                                   capture_output=True, text=True, timeout=60)
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == parent.trace_id
    received = otlp_receiver.wait_for(2)
    root = [s for s in received if s.name == names.SPAN_RUN][0]
    assert root.trace_id == parent.trace_id and root.parent_span_id == task.span_id
    tracing.flush(parent, tmp_path / "trace.json", environ=otlp_receiver.environ)
    received = otlp_receiver.wait_for(4)
    assert {s.trace_id for s in received} == {parent.trace_id} and len(received) == 4
    result = tracing.merge_trace_files(tmp_path / "trace.json", [tmp_path / "task" / "trace.json"])
    doc = json.loads((tmp_path / "trace.json").read_text())
    assert len(result.merged) == 1 and check_trace(doc) == []
    assert {e["name"] for e in doc["traceEvents"] if e["ph"] == "X"} >= {names.SPAN_SLURM_TASK, names.SPAN_MODEL}
    assert any(e["ph"] == "f" for e in doc["traceEvents"])  # the arrow from the task span to the child's run


NO_SDK = textwrap.dedent("""
    import os, sys
    sys.modules["opentelemetry"] = None  # as if the packages were not installed: every import of them fails
    from pathlib import Path
    from madengine import tracing

    for index in range(2):
        tracer = tracing.Tracer()
        with tracer.span("x"):
            pass
        result = tracing.flush(tracer, Path(sys.argv[1]) / f"trace{index}.json", environ=os.environ,
                               warn=lambda line: print(line, file=sys.stderr))
        print(result.path)
""")


def test_without_the_opentelemetry_packages_trace_json_still_works_and_one_line_says_why(otlp_receiver, tmp_path):
    env = {**os.environ, "PYTHONPATH": SRC, **otlp_receiver.environ}
    child = subprocess.run([sys.executable, "-c", NO_SDK, str(tmp_path)], env=env, capture_output=True, text=True,
                           timeout=60)
    assert child.returncode == 0, child.stderr
    assert child.stdout.split() == [str(tmp_path / "trace0.json"), str(tmp_path / "trace1.json")]
    assert child.stderr.count("pip install madengine[trace]") == 1 and len(child.stderr.splitlines()) == 1
    assert otlp_receiver.requests == []


def test_header_secrets_never_reach_warnings(tmp_path):
    tracer = tracing.Tracer()
    with tracer.span("x"):
        pass
    port = closed_port()
    environ = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{port}/v1/traces?key=topsecret-987",
               "OTEL_EXPORTER_OTLP_HEADERS": "k=topsecret-987"}
    result = tracing.flush(tracer, None, environ=environ)
    assert len(result.warnings) == 1 and "topsecret-987" not in result.warnings[0] and MASK in result.warnings[0]
