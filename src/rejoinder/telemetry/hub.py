"""The process's OpenTelemetry providers: OTLP exporters from the standard variables, the
Prometheus reader for ``rejoinder serve``, and a shutdown that never waits long.

Exporters are the official ones (``opentelemetry-exporter-otlp-proto-http`` / ``-grpc``), chosen by
``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` / ``OTEL_EXPORTER_OTLP_PROTOCOL`` (``http/protobuf``, the
specification's default, or ``grpc``); they read the endpoint, headers, timeout and certificates
from the same variables themselves. Spans leave through a ``BatchSpanProcessor`` (a background
thread): nothing is exported on the event loop.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any, Mapping, Sequence

from ..errors import ConfigError, MissingExtra
from .env import capture_content, otel_requested

log = logging.getLogger("rejoinder.telemetry")

# latency histograms (ms): resolution where voice agents live (100 ms – 2 s), up to 10 s
LATENCY_BUCKETS_MS = (0, 10, 25, 50, 75, 100, 150, 200, 250, 300, 400, 500, 600, 700, 800, 900,
                      1000, 1250, 1500, 2000, 2500, 3000, 4000, 5000, 7500, 10000)
_PROTOCOLS = ("http/protobuf", "grpc")
_OTLP_LOGGERS = ("opentelemetry.exporter.otlp", "opentelemetry.sdk.trace.export",
                 "opentelemetry.sdk.metrics._internal.export")


def _protocol(env: Mapping[str, str], signal: str) -> str:
    value = (env.get(f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
             or "http/protobuf").strip().lower()
    if value not in _PROTOCOLS:
        raise ConfigError(f"OTEL_EXPORTER_OTLP_PROTOCOL={value!r} is not supported; set it to "
                          "'http/protobuf' (port 4318) or 'grpc' (port 4317)")
    return value


def _endpoint(env: Mapping[str, str], signal: str) -> str:
    return (env.get(f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
            or "the default endpoint (localhost)")


class _LogOnce:
    """Logs the first export failure (traces or metrics), then stays quiet: the calls go on."""

    def __init__(self) -> None:
        self.failures = 0
        self._lock = threading.Lock()

    def failed(self, signal: str, endpoint: str, why: str) -> None:
        with self._lock:
            self.failures += 1
            first = self.failures == 1
        if first:
            log.warning("OpenTelemetry export of %s to %s failed (%s); calls go on and telemetry that "
                        "cannot be sent is dropped; check OTEL_EXPORTER_OTLP_ENDPOINT and that the "
                        "collector is up (this is logged once)", signal, endpoint, why)


def _guarded(export: Any, ok: Any, failure: Any, once: _LogOnce, signal: str, where: str) -> Any:
    """Run one export; any failure (raised or returned) is logged once and reported as
    ``failure`` — a broken exporter must never surface in a call."""
    try:
        result = export()
    except Exception as exc:  # noqa: BLE001
        once.failed(signal, where, repr(exc))
        return failure
    if result is not ok:
        once.failed(signal, where, "the endpoint did not accept them")
    return result


def _span_exporter(env: Mapping[str, str], once: _LogOnce) -> Any:
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
    if _protocol(env, "TRACES") == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    inner = OTLPSpanExporter()
    where = _endpoint(env, "TRACES")

    class QuietSpanExporter(SpanExporter):
        failures = once

        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            return _guarded(lambda: inner.export(spans), SpanExportResult.SUCCESS,
                            SpanExportResult.FAILURE, once, "spans", where)

        def shutdown(self) -> None:
            inner.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return inner.force_flush(timeout_millis)

    return QuietSpanExporter()


def _metric_exporter(env: Mapping[str, str], once: _LogOnce) -> Any:
    from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult
    if _protocol(env, "METRICS") == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
    else:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    inner = OTLPMetricExporter()
    where = _endpoint(env, "METRICS")

    class QuietMetricExporter(MetricExporter):
        failures = once

        def __init__(self) -> None:
            super().__init__(preferred_temporality=inner._preferred_temporality,
                             preferred_aggregation=inner._preferred_aggregation)

        def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kw: Any) -> MetricExportResult:
            return _guarded(lambda: inner.export(metrics_data, timeout_millis=timeout_millis, **kw),
                            MetricExportResult.SUCCESS, MetricExportResult.FAILURE, once, "metrics", where)

        def force_flush(self, timeout_millis: float = 10_000) -> bool:
            return inner.force_flush(timeout_millis)

        def shutdown(self, timeout_millis: float = 30_000, **kw: Any) -> None:
            inner.shutdown(timeout_millis=timeout_millis, **kw)

    return QuietMetricExporter()


class Telemetry:
    """Tracer and meter of this process. Build with :meth:`from_env`."""

    def __init__(self, *, tracer_provider: Any, meter_provider: Any, prometheus_reader: Any,
                 content: bool, span_exporter: Any = None) -> None:
        from .metrics import Instruments
        self.tracer_provider = tracer_provider
        self.tracer = tracer_provider.get_tracer("rejoinder") if tracer_provider else None
        self.meter_provider = meter_provider
        self.prometheus_reader = prometheus_reader
        self.prometheus = prometheus_reader is not None
        self.span_exporter = span_exporter
        self.content = content
        self.instruments = Instruments(meter_provider.get_meter("rejoinder")) if meter_provider else None

    @classmethod
    def from_env(cls, *, prometheus: bool = False, environ: Mapping[str, str] | None = None,
                 span_exporter: Any = None, metric_readers: Sequence[Any] = ()) -> "Telemetry":
        """Providers for what the environment switches on (plus Prometheus when asked).
        ``environ`` decides what is switched on (default ``os.environ``); the OTLP exporters read
        endpoint, headers and timeout from ``os.environ`` themselves. ``span_exporter`` /
        ``metric_readers`` replace the OTLP ones (tests)."""
        env = dict(os.environ if environ is None else environ)
        try:
            from opentelemetry.sdk.metrics import Histogram, MeterProvider
            from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError as exc:
            raise MissingExtra("the OpenTelemetry SDK (telemetry is switched on by OTEL_* variables)",
                               "opentelemetry-sdk opentelemetry-exporter-otlp") from exc
        from importlib.metadata import PackageNotFoundError, version
        try:  # not `from .. import __version__`: the package imports this module back
            __version__ = version("rejoinder")
        except PackageNotFoundError:
            __version__ = "unknown"
        for name in _OTLP_LOGGERS:  # one warning of ours instead of one per failed batch
            logging.getLogger(name).setLevel(logging.CRITICAL)
        attrs = {"service.version": __version__}
        if not env.get("OTEL_SERVICE_NAME"):
            attrs["service.name"] = "rejoinder"
        resource = Resource.create(attrs)
        otel = otel_requested(env)
        once = _LogOnce()
        tracer_provider = None
        if span_exporter is not None or (otel and env.get("OTEL_TRACES_EXPORTER", "otlp") != "none"):
            tracer_provider = TracerProvider(resource=resource, shutdown_on_exit=False)
            tracer_provider.add_span_processor(BatchSpanProcessor(span_exporter or _span_exporter(env, once)))
        readers = list(metric_readers)
        if otel and env.get("OTEL_METRICS_EXPORTER", "otlp") != "none" and not metric_readers:
            from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
            readers.append(PeriodicExportingMetricReader(_metric_exporter(env, once)))
        prom = None
        if prometheus:
            try:
                from opentelemetry.exporter.prometheus import PrometheusMetricReader
            except ImportError as exc:
                raise MissingExtra("the OpenTelemetry Prometheus exporter",
                                   "opentelemetry-exporter-prometheus prometheus-client") from exc
            prom = PrometheusMetricReader()
            readers.append(prom)
        meter_provider = None
        if readers:
            view = View(instrument_type=Histogram, instrument_name="rejoinder.*",
                        aggregation=ExplicitBucketHistogramAggregation(LATENCY_BUCKETS_MS))
            meter_provider = MeterProvider(metric_readers=readers, resource=resource, views=[view],
                                           shutdown_on_exit=False)
        tel = cls(tracer_provider=tracer_provider, meter_provider=meter_provider,
                  prometheus_reader=prom, content=capture_content(env), span_exporter=span_exporter)
        tel.export_failures = once
        return tel

    def observe(self, call_id: str, clock: Any, *, transport: str):
        from .observer import CallTelemetry
        return CallTelemetry(self, call_id, clock, transport)

    def force_flush(self, timeout_s: float = 5.0) -> None:
        """Export what is pending now (benchmarks, tests)."""
        for p in (self.tracer_provider, self.meter_provider):
            if p is not None:
                p.force_flush(int(timeout_s * 1000))

    def shutdown(self, timeout_s: float = 3.0) -> None:
        """Flush and stop in a helper thread, waiting at most ``timeout_s``."""
        def stop() -> None:
            for p in (self.tracer_provider, self.meter_provider):
                if p is not None:
                    try:
                        p.shutdown()
                    except Exception:  # noqa: BLE001 — shutting down must not raise
                        log.debug("telemetry shutdown failed", exc_info=True)
        worker = threading.Thread(target=stop, name="rejoinder-telemetry-shutdown", daemon=True)
        worker.start()
        worker.join(timeout_s)
        if self.prometheus_reader is not None:
            from prometheus_client import REGISTRY
            collector = getattr(self.prometheus_reader, "_collector", None)
            if collector is not None:
                try:
                    REGISTRY.unregister(collector)
                except KeyError:
                    pass
