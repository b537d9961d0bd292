"""A reply still playing when the call ends is recorded as cut there (what the caller heard of
it), not lost. Scripted LLM and TTS on a virtual clock."""

from __future__ import annotations

from rejoinder import Agent
from rejoinder.clock import VirtualClock
from rejoinder.events import AgentSpeech, EventBus
from rejoinder.harness.callrun import run_call

from fakes import tone
from test_run_dry import SlowLLM
from test_session import turn
from test_steps import events_of, stack


async def test_the_reply_on_the_line_at_hang_up_is_reported_as_heard_so_far():
    clock, bus = VirtualClock(), EventBus()
    speech = events_of(bus, AgentSpeech)
    # tokens every 250 ms, 200 ms of audio per word: the reply is still playing when the call
    # reaches max_ms
    res = await run_call([turn(tone(600))], stack(clock, ["Where is my order?"], SlowLLM(clock)),
                         Agent("You are a test agent."), clock=clock, tail_ms=500, max_ms=4000.0,
                         bus=bus)
    assert res.error is None
    [said] = [e for e in speech if e.turn_id == 1]
    assert said.interrupted
    heard, full = said.heard_text.split(), said.full_text.split()
    assert 0 < len(heard) < len(full) and heard == full[:len(heard)]
    assert heard[:3] == ["Thanks", "for", "waiting."]
