"""Telemetry as an observer, on scripted timelines (virtual clock): the spans of a call nest
call → turn → stage, stage spans cover every critical-path segment, boundaries are span events on
the call clock, a barge-in is one event, caller content stays out unless switched on, metrics count
what happened — and with no OTEL_* variable nothing is imported or subscribed."""

from __future__ import annotations

import asyncio
import logging
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import rejoinder
from rejoinder import telemetry
from rejoinder.harness.callrun import run_call
from rejoinder.clock import VirtualClock
from rejoinder.timeline import SEGMENTS

from fakes import lookup, scripted_agent, tone
from spans_check import uncovered_ms
from test_session import make_stack, turn

SRC = str(Path(rejoinder.__file__).parents[1])
TESTS = str(Path(__file__).parent)


@pytest.fixture
def tel(monkeypatch):
    """Telemetry with in-memory span and metric readers, installed as the process's."""
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from rejoinder.telemetry.hub import Telemetry
    spans, metrics = InMemorySpanExporter(), InMemoryMetricReader()
    t = Telemetry.from_env(environ={}, span_exporter=spans, metric_readers=[metrics])
    t.spans, t.metrics = spans, metrics
    monkeypatch.setattr(telemetry, "_active", t)
    yield t
    t.shutdown(2.0)


def finished_spans(tel) -> list:
    tel.force_flush()
    return list(tel.spans.get_finished_spans())


def metric_points(tel) -> dict[str, list]:
    out: dict[str, list] = {}
    data = tel.metrics.get_metrics_data()
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                out.setdefault(m.name, []).extend(m.data.data_points)
    return out


def segment_intervals(rec) -> dict[str, tuple[float, float]]:
    """Each critical-path segment as [start, end] on the call clock."""
    t = rec.stamps["user_speech_end"]
    out = {}
    for name, ms in rec.segments().items():
        out[name] = (t, t + ms)
        t += ms
    return out


async def barge_in_call():
    clock = VirtualClock()
    many = ["Order 4217 has shipped,"] + [f" word{i}" for i in range(30)] + ["."]
    stack = make_stack(clock, ["Check order 4217.", "Stop."], tokens=many, calls=lookup())
    res = await run_call([turn(tone(600)), turn(tone(700), barge_in_ms=1000)], stack, scripted_agent(),
                         clock=clock, tail_ms=1500)
    assert res.error is None
    return res


async def test_spans_nest_cover_the_critical_path_and_show_one_barge_in(tel):
    res = await barge_in_call()
    spans = finished_spans(tel)
    by_id = {s.context.span_id: s for s in spans}
    [call] = [s for s in spans if s.name == "call"]
    assert call.parent is None and call.attributes["rejoinder.transport"] == "harness"
    assert call.attributes["rejoinder.call.id"] == res.call_id
    turns = sorted((s for s in spans if s.name == "turn"), key=lambda s: s.attributes["rejoinder.turn.id"])
    assert [t.attributes["rejoinder.turn.id"] for t in turns] == [1, 2]
    assert len({s.context.trace_id for s in spans}) == 1
    for t in turns:
        assert by_id[t.parent.span_id] is call
        assert call.start_time <= t.start_time <= t.end_time <= call.end_time
    stages = [s for s in spans if s.name not in ("call", "turn")]
    assert {s.name.split()[0] for s in stages} >= {"end_of_turn", "stt", "reply", "execute_tool", "chat",
                                                   "tts", "playout"}
    for s in stages:  # call → turn → stage, each inside its parent
        parent = by_id[s.parent.span_id]
        assert parent.name == "turn"
        assert parent.start_time <= s.start_time <= s.end_time <= parent.end_time
    epoch = call.start_time  # the call clock's t = 0
    for t, rec in zip(turns, res.turns):
        mine = [(int(s.start_time - epoch) / 1e6, int(s.end_time - epoch) / 1e6) for s in stages
                if s.parent.span_id == t.context.span_id]
        for name, (a, b) in segment_intervals(rec).items():
            assert uncovered_ms(mine, a, b) <= 1.0, (t.attributes["rejoinder.turn.id"], name)
        assert t.attributes["rejoinder.v2v_ms"] == rec.v2v_ms()
        for name, ms in rec.segments().items():
            assert t.attributes[f"rejoinder.segment.{name}_ms"] == ms
        # every boundary is an event at its own moment on the call clock
        events = {(e.name, round((e.timestamp - epoch) / 1e6, 3)) for e in t.events}
        for name, at in rec.stamps.items():
            assert (name, round(at, 3)) in events or name in ("user_speech_start", "user_speech_end")
    [barge] = [(t, e) for t in turns for e in t.events if e.name == "barge_in"]
    assert barge[0].attributes["rejoinder.turn.id"] == 1
    assert barge[0].attributes["rejoinder.turn.status"] == "interrupted"
    assert round((barge[1].timestamp - epoch) / 1e6, 3) == round(res.turns[0].stamps["interrupted_at"], 3)
    # end of turn lies exactly on the endpointing segment; TTS first audio inside a tts span
    for t, rec in zip(turns, res.turns):
        [eot] = [s for s in stages if s.name == "end_of_turn" and s.parent.span_id == t.context.span_id]
        a, b = segment_intervals(rec)["endpointing"]
        assert abs((eot.start_time - epoch) / 1e6 - a) < 0.01 and abs((eot.end_time - epoch) / 1e6 - b) < 0.01


async def test_genai_attributes_and_no_caller_content_by_default(tel):
    await barge_in_call()
    spans = finished_spans(tel)
    [chat, *_] = [s for s in spans if s.name.startswith("chat ")]
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.request.model"] == chat.name.split(" ", 1)[1]
    assert chat.attributes["gen_ai.usage.output_tokens"] > 0
    assert "gen_ai.request.max_tokens" in chat.attributes and "rejoinder.llm.ttft_ms" in chat.attributes
    [tool, *_] = [s for s in spans if s.name.startswith("execute_tool ")]
    assert tool.attributes["gen_ai.tool.name"] == "lookup_order"
    strings = [v for s in spans for attrs in [s.attributes] + [e.attributes for e in s.events]
               for v in attrs.values() if isinstance(v, str)]
    keys = {k for s in spans for k in s.attributes}
    assert "rejoinder.transcript" not in keys and "gen_ai.tool.call.arguments" not in keys
    for secret in ("4217", "Check order", "Stop."):
        assert not any(secret in v for v in strings), secret


async def test_content_flag_puts_transcripts_in_turn_spans(tel):
    tel.content = True
    await barge_in_call()
    turns = [s for s in finished_spans(tel) if s.name == "turn"]
    assert {t.attributes["rejoinder.transcript"] for t in turns} == {"Check order 4217.", "Stop."}


async def test_metrics_count_turns_barge_ins_and_calls(tel):
    res = await barge_in_call()
    points = metric_points(tel)
    v2v = {p.attributes["status"]: p for p in points["rejoinder.turn.v2v"]}
    assert set(v2v) == {"interrupted", "completed"}  # labelled by the turn's status
    answered = [r for r in res.turns if r.v2v_ms() is not None]
    assert sum(p.count for p in v2v.values()) == len(answered) == 2
    assert sum(p.sum for p in v2v.values()) == pytest.approx(sum(r.v2v_ms() for r in answered))
    segs = {p.attributes["segment"]: p for p in points["rejoinder.turn.segment"]}
    assert set(segs) <= set(SEGMENTS) and segs["endpointing"].count == 2
    assert sum(p.value for p in points["rejoinder.barge_ins"]) == 1
    assert [p.value for p in points["rejoinder.calls.active"]] == [0]
    assert sum(p.value for p in points["rejoinder.calls"]) == 1
    labels = {k for pts in points.values() for p in pts for k in p.attributes}
    assert labels <= {"transport", "status", "segment", "stage", "action", "recovered", "outcome"}


def test_nothing_is_imported_or_subscribed_without_otel_variables():
    script = textwrap.dedent(f"""
        import asyncio, os, sys
        sys.path[:0] = [{SRC!r}, {TESTS!r}]
        from rejoinder.events import EventBus
        from rejoinder.harness.callrun import run_call
        from rejoinder.clock import VirtualClock
        from fakes import scripted_agent, tone
        from test_session import make_stack, turn
        clock, bus = VirtualClock(), EventBus()
        res = asyncio.run(run_call([turn(tone(600))], make_stack(clock, ["Check order 4217."]),
                                   scripted_agent(), clock=clock, tail_ms=1500, bus=bus))
        assert res.turns[0].v2v_ms() is not None
        print(len(bus._observers), any(m.startswith("opentelemetry") for m in sys.modules))
    """)
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("OTEL_")}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env=env, cwd=TESTS)
    assert out.returncode == 0, out.stderr
    # the timeline, the transcript and the call's own listener only
    assert out.stdout.split() == ["3", "False"]


def test_switched_on_by_the_standard_variables():
    assert not telemetry.otel_requested({})
    assert telemetry.otel_requested({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert telemetry.otel_requested({"OTEL_SERVICE_NAME": "support-bot"})
    assert not telemetry.otel_requested({"OTEL_SERVICE_NAME": "x", "OTEL_SDK_DISABLED": "true"})
    from rejoinder.errors import ConfigError
    from rejoinder.telemetry.hub import Telemetry
    with pytest.raises(ConfigError, match="http/protobuf.*grpc"):
        Telemetry.from_env(environ={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})


@pytest.mark.parametrize("kind,protocol", [("refused", "http/protobuf"), ("silent", "http/protobuf"),
                                           ("refused", "grpc")])
async def test_an_unreachable_endpoint_never_breaks_a_call(kind, protocol, monkeypatch, caplog):
    """Connection refused, or a collector that accepts and never answers: calls measure the same,
    one warning is logged, and shutting down waits a bounded time."""
    from rejoinder.telemetry.hub import Telemetry
    sink = socket.socket()
    sink.bind(("127.0.0.1", 0))
    port = sink.getsockname()[1]
    if kind == "silent":
        sink.listen(16)  # the kernel accepts connections; nobody ever reads or answers
    else:
        sink.close()
    for k, v in {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}", "OTEL_EXPORTER_OTLP_TIMEOUT": "2",
                 "OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_EXPORTER_OTLP_PROTOCOL": protocol}.items():
        monkeypatch.setenv(k, v)  # the official exporters read the standard variables themselves
    t = Telemetry.from_env()
    monkeypatch.setattr(telemetry, "_active", t)
    caplog.set_level(logging.WARNING, logger="rejoinder.telemetry")
    baseline = None
    try:
        for _ in range(3):
            res = await barge_in_call()
            got = [(r.status, r.v2v_ms(), r.segments()) for r in res.turns]
            baseline = baseline or got
            assert got == baseline  # same measurements, call after call
        deadline = time.monotonic() + 15
        while not t.export_failures.failures and time.monotonic() < deadline:
            await asyncio.sleep(0.05)  # the batch thread tries to export meanwhile
        t0 = time.monotonic()
        t.shutdown(1.0)
        assert time.monotonic() - t0 < 2.5  # bounded, whatever the endpoint does
    finally:
        sink.close()
    assert t.export_failures.failures >= 1
    warnings = [r for r in caplog.records if r.name == "rejoinder.telemetry" and str(port) in r.getMessage()]
    assert len(warnings) == 1 and "calls go on" in warnings[0].getMessage()
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" in warnings[0].getMessage()


async def test_a_failed_tool_is_an_error_span_without_its_message(tel):
    clock = VirtualClock()
    stack = make_stack(clock, ["Check order 4217."], calls=lookup("no_such_tool"))
    await run_call([turn(tone(600))], stack, scripted_agent(), clock=clock, tail_ms=1500)
    [tool] = [s for s in finished_spans(tel) if s.name.startswith("execute_tool ")]
    assert tool.name == "execute_tool no_such_tool"
    assert tool.status.status_code.name == "ERROR" and tool.status.description == "the tool failed"


async def test_bench_emits_one_trace_per_call(tel, tmp_path):
    import sys
    sys.path.insert(0, str(Path(__file__).parent / "harness"))
    from harness_fakes import FakeAgent, tone_suite
    from rejoinder.harness.bench import BenchOptions, run_bench
    from rejoinder.harness.store import open_store
    from rejoinder.harness.suite import load_suite
    _, scenarios = load_suite(str(tone_suite(tmp_path / "suite")))
    with open_store(tmp_path / "runs.sqlite") as store:
        run_id = store.begin_run({}, suite="t")
        await run_bench(FakeAgent(), scenarios, store, run_id, BenchOptions(levels=[1, 2]))
        n_calls = len(store.calls(run_id))
    calls = [s for s in finished_spans(tel) if s.name == "call"]
    assert len(calls) == n_calls == 6
    assert len({s.context.trace_id for s in calls}) == n_calls
    assert sum(p.value for p in metric_points(tel)["rejoinder.calls"]) == n_calls
