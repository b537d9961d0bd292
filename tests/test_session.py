"""Session behaviour on scripted timelines with a virtual clock (deterministic, instant).

The agent is LLM-driven: a scripted LLM calls the test agent's tool and writes the reply.
"""

from __future__ import annotations

import numpy as np
import pytest

from rejoinder.caller import RenderedTurn, voiced_span
from rejoinder.callrun import run_call
from rejoinder.clock import VirtualClock
from rejoinder.events import EventBus, SpeakableText
from rejoinder.scenario import CallerTurn, Segment
from rejoinder.session import Stack, number_incomplete
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
    res = await run_call([turn(tone(800))], stack, scripted_agent(), clock=clock, tail_ms=1500)
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
    # pause 160 + Smart Turn 50 → commit; STT (300 ms from the pause) is the largest wait; then
    # the LLM writes the tool call (200 ms), the tool runs, and the LLM's second step speaks
    assert segs["endpointing"] == pytest.approx(210, abs=25)
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
    # a partly heard chunk is kept in its spoken form, cut at the last whole word heard
    kept = heard(res)[0].split()
    full = normalize_for_speech("".join(many)).split()
    assert 0 < len(kept) < len(full)
    assert kept == full[:len(kept)]
    played_ms = first.stamps["interrupted_at"] - first.stamps["playback_start"]
    assert len(kept) <= played_ms / 200 + 1  # ToneTTS: 200 ms per word
    # the LLM's next request holds the heard words only, then the caller's barge-in
    last = stack.llm.requests[-1].messages
    assert (last[-2].role, last[-2].content) == ("assistant", " ".join(kept))
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


async def test_caller_talking_over_the_greeting_cuts_it():
    clock = VirtualClock()
    stack = make_stack(clock, ["Check order 4217."])
    agent = scripted_agent(greeting="Thanks for calling our shop today. How can I help you?")
    res = await run_call([turn(tone(900), barge_in_ms=600)], stack, agent, clock=clock, tail_ms=1500)
    assert [r.turn_id for r in res.turns] == [1]
    greeting = [text for t, text in res.heard_log if t == 0][0]
    assert 0 < len(greeting.split()) < 10  # cut: only what was heard is in the context
    assert res.turns[0].v2v_ms() is not None
