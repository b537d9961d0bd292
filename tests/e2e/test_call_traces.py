"""The spans of a whole `rejoinder call` (real models, real time, a caller who barges in) at a
loopback OTLP/HTTP receiver: they nest call → turn → stage, each turn's stage spans cover its V2V
segments to within 1 ms, the one barge-in is one event, and no caller text leaves by default."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import rejoinder
from rejoinder.telemetry.receiver import OtlpReceiver
from spans_check import uncovered_ms

SRC = str(Path(rejoinder.__file__).parents[1])
SCENARIO = Path(rejoinder.__file__).parent / "harness" / "suites" / "reference" / "interruption_mid_answer.yaml"


@pytest.fixture(scope="module")
def traced_call(tmp_path_factory):
    pytest.importorskip("rejoinder.adapters.registry")
    out = tmp_path_factory.mktemp("traced")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    with OtlpReceiver() as rx:
        env.update(PYTHONPATH=SRC, OTEL_EXPORTER_OTLP_ENDPOINT=rx.endpoint,
                   OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf", OTEL_SERVICE_NAME="rejoinder-e2e")
        proc = subprocess.run([sys.executable, "-m", "rejoinder", "call", str(SCENARIO), "--json",
                               "--out", str(out)], capture_output=True, text=True, timeout=600, env=env)
        turns = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        # A native library sometimes aborts while the interpreter finalizes, after everything was
        # written and flushed ("terminate called without an active exception", also without
        # telemetry): that exit is not what this test is about; any other failure is.
        at_exit = proc.returncode == -6 and "terminate called without an active exception" in proc.stderr
        # 3: the call ran and an expectation of the scenario was not met (not this test's concern)
        assert proc.returncode in (0, 3) or (at_exit and turns), proc.stderr[-3000:]
        return turns, list(rx.spans), list(rx.metrics)


def test_spans_nest_call_turn_stage(traced_call):
    turns, spans, _ = traced_call
    assert len({s["trace_id"] for s in spans}) == 1
    assert {s["service"] for s in spans} == {"rejoinder-e2e"}
    by_id = {s["span_id"]: s for s in spans}
    [call] = [s for s in spans if s["name"] == "call"]
    assert call["parent_id"] is None
    turn_spans = [s for s in spans if s["name"] == "turn"]
    assert {t["attributes"]["rejoinder.turn.id"] for t in turn_spans} == {t["turn_id"] for t in turns}
    for s in spans:
        if s is call:
            continue
        parent = by_id[s["parent_id"]]
        assert parent["name"] == ("call" if s["name"] == "turn" else "turn")
        assert parent["start_ns"] <= s["start_ns"] <= s["end_ns"] <= parent["end_ns"]
    names = {s["name"].split()[0] for s in spans}
    assert names >= {"end_of_turn", "stt", "reply", "chat", "tts", "playout"}
    # one tool span per tool call the LLM made (it decides whether to call one)
    tool_calls = [e for s in turn_spans for e in s["events"] if e["name"] == "tool_start"]
    assert len([s for s in spans if s["name"].startswith("execute_tool ")]) == len(tool_calls)


def test_stage_spans_cover_each_v2v_segment_within_1ms(traced_call):
    turns, spans, _ = traced_call
    [call] = [s for s in spans if s["name"] == "call"]
    epoch = call["start_ns"]
    answered = [t for t in turns if t["v2v_ms"] is not None]
    assert len(answered) >= 2
    for t in answered:
        [span] = [s for s in spans if s["name"] == "turn" and s["attributes"]["rejoinder.turn.id"] == t["turn_id"]]
        assert span["attributes"]["rejoinder.v2v_ms"] == pytest.approx(t["v2v_ms"], abs=0.001)
        stages = [((s["start_ns"] - epoch) / 1e6, (s["end_ns"] - epoch) / 1e6) for s in spans
                  if s["parent_id"] == span["span_id"]]
        at = t["boundaries"]["user_speech_end"]
        assert abs(sum(t["segments"].values()) - t["v2v_ms"]) < 0.01
        for name, ms in t["segments"].items():
            assert uncovered_ms(stages, at, at + ms) <= 1.0, (t["turn_id"], name, at, ms)
            at += ms
        # the boundaries are events of the turn span at their call-clock moments (±1 µs rounding)
        events = {e["name"]: (e["time_ns"] - epoch) / 1e6 for e in span["events"]}
        for name in ("eot_decided", "transcript_final", "first_audio_out", "playback_start"):
            assert events[name] == pytest.approx(t["boundaries"][name], abs=0.01)


def test_one_barge_in_is_one_event_and_no_caller_text_leaves(traced_call):
    turns, spans, metrics = traced_call
    barge = [(s, e) for s in spans for e in s["events"] if e["name"] == "barge_in"]
    assert len(barge) == 1
    span, _ = barge[0]
    assert span["attributes"]["rejoinder.turn.status"] == "interrupted"
    assert [t["status"] for t in turns].count("interrupted") == 1
    strings = [v for s in spans for attrs in [s["attributes"]] + [e["attributes"] for e in s["events"]]
               for v in attrs.values() if isinstance(v, str)]
    keys = {k for s in spans for k in s["attributes"]}
    assert "rejoinder.transcript" not in keys and "gen_ai.tool.call.arguments" not in keys
    for said in ("other order", "4217", "5031"):  # what the caller said, and the tool arguments
        assert not any(said in v for v in strings), said
    chats = [s for s in spans if s["name"].startswith("chat ")]
    assert chats and all(c["attributes"]["gen_ai.provider.name"] == "llama.cpp" for c in chats)
    assert all(c["attributes"]["rejoinder.outcome"] in ("ok", "cancelled", "error") for c in chats)
    for c in chats:  # streamed tokens (or a tool call); a request cut before its first token
        first = [e for e in c["events"] if e["name"] == "llm_first_token"]  # streamed none
        out = c["attributes"]["gen_ai.usage.output_tokens"] + c["attributes"]["rejoinder.llm.tool_calls"]
        assert out >= (1 if first else 0)
    # metrics went out too: the turns' V2V histogram
    v2v = [m for m in metrics if m["name"] == "rejoinder.turn.v2v"]
    assert sum(m["count"] for m in v2v) == len([t for t in turns if t["v2v_ms"] is not None])
