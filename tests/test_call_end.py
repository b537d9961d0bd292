"""A reply still playing when the call ends is recorded with what the caller heard of it
(``AgentSpeech.call_ended``), not lost, and is not counted as a barge-in. Scripted LLM and TTS
on a virtual clock."""

from __future__ import annotations

from rejoinder import Agent
from rejoinder.clock import VirtualClock
from rejoinder.events import AgentSpeech, EventBus
from rejoinder.harness.callrun import run_call
from rejoinder.timeline import CallTranscript, Timeline

from fakes import tone
from test_run_dry import SlowLLM
from test_session import turn
from test_steps import events_of, stack


async def _call(max_ms: float, tail_ms: float = 500):
    clock, bus = VirtualClock(), EventBus()
    speech = events_of(bus, AgentSpeech)
    tl, lines = Timeline(), CallTranscript()
    bus.subscribe(tl)
    bus.subscribe(lines)
    # tokens every 250 ms, 200 ms of audio per word: at 4 s the reply is still playing
    res = await run_call([turn(tone(600))], stack(clock, ["Where is my order?"], SlowLLM(clock)),
                         Agent("You are a test agent."), clock=clock, tail_ms=tail_ms, max_ms=max_ms,
                         bus=bus)
    return res, [e for e in speech if e.turn_id == 1], tl, lines


async def test_the_reply_on_the_line_at_call_end_is_reported_as_heard_so_far():
    res, said, tl, lines = await _call(4000.0)
    assert res.error is None
    [said] = said
    assert said.interrupted and said.call_ended
    heard, full = said.heard_text.split(), said.full_text.split()
    assert 0 < len(heard) < len(full) and heard == full[:len(heard)]
    assert heard[:3] == ["Thanks", "for", "waiting."]
    rec = tl.turns[1]
    assert rec.heard_text == said.heard_text
    assert rec.status != "interrupted"  # no one barged in
    assert "interrupted_at" not in rec.stamps
    assert lines.lines[-1] == ("agent", said.heard_text + " [call ended]")


async def test_a_reply_that_finished_is_not_reported_twice():
    res, said, _, _ = await _call(60000.0, tail_ms=30000)
    assert res.error is None
    assert [s.call_ended for s in said] == [False] and not said[0].interrupted
