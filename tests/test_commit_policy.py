"""Preemptive generation: the LLM starts on a pause's transcript before the turn is decided over;
reversible tools may run early and are compensated when the transcript changes; irreversible
tools never run before the turn is final; nothing is spoken before the commit."""

from __future__ import annotations

import numpy as np
import pytest

from rejoinder.harness.callrun import run_call
from rejoinder.clock import VirtualClock

from fakes import ToolLog, heard, lookup, scripted_agent, silence, tone
from test_session import make_stack, turn


async def test_reversible_tool_runs_early_and_the_draft_is_adopted_when_transcript_is_unchanged():
    clock = VirtualClock()
    # the end-of-turn model is unsure: the turn ends on the 900 ms silence timeout, so the
    # tentative transcript is ready ~600 ms before the commit
    stack = make_stack(clock, ["Where is order 4217"], eot_prob=0.05, calls=lookup())
    log = ToolLog()
    res = await run_call([turn(tone(600))], stack, scripted_agent(log), clock=clock, tail_ms=1000)
    rec = res.turns[0]
    assert log.executed == ["Where is order 4217"]  # once, early, not again at commit
    assert log.compensated == []
    assert rec.tools[0]["start_ms"] < rec.stamps["eot_decided"] and rec.tools[0]["tentative"]
    assert len(stack.llm.requests) == 2  # the draft's two steps, adopted: no new LLM request
    assert stack.llm.requests[0].messages[-1].content == "Where is order 4217"
    # nothing was spoken before the commit; the held text plays right after it (the scripted
    # LLM writes its last token 10 ms after the commit, which ends the first sentence)
    assert 0 <= rec.stamps["first_speakable_text"] - rec.stamps["eot_decided"] <= 15
    segs = rec.segments()
    assert segs["tool_choice"] == segs["tools"] == segs["llm_ttft"] == 0  # hidden before the commit
    # after the silence timeout only the last token (10 ms), TTS (80 ms) and a frame remain
    assert 900 <= segs["endpointing"] <= 940
    assert rec.v2v_ms() - segs["endpointing"] <= 10 + 80 + 20
    assert heard(res) == ["Order 4217 has shipped and arrives Friday."]


async def test_reversible_tool_is_compensated_when_the_caller_goes_on():
    clock = VirtualClock()
    stack = make_stack(clock, ["Move it to Friday", "Move it to Friday wait Thursday"],
                       eot_prob=0.05, calls=lookup())
    log = ToolLog()
    pcm = np.concatenate([tone(500), silence(700), tone(500)])
    res = await run_call([turn(pcm)], stack, scripted_agent(log), clock=clock, tail_ms=1000)
    assert log.executed == ["Move it to Friday", "Move it to Friday wait Thursday"]
    assert log.compensated == ["Move it to Friday"]
    assert [r.turn_id for r in res.turns] == [1]
    tools = res.turns[0].tools
    assert tools[0]["tentative"] and tools[0].get("compensated")
    assert len(tools) == 2 and not tools[-1].get("compensated")  # the second run was adopted
    # the context holds only the final transcript and one tool round
    roles = [m.role for m in res.context]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert res.context[0].content == "Move it to Friday wait Thursday"
    assert len(heard(res)) == 1


async def test_irreversible_tool_never_runs_before_the_turn_is_final():
    clock = VirtualClock()
    stack = make_stack(clock, ["Cancel it"], eot_prob=0.05, calls=lookup("cancel_order"))
    log = ToolLog()
    res = await run_call([turn(tone(600))], stack, scripted_agent(log), clock=clock, tail_ms=1000)
    rec = res.turns[0]
    assert log.executed == ["Cancel it"]
    assert rec.tools[0]["start_ms"] >= rec.stamps["eot_decided"]
    assert not rec.tools[0]["tentative"]
    # the LLM had already decided the call before the commit: only the tool waited
    assert stack.llm.requests[0].messages[-1].content == "Cancel it"
    assert rec.segments()["tool_choice"] == 0


async def test_irreversible_tool_of_a_discarded_draft_never_runs():
    clock = VirtualClock()
    stack = make_stack(clock, ["Cancel it", "Cancel it no wait keep it"], eot_prob=0.05,
                       calls=lookup("cancel_order"))
    log = ToolLog()
    pcm = np.concatenate([tone(500), silence(700), tone(500)])
    await run_call([turn(pcm)], stack, scripted_agent(log), clock=clock, tail_ms=1000)
    assert log.executed == ["Cancel it no wait keep it"]  # the first draft's call never ran


async def test_preemption_can_be_switched_off():
    clock = VirtualClock()
    stack = make_stack(clock, ["Where is order 4217"], eot_prob=0.05, calls=lookup())
    log = ToolLog()
    res = await run_call([turn(tone(600))], stack, scripted_agent(log), clock=clock, tail_ms=1000,
                         preemptive=False)
    rec = res.turns[0]
    assert rec.tools[0]["start_ms"] > rec.stamps["eot_decided"]
    segs = rec.segments()
    assert segs["tool_choice"] == pytest.approx(200, abs=5) and segs["llm_ttft"] == pytest.approx(200, abs=5)
