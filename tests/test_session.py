"""Session behaviour on scripted timelines with a virtual clock (deterministic, instant).

The agent is LLM-driven: a scripted LLM calls the test agent's tool and writes the reply.
"""

from __future__ import annotations

import numpy as np
import pytest

from rejoinder.harness.caller import RenderedTurn, voiced_span
from rejoinder.harness.callrun import run_call
from rejoinder.clock import VirtualClock
from rejoinder.conversation import CUT_MARK
from rejoinder.events import EventBus, Recovery, SpeakableText
from rejoinder.scenario import CallerTurn, Segment
from rejoinder.session import Stack
from rejoinder.turntext import number_incomplete
from rejoinder.text import normalize_for_speech
from rejoinder.timeline import SEGMENTS

from fakes import (AmplitudeVAD, ScriptedLLM, ScriptedSTT, ScriptedTurn, ToneTTS, heard, lookup,
                   scripted_agent, silence, tone)

ANSWER = ["Order", " 4217", " has", " shipped", " and", " arrives", " Friday."]


def turn(pcm: np.ndarray, **timing) -> RenderedTurn:
    spec = CallerTurn(audio=[Segment(silence_ms=0)], **timing)
    return RenderedTurn(pcm, voiced_span(pcm), spec)


def make_stack(clock, texts, *, eot_prob=0.9, stt_ms=300.0, tokens=None, lead_silence_ms=0.0,
               calls=None):
    return Stack(vad=AmplitudeVAD(), turn=ScriptedTurn(clock, prob=eot_prob),
                 stt=ScriptedSTT(clock, texts, delay_ms=stt_ms),
                 llm=ScriptedLLM(clock, tokens if tokens is not None else ANSWER,
                                 calls=calls if calls is not None else []),
                 tts=ToneTTS(clock, lead_silence_ms=lead_silence_ms))


async def test_tool_turn_stamps_every_boundary_and_segments_sum_to_v2v():
    clock = VirtualClock()
    stack = make_stack(clock, ["What is the status of order 4217?"], calls=lookup())
    # text_wait_ms=0: the confident model commits before the words, so both segments show
    res = await run_call([turn(tone(800))], stack, scripted_agent(), clock=clock, tail_ms=1500,
                         policy=TurnPolicy(text_wait_ms=0))
    assert res.error is None
    [rec] = res.turns
    for name in ("user_speech_start", "user_speech_end", "eot_decided", "transcript_final",
                 "llm_request", "llm_first_token", "tool_start", "tool_end", "first_speakable_text",
                 "tts_request", "tts_first_audio", "first_audio_out", "playback_start",
                 "answer_start", "playback_end"):
        assert name in rec.stamps, name
    assert "user_speech_end" not in rec.estimated  # truth from the caller's audio
    assert rec.stamps["user_speech_end"] == pytest.approx(500 + 800, abs=1)
    segs = rec.segments()
    assert set(segs) <= set(SEGMENTS)
    assert sum(segs.values()) == pytest.approx(rec.v2v_ms(), abs=1)
    # first short pause 96 + Smart Turn 50 (p 0.9, confident) → commit; STT (300 ms from the
    # pause) is the largest wait; then the LLM writes the tool call (200 ms), the tool runs, and
    # the LLM's second step speaks
    assert segs["endpointing"] == pytest.approx(150, abs=25)
    assert segs["transcription"] == pytest.approx(250, abs=25)
    assert segs["tool_choice"] == pytest.approx(200, abs=5)
    assert segs["llm_ttft"] == pytest.approx(200, abs=5)
    assert segs["tts_ttfb"] == pytest.approx(80, abs=5)
    assert max(segs, key=segs.get) == "transcription"
    # the LLM wrote every word the caller heard: time to answer is V2V
    assert rec.time_to_answer_ms() == rec.v2v_ms()
    assert heard(res) == ["Order 4217 has shipped and arrives Friday."]
    # the tool got the caller's words through its arguments, and its result went back to the LLM
    second = stack.llm.requests[1]
    assert [m.role for m in second.messages] == ["system", "user", "assistant", "tool"]
    assert second.messages[2].tool_calls[0].name == "lookup_order"
    assert '"status": "shipped"' in second.messages[3].content
    assert [t.name for t in stack.llm.requests[0].tools] == ["lookup_order", "cancel_order"]


async def test_leading_tts_silence_counts_as_waiting_and_is_trimmed_from_the_first_chunk():
    clock = VirtualClock()
    stack = make_stack(clock, ["Hi."], lead_silence_ms=300)
    res = await run_call([turn(tone(600))], stack, scripted_agent(), clock=clock, tail_ms=1000)
    rec = res.turns[0]
    segs = rec.segments()
    # playback_start is the first voiced sample: what is left of the silence (the 15 ms margin)
    # is measured as waiting, in its own segment; the other 285 ms were trimmed, not heard
    assert 14 <= segs["lead_silence"] <= 16
    assert rec.stamps["playback_start"] - rec.stamps["playout_start"] == segs["lead_silence"]
    assert segs["playout"] < 40  # the transport itself adds at most a frame or two
    assert stack.tts.texts[0].startswith("Order")


async def test_silence_timeout_ends_turn_when_model_says_incomplete():
    clock = VirtualClock()
    stack = make_stack(clock, ["So I was wondering"], eot_prob=0.1)
    res = await run_call([turn(tone(600))], stack, scripted_agent(), clock=clock, tail_ms=1000)
    rec = res.turns[0]
    wait = rec.stamps["eot_decided"] - rec.stamps["user_speech_end"]
    assert 900 - 40 <= wait <= 900 + 40


async def test_pause_inside_a_number_does_not_end_the_turn():
    clock = VirtualClock()
    stack = make_stack(clock, ["4 2", "4 2 1 7"], calls=lookup())
    pcm = np.concatenate([tone(500), silence(600), tone(500)])
    res = await run_call([turn(pcm)], stack, scripted_agent(), clock=clock, tail_ms=1500)
    assert [r.turn_id for r in res.turns] == [1]
    assert res.turns[0].transcript == "4 2 1 7"
    assert [t["args"]["text"] for t in res.turns[0].tools] == ["4 2 1 7"]  # one reply, whole number


async def test_speech_resuming_before_audio_reopens_the_same_turn_and_drops_stale_reply():
    clock = VirtualClock()
    stack = make_stack(clock, ["I want to", "I want to check order 4217"], stt_ms=250)
    pcm = np.concatenate([tone(500), silence(330), tone(500)])
    res = await run_call([turn(pcm)], stack, scripted_agent(), clock=clock, tail_ms=1500)
    assert [r.turn_id for r in res.turns] == [1]
    rec = res.turns[0]
    assert rec.transcript == "I want to check order 4217"
    assert rec.stamps["playback_start"] > rec.stamps["user_speech_end"]
    assert heard(res) == ["Order 4217 has shipped and arrives Friday."]
    # the context holds the final transcript once, and only the reply that was heard
    assert [(m.role, m.content) for m in res.context] == [
        ("user", "I want to check order 4217"), ("assistant", "Order 4217 has shipped and arrives Friday.")]


async def test_barge_in_cuts_audio_fast_and_keeps_only_heard_words():
    clock = VirtualClock()
    many = ["Order 4217 has shipped,"] + [f" word{i}" for i in range(30)] + ["."]
    stack = make_stack(clock, ["Check order 4217.", "Stop."], tokens=many)
    res = await run_call([turn(tone(600)), turn(tone(700), barge_in_ms=1000)], stack,
                         scripted_agent(), clock=clock, tail_ms=1500)
    first, second = res.turns[0], res.turns[1]
    assert first.status == "interrupted"
    cut = first.stamps["interrupted_at"]
    onset_truth = second.stamps["user_speech_start"]
    assert 0 <= cut - onset_truth <= 150  # over-talk: caller starts → agent audio stops
    assert len(res.overtalk_ms) == 1 and 0 < res.overtalk_ms[0] <= 150  # measured at the caller
    assert res.overlapping_audio == 0 and res.unheard_context_words == 0
    # a partly heard chunk is kept as written, cut at the last written word wholly heard
    kept = heard(res)[0].split()
    full = "".join(many).split()
    assert 0 < len(kept) < len(full)
    assert kept == full[:len(kept)]
    played_ms = first.stamps["interrupted_at"] - first.stamps["playback_start"]
    spoken = normalize_for_speech(" ".join(kept)).split()
    assert len(spoken) <= played_ms / 200 + 1  # ToneTTS: 200 ms per spoken word
    # the LLM's next request holds the heard words only, marked as cut, then the barge-in
    last = stack.llm.requests[-1].messages
    assert (last[-2].role, last[-2].content) == ("assistant", " ".join(kept) + CUT_MARK)
    assert (last[-1].role, last[-1].content) == ("user", "Stop.")
    assert second.v2v_ms() is not None


@pytest.mark.parametrize("text,expected", [
    ("4 2", True), ("four two one", True), ("4217", False), ("four two one seven", False),
    ("my order is", False), ("Thank you.", False), ("order 42", True), ("", False)])
def test_number_incomplete(text, expected):
    assert number_incomplete(text) is expected


async def test_backchannel_pauses_then_resumes_without_llm_call():
    clock = VirtualClock()
    many = ["Order 4217 has shipped,"] + [f" word{i}" for i in range(20)] + ["."]
    stack = make_stack(clock, ["Check order 4217.", "uh-huh"], tokens=many)
    res = await run_call([turn(tone(600)), turn(tone(250), barge_in_ms=1500)], stack,
                         scripted_agent(), clock=clock, tail_ms=1500)
    assert [r.turn_id for r in res.turns] == [1]
    assert res.turns[0].status == "completed"
    assert len(stack.llm.requests) == 1
    assert heard(res) == ["".join(many)]  # resumed where it stopped: nothing lost, nothing replayed


async def test_short_no_over_the_agent_is_a_barge_in():
    clock = VirtualClock()
    many = ["Order 4217 has shipped,"] + [f" word{i}" for i in range(20)] + ["."]
    stack = make_stack(clock, ["Check order 4217.", "No.", "No."], tokens=many)
    res = await run_call([turn(tone(600)), turn(tone(250), barge_in_ms=1500)], stack,
                         scripted_agent(), clock=clock, tail_ms=1500)
    assert [r.turn_id for r in res.turns] == [1, 2]
    assert res.turns[0].status == "interrupted"
    assert stack.llm.requests[-1].messages[-1].content == "No."


def test_backchannel_policy_words():
    from rejoinder.turns import TurnPolicy, is_backchannel
    p = TurnPolicy()
    assert is_backchannel("Uh-huh.", p) and is_backchannel("yeah, right", p) and is_backchannel("", p)
    assert is_backchannel("Uh uh.", p) and is_backchannel("Mm-hmm, I see.", p)
    assert not is_backchannel("No.", p) and not is_backchannel("yeah but cancel it", p)
    assert not is_backchannel("uh-huh", TurnPolicy(backchannels=("yeah",)))


async def test_failure_mid_call_keeps_recording_and_timeline(tmp_path):
    import json
    import soundfile as sf

    class BrokenVAD(AmplitudeVAD):
        calls = 0

        def speech_prob(self, window):
            BrokenVAD.calls += 1
            if BrokenVAD.calls > 60:  # ≈ 1.9 s into the call
                raise RuntimeError("VAD crashed")
            return super().speech_prob(window)

    clock = VirtualClock()
    stack = make_stack(clock, ["Hello."])
    stack.vad = BrokenVAD()
    res = await run_call([turn(tone(600)), turn(tone(600), after_agent_ms=300)], stack,
                         scripted_agent(), clock=clock, out_dir=tmp_path, tail_ms=1000)
    assert res.error is not None and "VAD crashed" in res.error
    audio, rate = sf.read(tmp_path / "call.wav", dtype="int16")
    assert audio.shape[1] == 2 and 1.8 <= len(audio) / rate <= 2.1  # everything up to the crash
    lines = [json.loads(x) for x in (tmp_path / "timeline.jsonl").read_text().splitlines()]
    assert any(e.get("name") == "user_speech_start" for e in lines)


async def test_backchannel_check_failing_resumes_the_reply():
    from rejoinder.ports import PortError

    clock = VirtualClock()
    many = ["Order 4217 has shipped,"] + [f" word{i}" for i in range(20)] + ["."]
    stack = make_stack(clock, ["Check order 4217."], tokens=many)
    inner = stack.stt

    class ShortAudioFails:
        sample_rate = 16000

        async def stream(self, audio):
            chunks = [c async for c in audio]
            if sum(len(c) for c in chunks) < 16000 * 0.8:
                raise PortError("recogniser unavailable")

            async def again():
                for c in chunks:
                    yield c
            async for tr in inner.stream(again()):
                yield tr

    stack.stt = ShortAudioFails()
    res = await run_call([turn(tone(600)), turn(tone(250), barge_in_ms=1500)], stack,
                         scripted_agent(), clock=clock, tail_ms=1500)
    assert [r.turn_id for r in res.turns] == [1]
    assert heard(res) == ["".join(many)]


async def test_greeting_opens_the_call_the_caller_waits_and_it_enters_the_context():
    clock = VirtualClock()
    bus = EventBus()
    said: list[SpeakableText] = []
    bus.subscribe(lambda e: said.append(e) if isinstance(e, SpeakableText) else None)
    stack = make_stack(clock, ["Check order 4217."])
    agent = scripted_agent(greeting="Thanks for calling. How can I help?")
    res = await run_call([turn(tone(600))], stack, agent, clock=clock, tail_ms=1500, bus=bus)
    assert [(s.turn_id, s.source) for s in said][:2] == [(0, "greeting"), (0, "greeting")]
    assert {s.source for s in said if s.turn_id == 1} == {"llm"}
    # the caller's first turn waited for the greeting to end (no overlap, nothing cut)
    cue = res.caller.cues[0]
    assert cue["cue"] == "after_agent" and cue["at_ms"] > 7 * 200  # 7 tone words
    assert [r.turn_id for r in res.turns] == [1] and res.turns[0].status == "completed"
    assert [(m.role, m.content) for m in res.context][:2] == [
        ("assistant", "Thanks for calling. How can I help?"), ("user", "Check order 4217.")]
    assert stack.llm.requests[0].messages[1].content == "Thanks for calling. How can I help?"


async def test_an_llm_that_can_prefill_gets_the_next_request_after_every_reply_heard():
    """After the greeting and after each reply, the session hands an LLM with ``prefill`` the
    next request with the caller's message still empty: the history as heard; the turn's own
    request is that history plus the caller's words."""
    from concurrent.futures import Future

    from rejoinder.ports import ChatMessage

    class PrefillingLLM(ScriptedLLM):
        def prefill(self, request):
            self.prefills.append(request)
            fut: Future = Future()
            fut.set_result(3)
            return fut

    clock = VirtualClock()
    stack = make_stack(clock, ["Check order 4217.", "Thanks."])
    llm = PrefillingLLM(clock, ANSWER)
    llm.prefills = []
    stack.llm = llm
    agent = scripted_agent(greeting="Thanks for calling. How can I help?")
    res = await run_call([turn(tone(600)), turn(tone(400))], stack, agent, clock=clock,
                         tail_ms=1500)
    assert [r.status for r in res.turns] == ["completed", "completed"]
    assert len(llm.prefills) == 3  # after the greeting and after each of the two replies
    for pre in llm.prefills:
        assert pre.messages[-1] == ChatMessage("user", "") and pre.cache_key == llm.requests[0].cache_key
    assert llm.prefills[0].messages[-2].content == "Thanks for calling. How can I help?"
    assert llm.prefills[1].messages[-2].content == "".join(ANSWER)
    # the second turn's request is the prefilled one with the caller's words
    second = llm.requests[-1]
    assert second.messages[:-1] == llm.prefills[1].messages[:-1]
    assert second.messages[-1] == ChatMessage("user", "Thanks.")


async def test_caller_talking_over_the_greeting_cuts_it():
    clock = VirtualClock()
    stack = make_stack(clock, ["Check order 4217."])
    agent = scripted_agent(greeting="Thanks for calling our shop today. How can I help you?")
    res = await run_call([turn(tone(900), barge_in_ms=600)], stack, agent, clock=clock, tail_ms=1500)
    assert [r.turn_id for r in res.turns] == [1]
    greeting = [text for t, text in res.heard_log if t == 0][0]
    assert 0 < len(greeting.split()) < 10  # cut: only what was heard is in the context
    assert res.turns[0].v2v_ms() is not None


# --- caller realism (issue 12): sounds over the reply, noise turns, idle, numbers read out -------
from fakes import ToolLog  # noqa: E402
from rejoinder.ports import Transcript  # noqa: E402
from rejoinder.turns import IdlePolicy, TurnPolicy  # noqa: E402

LONG = ["Order 4217 has shipped,"] + [f" word{i}" for i in range(20)] + ["."]


def asked(res) -> list[str]:
    """The caller's turns that entered the conversation (each got a reply)."""
    return [m.content for m in res.context if m.role == "user"]


async def sound_over_reply(heard_as: Transcript, ms: float):
    """A request, then a ``ms`` sound 1.5 s into the long reply that the STT hears as ``heard_as``."""
    clock = VirtualClock()
    stack = make_stack(clock, ["Check order 4217.", heard_as], tokens=LONG)
    res = await run_call([turn(tone(600)), turn(tone(ms), barge_in_ms=1500)], stack,
                         scripted_agent(), clock=clock, tail_ms=1500)
    return res, stack


async def test_mm_hmm_heard_as_a_nonsense_token_resumes_the_reply():
    # Whisper base heard a recorded "mm-hmm" as "Ememson", avg log-prob -1.49 (bench/sounds.py)
    res, stack = await sound_over_reply(Transcript("Ememson", True, no_speech_prob=0.11,
                                                   avg_logprob=-1.49), 450)
    assert [r.turn_id for r in res.turns] == [1]
    assert res.turns[0].status == "completed" and res.turns[0].resumed == ["unclear"]
    assert len(stack.llm.requests) == 1
    assert heard(res) == ["".join(LONG)]  # resumed where it paused: nothing lost, nothing replayed


async def test_a_short_speech_like_noise_resumes_but_a_short_confident_word_still_barges_in():
    # a 0.3 s fragment of a real word, heard confidently as "Order.": too short to be a turn
    res, _ = await sound_over_reply(Transcript("Order.", True, no_speech_prob=0.1, avg_logprob=-0.36), 300)
    assert [r.turn_id for r in res.turns] == [1] and res.turns[0].resumed == ["unclear"]
    # the same length but "Thursday." said for 600 ms is meant: barge-in
    res, _ = await sound_over_reply(Transcript("Thursday.", True, no_speech_prob=0.05, avg_logprob=-0.3), 600)
    assert [r.turn_id for r in res.turns] == [1, 2] and res.turns[0].status == "interrupted"


async def test_a_hallucinated_word_on_babble_gets_no_reply_and_is_recorded(tmp_path):
    import json
    clock = VirtualClock()
    # babble 40 dB below full scale: Whisper base wrote "The" at avg log-prob -2.87
    babble = Transcript("The", True, no_speech_prob=0.33, avg_logprob=-2.87)
    stack = make_stack(clock, [babble, "Check order 4217."], calls=lookup())
    log = ToolLog()
    res = await run_call([turn(tone(1200)), turn(tone(700), at_ms=4000)], stack, scripted_agent(log),
                         clock=clock, out_dir=tmp_path, tail_ms=1500)
    first, second = res.turns
    assert first.status == "rejected_noise" and "playback_start" not in first.stamps
    assert first.rejected["why"] == "low_confidence" and first.rejected["text"] == "The"
    assert first.rejected["avg_logprob"] == pytest.approx(-2.87)
    assert asked(res) == ["Check order 4217."] and log.executed == ["Check order 4217."]
    assert second.v2v_ms() is not None
    assert (tmp_path / "transcript.txt").read_text().splitlines()[0] == "caller: Check order 4217."
    events = [json.loads(x) for x in (tmp_path / "timeline.jsonl").read_text().splitlines()]
    assert any(e["type"] == "TurnDecision" and e["reason"] == "rejected_noise" and e["turn_id"] == 1
               for e in events)
    assert all(m.content != "The" for r in stack.llm.requests for m in r.messages)  # no draft either


async def test_a_number_read_three_three_four_with_one_second_pauses_is_one_turn(tmp_path):
    clock = VirtualClock()
    # the end-of-turn model calls every pause "complete"; the transcript shows the number
    stack = make_stack(clock, ["4 1 5", "4 1 5 5 5 5", "4 1 5 5 5 5 0 1 0 1."], eot_prob=0.95,
                       calls=lookup())
    log = ToolLog()
    pcm = np.concatenate([tone(900), silence(1000), tone(900), silence(1000), tone(1200)])
    res = await run_call([turn(pcm)], stack, scripted_agent(log), clock=clock, out_dir=tmp_path,
                         tail_ms=2000)
    assert [r.turn_id for r in res.turns] == [1]
    assert asked(res) == ["4 1 5 5 5 5 0 1 0 1."]
    assert log.compensated == log.executed[:-1] and log.executed[-1] == "4 1 5 5 5 5 0 1 0 1."
    # the transcript shows the held turn once, as finally heard
    lines = (tmp_path / "transcript.txt").read_text().splitlines()
    assert [x for x in lines if x.startswith("caller:")] == ["caller: 4 1 5 5 5 5 0 1 0 1."]
    # the complete number ends the turn at the model's pace (pause 160 ms + model 50 ms), not
    # after the digit hold (1.4 s) or the silence timeout (0.9 s)
    rec = res.turns[0]
    assert rec.stamps["eot_decided"] - rec.stamps["user_speech_end"] < 400


async def test_a_number_still_holds_when_the_stt_is_slower_than_the_pauses():
    clock = VirtualClock()
    # each transcript arrives 1.1 s after its pause, later than the 0.9 s silence timeout: the
    # commit it comes after is taken back (the reply waits for the transcript, so it is silent)
    stack = make_stack(clock, ["4 1 5", "4 1 5 5 5 5", "4 1 5 5 5 5 0 1 0 1."], eot_prob=0.95,
                       stt_ms=1100)
    pcm = np.concatenate([tone(900), silence(1000), tone(900), silence(1000), tone(1200)])
    res = await run_call([turn(pcm)], stack, scripted_agent(), clock=clock, tail_ms=3000)
    assert [r.turn_id for r in res.turns] == [1]
    assert asked(res) == ["4 1 5 5 5 5 0 1 0 1."]


async def test_digits_written_one_by_one_hold_at_a_group_that_looks_complete():
    clock = VirtualClock()
    # "1 800 555 0101": at the 2nd pause Whisper wrote four digits, a complete order number by
    # count — the caller's 1 s pause after "1" shows the grouping 1-3, so the turn is held
    stack = make_stack(clock, ["1", "1, 8, 0, 0", "1, 8, 0, 0, 5, 5, 5",
                               "1, 8, 0, 0, 5, 5, 5, 0, 1, 0, 1."], eot_prob=0.95)
    pcm = np.concatenate([tone(400), silence(1000), tone(900), silence(1000), tone(900),
                          silence(1000), tone(1200)])
    res = await run_call([turn(pcm)], stack, scripted_agent(), clock=clock, tail_ms=2000)
    assert [r.turn_id for r in res.turns] == [1]
    assert asked(res) == ["1, 8, 0, 0, 5, 5, 5, 0, 1, 0, 1."]


async def test_a_turn_ending_in_a_complete_number_is_not_delayed():
    async def endpointing(text: str) -> float:
        clock = VirtualClock()
        stack = make_stack(clock, [text], eot_prob=0.95)
        res = await run_call([turn(tone(900))], stack, scripted_agent(), clock=clock, tail_ms=1500)
        rec = res.turns[0]
        return rec.stamps["eot_decided"] - rec.stamps["user_speech_end"]
    complete, plain, held = (await endpointing("Order 4217."), await endpointing("Hello there."),
                             await endpointing("Order 42"))
    # the sure model waits for the words: the first short pause (~100 ms) and the STT (300 ms)
    assert complete == plain == pytest.approx(100 + 300, abs=10)
    assert held >= TurnPolicy().digit_hold_ms - 40


async def test_digits_read_out_end_the_turn_when_the_number_is_whole_even_if_the_model_hesitates():
    async def endpointing(text: str) -> float:
        clock = VirtualClock()
        stack = make_stack(clock, [text], eot_prob=0.05)  # Smart Turn: list intonation, "not done"
        res = await run_call([turn(tone(900))], stack, scripted_agent(), clock=clock, tail_ms=1500)
        rec = res.turns[0]
        return rec.stamps["eot_decided"] - rec.stamps["user_speech_end"]
    # the transcript (first short pause 96 + STT 300 ms) shows a whole order number: no 900 ms
    # timeout
    assert await endpointing("4, 2, 1, 7.") == pytest.approx(400, abs=30)
    assert await endpointing("Thank you") == pytest.approx(900, abs=40)


async def test_idle_reprompt_then_goodbye_and_a_real_hang_up(tmp_path):
    clock = VirtualClock()
    many = [f" word{i}" for i in range(25)] + ["."]  # a long reply: ≈ 5 s of audio
    stack = make_stack(clock, ["Check order 4217."], tokens=many)
    policy = TurnPolicy(idle=IdlePolicy(reprompt_ms=3000, hangup_ms=2000))
    dead_air = turn(silence(30000), after_agent_ms=0)
    res = await run_call([turn(tone(600)), dead_air], stack, scripted_agent(), clock=clock,
                         policy=policy, out_dir=tmp_path, tail_ms=1000)
    answer, reprompt, goodbye = res.turns
    assert reprompt.initiated == goodbye.initiated == "idle_prompt"
    said = " ".join(stack.tts.texts)
    assert said.endswith("Are you still there? I haven't heard anything, so I'll end the call now. Goodbye!")
    assert len(stack.llm.requests) == 1  # the runtime's own words, not the LLM's
    # the timer starts when the long reply has finished playing at the caller
    gap = reprompt.stamps["playback_start"] - answer.stamps["playback_end"]
    assert 3000 <= gap <= 3000 + 200
    gap2 = goodbye.stamps["playback_start"] - reprompt.stamps["playback_end"]
    assert 2000 <= gap2 <= 2000 + 200
    # a real hang-up: the call ends once the goodbye has played, long before the caller's 30 s
    assert res.hangup == "no_input"
    assert goodbye.stamps["playback_end"] <= res.duration_ms <= goodbye.stamps["playback_end"] + 40
    assert heard(res)[-2:] == ["Are you still there?",
                               "I haven't heard anything, so I'll end the call now. Goodbye!"]
    assert res.turn_taking_metrics() == {"resumed": {}, "rejected_noise": 0, "idle_prompts": 2,
                                         "hangup": "no_input"}


async def test_answering_the_reprompt_keeps_the_call_going():
    clock = VirtualClock()
    stack = make_stack(clock, ["Check order 4217."])
    policy = TurnPolicy(idle=IdlePolicy(reprompt_ms=2000, hangup_ms=4000))
    # silent for 2.5 s after each agent audio: the reprompt comes at 2 s, the answer 2.5 s later
    res = await run_call([turn(tone(600)), turn(tone(600), after_agent_ms=2500),
                          turn(tone(600), after_agent_ms=500)], stack, scripted_agent(), clock=clock,
                         policy=policy, tail_ms=1000)
    assert res.hangup is None
    assert [r.initiated for r in res.turns] == [None, "idle_prompt", None, None]


async def test_the_idle_timer_starts_after_the_greeting():
    clock = VirtualClock()
    stack = make_stack(clock, ["Check order 4217."])
    agent = scripted_agent(greeting="Thanks for calling. How can I help?")
    policy = TurnPolicy(idle=IdlePolicy(reprompt_ms=2500))
    bus = EventBus()
    ends: list[float] = []
    bus.subscribe(lambda e: ends.append(e.t_ms) if getattr(e, "name", "") == "playback_end" else None)
    res = await run_call([turn(silence(8000))], stack, agent, clock=clock, policy=policy, tail_ms=500,
                         bus=bus)
    [reprompt] = res.turns  # the greeting is turn 0, outside the per-turn records
    assert reprompt.initiated == "idle_prompt" and ends
    assert 2500 <= reprompt.stamps["playback_start"] - ends[0] <= 2700


async def test_a_transcript_that_drops_the_digits_keeps_the_hold():
    clock = VirtualClock()
    # Whisper base, on a real recording: "… 41586" at one pause, then the digits vanish at the
    # next ("My callback number is...") although the caller read more: the turn stays held
    stack = make_stack(clock, ["My callback number is 4 1 5", "My callback number is... 41586",
                               "My callback number is...", "My callback number is 415 862 3079."],
                       eot_prob=0.95)
    pcm = np.concatenate([tone(1500), silence(1000), tone(900), silence(1000), tone(500),
                          silence(1000), tone(1200)])
    res = await run_call([turn(pcm)], stack, scripted_agent(), clock=clock, tail_ms=2000)
    assert [r.turn_id for r in res.turns] == [1]
    assert asked(res) == ["My callback number is 415 862 3079."]


async def test_a_transcript_that_lost_its_last_words_is_mended_from_the_rest_of_the_audio():
    clock = VirtualClock()
    # Whisper base in a suite run: "Yeah, it's... 5, 0, 3." at one pause, then "Yeah, it's..."
    # over the whole turn; the speech after the earlier pause is transcribed on its own ("1.")
    stack = make_stack(clock, ["Yeah, it's...", "Yeah, it's... 5, 0, 3.", "Yeah, it's...", "1."],
                       eot_prob=0.95)
    bus = EventBus()
    mends: list = []
    bus.subscribe(lambda e: mends.append(e) if isinstance(e, Recovery) else None)
    pcm = np.concatenate([tone(900), silence(1000), tone(900), silence(1000), tone(600)])
    res = await run_call([turn(pcm)], stack, scripted_agent(), clock=clock, tail_ms=2000, bus=bus)
    assert [r.turn_id for r in res.turns] == [1]
    assert asked(res) == ["Yeah, it's... 5, 0, 3. 1."]
    # the 4th request is the rest only: from the 2nd tone's end (1 s of silence, the 600 ms
    # tone, the 120 ms tail), not the whole turn again
    assert len(stack.stt.requests) == 4
    assert stack.stt.requests[3] == pytest.approx(1.72, abs=0.1)
    assert stack.stt.requests[2] > 3.0
    [m] = mends
    assert (m.stage, m.action, m.resume_from) == ("stt", "mended", "Yeah, it's... 5, 0, 3. 1.")


async def test_a_transcript_that_spells_a_number_differently_is_not_mended():
    clock = VirtualClock()
    stack = make_stack(clock, ["Telephone number, 4, 1, 5, 8, 6, 2, 3, 0.",
                               "Telephone number 4158623079."], eot_prob=0.95)
    pcm = np.concatenate([tone(1500), silence(1000), tone(600)])
    res = await run_call([turn(pcm)], stack, scripted_agent(), clock=clock, tail_ms=2000)
    assert asked(res) == ["Telephone number 4158623079."]
    assert len(stack.stt.requests) == 2


async def test_a_reply_dropped_before_it_was_heard_is_no_interruption_and_no_line(tmp_path):
    clock = VirtualClock()
    # the model commits after "Telephone number"; the caller goes on reading the number before
    # the reply is audible: the same turn reopens, its later reply plays to the end
    stack = make_stack(clock, ["Telephone number", "Telephone number 4158623079."], eot_prob=0.95,
                       stt_ms=100)
    pcm = np.concatenate([tone(900), silence(330), tone(1500)])
    res = await run_call([turn(pcm)], stack, scripted_agent(), clock=clock, out_dir=tmp_path,
                         tail_ms=2000)
    [rec] = res.turns
    assert rec.status == "completed" and rec.heard_text == "Order 4217 has shipped and arrives Friday."
    assert (tmp_path / "transcript.txt").read_text().splitlines() == [
        "caller: Telephone number 4158623079.", "agent: Order 4217 has shipped and arrives Friday."]


async def test_no_preemptive_draft_is_started_on_noise():
    clock = VirtualClock()
    # Smart Turn unsure: the transcript comes while the turn is still open, when a draft would
    # start — not on a hallucination
    babble = Transcript("The", True, no_speech_prob=0.33, avg_logprob=-2.87)
    stack = make_stack(clock, [babble], eot_prob=0.05)
    res = await run_call([turn(tone(1200))], stack, scripted_agent(), clock=clock, tail_ms=1500)
    assert [r.status for r in res.turns] == ["rejected_noise"]
    assert stack.llm.requests == []
