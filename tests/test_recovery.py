"""Mid-stream recovery and fault injection on scripted timelines (virtual clock)."""

from __future__ import annotations

import re

import pytest

from rejoinder.adapters.faults import FaultyLLM, FaultyTTS, parse_faults
from rejoinder.agent import Agent
from rejoinder.harness.callrun import run_call
from rejoinder.clock import VirtualClock
from rejoinder.errors import ConfigError
from rejoinder.events import EventBus, Recovery, SpeakableText
from rejoinder.ports import ToolCall
from rejoinder.reply import FillerPolicy
from rejoinder.respond import RECOVERY_LINE
from rejoinder.tools import ToolError, tool

from fakes import ToneTTS, heard, lookup, scripted_agent, tone
from test_session import make_stack, turn

TOKENS = ["Your", " order", " has", " shipped,", " and", " it", " arrives", " on", " Friday",
          " before", " noon", "."]
FULL = "Your order has shipped, and it arrives on Friday before noon."


def words(text: str) -> list[str]:
    return re.findall(r"[a-z]+", text.lower())


async def run(stack, clock, agent=None, tail_ms=2000, **kw):
    bus = EventBus()
    events: list = []
    bus.subscribe(events.append)
    res = await run_call([turn(tone(600))], stack, agent or scripted_agent(), clock=clock,
                         tail_ms=tail_ms, bus=bus, **kw)
    return res, [e for e in events if isinstance(e, Recovery)], events


async def test_tts_drop_mid_sentence_resumes_from_last_whole_word():
    clock = VirtualClock()
    stack = make_stack(clock, ["Where is my order?"], tokens=TOKENS)
    stack.tts = FaultyTTS(stack.tts, parse_faults("tts:drop@0"), clock)  # every request dies halfway
    stack.backup_tts = ToneTTS(clock, ttfb_ms=20)
    res, recs, _ = await run(stack, clock)
    assert words(heard(res)[0]) == words(FULL)  # nothing lost, nothing heard twice
    assert [r.action for r in recs if r.stage == "tts"][:2] == ["retry", "backup"]
    rec = res.turns[0]
    assert rec.status == "recovered"
    assert all(d < 1000 for _, d in rec.stalls)  # no silence over 1 s inside the reply


async def test_tts_slow_first_byte_goes_to_the_backup_without_resending_the_same_request():
    clock = VirtualClock()
    stack = make_stack(clock, ["Where is my order?"], tokens=TOKENS)
    slow = FaultyTTS(stack.tts, parse_faults("tts:slow=3000"), clock)
    stack.tts = slow
    stack.backup_tts = ToneTTS(clock, ttfb_ms=20)
    res, recs, _ = await run(stack, clock)
    assert words(heard(res)[0]) == words(FULL)
    tts_actions = [r.action for r in recs if r.stage == "tts"]
    assert tts_actions and set(tts_actions) == {"backup"}  # never a retry on the engine that timed out
    rec = res.turns[0]
    # the first audio came from the backup after one watchdog: 600 ms + 6 ms per character
    first_chunk = stack.backup_tts.texts[0]
    limit = 600 + 6 * len(first_chunk)
    assert limit <= rec.segments()["tts_ttfb"] <= limit + 60
    assert rec.v2v_ms() < 2500


async def test_tts_watchdog_scales_with_the_chunk_length():
    clock = VirtualClock()
    long_words = [f" word{i}" for i in range(14)]
    stack = make_stack(clock, ["Where is my order?"], tokens=["Alright"] + long_words + ["."])
    stack.tts.ttfb_ms = 700.0  # slower than the 600 ms base, within the per-character allowance
    res, recs, _ = await run(stack, clock)
    assert [r for r in recs if r.stage == "tts"] == []
    assert res.turns[0].status == "completed"


async def test_llm_stall_after_partial_output_continues_the_same_text():
    clock = VirtualClock()
    stack = make_stack(clock, ["Where is my order?"], tokens=TOKENS)
    inner = stack.llm
    stack.llm = FaultyLLM(inner, parse_faults("llm:stall=5000@5"), clock)
    res, recs, _ = await run(stack, clock, tail_ms=4000)  # the caller waits through both stalls
    assert [r.action for r in recs if r.stage == "llm"] == ["retry", "give_up"]
    # the retry continued from what was generated: its prefix holds the first five tokens
    assert inner.requests[1].prefix == "".join(TOKENS[:5]).lstrip()
    # the second attempt stalls too (at its 5th token) and the reply ends there: nothing repeated
    assert words(heard(res)[0]) == words("".join(TOKENS[:10]))
    assert all(d < 1000 for _, d in res.turns[0].stalls)  # no silence over 1 s inside the reply


async def test_llm_error_before_first_token_with_nothing_said_speaks_a_marked_recovery_line():
    clock = VirtualClock()
    stack = make_stack(clock, ["Hello?"], tokens=TOKENS)
    stack.llm = FaultyLLM(stack.llm, parse_faults("llm:error"), clock)
    res, recs, events = await run(stack, clock)
    assert [r.action for r in recs] == ["retry", "give_up", "recovery_line"]
    assert words(heard(res)[0]) == words(RECOVERY_LINE)
    assert {e.source for e in events if isinstance(e, SpeakableText)} == {"recovery"}
    rec = res.turns[0]
    assert rec.v2v_ms() is not None and rec.time_to_answer_ms() is None  # the LLM never answered


async def test_llm_writing_nothing_speaks_the_recovery_line_unless_the_policy_is_off():
    from rejoinder.reply import RecoveryPolicy
    clock = VirtualClock()
    stack = make_stack(clock, ["Hello?"], tokens=[])
    res, recs, _ = await run(stack, clock)
    assert [r.action for r in recs] == ["recovery_line"]
    clock = VirtualClock()
    stack = make_stack(clock, ["Hello?"], tokens=[])
    res, recs, _ = await run(stack, clock, recovery=RecoveryPolicy(recovery_line=False))
    assert recs == [] and res.turns[0].v2v_ms() is None


def test_fault_spec_parsing_and_errors():
    f = parse_faults("tts:drop@2%0.5,llm:stall=300@1")
    assert (f[0].stage, f[0].kind, f[0].after, f[0].probability) == ("tts", "drop", 2, 0.5)
    assert (f[1].kind, f[1].value_ms, f[1].after) == ("stall", 300.0, 1)
    assert len(parse_faults("default")) >= 4
    with pytest.raises(ConfigError, match="stage must be one of"):
        parse_faults("db:drop")
    with pytest.raises(ConfigError, match="expected stage:kind"):
        parse_faults("tts:drop@x")


async def test_stt_failure_is_retried_then_answered_with_a_recovery_line():
    from rejoinder.adapters.faults import FaultySTT
    from rejoinder.session import DIDNT_CATCH
    clock = VirtualClock()
    stack = make_stack(clock, ["Where is my order?"], tokens=TOKENS)
    stack.stt = FaultySTT(stack.stt, parse_faults("stt:error"), clock)  # every request fails
    res, recs, _ = await run(stack, clock)
    assert [(r.stage, r.action) for r in recs] == [("stt", "retry"), ("stt", "recovery_line")]
    assert stack.llm.requests == []  # nothing was asked on a transcript that never came
    assert words(heard(res)[0]) == words(DIDNT_CATCH)


async def test_stt_failing_once_recovers_on_retry():
    from rejoinder.adapters.faults import FaultySTT
    clock = VirtualClock()
    stack = make_stack(clock, ["Where is my order?"], tokens=TOKENS)
    flaky = FaultySTT(stack.stt, parse_faults("stt:error%0.5"), clock, seed=3)
    stack.stt = flaky
    res, recs, _ = await run(stack, clock)
    assert len(flaky.injector.fired) == 1  # seed 3: the first request fails, the retry succeeds
    assert [r.action for r in recs if r.stage == "stt"] == ["retry"]
    assert stack.llm.requests[-1].messages[-1].content == "Where is my order?"


async def test_turn_with_only_interim_results_is_promoted_after_timeout():
    from dataclasses import dataclass

    from rejoinder.ports import Transcript

    @dataclass
    class InterimOnlySTT:  # a streaming recogniser that never sends its final
        clock: VirtualClock
        sample_rate: int = 16000

        async def stream(self, audio):
            async for _ in audio:
                pass
            yield Transcript("where is my order", False)
            await self.clock.sleep_until(self.clock.now_ms() + 60000)
            yield Transcript("never", True)

    clock = VirtualClock()
    stack = make_stack(clock, ["unused"], tokens=TOKENS)
    stack.stt = InterimOnlySTT(clock)
    res, recs, _ = await run(stack, clock)
    assert [(r.stage, r.action) for r in recs][:1] == [("stt", "promoted")]
    assert stack.llm.requests[0].messages[-1].content == "where is my order"
    rec = res.turns[0]
    # the interim came at once, then nothing: promoted stt_interim_stall_ms (1000) after it,
    # not promote_interim_ms (2500) after the commit (issue 17, failure kind 4)
    interim_at = rec.stamps["stt_request"]
    assert rec.stamps["transcript_final"] - interim_at == pytest.approx(1000, abs=25)
    assert rec.stamps["transcript_final"] - rec.stamps["eot_decided"] < 1500


def _agent_with(fn) -> Agent:
    return Agent("test", tools=[fn])


async def test_tool_error_is_told_to_the_llm_and_the_caller_hears_a_reply():
    @tool(reversible=True)
    async def lookup_order(order_id: str, text: str = "") -> dict:
        """Look up an order."""
        raise ToolError("the order database is down")

    clock = VirtualClock()
    stack = make_stack(clock, ["Where is order 4217?"], tokens=["Sorry,", " I", " can't", " check", "."],
                       calls=lookup())
    res, _, _ = await run(stack, clock, _agent_with(lookup_order))
    tool_msg = stack.llm.requests[1].messages[-1]
    assert tool_msg.role == "tool" and "the order database is down" in tool_msg.content
    assert res.turns[0].tools[0]["error"] == "the order database is down"
    assert words(heard(res)[0]) == words("Sorry, I can't check.")


async def test_tool_timeout_is_told_to_the_llm_and_the_caller_hears_a_reply():
    import asyncio

    @tool(reversible=True, timeout_s=0.05)
    async def lookup_order(order_id: str, text: str = "") -> dict:
        """Look up an order."""
        await asyncio.sleep(5)  # real time: the tool's own timeout is wall-clock
        return {}

    clock = VirtualClock()
    stack = make_stack(clock, ["Where is order 4217?"], tokens=["Sorry,", " it", " is", " slow", "."],
                       calls=lookup())
    res, _, _ = await run(stack, clock, _agent_with(lookup_order))
    assert "timed out after 0.05 s" in stack.llm.requests[1].messages[-1].content
    assert res.turns[0].v2v_ms() is not None


async def test_unknown_tool_and_bad_arguments_become_errors_for_the_llm():
    clock = VirtualClock()
    stack = make_stack(clock, ["Hi"], tokens=["Okay", "."],
                       calls=[ToolCall("", "no_such_tool", {}), ToolCall("", "lookup_order", {"x": 1})])
    res, _, _ = await run(stack, clock)
    msgs = [m for m in stack.llm.requests[1].messages if m.role == "tool"]
    assert "there is no tool named 'no_such_tool'" in msgs[0].content
    assert "invalid argument" in msgs[1].content and "order_id" in msgs[1].content
    assert res.turns[0].v2v_ms() is not None


async def test_tool_rounds_are_bounded_by_max_steps():
    clock = VirtualClock()
    stack = make_stack(clock, ["Hi"], tokens=["Done", "."], calls=lookup())

    class Loops(type(stack.llm)):  # calls the tool whenever it may
        async def stream(self, request):
            self.requests.append(request)
            await self.clock.sleep_until(self.clock.now_ms() + self.ttft_ms)
            if request.tool_choice != "none":
                yield ToolCall("", "lookup_order", {"order_id": "4217"})
                return
            for t in self.tokens:
                yield t

    stack.llm = Loops(clock, ["Done", "."])
    res, _, _ = await run(stack, clock)
    assert [r.tool_choice for r in stack.llm.requests] == ["auto", "auto", "none"]  # max_steps 3
    # the same call in the second step is answered from the first run, not run again
    assert len(res.turns[0].tools) == 1
    second = stack.llm.requests[2].messages
    assert [m.role for m in second[-4:]] == ["assistant", "tool", "assistant", "tool"]
    assert second[-1].content == second[-3].content
    assert heard(res) == ["Done."]


async def test_filler_is_declared_marked_and_time_to_answer_is_reported_beside_v2v():
    clock = VirtualClock()

    @tool(reversible=True)
    async def lookup_order(order_id: str, text: str = "") -> dict:
        """Look up an order (slow)."""
        await clock.sleep_until(clock.now_ms() + 1500)
        return {"status": "shipped"}

    stack = make_stack(clock, ["Where is order 4217?"], tokens=TOKENS, calls=lookup())
    res, _, events = await run(stack, clock, _agent_with(lookup_order),
                               filler=FillerPolicy(enabled=True, after_ms=400))
    said = [(e.source, e.text.strip()) for e in events if isinstance(e, SpeakableText)]
    assert said[0] == ("filler", "One moment.")
    assert said[1] == ("filler", "Let me check.")  # the 1.5 s tool outlasts the filler: holds
    first = [src for src, _ in said].index("llm")
    assert {src for src, _ in said[first:]} == {"llm"}
    rec = res.turns[0]
    assert rec.stamps["answer_start"] > rec.stamps["playback_start"]
    assert rec.time_to_answer_ms() - rec.v2v_ms() >= 1000  # the tool kept the answer waiting
    # with neither policy, nothing is said until the answer: V2V is time to answer
    clock = VirtualClock()
    stack = make_stack(clock, ["Where is order 4217?"], tokens=TOKENS, calls=lookup())
    res, _, events = await run(stack, clock, _agent_with(lookup_order),
                               filler=FillerPolicy(tools=False))
    assert {e.source for e in events if isinstance(e, SpeakableText)} == {"llm"}
    assert res.turns[0].time_to_answer_ms() == res.turns[0].v2v_ms()


@pytest.mark.parametrize("in_process", [False, True])
async def test_an_in_process_llm_late_on_a_busy_cpu_is_waited_for_not_retried(in_process):
    """A first token 4 s late: a remote LLM is retried then given up on (the recovery line);
    an LLM in this process is waited for (``llm_in_process_first_token_ms``, 8 s), and its
    words are the reply."""
    clock = VirtualClock()
    stack = make_stack(clock, ["Where is my order?"], tokens=TOKENS)
    stack.llm.ttft_ms = 4000.0
    if in_process:
        stack.llm.in_process = True
    res, recs, _ = await run(stack, clock, tail_ms=3000)
    said = words(heard(res)[0])
    if in_process:
        assert [r for r in recs if r.stage == "llm"] == []
        assert len(stack.llm.requests) == 1
        assert said == words(FULL)
        rec = res.turns[0]
        assert rec.stamps["llm_first_token"] - rec.stamps["llm_request"] == pytest.approx(4000, abs=1)
    else:
        assert [r.action for r in recs if r.stage == "llm"] == ["retry", "give_up", "recovery_line"]
        assert len(stack.llm.requests) == 2
        assert said == words(RECOVERY_LINE)
