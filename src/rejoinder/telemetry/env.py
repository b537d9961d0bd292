"""What the standard OpenTelemetry environment variables ask for (read, never set)."""

from __future__ import annotations

import os
from typing import Mapping


def _on(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def otel_requested(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the standard OpenTelemetry variables ask for export."""
    env = os.environ if environ is None else environ
    if _on(env.get("OTEL_SDK_DISABLED")):
        return False
    return bool(env.get("OTEL_SERVICE_NAME")) or any(
        k.startswith("OTEL_EXPORTER_OTLP_") and v for k, v in env.items())


def capture_content(environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return _on(env.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"))
