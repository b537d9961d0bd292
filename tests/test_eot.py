"""End of turn at the first short pause, speculation records, false cut-offs and longest silence
(issue 18, items 1–3): the pure decisions with exact times, then sessions on the virtual clock."""

from __future__ import annotations

import numpy as np
import pytest

from rejoinder.agent import Agent
from rejoinder.callmetrics import endpointing_metrics, longest_silences
from rejoinder.harness.callrun import run_call
from rejoinder.clock import VirtualClock
from rejoinder.completeness import read_transcript
from rejoinder.events import EventBus, SpeakableText, Speculation
from rejoinder.ports import ToolCall
from rejoinder.reply import FillerPolicy
from rejoinder.speculation import same_request, saved_ms
from rejoinder.timeline import TurnRecord
from rejoinder.tools import tool
from rejoinder.turns import CancelReply, Commit, Speculate, State, TurnPolicy, TurnTaker

from fakes import ToolLog, lookup, scripted_agent, silence, tone
from test_session import make_stack, turn


# --- the decisions, exact times -----------------------------------------------------------------
def paused(policy: TurnPolicy | None = None, *, end: float = 900, now: float = 996) -> TurnTaker:
    t = TurnTaker(policy)
    t.speech_onset(100, 164)
    assert t.speech_pause(end, now) == [Speculate(1, end)]  # the first short pause (96 ms)
    return t


def test_a_confident_model_ends_the_turn_as_soon_as_the_words_agree():
    # the words came first: the model's verdict at the first short pause commits at once
    t = paused()
    assert t.transcript_result(1, False, False, 1030) == []  # "I was wondering": not complete
    assert t.eot_result(1, 0.95, 1046) == [Commit(1, "model", 0.95, 900)]  # 146 ms after speech
    # the model came first: it waits for this pause's words, which may say "not done"
    t = paused()
    assert t.eot_result(1, 0.95, 1046) == []
    assert t.next_deadline() == 900 + TurnPolicy().text_wait_ms
    assert t.transcript_result(1, False, False, 1110) == [Commit(1, "model", 0.95, 900)]
    # a late STT holds the model back no longer than text_wait_ms of silence
    t = paused()
    assert t.eot_result(1, 0.95, 1046) == []
    assert t.tick(900 + TurnPolicy().text_wait_ms - 1) == []
    assert t.tick(900 + TurnPolicy().text_wait_ms) == [Commit(1, "model", 0.95, 900)]
    # text_wait_ms=0: the model alone commits at the short pause, without the words
    t = paused(TurnPolicy(text_wait_ms=0))
    assert t.eot_result(1, 0.95, 1046) == [Commit(1, "model", 0.95, 900)]


def test_a_lead_in_then_more_words_is_no_cut_off_even_when_the_model_is_sure():
    # interruption-mid-answer (real speech, 2026-12-07): Smart Turn was 0.97 sure after
    # "Actually," and committed; the transcript took it back 64 ms later, but the caller's
    # "what about my other order?" had started in between: a false cut-off on the metric
    t = paused()
    assert t.eot_result(1, 0.97, 1046) == []  # no commit before the words
    assert t.speech_onset(1080, 1144) == []  # the caller goes on: nothing to take back
    assert t.state is State.USER_SPEAKING
    assert t.transcript_result(1, False, False, 1150, dangling=True) == []  # stale: ignored
    assert t.speech_pause(2600, 2696) == [Speculate(1, 2600)]
    assert t.transcript_result(1, True, False, 2800, question=True) == [
        Commit(1, "transcript", 0.0, 2600)]


def test_a_moderately_sure_model_waits_for_pause_ms_unless_the_words_read_complete():
    t = paused()
    assert t.transcript_result(1, False, False, 1030) == []  # words in, neither complete nor open
    assert t.eot_result(1, 0.6, 1046) == []
    assert t.next_deadline() == 900 + 160
    assert t.tick(1059) == []
    assert t.tick(1060) == [Commit(1, "model", 0.6, 900)]
    # the same verdict with a complete transcript already in: no fixed wait
    t = paused()
    assert t.transcript_result(1, True, False, 1030) == []  # the model has not answered yet
    assert t.eot_result(1, 0.6, 1046) == [Commit(1, "model", 0.6, 900)]


def test_a_decisive_transcript_does_not_wait_for_the_model():
    t = paused()
    assert t.transcript_result(1, True, False, 1040, question=True) == [
        Commit(1, "transcript", 0.0, 900)]
    # complete words after pause_ms of silence do not wait for a late model either
    t = paused()
    assert t.transcript_result(1, True, False, 1059) == []
    assert t.tick(1060) == [] and t.state is State.USER_PAUSED  # (a transcript decides, not time)
    t = paused()
    assert t.transcript_result(1, True, False, 1200) == [Commit(1, "transcript", 0.0, 900)]
    # ... but a model that has answered "not done" (below eot_text_threshold) holds them back
    t = paused()
    t.eot_result(1, 0.05, 1046)
    assert t.transcript_result(1, True, False, 1200) == []


def test_no_model_only_end_while_a_number_is_read_out():
    t = paused()
    assert t.transcript_result(1, False, True, 1250) == []  # "4 2": open
    assert t.eot_result(1, 0.97, 1260) == []
    t.speech_onset(1300, 1364)  # the next digit
    assert t.speech_pause(1700, 1796) == [Speculate(1, 1700)]
    # the model is sure, but this pause's transcript is not in yet: no commit on the model alone,
    # not at the short pause and not after pause_ms either
    assert t.eot_result(1, 0.97, 1846) == []
    assert t.tick(1900) == [] and t.state is State.USER_PAUSED
    # while this pause's transcript is late, the digit hold applies, not the 900 ms timeout
    assert t.next_deadline() == 1700 + TurnPolicy().digit_hold_ms
    assert t.tick(1700 + 900) == []
    # the transcript shows the whole number: the turn ends at once
    assert t.transcript_result(1, True, False, 2700, number_complete=True) == [
        Commit(1, "model", 0.97, 1700)]


def test_a_dangling_transcript_takes_back_a_model_commit_and_waits():
    t = paused()
    assert t.eot_result(1, 0.95, 1046) == []
    wait = TurnPolicy().text_wait_ms  # the STT is late: the model alone commits after the wait
    assert t.tick(900 + wait) == [Commit(1, "model", 0.95, 900)]
    # "I'd like to check my": the caller is not done — nothing has been said yet
    assert t.transcript_result(1, False, False, 950 + wait, dangling=True) == [
        CancelReply(1, "incomplete")]
    assert t.state is State.USER_PAUSED
    assert t.eot_result(1, 0.95, 1500) == []  # a late verdict of the same pause changes nothing
    # a phrase left open waits longer than the plain silence timeout, as a number read out does
    hold = TurnPolicy().dangling_hold_ms
    assert hold > TurnPolicy().silence_timeout_ms
    assert t.next_deadline() == 900 + hold
    assert t.tick(900 + TurnPolicy().silence_timeout_ms) == []
    assert t.tick(900 + hold) == [Commit(1, "timeout", 0.95, 900)]
    # a commit made on the timeout is not taken back by the words
    assert t.transcript_result(1, False, False, 950 + hold, dangling=True) == []


def test_early_pause_must_not_come_after_pause_ms():
    from pydantic import ValidationError
    with pytest.raises(ValidationError, match="early_pause_ms"):
        TurnPolicy(early_pause_ms=200, pause_ms=160)


@pytest.mark.parametrize("text,complete,dangling,decisive", [
    ("Thank you.", True, False, False), ("Hello", True, False, False),
    ("Where is my order?", True, False, True), ("Who am I talking to?", True, False, True),
    ("I'd like to check my", False, True, False), ("My order and", False, True, False),
    ("I want to check my order...", False, True, False), ("So, um,", False, True, False),
    ("I was wondering", False, False, False), ("Hello,", True, False, False),
    ("Yeah, it's.", False, True, False), ("The number is.", False, True, False),
    ("Yes, that's it.", True, False, False), ("It ought to be.", False, True, False),
    # a lead-in alone goes on ("Actually," a pause, "what about my other order?": a real-speech
    # call cut off there, 2026-12-07); after other words it is an ordinary last word
    ("Actually", False, True, False), ("Actually.", False, True, False),
    ("So, well.", False, True, False), ("I'll keep it, actually.", True, False, False),
    ("So?", True, False, True)])
def test_transcript_reading(text, complete, dangling, decisive):
    r = read_transcript(text)
    assert (r.complete, r.dangling, r.decisive) == (complete, dangling, decisive)
    # a number still read out is neither complete nor dangling: it has its own hold
    assert read_transcript("4, 2,", number_open=True).dangling is False
    assert read_transcript("Order 4217.", number_complete=True).decisive


# --- false cut-offs and endpointing delay against the caller's audio ----------------------------
def rec(turn_id: int, commits: list[float], *, end: float, transcript: str = "Hi.") -> TurnRecord:
    r = TurnRecord(turn_id, stamps={"user_speech_end": end, "eot_decided": commits[-1],
                                    "playback_start": commits[-1] + 400})
    r.commits, r.transcript = commits, transcript
    return r


def test_false_cutoff_accounting():
    truth = [(0, 1000, 2000), (1, 5000, 7500), (2, 10_000, 11_000)]
    runs = [(0, 1000, 1400), (0, 1700, 2000),          # a 300 ms gap inside utterance 0
            (1, 5000, 5500), (1, 6300, 7500),          # 800 ms gap: a digit group
            (2, 10_000, 10_400), (2, 10_600, 11_000)]
    turns = [rec(1, [1500, 2200], end=2000),            # decided in the gap, caller went on: cut
             rec(2, [5600, 7650], end=7500, transcript="4 1 5 5 5 5 0 1 0 1."),  # inside a number
             rec(3, [11_150], end=11_000)]              # decided after the end: right
    m = endpointing_metrics(turns, runs, truth)
    assert m["utterances"] == 3 and m["cut_off"] == 2 and m["cut_off_in_numbers"] == 1
    assert m["delays_ms"] == [200, 150, 150]
    # a decision the transcript took back before the caller went on is counted apart
    held = rec(2, [5600, 7650], end=7500, transcript="4 1 5 5 5 5 0 1 0 1.")
    held.retractions = [5900]
    m = endpointing_metrics([turns[0], held, turns[2]], runs, truth)
    assert (m["cut_off"], m["cut_off_in_numbers"], m["retracted"]) == (1, 0, 1)
    # going on only after more than 1 s is not a cut-off
    late = [(0, 1000, 1400), (0, 2500, 3000)]
    assert endpointing_metrics([rec(1, [1450, 3100], end=3000)], late,
                               [(0, 1000, 3000)])["cut_off"] == 0


def test_longest_silence_counts_the_wait_and_the_gaps_inside_the_reply():
    r = TurnRecord(1, stamps={"user_speech_end": 1000, "playback_start": 1600, "playback_end": 4000})
    r.tools = [{"name": "lookup_order"}]
    heard = [[200, 800], [1600, 2000], [3100, 4000], [6000, 6500]]  # filler, 1.1 s gap, answer
    assert longest_silences([r], heard, 7000) == [
        {"turn_id": 1, "longest_silence_ms": 1100.0, "tools": True}]


# --- the speculation record on the virtual clock ------------------------------------------------
def specs(bus_events: list) -> list[Speculation]:
    return [e for e in bus_events if isinstance(e, Speculation)]


async def call(texts, pcm, *, eot_prob=0.05, calls=None, agent=None, tail_ms=2500):
    clock = VirtualClock()
    bus = EventBus()
    seen: list = []
    bus.subscribe(seen.append)
    stack = make_stack(clock, texts, eot_prob=eot_prob, calls=calls)
    res = await run_call([turn(pcm)], stack, agent or scripted_agent(), clock=clock,
                         tail_ms=tail_ms, bus=bus)
    return res, stack, seen


async def test_a_kept_speculative_draft_records_the_time_it_saved():
    # Smart Turn unsure (0.05), the words complete: the draft starts on the transcript (pause 96
    # + STT 300 ms) while the turn waits for the 900 ms silence timeout, and is adopted then
    res, stack, seen = await call(["So I was wondering about my order."], tone(800))
    [s] = specs(seen)
    assert s.outcome == "kept" and s.llm_requests == 1 and s.tool_runs == 0
    # it ran from ≈ 396 ms after the speech until its first text (LLM TTFT 200 ms)
    assert s.saved_ms == pytest.approx(200, abs=25)
    assert s.started_ms - res.turns[0].stamps["user_speech_end"] == pytest.approx(396, abs=25)
    m = res.speculation_metrics()
    assert (m["speculative"], m["kept"], m["discarded"], m["llm_requests"]) == (1, 1, 0, 1)
    assert m["unconfirmed_words"] == 0 and m["saved_ms"] == [s.saved_ms]
    assert res.turns[0].summary()["speculation"][0]["outcome"] == "kept"


async def test_a_discarded_draft_records_the_llm_work_and_tool_runs_it_wasted():
    log = ToolLog()
    pcm = np.concatenate([tone(800), silence(700), tone(800)])
    res, stack, seen = await call(["Check my order.", "Check my order and cancel it."], pcm,
                                  calls=lookup(), agent=scripted_agent(log))
    first, second = specs(seen)
    assert (first.outcome, first.reason) == ("discarded", "transcript_changed")
    assert first.llm_requests >= 1 and first.tool_runs == 1
    assert log.compensated == ["Check my order."]
    assert second.outcome == "kept"
    m = res.speculation_metrics()
    assert m["wasted_tool_runs"] == 1 and m["wasted_llm_requests"] == first.llm_requests
    # two replies started (the dropped draft and the kept one); the requests after a tool round
    # continue a reply and are counted in llm_requests only
    assert m["llm_replies"] == 2 and m["llm_requests"] == first.llm_requests + second.llm_requests
    assert m["llm_requests"] > m["llm_replies"]
    assert m["discard_reasons"] == {"transcript_changed": 1} and m["unconfirmed_words"] == 0
    assert [m.content for m in res.context if m.role == "user"] == ["Check my order and cancel it."]


async def test_a_final_transcript_that_only_adds_courtesy_words_keeps_the_draft():
    pcm = np.concatenate([tone(800), silence(700), tone(400)])
    res, stack, seen = await call(["Check my order.", "Check my order, please."], pcm)
    [s] = specs(seen)
    assert s.outcome == "extended" and s.llm_requests == 1
    assert len(stack.llm.requests) == 1  # one LLM call for the turn
    assert [m.content for m in res.context if m.role == "user"] == ["Check my order, please."]
    assert res.speculation_metrics()["llm_requests"] == 1


def test_same_request_and_saved_ms():
    assert same_request("Check order 4217.", "check order 4217") == "kept"
    assert same_request("Check order 4217.", "Check order 4217, thank you.") == "extended"
    assert same_request("Check order 4217.", "Check order 4217 and cancel it.") is None
    assert same_request("Check order 4217.", "Check order 4218.") is None
    assert saved_ms(1000, 1500, 1200) == 200 and saved_ms(1000, 1500, None) == 500
    assert saved_ms(1000, 1500, 1900) == 500


# --- tool turns: filler only for a long expected wait; longest silence ---------------------------
def slow_agent(clock: VirtualClock, tool_ms: float, latency_ms: float | None,
               reversible: bool = True) -> Agent:
    @tool(reversible=reversible, latency_ms=latency_ms)
    async def lookup_order(order_id: str, text: str = "") -> dict:
        """Look up an order."""
        await clock.sleep_until(clock.now_ms() + tool_ms)
        return {"order_id": order_id, "status": "shipped"}
    return Agent("You are a test agent.", tools=[lookup_order])


async def tool_call(latency_ms: float | None, tool_ms: float = 1000,
                    filler: FillerPolicy | None = None, eot_prob: float = 0.95,
                    text: str = "What is the status of order 4217?", reversible: bool = True):
    clock = VirtualClock()
    said: list[SpeakableText] = []
    bus = EventBus()
    bus.subscribe(lambda e: said.append(e) if isinstance(e, SpeakableText) else None)
    stack = make_stack(clock, [text], eot_prob=eot_prob,
                       calls=[ToolCall("", "lookup_order", {"order_id": "4217"})])
    res = await run_call([turn(tone(800))], stack, slow_agent(clock, tool_ms, latency_ms, reversible),
                         clock=clock, tail_ms=3000, bus=bus, filler=filler)
    [row] = res.silence_metrics()
    return res, said, row


async def test_a_slow_tool_gets_a_marked_filler_and_a_shorter_longest_silence():
    res, said, row = await tool_call(latency_ms=1000)
    assert [s.source for s in said][0] == "filler" and said[0].text == "One moment. "  # then the answer
    sources = [s.source for s in said]
    assert set(sources[sources.index("llm"):]) == {"llm"}  # (a hold phrase may come between)
    rec = res.turns[0]
    assert rec.time_to_answer_ms() > rec.v2v_ms()  # the filler is not the answer
    assert row["tools"] and row["longest_silence_ms"] < 1000
    # without a declared latency (and no runs observed yet) the tool's share is unknown: with
    # no reading prior either there is no filler, and the caller hears dead air
    _, said, quiet = await tool_call(latency_ms=None, filler=FillerPolicy(reading_prior_ms=0))
    assert {s.source for s in said} == {"llm"}
    assert quiet["longest_silence_ms"] > 1500  # endpointing, STT, tool choice, tool, answer
    # a reading prior (the LLM's reading, not yet observed in the process) says the filler
    _, said, prior = await tool_call(latency_ms=None, filler=FillerPolicy(reading_prior_ms=700))
    assert [s.source for s in said][0] == "filler"
    assert prior["longest_silence_ms"] < quiet["longest_silence_ms"] - 300


async def test_the_filler_is_in_the_call_message_the_llm_reads_the_results_after():
    # the caller heard "One moment." before the results: the request that reads them carries it
    # in the call's message, exactly as the history holds it afterwards, so the next turn's
    # prompt extends this one's (an in-process LLM's KV state is reused, not re-evaluated)
    async def run(latency_ms, filler=None):
        clock = VirtualClock()
        stack = make_stack(clock, ["What is the status of order 4217?"], eot_prob=0.95,
                           calls=[ToolCall("", "lookup_order", {"order_id": "4217"})])
        res = await run_call([turn(tone(800))], stack, slow_agent(clock, 1000, latency_ms),
                             clock=clock, tail_ms=3000, filler=filler)
        [reading] = [r for r in stack.llm.requests if any(m.role == "tool" for m in r.messages)]
        return [m for m in reading.messages if m.tool_calls], [m for m in res.context if m.tool_calls]

    sent, history = await run(latency_ms=1000)  # a 1 s tool: hold phrases follow the filler
    assert sent == history and len(sent) == 1
    assert sent[0].content.startswith("One moment. Let me check.")
    # no filler: nothing in the call's message, as before
    sent, history = await run(latency_ms=None, filler=FillerPolicy(reading_prior_ms=0))
    assert [m.content for m in sent] == [""] and sent == history


async def test_a_wait_longer_than_the_filler_gets_hold_phrases_until_the_answer():
    # a 2 s tool: "One moment." plays 400 ms; each hold phrase is sent as the audio before it has
    # 300 ms left, so the line never goes quiet long enough for the caller to take the turn
    res, said, row = await tool_call(latency_ms=1000, tool_ms=2000)
    sources = [s.source for s in said]
    texts = [s.text.strip() for s in said if s.source == "filler"]
    assert texts == ["One moment.", "Let me check.", "Just a second.", "Still checking.",
                     "Thanks for waiting."]
    assert sources[:5] == ["filler"] * 5 and set(sources[5:]) == {"llm"}
    rec = res.turns[0]
    assert rec.time_to_answer_ms() > rec.v2v_ms() + 1500  # the holds are not the answer
    assert row["longest_silence_ms"] < 1000  # the wait before the filler: endpointing, STT, tool choice
    # an answer whose first chunk goes to TTS before the filler runs low gets no hold phrase
    _, said, _ = await tool_call(latency_ms=1000, tool_ms=50, filler=FillerPolicy(hold_lead_ms=50))
    assert [s.text.strip() for s in said if s.source == "filler"] == ["One moment."]
    # and a policy without hold phrases says the filler alone, then leaves the line quiet
    _, said, quiet = await tool_call(latency_ms=1000, tool_ms=2000,
                                     filler=FillerPolicy(hold_phrases=()))
    assert [s.text.strip() for s in said if s.source == "filler"] == ["One moment."]
    assert quiet["longest_silence_ms"] > 1500


async def test_hold_phrases_start_over_until_hold_max_ms_after_the_filler():
    # a 3.5 s tool outlasts the filler and all four hold phrases (fake TTS audio): the list
    # starts over, and the caller never hears a silence they would take the turn in
    res, said, row = await tool_call(latency_ms=1000, tool_ms=3500)
    holds = [s.text.strip() for s in said if s.source == "filler"][1:]
    phrases = list(FillerPolicy().hold_phrases)
    assert holds[:4] == phrases and holds[4:] == phrases[:len(holds) - 4] and len(holds) > 4
    assert row["longest_silence_ms"] < 1000  # the wait before the filler
    assert res.turns[0].time_to_answer_ms() > 4000
    # hold_max_ms=0: each phrase once, then the line goes quiet until the answer
    _, said, once = await tool_call(latency_ms=1000, tool_ms=3500,
                                    filler=FillerPolicy(hold_max_ms=0))
    assert [s.text.strip() for s in said if s.source == "filler"][1:] == phrases
    assert once["longest_silence_ms"] > 1000
    # a cap shorter than the wait: the phrases stop at it, the rest is quiet
    _, said, capped = await tool_call(latency_ms=1000, tool_ms=6000,
                                      filler=FillerPolicy(hold_max_ms=3500))
    n = len([s for s in said if s.source == "filler"])
    _, said, longer = await tool_call(latency_ms=1000, tool_ms=6000)
    assert 5 < n < len([s for s in said if s.source == "filler"])
    assert capped["longest_silence_ms"] > 1000 > longer["longest_silence_ms"]


async def test_a_gate_decision_to_call_starts_the_filler_before_the_call_is_written():
    """A scoring gate decides "call lookup_order" 100 ms into the request; writing the call
    then takes 1 s (a grammar-constrained JSON on a busy CPU). The filler is sent to TTS at
    the decision, not after the call."""
    from rejoinder.ports import LLMRequest, ToolDecision
    from fakes import ScriptedLLM

    class GateLLM(ScriptedLLM):
        async def stream(self, request: LLMRequest):
            last = request.messages[-1] if request.messages else None
            if last is not None and last.role == "user":
                self.requests.append(request)
                t0 = self.clock.now_ms()
                await self.clock.sleep_until(t0 + 100)
                yield ToolDecision("lookup_order", {"lookup_order": -0.1, "(none)": -3.0}, 2.9, 1.0)
                await self.clock.sleep_until(t0 + 1100)
                yield ToolCall("", "lookup_order", {"order_id": "4217"})
                return
            async for d in super().stream(request):
                yield d

    clock = VirtualClock()
    said: list[SpeakableText] = []
    bus = EventBus()
    bus.subscribe(lambda e: said.append(e) if isinstance(e, SpeakableText) else None)
    stack = make_stack(clock, ["What is the status of order 4217?"], eot_prob=0.95)
    stack.llm = GateLLM(clock, ["It", " has", " shipped."])
    stack.llm.reading_prior_ms = 700.0  # an LLM that declares 700 ms: 200 + 700 calls for a filler
    res = await run_call([turn(tone(800))], stack, slow_agent(clock, 200, 200), clock=clock,
                         tail_ms=3000, bus=bus)
    rec = res.turns[0]
    assert said[0].source == "filler" and said[0].text == "One moment. "
    assert said[0].t_ms == pytest.approx(rec.stamps["llm_request"] + 100, abs=5)
    assert said[0].t_ms < rec.stamps["tool_start"] - 900
    assert [s.text.strip() for s in said if s.source == "filler"][0] == "One moment."
    assert "shipped" in " ".join(s.text for s in said if s.source == "llm")


async def test_pre_rendered_filler_phrases_play_without_a_tts_request():
    """The filler and hold phrases rendered at warm-up (rejoinder.phrases) are replayed: no TTS
    request for them during the call, first audio at once, the voice marked pre-rendered; the
    answer is still synthesized; what the caller heard is the same."""
    from rejoinder.phrases import phrase_key, render_phrases
    from rejoinder.runtime import warm_ports

    async def once(rendered: bool):
        clock = VirtualClock()
        stack = make_stack(clock, ["What is the status of order 4217?"], eot_prob=0.95,
                           calls=[ToolCall("", "lookup_order", {"order_id": "4217"})])
        policy = FillerPolicy()
        if rendered:  # rendered at warm-up, before the call (the fake TTS waits 80 ms each)
            stack.tts.ttfb_ms = 0.0
            await warm_ports(stack, (*policy.phrases, *policy.hold_phrases))
            stack.tts.ttfb_ms = 80.0
            assert set(stack.phrases.audio) == {"One moment.", *policy.hold_phrases}
        stack.tts.texts.clear()
        bus, stamps = EventBus(), []
        from rejoinder.events import Boundary
        bus.subscribe(lambda e: stamps.append(e) if isinstance(e, Boundary) else None)
        res = await run_call([turn(tone(800))], stack, slow_agent(clock, 2000, 1000), clock=clock,
                             tail_ms=3000, bus=bus)
        return res, stack.tts.texts, stamps

    res, texts, stamps = await once(True)
    assert not any(t in texts for t in ("One moment.", *FillerPolicy().hold_phrases))
    req = [b for b in stamps if b.name == "tts_request"]
    first = [b for b in stamps if b.name == "tts_first_audio"]
    assert req[0].data["voice"] == "tone (pre-rendered)"
    assert first[0].t_ms - req[0].t_ms == 0.0  # no synthesis wait
    base, texts0, stamps0 = await once(False)
    assert texts0[:5] == ["One moment.", *FillerPolicy().hold_phrases]
    assert texts and texts == texts0[5:]  # the answer is synthesized as before
    from fakes import heard
    assert heard(base) == heard(res)
    # the first filler reaches the caller 80 ms (the fake TTS's time to first audio) sooner
    assert res.turns[0].v2v_ms() == pytest.approx(base.turns[0].v2v_ms() - 80, abs=25)
    assert phrase_key("One  moment. ") == "One moment."
    assert len(await render_phrases(stack_tts_silent(), ["Hi."])) == 0


async def test_a_pre_rendered_hold_phrase_waits_longer_for_the_answer():
    """A hold phrase rendered at warm-up plays at once, so it is due when the filler has
    ``hold_lead_rendered_ms`` (90 ms) left, not ``hold_lead_ms`` (300 ms, a TTS request's
    time): an answer that reaches TTS in between follows the filler without a hold phrase."""
    from rejoinder.runtime import warm_ports

    async def once(policy: FillerPolicy, rendered: bool):
        clock = VirtualClock()
        stack = make_stack(clock, ["What is the status of order 4217?"], eot_prob=0.95,
                           calls=[ToolCall("", "lookup_order", {"order_id": "4217"})])
        if rendered:
            stack.tts.ttfb_ms = 0.0
            await warm_ports(stack, (*policy.phrases, *policy.hold_phrases))
            stack.tts.ttfb_ms = 80.0
        said: list[SpeakableText] = []
        bus = EventBus()
        bus.subscribe(lambda e: said.append(e) if isinstance(e, SpeakableText) else None)
        res = await run_call([turn(tone(800))], stack, slow_agent(clock, 50, 1000), clock=clock,
                             tail_ms=3000, bus=bus, filler=policy)
        return [s.text.strip() for s in said if s.source == "filler"], res.turns[0]

    fillers, rec = await once(FillerPolicy(), rendered=True)
    assert fillers == ["One moment."]
    early, late = await once(FillerPolicy(hold_lead_rendered_ms=300), rendered=True)
    assert early == ["One moment.", "Let me check."]
    # the answer no longer waits behind "Let me check." (600 ms of the fake TTS's audio)
    assert rec.time_to_answer_ms() == pytest.approx(late.time_to_answer_ms() - 600, abs=25)
    assert rec.v2v_ms() == late.v2v_ms()  # the filler itself is as early as before
    # a phrase that is synthesized when said keeps the longer lead
    fillers, _ = await once(FillerPolicy(), rendered=False)
    assert fillers == ["One moment.", "Let me check."]


def stack_tts_silent():
    class Silent:
        sample_rate, voice_name = 16000, "silent"

        async def stream(self, text):
            yield __import__("rejoinder.ports", fromlist=["TTSAudio"]).TTSAudio(np.zeros(0, np.int16))
    return Silent()


async def test_a_quick_round_gets_no_filler_even_when_declared():
    # a quick tool and an LLM expected to read its result quickly: 100 + 300 ms < 600 ms
    _, said, row = await tool_call(latency_ms=100, tool_ms=100,
                                   filler=FillerPolicy(reading_prior_ms=300))
    assert {s.source for s in said} == {"llm"}
    # the same tool with a 700 ms reading prior (800 ms expected) gets a filler
    _, said, row = await tool_call(latency_ms=100, tool_ms=100,
                                   filler=FillerPolicy(reading_prior_ms=700))
    assert [s.source for s in said][0] == "filler"


async def test_a_quick_round_after_a_late_end_of_turn_is_filled_within_the_silence_budget():
    # the end-of-turn model says "not done" (0.05) to words that read complete (a request, not
    # a question): the turn waits out the 900 ms silence timeout. The draft written at the pause
    # chose an irreversible tool, which waits for the commit, so the quick round (100 + 300 ms
    # expected) only starts then: ≈ 1.3 s of silence since the caller's last word
    quick = FillerPolicy(reading_prior_ms=300)
    late = dict(latency_ms=100, tool_ms=100, eot_prob=0.05, text="Cancel my order.",
                reversible=False)
    res, said, row = await tool_call(filler=quick, **late)
    [rec] = res.turns
    assert rec.stamps["eot_decided"] - rec.stamps["user_speech_end"] >= 900  # the timeout
    assert [s.source for s in said][0] == "filler" and said[0].text == "One moment. "
    assert rec.time_to_answer_ms() > rec.v2v_ms()  # the filler is marked, not the answer
    # the budget off: the same turn is quiet until the answer
    off = quick.model_copy(update={"silence_budget_ms": 0})
    res_off, said, quiet = await tool_call(filler=off, **late)
    assert {s.source for s in said} == {"llm"}
    assert quiet["longest_silence_ms"] >= 1300  # timeout 900, the call's writing, tool, reading
    assert row["longest_silence_ms"] <= quiet["longest_silence_ms"] - 250
    assert res_off.turns[0].time_to_answer_ms() < rec.time_to_answer_ms()  # what the filler costs
    # a turn decided early leaves the round its room: no filler
    _, said, _ = await tool_call(filler=quick, **{**late, "eot_prob": 0.95})
    assert {s.source for s in said} == {"llm"}
    # a reversible round the draft ran during the pause is over at the commit: its answer is
    # ready, and a filler would only put it off
    _, said, _ = await tool_call(filler=quick, **{**late, "reversible": True})
    assert {s.source for s in said} == {"llm"}


async def test_an_llm_that_declares_its_reading_prior_gets_a_filler_on_its_first_round():
    from rejoinder.respond import expected_reading_ms
    clock = VirtualClock()
    stack = make_stack(clock, ["What is the status of order 4217?"], eot_prob=0.95,
                       calls=[ToolCall("", "lookup_order", {"order_id": "4217"})])
    assert expected_reading_ms(stack.llm) is None  # nothing observed, nothing declared
    stack.llm.reading_prior_ms = 700.0  # an LLM that declares 700 ms
    assert expected_reading_ms(stack.llm) == 700.0
    bus = EventBus()
    said: list[SpeakableText] = []
    bus.subscribe(lambda e: said.append(e) if isinstance(e, SpeakableText) else None)
    await run_call([turn(tone(800))], stack, slow_agent(clock, 50, None), clock=clock,
                   tail_ms=3000, bus=bus)
    assert [s.source for s in said][0] == "filler"
    # once observed, the median replaces the declared prior (the fake reads at once)
    assert expected_reading_ms(stack.llm) < 300


async def test_a_call_control_round_is_never_filled():
    from rejoinder.calltools import end_call
    clock = VirtualClock()
    stack = make_stack(clock, ["That's all, bye."], eot_prob=0.95, tokens=["Goodbye!"],
                       calls=[ToolCall("", "end_call", {})])
    bus = EventBus()
    said: list[SpeakableText] = []
    bus.subscribe(lambda e: said.append(e) if isinstance(e, SpeakableText) else None)
    res = await run_call([turn(tone(800))], stack, Agent("You are a test agent.", tools=[end_call()]),
                         clock=clock, tail_ms=3000, bus=bus, filler=FillerPolicy(reading_prior_ms=5000))
    assert said and "filler" not in {s.source for s in said}
    assert res.hangup == "end_call"


async def test_the_llm_reading_the_results_counts_in_a_tool_rounds_expected_wait():
    # a quick tool (50 ms, observed) but an LLM that takes 900 ms to read its result: the first
    # round has nothing observed (no filler, with no reading prior); the process's next one
    # expects ≥ 900 ms and says a filler, marked; the time to the answer stays the LLM's
    from rejoinder.respond import expected_reading_ms
    llm = None
    runs = []
    for _ in range(2):  # two calls of one process: a clock each, the same LLM
        clock = VirtualClock()
        stack = make_stack(clock, ["What is the status of order 4217?"], eot_prob=0.95,
                           calls=[ToolCall("", "lookup_order", {"order_id": "4217"})])
        if llm is None:
            llm = stack.llm
            llm.ttft_ms = 900.0
            assert expected_reading_ms(llm) is None
        llm.clock, stack.llm = clock, llm
        agent = slow_agent(clock, 50, None)
        bus = EventBus()
        said: list[SpeakableText] = []
        bus.subscribe(lambda e, said=said: said.append(e) if isinstance(e, SpeakableText) else None)
        res = await run_call([turn(tone(800))], stack, agent, clock=clock, tail_ms=4000, bus=bus,
                             filler=FillerPolicy(reading_prior_ms=0))
        runs.append((res.turns[0], [s.source for s in said]))
    (first, src1), (second, src2) = runs
    assert set(src1) == {"llm"} and src2[0] == "filler"
    assert set(src2[src2.index("llm"):]) == {"llm"}
    # 900 ms to the first token, then tokens until the chunker has a first chunk
    assert 900 <= expected_reading_ms(llm) < 1200
    assert second.v2v_ms() < first.v2v_ms() - 500
    # the answer is the LLM's as soon as it is ready, or after the hold phrase said while the
    # filler ran out (600 ms of tone here)
    assert first.time_to_answer_ms() - 300 <= second.time_to_answer_ms() <= first.time_to_answer_ms() + 700


def test_expected_latency_falls_back_to_the_observed_median():
    @tool
    def t() -> None:
        """A tool."""
    assert t.expected_ms() is None
    for ms in (900, 100, 1000):
        t.observe(ms)
    assert t.expected_ms() == 900


def test_bench_summary_blocks_from_calls():
    from rejoinder.harness.eotsummary import eot_summary
    calls = [{"extra": {
        "endpointing": {"delays_ms": [200.0, 300.0], "utterances": 2, "cut_off": 1,
                        "cut_off_in_numbers": 0, "false_cutoff_events": 1},
        "speculation": {"turns": 2, "llm_requests": 3, "llm_replies": 2, "speculative": 2, "kept": 1, "extended": 0,
                        "discarded": 1, "saved_ms": [180.0], "wasted_llm_requests": 1,
                        "wasted_tokens": 12, "wasted_tool_runs": 1, "discard_reasons": {},
                        "unconfirmed_words": 0},
        "silence": [{"turn_id": 1, "longest_silence_ms": 700.0, "tools": False},
                    {"turn_id": 2, "longest_silence_ms": 1200.0, "tools": True}]}},
        {"extra": {}}]  # a failed call has no blocks
    s = eot_summary(calls)
    ep, sp, si = s["endpointing"], s["speculation"], s["silence"]
    assert ep["delay_ms"]["p50"] == 250 and ep["false_cutoff_rate"] == 0.5
    assert sp["hit_rate"] == 0.5 and sp["saved_ms"]["p50"] == 180
    assert sp["llm_calls_per_turn"] == 1.5 and sp["wasted_llm_calls_per_turn"] == 0.5
    assert sp["llm_replies_per_turn"] == 1.0  # the third request continued a reply
    assert si["tool_turns_longest_silence_ms"]["max"] == 1200 and si["longest_silence_ms"]["n"] == 2


@pytest.mark.parametrize("stt_ms,commits,retractions", [(300.0, 1, 0), (600.0, 2, 1)])
async def test_a_confident_model_inside_a_number_is_no_cut_off(stt_ms, commits, retractions):
    # Smart Turn calls the pause after "415" complete. An STT quicker than text_wait_ms shows the
    # open number before the model may commit alone; a slower one comes after that commit and
    # takes it back before the caller reads the next group. Nothing is said either way.
    clock = VirtualClock()
    stack = make_stack(clock, ["4 1 5", "4 1 5 5 5 5", "4 1 5 5 5 5 0 1 0 1."], eot_prob=0.95,
                       stt_ms=stt_ms)
    assert (stt_ms < TurnPolicy().text_wait_ms) == (retractions == 0)
    pcm = np.concatenate([tone(900), silence(1000), tone(900), silence(1000), tone(1200)])
    res = await run_call([turn(pcm)], stack, scripted_agent(), clock=clock, tail_ms=2000)
    [r] = res.turns
    # once the first group showed a number being read, the model alone commits no more
    assert len(r.commits) == commits and len(r.retractions) == retractions
    m = res.endpointing_metrics()
    assert (m["utterances"], m["cut_off"], m["cut_off_in_numbers"], m["retracted"]) == (
        1, 0, 0, retractions)
    assert m["delays_ms"] == [pytest.approx(r.stamps["eot_decided"] - r.stamps["user_speech_end"])]
    assert len(stack.llm.requests) == 1  # no LLM work on the retracted commits


async def test_the_text_reading_a_tool_rounds_results_starts_with_a_short_first_chunk():
    # the same run-on clause: as a reply's own first chunk it may hold 10 words; read after a
    # tool round (the caller has waited through it) the first chunk holds at most AFTER_TOOLS_FIRST_WORDS (4)
    from rejoinder.reply import AFTER_TOOLS_FIRST_WORDS
    text = ("The wireless headphones of order 4217 were shipped on Friday and should arrive "
            "on Wednesday.")
    tokens = [w if i == 0 else " " + w for i, w in enumerate(text.split(" "))]

    async def first_llm_chunk(calls):
        clock = VirtualClock()
        stack = make_stack(clock, ["What is the status of order 4217?"], eot_prob=0.95,
                           tokens=tokens, calls=calls)
        bus = EventBus()
        said: list[SpeakableText] = []
        bus.subscribe(lambda e: said.append(e) if isinstance(e, SpeakableText) else None)
        await run_call([turn(tone(800))], stack, slow_agent(clock, 50, None), clock=clock,
                       tail_ms=4000, bus=bus, filler=FillerPolicy(tools=False))
        llm = [s.text for s in said if s.source == "llm" and s.text.strip()]
        assert "".join(llm).split() == text.split()  # nothing added, dropped or reordered
        return llm[0].split()

    own = await first_llm_chunk(None)
    after = await first_llm_chunk([ToolCall("", "lookup_order", {"order_id": "4217"})])
    assert own == text.split()[:10]  # the reply's own budget: 10 words
    # "order 4217" is not cut apart (a name and its numeral): the chunk ends before it
    assert len(after) <= AFTER_TOOLS_FIRST_WORDS and after == text.split()[:4]
