"""OpenTelemetry traces and metrics of calls, and Prometheus metrics for ``rejoinder serve``.

Switched on by the standard variables: any ``OTEL_EXPORTER_OTLP_*`` or ``OTEL_SERVICE_NAME``
(``OTEL_SDK_DISABLED=true`` wins; ``OTEL_TRACES_EXPORTER=none`` / ``OTEL_METRICS_EXPORTER=none``
switch one signal off). With none of them set, nothing is imported and no observer is put on a
call's event bus: telemetry costs nothing. ``rejoinder serve`` always keeps metrics, for
``GET /metrics`` (Prometheus exposition format).

Caller content (transcripts, heard text, tool arguments) goes into spans only with the GenAI
conventions' switch ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``; audio never leaves
the machine.

Telemetry is an observer (:class:`~rejoinder.telemetry.observer.CallTelemetry` on the call's
:class:`~rejoinder.events.EventBus`): spans are built when the call ends, on the call clock, and
exported off the event loop by the SDK's batch processor. An OTLP endpoint that is down or slow
never slows or breaks a call: export failures are logged once and the spans are dropped.

Usage (the CLI does this)::

    obs = telemetry.observe_call(bus, call_id, clock, transport="harness")   # None when off
    ...
    if obs: obs.finish(timeline.records())
    telemetry.shutdown()   # at process exit: flush, bounded in time

Raises:
    MissingExtra: telemetry is switched on but the OpenTelemetry packages are not installed.
    ConfigError: an unsupported ``OTEL_EXPORTER_OTLP_PROTOCOL``.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:  # pragma: no cover
    from ..clock import Clock
    from ..events import EventBus
    from .hub import Telemetry
    from .observer import CallTelemetry

__all__ = ["otel_requested", "configure", "install", "active", "observe_call", "shutdown"]

from .env import _on, capture_content, otel_requested  # noqa: E402,F401 — re-exported

_UNSET: Any = object()
_active: Any = _UNSET
_lock = threading.Lock()
_atexit = False


def configure(*, prometheus: bool = False, environ: Mapping[str, str] | None = None) -> "Telemetry | None":
    """Set up this process's telemetry from the environment (idempotent); ``prometheus`` adds the
    Prometheus reader that ``GET /metrics`` serves. Returns None when nothing is switched on."""
    global _active
    with _lock:
        current = None if _active is _UNSET else _active
        if current is not None and (current.prometheus or not prometheus):
            return current
        if not prometheus and not otel_requested(environ):
            _active = None
            return None
        from .hub import Telemetry
        if current is not None:
            current.shutdown()
        _active = Telemetry.from_env(prometheus=prometheus, environ=environ)
        global _atexit
        if not _atexit:  # a bounded flush at exit: spans of the last call are not lost
            import atexit
            atexit.register(shutdown)
            _atexit = True
        return _active


def install(tel: "Telemetry | None") -> None:
    """Use ``tel`` for the calls that start from now on (None: telemetry off) — for benchmarks
    that compare on and off in one process, and for embedding with your own providers."""
    global _active
    with _lock:
        _active = tel


def active() -> "Telemetry | None":
    """The process's telemetry: configured on first use from the environment; None when off."""
    if _active is _UNSET:
        return configure()
    return _active


def observe_call(bus: "EventBus", call_id: str, clock: "Clock", *, transport: str) -> "CallTelemetry | None":
    """Put a telemetry observer on a new call's bus; None (and nothing subscribed) when off.
    ``transport`` is a bounded label: ``harness``, ``browser`` or ``twilio``."""
    tel = active()
    if tel is None:
        return None
    obs = tel.observe(call_id, clock, transport=transport)
    bus.subscribe(obs)
    return obs


def shutdown(timeout_s: float = 3.0) -> None:
    """Flush and stop exporting, waiting at most ``timeout_s`` (an unreachable endpoint must not
    hold the process). Safe to call when telemetry is off or already shut down."""
    global _active
    with _lock:
        tel, _active = (None if _active is _UNSET else _active), _UNSET
    if tel is not None:
        tel.shutdown(timeout_s)
