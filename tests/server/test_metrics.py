"""``GET /metrics`` of a running server (Prometheus exposition, prometheus_client): after two
browser-protocol calls the V2V histogram has counted their turns and the in-progress gauge is back
at 0; labels are bounded (no call ids, no text). First on the real embedded stack, then fast with
scripted models."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import BrowserLikeClient, FakeProvider, ServerThread, TOKEN, health, silence, tone

ALLOWED_LABELS = {"transport", "status", "segment", "stage", "action", "recovered", "outcome", "le",
                  # prometheus_client's own process/platform/gc collectors
                  "generation", "implementation", "major", "minor", "patchlevel", "version", "job",
                  "instance", "otel_scope_name", "otel_scope_version", "otel_scope_schema_url",
                  "service_name", "service_version", "service_instance_id", "telemetry_sdk_language", "telemetry_sdk_name",
                  "telemetry_sdk_version"}


def scrape(srv: ServerThread) -> dict[str, list]:
    """{sample name: [(labels, value)]} of one GET /metrics."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families
    r = httpx.get(f"http://{srv.base}/metrics", timeout=10)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(r.text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def total(samples: dict[str, list], name: str, **match: str) -> float:
    return sum(v for labels, v in samples.get(name, []) if all(labels.get(k) == x for k, x in match.items()))


def check_labels(samples: dict[str, list], call_ids: list[str]) -> None:
    for name, rows in samples.items():
        for labels, _ in rows:
            assert set(labels) <= ALLOWED_LABELS, (name, labels)
            for value in labels.values():
                assert not any(c in value for c in call_ids) and len(value) < 64, (name, labels)


async def two_calls_then_scrape(srv: ServerThread, audio: np.ndarray, tail_ms: float):
    before = scrape(srv)
    clients = []
    for _ in range(2):
        client = BrowserLikeClient(f"ws://{srv.base}/ws")
        await client.call(audio, tail_ms=tail_ms)
        assert client.close_code == 1000
        clients.append(client)
    return before, scrape(srv), clients


async def test_metrics_after_two_browser_calls_real_stack(tmp_path):
    from test_browser_e2e import _real_provider
    from helpers import speech_wav
    import soundfile as sf
    from rejoinder.server.app import ServerConfig, create_app
    # after the agent's greeting (≈ 4 s), the caller reads an order number
    script = [(6000, ["digits/4", "digits/2", "digits/1", "digits/7"])]
    speech_wav(tmp_path / "caller.wav", script=script, end_ms=11000)
    audio, _ = sf.read(str(tmp_path / "caller.wav"), dtype="int16")
    app = create_app(ServerConfig(token=TOKEN, store_dir=tmp_path / "calls", max_calls=1), _real_provider())
    with ServerThread(app) as srv:
        import asyncio
        import time
        deadline = time.monotonic() + 600  # loading all models takes minutes on a loaded box
        while health(srv)["models"] == "loading" and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert health(srv)["models"] == "ready"
        before, after, _ = await two_calls_then_scrape(srv, audio, tail_ms=8000)
    import json
    turns = [t for p in (tmp_path / "calls").iterdir() for t in json.loads((p / "call.json").read_text())["turns"]]
    assert len([t for t in turns if t["v2v_ms"] is not None]) >= 2, turns
    name = "rejoinder_turn_v2v_milliseconds_count"
    assert total(after, name, transport="browser") - total(before, name, transport="browser") >= 2
    assert total(after, "rejoinder_calls_active", transport="browser") == 0
    assert total(after, "rejoinder_calls_total", transport="browser") - \
        total(before, "rejoinder_calls_total", transport="browser") == 2
    loaded = {labels["stage"]: v for labels, v in after["rejoinder_models_loaded"]}
    assert {k for k, v in loaded.items() if v >= 1} >= {"vad", "turn", "stt", "llm", "tts"}
    assert after["rejoinder_event_loop_lag_milliseconds"][0][1] >= 0
    segs = {labels["segment"] for labels, _ in after["rejoinder_turn_segment_milliseconds_count"]}
    assert {"endpointing", "transcription", "tts_ttfb"} <= segs
    check_labels(after, [])


async def test_metrics_after_two_browser_calls_scripted(tmp_path):
    from rejoinder.server.app import ServerConfig, create_app
    app = create_app(ServerConfig(token=TOKEN, store_dir=tmp_path), FakeProvider())
    with ServerThread(app) as srv:
        before, after, clients = await two_calls_then_scrape(
            srv, np.concatenate([silence(300), tone(800)]), tail_ms=3500)
        assert health(srv)["calls"] == 0
    name = "rejoinder_turn_v2v_milliseconds_count"
    assert total(after, name, transport="browser") - total(before, name, transport="browser") == 2
    assert total(after, "rejoinder_calls_active", transport="browser") == 0
    buckets = [(float(labels["le"]), v) for labels, v in after["rejoinder_turn_v2v_milliseconds_bucket"]
               if labels["transport"] == "browser"]
    assert any(le == 500.0 for le, _ in buckets)  # latency buckets, not the SDK's defaults
    call_ids = [p.name.rsplit("-", 1)[-1] for p in tmp_path.iterdir() if p.is_dir()]
    assert len(call_ids) >= 2
    check_labels(after, call_ids)


@pytest.mark.parametrize("path", ["/metrics"])
def test_metrics_needs_no_token_and_has_no_call_data(tmp_path, path):
    import httpx
    from rejoinder.server.app import ServerConfig, create_app
    with ServerThread(create_app(ServerConfig(token=TOKEN), FakeProvider())) as srv:
        r = httpx.get(f"http://{srv.base}{path}", timeout=10)
    assert r.status_code == 200 and "rejoinder_calls_active" in r.text


async def test_serve_emits_traces_of_its_calls(tmp_path):
    """With telemetry on, each socket's call is a trace (transport ``browser``), like `call`."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from rejoinder import telemetry
    from rejoinder.server.app import ServerConfig, create_app
    from rejoinder.telemetry.hub import Telemetry
    telemetry.shutdown()
    spans = InMemorySpanExporter()
    tel = Telemetry.from_env(environ={}, prometheus=True, span_exporter=spans)
    telemetry.install(tel)
    try:
        app = create_app(ServerConfig(token=TOKEN, store_dir=tmp_path), FakeProvider())
        with ServerThread(app) as srv:
            client = BrowserLikeClient(f"ws://{srv.base}/ws")
            await client.call(np.concatenate([silence(300), tone(800)]), tail_ms=3500)
        tel.force_flush()
        got = spans.get_finished_spans()
    finally:
        telemetry.shutdown()
    [call] = [s for s in got if s.name == "call"]
    assert call.attributes["rejoinder.transport"] == "browser"
    turns = [s for s in got if s.name == "turn"]
    assert turns and all(s.parent.span_id == call.context.span_id for s in turns)
    assert any(s.attributes.get("rejoinder.v2v_ms") for s in turns)
