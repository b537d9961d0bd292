"""A later chunk of a reply goes to TTS at a clause boundary when the audio queued ahead of the
caller runs low (rejoinder.reply.RUN_DRY_MS), instead of leaving the line silent until a small
LLM's run-on sentence ends. Scripted LLM and TTS on a virtual clock."""

from __future__ import annotations

from dataclasses import dataclass, field

from rejoinder import Agent
from rejoinder.harness.callrun import run_call
from rejoinder.clock import VirtualClock
from rejoinder.events import EventBus, SpeakableText
from rejoinder.ports import LLMRequest

from fakes import tone
from test_session import turn
from test_steps import events_of, stack

RUN_ON = ["Thanks", " for", " waiting.", " Your", " order", " 4217,", " the", " wireless",
          " headphones,", " shipped", " on", " Friday,", " December", " 4,", " and", " it",
          " should", " arrive", " on", " Wednesday", " next", " week."]


@dataclass
class SlowLLM:
    """Streams ``tokens`` one every ``every_ms`` (call clock)."""

    clock: VirtualClock
    tokens: list[str] = field(default_factory=lambda: list(RUN_ON))
    every_ms: float = 250.0
    model_name: str = "slow"

    async def stream(self, request: LLMRequest):
        for tok in self.tokens:
            await self.clock.sleep_until(self.clock.now_ms() + self.every_ms)
            yield tok


async def test_a_run_on_sentence_is_spoken_clause_by_clause_when_the_line_runs_dry():
    clock, bus = VirtualClock(), EventBus()
    chunks = events_of(bus, SpeakableText)
    res = await run_call([turn(tone(600))], stack(clock, ["Where is my order?"], SlowLLM(clock)),
                         Agent("You are a test agent."), clock=clock, tail_ms=9000, bus=bus)
    assert res.error is None
    texts = [c.text for c in chunks]
    # the first chunk as usual; then, the 0.6 s of "Thanks for waiting." playing out while
    # tokens come every 250 ms, clauses go as soon as they are safe instead of the sentence
    assert texts[0] == "Thanks for waiting."
    # (never inside "Friday, December 4": that comma is not a safe boundary)
    assert texts[1:] == [" Your order 4217,", " the wireless headphones,",
                         " shipped on Friday, December 4,", " and it should arrive on Wednesday next week."]
    assert "".join(texts) == "".join(RUN_ON)


async def test_the_rest_of_a_reply_that_ends_as_the_line_runs_dry_goes_head_first():
    """The LLM's last delta brings a long run-on rest while the first chunk's audio is nearly
    played out: its head (cut like a first chunk) goes to TTS before the rest, so its audio is
    ready sooner; with audio enough ahead the rest goes whole, as before."""
    rest = " Your order 4217 was shipped on Friday, December 4 and should arrive on Wednesday next week."

    async def chunks_of(tokens: list[str], every_ms: float) -> list[str]:
        clock, bus = VirtualClock(), EventBus()
        chunks = events_of(bus, SpeakableText)
        llm = SlowLLM(clock, tokens=tokens, every_ms=every_ms)
        res = await run_call([turn(tone(600))], stack(clock, ["Where is my order?"], llm),
                             Agent("You are a test agent."), clock=clock, tail_ms=9000, bus=bus)
        assert res.error is None
        return [c.text for c in chunks]

    dry = await chunks_of(["Thanks for waiting. ", rest], every_ms=500)
    assert dry[0] == "Thanks for waiting."
    # (cut at a safe gap within the first chunk's budget of 10 words: never inside the date)
    assert dry[1:] == ["  Your order 4217 was shipped on Friday, December 4 and",
                       " should arrive on Wednesday next week."]
    ahead = await chunks_of(["Thanks for waiting, I have your order right here in front of me. ",
                             rest], every_ms=500)
    assert ahead[-1] == " " + rest  # seconds of audio ahead: the rest goes whole


async def test_a_run_on_without_a_clause_boundary_is_cut_at_a_safe_gap_when_the_line_runs_dry():
    """No safe clause boundary (the date's comma is none): while the line runs dry the head of
    the sentence goes at a safe gap within a first chunk's budget instead of waiting for the
    end of the sentence."""
    words = ("Your order 4217 was shipped on Friday, December 4 and should arrive on Wednesday "
             "next week at your door.").split()
    tokens = ["Thanks", " for", " waiting."] + [" " + w for w in words]
    clock, bus = VirtualClock(), EventBus()
    chunks = events_of(bus, SpeakableText)
    res = await run_call([turn(tone(600))],
                         stack(clock, ["Where is my order?"], SlowLLM(clock, tokens=tokens)),
                         Agent("You are a test agent."), clock=clock, tail_ms=9000, bus=bus)
    assert res.error is None
    texts = [c.text for c in chunks]
    assert texts[0] == "Thanks for waiting."
    assert texts[1:] == [" Your order 4217 was shipped on Friday, December 4 and",
                         " should arrive on Wednesday next week at your door."]
    # the head went as soon as it was past the budget ("should" arrived), 1.75 s before the
    # sentence's last word: seven tokens of 250 ms
    assert chunks[2].t_ms - chunks[1].t_ms == 1750.0
