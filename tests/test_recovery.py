"""Mid-stream recovery and fault injection on scripted timelines (virtual clock)."""

from __future__ import annotations

import re

import pytest

from rejoinder.adapters.faults import FaultyLLM, FaultyTTS, parse_faults
from rejoinder.callrun import run_call
from rejoinder.clock import VirtualClock
from rejoinder.errors import ConfigError
from rejoinder.events import Recovery
from rejoinder.events import EventBus
from rejoinder.reply import RECOVERY_LINE

from fakes import ScriptedApp, ToneTTS, tone
from test_session import make_stack, turn

TOKENS = [" and", " it", " arrives", " on", " Friday", " before", " noon", "."]
FULL = "Your order has shipped, and it arrives on Friday before noon."


def words(text: str) -> list[str]:
    return re.findall(r"[a-z]+", text.lower())


async def run(stack, app, clock):
    bus = EventBus()
    recoveries: list[Recovery] = []
    bus.subscribe(lambda e: recoveries.append(e) if isinstance(e, Recovery) else None)
    res = await run_call([turn(tone(600))], stack, app, clock=clock, tail_ms=2000, bus=bus)
    return res, recoveries


async def test_tts_drop_mid_sentence_resumes_from_last_whole_word():
    clock = VirtualClock()
    stack = make_stack(clock, ["Where is my order?"], tokens=TOKENS)
    stack.tts = FaultyTTS(stack.tts, parse_faults("tts:drop@0"), clock)  # every request dies halfway
    stack.backup_tts = ToneTTS(clock, ttfb_ms=20)
    app = ScriptedApp("Your order has shipped,")
    res, recs = await run(stack, app, clock)
    assert words(app.heard_log[0]) == words(FULL)  # nothing lost, nothing heard twice
    assert [r.action for r in recs if r.stage == "tts"][:2] == ["retry", "backup"]
    rec = res.turns[0]
    assert rec.status == "recovered"
    assert all(d < 1000 for _, d in rec.stalls)  # no silence over 1 s inside the reply


async def test_tts_slow_first_byte_switches_to_backup_after_watchdog():
    clock = VirtualClock()
    stack = make_stack(clock, ["Where is my order?"], tokens=TOKENS)
    stack.tts = FaultyTTS(stack.tts, parse_faults("tts:slow=3000"), clock)
    stack.backup_tts = ToneTTS(clock, ttfb_ms=20)
    app = ScriptedApp("Your order has shipped,")
    res, recs = await run(stack, app, clock)
    assert words(app.heard_log[0]) == words(FULL)
    assert "backup" in [r.action for r in recs]
    rec = res.turns[0]
    # the first audio came from the backup after the 600 ms watchdog (+ retry watchdog)
    assert rec.segments()["tts_ttfb"] >= 1200
    assert rec.v2v_ms() < 3000


async def test_llm_stall_after_partial_output_continues_the_same_text():
    clock = VirtualClock()
    stack = make_stack(clock, ["Where is my order?"], tokens=TOKENS)
    inner = stack.llm
    stack.llm = FaultyLLM(inner, parse_faults("llm:stall=5000@3"), clock)
    app = ScriptedApp("Your order has shipped,")
    res, recs = await run(stack, app, clock)
    assert [r.action for r in recs if r.stage == "llm"] == ["retry", "give_up"]
    # the retry continued from what was generated: its prefix holds the first three tokens
    assert inner.requests[1].prefix == "Your order has shipped," + "".join(TOKENS[:3])
    # the second attempt stalls too (at its 3rd token) and the reply ends there: nothing repeated
    assert words(app.heard_log[0]) == words("Your order has shipped," + "".join(TOKENS[:6]))
    assert all(d < 1000 for _, d in res.turns[0].stalls)


async def test_llm_error_before_first_token_with_nothing_said_speaks_recovery_line():
    clock = VirtualClock()
    stack = make_stack(clock, ["Hello?"], tokens=TOKENS)
    stack.llm = FaultyLLM(stack.llm, parse_faults("llm:error"), clock)
    app = ScriptedApp("")
    res, recs = await run(stack, app, clock)
    assert [r.action for r in recs] == ["retry", "recovery_line"]
    assert words(app.heard_log[0]) == words(RECOVERY_LINE)


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
    app = ScriptedApp("Your order has shipped,")
    res, recs = await run(stack, app, clock)
    assert [(r.stage, r.action) for r in recs] == [("stt", "retry"), ("stt", "recovery_line")]
    assert app.planned == []  # nothing was planned on a transcript that never came
    assert words(app.heard_log[0]) == words(DIDNT_CATCH)


async def test_stt_failing_once_recovers_on_retry():
    from rejoinder.adapters.faults import FaultySTT
    clock = VirtualClock()
    stack = make_stack(clock, ["Where is my order?"], tokens=TOKENS)
    flaky = FaultySTT(stack.stt, parse_faults("stt:error%0.5"), clock, seed=3)
    stack.stt = flaky
    app = ScriptedApp("Your order has shipped,")
    res, recs = await run(stack, app, clock)
    fired = len(flaky.injector.fired)
    assert app.planned == ["Where is my order?"]
    assert fired == 1  # seed 3: the first request fails, the retry succeeds
    assert [r.action for r in recs if r.stage == "stt"] == ["retry"]


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
    app = ScriptedApp("Your order has shipped,")
    res, recs = await run(stack, app, clock)
    assert [(r.stage, r.action) for r in recs][:1] == [("stt", "promoted")]
    assert app.planned == ["where is my order"]
    rec = res.turns[0]
    # committed on the silence timeout, then promoted promote_interim_ms later
    assert rec.stamps["transcript_final"] - rec.stamps["eot_decided"] >= 2500 - 1


async def test_slow_optional_continuation_is_skipped_for_the_tail_before_the_first_clause_ends():
    from dataclasses import dataclass

    from rejoinder.ports import LLMRequest

    @dataclass
    class GuardedReply:
        first_clause: str
        llm_request: LLMRequest
        tail: str = "It arrives on Friday."

        def grounded(self, text: str) -> bool:
            return True

    class GuardedApp(ScriptedApp):
        def compose(self, plan, results):
            return GuardedReply(self.first_clause, LLMRequest(messages=(), prefix=self.first_clause))

    clock = VirtualClock()
    stack = make_stack(clock, ["Where is my order?"], tokens=TOKENS)
    stack.llm.ttft_ms = 2000.0  # the LLM is queued behind other calls
    app = GuardedApp("Your order has shipped,")
    res, recs = await run(stack, app, clock)
    assert [(r.stage, r.action) for r in recs] == [("llm", "skipped")]
    assert words(app.heard_log[0]) == words("Your order has shipped, It arrives on Friday.")
    rec = res.turns[0]
    assert rec.status == "completed"  # a planned fallback, not a failure
    assert all(d < 400 for _, d in rec.stalls)  # the tail followed the first clause without a gap
