"""Whether the optional OpenTelemetry SDK can export (imported on its own, so the tracer can load
the SDK in the background without importing the exporter's code, which imports the tracer)."""

from __future__ import annotations


def sdk_available() -> bool:
    """Whether the SDK and the exporter import (importing everything the export will need)."""
    try:
        import opentelemetry.exporter.otlp.proto.http.trace_exporter  # noqa: F401
        import opentelemetry.sdk.resources  # noqa: F401
        import opentelemetry.sdk.trace  # noqa: F401
        import requests  # noqa: F401
    except ImportError:
        return False
    return True
