"""A rejoinder server as a remote target, over both its protocols: the call reports (authenticated),
its internal boundaries joined onto the caller's clock, its tool calls checked by the scenario —
and Whisper on the audio the caller actually heard."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "server"))

from fakes import lookup  # noqa: E402
from helpers import TOKEN, FakeProvider, start_server  # noqa: E402
from rejoinder.harness.expect import evaluate  # noqa: E402
from rejoinder.harness.remote.target import RemoteTarget, parse_target  # noqa: E402
from rejoinder.scenario import CallerTurn, Expect, Scenario, Segment, ToolExpect  # noqa: E402

from remote_helpers import NoTranscript, tone_turns  # noqa: E402


class ToolProvider(FakeProvider):
    """Its LLM looks up order 4217 on every request, then answers."""

    def new_stack(self):
        stack = super().new_stack()
        stack.llm.calls = lookup()
        return stack


@pytest.fixture(scope="module")
def server():
    srv = start_server(ToolProvider())
    yield srv
    srv.__exit__(None, None, None)


def test_call_reports_need_the_token(server):
    base = f"http://{server.base}"
    assert httpx.get(f"{base}/calls/nope", timeout=5).status_code == 401
    assert httpx.get(f"{base}/info", headers={"Authorization": "Bearer wrong-token"}, timeout=5).status_code == 401
    r = httpx.get(f"{base}/calls/nope", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5)
    assert r.status_code == 404 and "no call 'nope'" in r.json()["detail"]
    info = httpx.get(f"{base}/info", params={"token": TOKEN}, timeout=5).json()
    assert info["server"] == "rejoinder serve" and info["call_reports"] is True


@pytest.mark.parametrize("path", ["/ws", "/twilio"])
async def test_a_rejoinder_target_reports_its_internals_and_tools(server, path):
    target = RemoteTarget(parse_target(f"ws://{server.base}{path}", token=TOKEN), transcriber=NoTranscript())
    await target.probe()
    assert target.info["server"] == "rejoinder serve"
    turns = tone_turns(1)
    res = await target.call(turns, caller_phone="+15550101", tail_ms=800)
    assert res.error is None, res.error
    assert res.observable == {"tools"}                 # the fake application has no database
    [rec] = [r for r in res.turns if r.v2v_ms() is not None]
    segs = rec.segments()
    # the target's own moments, moved onto the caller's clock, split the wait
    assert {"endpointing", "transcription", "tool_choice", "tools", "llm_ttft", "tts_ttfb", "arrival",
            "playout"} <= set(segs)
    assert sum(segs.values()) == pytest.approx(rec.v2v_ms(), abs=0.01)
    # its first audio frame left before it reached the caller's socket (the clock mapping is sound)
    assert rec.stamps["first_audio_out"] <= rec.stamps["first_audio_in"] + 5.0
    assert segs["playout"] == pytest.approx(60.0, abs=0.1)
    assert [t["name"] for t in rec.tools] == ["lookup_order"] and rec.tools[0]["args"]["order_id"] == "4217"
    assert res.target["self_reported"][0]["v2v_ms"] is not None
    sc = Scenario(name="x", turns=[CallerTurn(audio=[Segment(silence_ms=1)], expect=Expect(
        tools=[ToolExpect(name="lookup_order", args={"order_id": "4217"})]))], final_db={"orders": {"1": {"a": 1}}})
    verdict = evaluate(sc, res, res.caller.truth, res.caller.cues, owned=res.owners, observable=res.observable)
    assert verdict.success and verdict.failures == []
    assert verdict.skipped == ["final_db (the agent does not report its final state)"]


async def test_whisper_scores_the_words_the_caller_heard(tmp_path):
    """Real speech back from the echo target over Media Streams (μ-law 8 kHz), transcribed by the
    embedded Whisper in its worker process."""
    from rejoinder.harness.remote.echo import load_reply, serve_echo
    from rejoinder.harness.remote.transcribe import Transcriber

    reply = load_reply("/usr/share/asterisk/sounds/en/auth-thankyou.wav")
    stt = Transcriber(nice=0)
    try:
        async with serve_echo(delay_ms=500, hang_ms=300, reply=reply) as echo:
            target = RemoteTarget(parse_target(f"ws://127.0.0.1:{echo.port}/twilio"), transcriber=stt)
            await target.warmup()
            res = await target.call(tone_turns(1), tail_ms=600, out_dir=tmp_path)
    finally:
        stt.close()
    assert res.error is None
    [rec] = res.turns
    assert "thank you" in rec.heard_text.lower(), rec.heard_text
    assert (tmp_path / "call.wav").exists() and "agent: " in (tmp_path / "transcript.txt").read_text()
