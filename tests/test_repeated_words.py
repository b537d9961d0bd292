"""Repeated words: what a recovery said again that the caller had already heard (issue 17's
fault-sweep counter), on scripted timelines with the virtual clock."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from rejoinder.adapters.faults import FaultyLLM, FaultyTTS, parse_faults
from rejoinder.harness.callrun import run_call
from rejoinder.clock import VirtualClock
from rejoinder.events import AgentSpeech, EventBus, Recovery
from rejoinder.harness.summary import control_summary
from rejoinder.reply import Reply, repeated_across

from fakes import ScriptedLLM, ToneTTS, heard, scripted_agent, tone
from test_session import make_stack, turn

TOKENS = ["Your", " order", " has", " shipped,", " and", " it", " arrives", " on", " Friday",
          " before", " noon", "."]
FULL = "Your order has shipped, and it arrives on Friday before noon."


def words(text: str) -> list[str]:
    return re.findall(r"[a-z]+", text.lower())


# --- the counting itself ------------------------------------------------------------------------
def test_repeated_across_counts_the_longest_run_said_again_at_each_point():
    said = "Your order has shipped, and Your order has shipped, and it arrives".split()
    assert repeated_across(said, [5]) == 5  # an answer restarted after 5 words heard
    # a resume from the word after the last one heard repeats nothing
    assert repeated_across("Your order has shipped, and it arrives".split(), [5]) == 0
    # a resume one word too early (a wrong trim): the last word heard comes again
    assert repeated_across("it arrives on on Friday".split(), [3]) == 1
    # case and punctuation do not hide a repeat; points add up; a point at the start is none
    assert repeated_across("Shipped, and it shipped and it arrives".split(), [3]) == 3
    assert repeated_across("a b a b c d c d".split(), [2, 6]) == 4
    assert repeated_across("a b".split(), [0]) == 0 and repeated_across([], [0]) == 0
    # only the run that touches the point counts, not an earlier coincidence
    assert repeated_across("the cat sat the dog".split(), [3]) == 0


# --- end to end: today's recoveries resume after the last word heard -----------------------------
@pytest.fixture
def spoken(monkeypatch):
    """Every (words heard, recovery points) computed for an AgentSpeech."""
    seen: list[tuple[list[str], list[int]]] = []
    original = Reply.heard_spoken

    def spy(self, played):
        out = original(self, played)
        seen.append(out)
        return out

    monkeypatch.setattr(Reply, "heard_spoken", spy)
    return seen


async def run(stack, clock, tail_ms=2500):
    bus, events = EventBus(), []
    bus.subscribe(events.append)
    res = await run_call([turn(tone(600))], stack, scripted_agent(), clock=clock, tail_ms=tail_ms,
                         bus=bus)
    return res, events


async def test_tts_failing_mid_word_then_failing_over_repeats_no_word(spoken):
    clock = VirtualClock()
    stack = make_stack(clock, ["Where is my order?"], tokens=TOKENS)
    stack.tts = FaultyTTS(stack.tts, parse_faults("tts:drop@0"), clock)  # every request dies halfway
    stack.backup_tts = ToneTTS(clock, ttfb_ms=20)
    res, events = await run(stack, clock)
    assert [r.action for r in events if isinstance(r, Recovery)][:2] == ["retry", "backup"]
    said, points = spoken[-1]
    assert len(points) >= 2  # the retry and the backup each continued the reply on the line
    assert words(" ".join(said)) == words(FULL)  # every word once, in order
    assert res.repeated_words == 0 and res.control_metrics()["repeated_words"] == 0
    assert [e.repeated_words for e in events if isinstance(e, AgentSpeech)] == [0]
    assert res.turns[0].summary()["repeated_words"] == 0


async def test_llm_stream_broken_mid_reply_continues_without_repeating(spoken):
    clock = VirtualClock()
    stack = make_stack(clock, ["Where is my order?"], tokens=TOKENS)
    stack.llm = FaultyLLM(stack.llm, parse_faults("llm:drop@5"), clock)  # dies after 5 tokens
    res, events = await run(stack, clock, tail_ms=4000)
    assert [r.action for r in events if isinstance(r, Recovery) and r.stage == "llm"] == ["retry", "give_up"]
    said, points = spoken[-1]
    assert points == [5]  # what the retry wrote starts after the five words heard
    # the retry continued from its prefix: five words, then the next five (it broke again)
    assert words(heard(res)[0]) == words("".join(TOKENS[:10]))
    assert res.repeated_words == 0


async def test_a_retry_that_restarts_the_answer_is_counted(spoken):
    """A server that ignores the retry's prefix (OpenAICompatLLM: "many servers ignore it")
    starts the answer over: the caller hears the first five words twice."""
    clock = VirtualClock()

    class Restarts(ScriptedLLM):
        async def stream(self, request):
            async for d in super().stream(replace(request, prefix="")):
                yield d

    stack = make_stack(clock, ["Where is my order?"], tokens=TOKENS)
    stack.llm = FaultyLLM(Restarts(clock, TOKENS), parse_faults("llm:drop@5"), clock)
    res, events = await run(stack, clock, tail_ms=4000)
    said, points = spoken[-1]
    assert points == [5]
    assert words(" ".join(said)) == words("Your order has shipped, and") * 2
    assert res.repeated_words == 5
    assert [e.repeated_words for e in events if isinstance(e, AgentSpeech)] == [5]
    assert res.turns[0].summary()["repeated_words"] == 5


# --- the sweep's summary ------------------------------------------------------------------------
def test_summary_sums_repeated_words_and_says_none_when_no_call_counted_them():
    def call(**ctl):
        base = {"overtalk_ms": [], "recovery_gap_ms": [], "overlapping_audio": 0,
                "unheard_context_words": 0, "recoveries": 1, "faults_injected": 1,
                "silences_over_1s": 0}
        return {"extra": {"control": {**base, **ctl}}}

    assert control_summary([call(repeated_words=5), call(repeated_words=2)])["repeated_words"] == 7
    assert control_summary([call(repeated_words=0)])["repeated_words"] == 0
    # a run stored before the counter existed (or a remote agent's): not observed, not 0
    assert control_summary([call(), call(repeated_words=None)])["repeated_words"] is None
