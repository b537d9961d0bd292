"""The tool gate's decision on the call clock: the LLM watchdog treats it as progress (the
first-token limit starts again after it), timed_llm stamps it as ``tool_decided`` without
counting it as the first token, and the timeline puts a talk decision on the critical path as
``tool_choice`` (virtual clock, scripted streams)."""

from __future__ import annotations

import asyncio

import pytest

from rejoinder.clock import VirtualClock
from rejoinder.events import Boundary, EventBus
from rejoinder.ports import LLMRequest, ToolDecision
from rejoinder.stages import Stamper, WatchdogTimeout, timed_llm, watch
from rejoinder.timeline import Timeline

DECISION = ToolDecision(None, {"lookup_order": 1.0, "(none)": -1.0}, 2.0, 4.5, "model")


async def _scripted(clock: VirtualClock, items: list[tuple[float, object]]):
    for t, item in items:
        await clock.sleep_until(t)
        yield item


async def _collect(gen) -> list:
    return [x async for x in gen]


async def _run(clock: VirtualClock, coro, until: float):
    task = asyncio.ensure_future(coro)
    await clock.advance_to(until)
    return await task


async def test_first_token_limit_starts_again_after_a_decision():
    clock = VirtualClock()
    items = [(300.0, DECISION), (300.0 + 1500.0, "Hi"), (1900.0, " there")]
    gen = watch(_scripted(clock, items), clock, 2500.0, 700.0, "llm",
                lambda d: isinstance(d, ToolDecision))
    out = await _run(clock, _collect(gen), 5000.0)
    assert out == [DECISION, "Hi", " there"]
    # without the predicate the decision is the first item and the 1.5 s wait is a stall
    gen = watch(_scripted(clock, [(5300.0, DECISION), (6800.0, "Hi")]), clock, 2500.0, 700.0, "llm")
    with pytest.raises(WatchdogTimeout, match="700 ms"):
        await _run(clock, _collect(gen), 9000.0)


class _GateLLM:
    model_name = "scripted"

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock

    def stream(self, request: LLMRequest):
        return _scripted(self.clock, [(120.0, DECISION), (260.0, "Hello!")])


async def test_decision_is_stamped_and_on_the_path_when_the_agent_talks():
    clock, bus = VirtualClock(), EventBus()
    tl = Timeline()
    bus.subscribe(tl)
    seen: list[Boundary] = []
    bus.subscribe(lambda e: seen.append(e) if isinstance(e, Boundary) else None)
    st = Stamper("c", clock, bus)
    st.stamp("user_speech_end", 1, 0.0)
    st.stamp("eot_decided", 1, 50.0)
    st.stamp("transcript_final", 1, 60.0, text="Hello.")
    out = await _run(clock, _collect(timed_llm(st, 1, _GateLLM(clock), LLMRequest(()))), 1000.0)
    assert out == [DECISION, "Hello!"]
    names = [b.name for b in seen]
    assert names.count("tool_decided") == 1 and names.count("llm_first_token") == 1
    decided = next(b for b in seen if b.name == "tool_decided")
    first = next(b for b in seen if b.name == "llm_first_token")
    assert decided.t_ms == 120.0 and first.t_ms == 260.0
    assert decided.data["chosen"] is None and decided.data["threshold"] == 4.5
    st.stamp("first_speakable_text", 1, 300.0)
    st.stamp("playback_start", 1, 400.0)
    rec = tl.turns[1]
    assert rec.tool_decisions[0]["t_ms"] == 120.0 and rec.tool_decisions[0]["margin"] == 2.0
    segs = rec.segments()
    # 60 → 120 ms deciding to talk, then 140 ms to the first token
    assert segs["tool_choice"] == 60.0 and segs["llm_ttft"] == 140.0
    assert sum(segs.values()) == pytest.approx(rec.v2v_ms())
