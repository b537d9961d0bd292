"""Tentative transcripts: reversible tools may run early and are compensated; irreversible never."""

from __future__ import annotations

import numpy as np

from rejoinder.callrun import run_call
from rejoinder.clock import VirtualClock

from fakes import ScriptedApp, silence, tone
from test_session import make_stack, turn


async def test_reversible_tool_runs_early_and_is_reused_when_transcript_is_unchanged():
    clock = VirtualClock()
    # the end-of-turn model is unsure: the turn ends on the 900 ms silence timeout, so the
    # tentative transcript is ready ~600 ms before the commit
    stack = make_stack(clock, ["Where is order 4217"], eot_prob=0.05)
    app = ScriptedApp()
    res = await run_call([turn(tone(600))], stack, app, clock=clock, tail_ms=1000)
    rec = res.turns[0]
    assert app.executed == ["Where is order 4217"]  # once, early, not again at commit
    assert app.compensated == []
    assert app.planned == ["Where is order 4217"]
    assert rec.tools[0]["start_ms"] < rec.stamps["eot_decided"]


async def test_reversible_tool_is_compensated_when_the_caller_goes_on():
    clock = VirtualClock()
    stack = make_stack(clock, ["Move it to Friday", "Move it to Friday wait Thursday"], eot_prob=0.05)
    app = ScriptedApp()
    pcm = np.concatenate([tone(500), silence(700), tone(500)])
    res = await run_call([turn(pcm)], stack, app, clock=clock, tail_ms=1000)
    assert app.executed[0] == "Move it to Friday"
    assert app.compensated == ["Move it to Friday"]
    assert app.planned == ["Move it to Friday wait Thursday"]
    assert app.executed[-1] == "Move it to Friday wait Thursday"
    assert [r.turn_id for r in res.turns] == [1]
    tools = res.turns[0].tools
    assert tools[0]["tentative"] and tools[0].get("compensated")
    assert len(tools) == 2 and not tools[-1].get("compensated")  # the second run was adopted


async def test_irreversible_tool_never_runs_before_the_turn_is_final():
    clock = VirtualClock()
    stack = make_stack(clock, ["Cancel it"], eot_prob=0.05)
    app = ScriptedApp()
    app.tool = "cancel_order"
    res = await run_call([turn(tone(600))], stack, app, clock=clock, tail_ms=1000)
    rec = res.turns[0]
    assert app.executed == ["Cancel it"]
    assert rec.tools[0]["start_ms"] >= rec.stamps["eot_decided"]
