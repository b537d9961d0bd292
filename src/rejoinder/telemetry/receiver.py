"""A tiny loopback OTLP/HTTP receiver (protobuf): see what rejoinder exports, without a collector.

For tests, benchmarks and a first look. It accepts ``POST /v1/traces`` and ``POST /v1/metrics``
(OTLP/HTTP with protobuf bodies, gzip or not), decodes them with the ``opentelemetry-proto``
messages and keeps every span as a flat dict::

    python -m rejoinder.telemetry.receiver --port 4318 [--out spans.jsonl]
    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 rejoinder call caller.wav

It listens on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, IO


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind) if kind else None


def _attrs(kvs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in kvs}


def spans_of(body: bytes) -> list[dict[str, Any]]:
    """The spans of one ``ExportTraceServiceRequest`` as dicts: name, ids (hex), parent, start/end
    (Unix ns), attributes, events [(name, time ns, attributes)], status, service."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    req = ExportTraceServiceRequest()
    req.ParseFromString(body)
    out = []
    for rs in req.resource_spans:
        resource = _attrs(rs.resource.attributes)
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append({
                    "name": s.name, "trace_id": s.trace_id.hex(), "span_id": s.span_id.hex(),
                    "parent_id": s.parent_span_id.hex() or None,
                    "start_ns": s.start_time_unix_nano, "end_ns": s.end_time_unix_nano,
                    "attributes": _attrs(s.attributes),
                    "events": [{"name": e.name, "time_ns": e.time_unix_nano, "attributes": _attrs(e.attributes)}
                               for e in s.events],
                    "status": {"code": int(s.status.code), "message": s.status.message},
                    "service": resource.get("service.name"), "scope": ss.scope.name})
    return out


def metrics_of(body: bytes) -> list[dict[str, Any]]:
    """The metric data points of one ``ExportMetricsServiceRequest``: name, kind, attributes and
    value (sum/gauge) or count and sum (histogram)."""
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
    req = ExportMetricsServiceRequest()
    req.ParseFromString(body)
    out = []
    for rm in req.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                kind = m.WhichOneof("data")
                for p in getattr(m, kind).data_points:
                    row = {"name": m.name, "kind": kind, "unit": m.unit, "attributes": _attrs(p.attributes)}
                    if kind == "histogram":
                        row.update(count=p.count, sum=p.sum)
                    else:
                        row["value"] = p.as_double if p.WhichOneof("value") == "as_double" else p.as_int
                    out.append(row)
    return out


class OtlpReceiver:
    """OTLP/HTTP receiver on 127.0.0.1 in a background thread. ``spans`` / ``metrics`` fill as
    exports arrive; ``out`` (optional) gets one JSON line per span."""

    def __init__(self, port: int = 0, out: IO[str] | None = None) -> None:
        self.spans: list[dict[str, Any]] = []
        self.metrics: list[dict[str, Any]] = []
        self.requests = 0
        self.out = out
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 — http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                try:
                    if self.path.endswith("/v1/traces"):
                        receiver._add_spans(spans_of(body))
                    elif self.path.endswith("/v1/metrics"):
                        with receiver.lock:
                            receiver.metrics.extend(metrics_of(body))
                    else:
                        self.send_error(404)
                        return
                except Exception as exc:  # noqa: BLE001 — a bad body is the client's problem
                    self.send_error(400, str(exc)[:200])
                    return
                with receiver.lock:
                    receiver.requests += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, name="otlp-receiver", daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _add_spans(self, spans: list[dict[str, Any]]) -> None:
        with self.lock:
            self.spans.extend(spans)
            if self.out is not None:
                for s in spans:
                    self.out.write(json.dumps(s) + "\n")
                self.out.flush()

    def __enter__(self) -> "OtlpReceiver":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def main(argv: list[str] | None = None) -> None:  # pragma: no cover - a dev tool
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=4318)
    ap.add_argument("--out", type=Path, help="write one JSON line per span here")
    args = ap.parse_args(argv)
    fh = open(args.out, "a", encoding="utf-8") if args.out else None
    with OtlpReceiver(args.port, fh) as rx:
        print(f"listening on {rx.endpoint} (OTLP/HTTP protobuf)", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            print(f"{len(rx.spans)} spans, {len(rx.metrics)} metric points", file=sys.stderr)


if __name__ == "__main__":  # pragma: no cover
    main()
