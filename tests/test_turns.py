"""The pure turn-taking state machine, the VAD tracker and the critical path."""

from __future__ import annotations

import numpy as np
from hypothesis import given, strategies as st

from rejoinder.timeline import SEGMENTS, TurnRecord
from rejoinder.turns import (CancelReply, CheckBackchannel, Commit, Hold, OpenTurn, Resume,
                             Speculate, State, TurnPolicy, TurnTaker)
from rejoinder.vad import VadTracker

from fakes import AmplitudeVAD


def taker(**policy) -> TurnTaker:
    """A turn-taker whose end-of-turn model commits without waiting for the pause's transcript
    (``text_wait_ms=0``), so a scripted timeline here needs no transcript to end a turn. The wait
    for the words is tested in ``test_eot``."""
    return TurnTaker(TurnPolicy(text_wait_ms=0, **policy))


def test_commit_by_model_then_reply_lifecycle():
    t = taker()
    assert t.speech_onset(100, 164) == [OpenTurn(1, 100)]
    assert t.speech_pause(900, 1060) == [Speculate(1, 900)]
    assert t.eot_result(1, 0.8, 1110) == [Commit(1, "model", 0.8, 900)]
    assert t.state is State.THINKING
    assert t.agent_audible(1, 1500) == [] and t.state is State.SPEAKING
    assert t.agent_done(1, 3000) == [] and t.state is State.LISTENING


def test_speech_over_a_filler_reopens_the_turn_until_the_answer_is_audible():
    """While only a filler of the reply has played, caller speech within ``filler_reopen_ms``
    of the caller's last word goes on with the same turn (a reopen, no hold); later speech, or
    any once the answer's own words play, holds the reply as before. The greeting (turn 0) is
    never reopened."""
    def audible_filler() -> TurnTaker:
        t = taker()
        t.speech_onset(100, 164)
        t.speech_pause(900, 1060)  # the caller's last word ends at 900
        t.eot_result(1, 0.8, 1110)
        assert t.agent_audible(1, 1500, filler=True) == [] and t.state is State.SPEAKING
        return t

    t = audible_filler()
    assert t.speech_onset(1600, 1664) == [CancelReply(1, "reopen")]
    assert t.state is State.USER_SPEAKING and t.turn_id == 1
    t.speech_pause(2400, 2560)
    assert t.eot_result(1, 0.8, 2610) == [Commit(1, "model", 0.8, 2400)]
    assert audible_filler().speech_onset(1950, 2014) == [Hold(1)]  # 1.05 s on: a new utterance
    t = audible_filler()
    t.answer_audible(1)  # "One moment." done, the answer plays
    assert t.speech_onset(1600, 1664) == [Hold(1)]
    g = taker()
    assert g.agent_initiates() and g.agent_audible(0, 10, filler=True) == []
    assert g.speech_onset(200, 264) == [Hold(0)]


def test_timeout_fallback_and_digit_hold():
    p = TurnPolicy(silence_timeout_ms=900, digit_hold_ms=1400, text_wait_ms=0)
    t = TurnTaker(p)
    t.speech_onset(0, 64)
    t.speech_pause(1000, 1160)
    assert t.eot_result(1, 0.2, 1210) == []
    assert t.next_deadline() == 1900
    assert t.tick(1899) == []
    assert t.tick(1900) == [Commit(1, "timeout", 0.2, 1000)]
    # the transcript of the committed turn ends in "4 2": take it back, wait for more digits
    assert t.hold_for_digits(1, 1950) == [CancelReply(1, "digit_hold")]
    assert t.state is State.USER_PAUSED and t.next_deadline() == 2400
    assert t.tick(2400) == [Commit(1, "timeout", 0.2, 1000)]


def test_weak_model_plus_complete_transcript_commits():
    t = taker(eot_threshold=0.5, eot_text_threshold=0.12)
    t.speech_onset(0, 64)
    t.speech_pause(500, 660)
    assert t.eot_result(1, 0.2, 700) == []
    assert t.transcript_result(1, True, False, 900) == [Commit(1, "model+transcript", 0.2, 500)]


def test_open_number_in_transcript_blocks_model_commit():
    t = taker()
    t.speech_onset(0, 64)
    t.speech_pause(500, 660)
    assert t.transcript_result(1, False, True, 800) == []
    assert t.eot_result(1, 0.95, 820) == []  # "4 2" — a confident model must not end the turn
    assert t.next_deadline() == 500 + TurnPolicy().digit_hold_ms


def test_resumed_speech_reopens_same_turn_and_stale_results_are_ignored():
    t = taker()
    t.speech_onset(0, 64)
    t.speech_pause(500, 660)
    t.eot_result(1, 0.9, 700)
    assert t.speech_onset(900, 964) == [CancelReply(1, "reopen")]
    assert t.turn_id == 1 and t.state is State.USER_SPEAKING
    assert t.eot_result(1, 0.9, 1000) == []  # result of an old pause: not paused any more


def test_overlap_hold_then_backchannel_or_barge_in():
    p = TurnPolicy(barge_in_ms=400, text_wait_ms=0)
    t = TurnTaker(p)
    t.speech_onset(0, 64); t.speech_pause(500, 660); t.eot_result(1, 0.9, 700)
    t.agent_audible(1, 1000)
    assert t.speech_onset(2000, 2064) == [Hold(1)]
    assert t.speech_continues(2200) == []
    assert t.speech_pause(2250, 2410) == [CheckBackchannel(1, 2000, 2250)]
    assert t.backchannel_result(1, True, 2900) == [Resume(1)]
    assert t.state is State.SPEAKING
    # long speech over the agent: barge-in without waiting for a transcript
    t.speech_onset(4000, 4064)
    assert t.speech_continues(4400) == [CancelReply(1, "barge_in"), OpenTurn(2, 4000)]
    assert t.state is State.USER_SPEAKING


def test_sounds_resumed_over_just_before_a_turn_start_that_turn():
    """A caller's "6." taken for a short sound and "oh" for a backchannel, then "5, 8" barging
    in: the new turn starts at the "6", so the whole number is transcribed; a sound resumed
    over longer ago (or one a turn already followed) starts nothing."""
    join = TurnPolicy().overlap_join_ms
    t = taker(barge_in_ms=400)
    t.speech_onset(0, 64); t.speech_pause(500, 660); t.eot_result(1, 0.9, 700)
    t.agent_audible(1, 1000)
    t.speech_onset(2000, 2064); t.speech_pause(2300, 2460)
    assert t.backchannel_result(1, True, 2600, reason="unclear") == [Resume(1, "unclear")]
    t.speech_onset(3000, 3064); t.speech_pause(3200, 3360)  # "oh", 700 ms after the "6"
    assert t.backchannel_result(1, True, 3500) == [Resume(1)]
    t.speech_onset(3200 + join, 3264 + join)  # "5", as late as still joins
    assert t.speech_continues(3700 + join) == [CancelReply(1, "barge_in"), OpenTurn(2, 2000)]
    # the next turn after another resumed sound, too late to join: its own onset
    t.speech_pause(4000 + join, 4160 + join); t.eot_result(2, 0.9, 4200 + join)
    t.agent_audible(2, 4300 + join)
    t.speech_onset(5000 + join, 5064 + join); t.speech_pause(5200 + join, 5360 + join)
    assert t.backchannel_result(2, True, 5400 + join) == [Resume(2)]
    late = 5200 + 2 * join + 1
    t.speech_onset(late, late + 64)
    assert t.speech_continues(late + 500) == [CancelReply(2, "barge_in"), OpenTurn(3, late)]


def test_vad_tracker_onset_and_pause_times():
    tr = VadTracker(AmplitudeVAD(), min_speech_ms=64, pause_ms=160)
    sigs = []
    sound = np.concatenate([np.zeros(16000, np.float32), 0.5 * np.ones(16000, np.float32),
                            np.zeros(16000, np.float32)])
    for i in range(0, len(sound), 320):
        sigs += [(s.kind, s.at_ms) for s in tr.push(sound[i:i + 320], i / 16)]
    kinds = [k for k, _ in sigs]
    assert kinds[0] == "onset" and kinds[-1] == "pause" and kinds.count("onset") == 1
    onset = sigs[0][1]
    pause = sigs[-1][1]
    assert abs(onset - 1000) <= 32 and abs(pause - 2000) <= 32


@given(st.lists(st.floats(0, 2000), min_size=9, max_size=9))
def test_segments_always_sum_exactly_to_v2v(offsets):
    names = ["user_speech_end", "eot_decided", "transcript_final", "llm_first_token",
             "first_speakable_text", "tts_first_audio", "first_audio_out", "playback_start"]
    stamps = {n: 1000 + o for n, o in zip(names, offsets)}
    stamps["playback_start"] = max(stamps.values()) + offsets[8]
    rec = TurnRecord(1, stamps=stamps)
    segs = rec.segments()
    assert set(segs) <= set(SEGMENTS)
    assert all(v >= 0 for v in segs.values())
    assert abs(sum(segs.values()) - rec.v2v_ms()) < 0.01


def test_a_question_ends_the_turn_even_when_the_model_is_unsure():
    t = taker()
    t.speech_onset(0, 64)
    t.speech_pause(500, 660)
    t.eot_result(1, 0.02, 700)  # synthetic voices confuse Smart Turn's prosody cues
    assert t.transcript_result(1, True, False, 900, question=True) == [
        Commit(1, "model+transcript", 0.02, 500)]


# --- caller realism: noise turns, numbers read out, idle ----------------------------------------
from rejoinder.turns import EndCall, IdlePolicy, Reject, Reprompt  # noqa: E402


def _answered(t: TurnTaker, end_ms: float) -> None:
    """Drive ``t`` through one answered caller turn whose reply finishes playing at ``end_ms``."""
    t.speech_onset(0, 64)
    t.speech_pause(500, 660)
    t.eot_result(t.turn_id, 0.9, 700)
    t.agent_audible(t.turn_id, 1000)
    t.agent_done(t.turn_id, end_ms)


def test_a_hallucinated_turn_is_rejected_not_answered():
    t = taker()
    t.speech_onset(0, 64)
    t.speech_pause(1200, 1296)
    assert t.transcript_result(1, True, False, 1340, noise="low_confidence") == []
    assert t.eot_result(1, 0.9, 1350) == [Reject(1, "low_confidence")]  # would have committed
    assert t.state is State.LISTENING
    # the next sound opens a new turn; its own transcript decides afresh
    assert t.speech_onset(3000, 3064) == [OpenTurn(2, 3000)]
    t.speech_pause(3500, 3660)
    assert t.eot_result(2, 0.9, 3700) == [Commit(2, "model", 0.9, 3500)]
    assert t.transcript_result(2, True, False, 3800) == []


def test_noise_found_after_the_commit_cancels_the_reply():
    t = taker()
    t.speech_onset(0, 64)
    t.speech_pause(400, 560)
    assert t.eot_result(1, 0.9, 600) == [Commit(1, "model", 0.9, 400)]
    assert t.transcript_result(1, False, False, 900, noise="no_words") == [
        CancelReply(1, "noise"), Reject(1, "no_words")]
    assert t.state is State.LISTENING


def test_a_number_still_being_read_takes_back_a_model_commit():
    t = taker()
    t.speech_onset(0, 64)
    t.speech_pause(2000, 2160)
    assert t.eot_result(1, 0.95, 2210) == [Commit(1, "model", 0.95, 2000)]  # Smart Turn: "done"
    # the transcript ("415 555") shows a phone number half read out: hold for the rest
    assert t.transcript_result(1, False, True, 2400) == [CancelReply(1, "digit_hold")]
    assert t.state is State.USER_PAUSED and t.next_deadline() == 2000 + TurnPolicy().digit_hold_ms
    assert t.speech_onset(3000, 3064) == []  # the next group, 1 s later: same turn
    assert t.turn_id == 1 and t.state is State.USER_SPEAKING
    # a complete number does not wait: the model's commit stands
    t.speech_pause(4500, 4660)
    assert t.transcript_result(1, True, False, 4800) == [Commit(1, "transcript", 0.0, 4500)]


def test_idle_is_off_by_default():
    t = taker()
    _answered(t, 5000)
    assert [a for ms in range(5000, 120_000, 500) for a in t.tick(ms)] == []


def test_idle_reprompt_then_goodbye_timed_from_the_end_of_playback():
    t = taker(idle=IdlePolicy(reprompt_ms=4000, hangup_ms=3000))
    _answered(t, end_ms=9000)  # a long reply: it finished playing at 9 s, not when generated
    t.tick(9000)
    assert t.tick(12_999) == [] and t.next_deadline() == 13_000
    assert t.tick(13_000) == [Reprompt(2)]
    assert t.state is State.THINKING and t.tick(20_000) == []  # nothing while it is being said
    t.agent_audible(2, 13_400)
    t.agent_done(2, 14_500)
    assert t.tick(17_499) == []
    assert t.tick(17_500) == [EndCall(3, "no_input")]
    assert t.goodbye_turn == 3
    t.agent_audible(3, 17_800)
    t.agent_done(3, 20_000)
    assert [a for ms in range(20_000, 60_000, 500) for a in t.tick(ms)] == []  # said once


def test_a_caller_who_answers_the_reprompt_starts_idle_over():
    t = taker(idle=IdlePolicy(reprompt_ms=4000, hangup_ms=3000))
    _answered(t, 5000)
    t.tick(5000)
    assert t.tick(9000) == [Reprompt(2)]
    t.agent_audible(2, 9300)
    t.agent_done(2, 10_000)
    t.speech_onset(11_000, 11_064)  # "yes, I'm here"
    t.speech_pause(11_800, 11_960)
    assert t.eot_result(3, 0.9, 12_000) == [Commit(3, "model", 0.9, 11_800)]
    t.agent_audible(3, 12_500)
    t.agent_done(3, 14_000)
    t.tick(14_000)
    assert t.tick(17_000) == [] and t.tick(18_000) == [Reprompt(4)]  # a reprompt again, not goodbye


def test_speaking_over_the_goodbye_keeps_the_call():
    t = taker(idle=IdlePolicy(reprompt_ms=1000, hangup_ms=1000), barge_in_ms=300)
    _answered(t, 2000)
    t.tick(2000)
    t.tick(3000)
    t.agent_audible(2, 3200)
    t.agent_done(2, 4000)
    t.tick(4000)
    assert t.tick(5000) == [EndCall(3, "no_input")]
    t.agent_audible(3, 5200)
    t.speech_onset(5500, 5564)
    assert t.speech_continues(5800) == [CancelReply(3, "barge_in"), OpenTurn(4, 5500)]
    assert t.goodbye_turn is None


def test_vad_hysteresis_settings_are_validated():
    import pytest
    from pydantic import ValidationError
    with pytest.raises(ValidationError, match="vad_neg_threshold"):
        TurnPolicy(vad_threshold=0.4, vad_neg_threshold=0.6)
    assert TurnPolicy().merged({"idle": {"reprompt_ms": 4000}}).idle.reprompt_ms == 4000
    assert TurnPolicy().merged({"idle": {"reprompt_ms": 4000}}).idle.reprompt_text == "Are you still there?"
    with pytest.raises(ValidationError):
        TurnPolicy().merged({"idle": {"reprompt_sec": 4}})


def test_vad_tracker_min_speech_ignores_short_bursts():
    def signals(tracker, sound):
        out = []
        for i in range(0, len(sound), 320):
            out += [s.kind for s in tracker.push(sound[i:i + 320], i / 16)]
        return out
    click = np.concatenate([np.zeros(8000, np.float32), 0.5 * np.ones(1600, np.float32),
                            np.zeros(8000, np.float32)])  # a 100 ms burst
    assert "onset" in signals(VadTracker(AmplitudeVAD(), min_speech_ms=64), click)
    assert signals(VadTracker(AmplitudeVAD(), min_speech_ms=200), click) == []


def test_a_complete_number_ends_the_turn_whatever_the_model_says():
    t = taker()
    t.speech_onset(0, 64)
    t.speech_pause(2000, 2160)
    t.eot_result(1, 0.03, 2210)  # Smart Turn hears digits read out as unfinished
    assert t.transcript_result(1, True, False, 2500, number_complete=True) == [
        Commit(1, "model+transcript", 0.03, 2000)]
    # without terminal punctuation (Whisper still unsure) it waits for the silence timeout
    t = taker()
    t.speech_onset(0, 64)
    t.speech_pause(2000, 2160)
    t.eot_result(1, 0.03, 2210)
    assert t.transcript_result(1, False, False, 2500, number_complete=True) == []


def test_vad_state_is_reset_once_per_long_silence():
    class Counting(AmplitudeVAD):
        resets = 0

        def reset(self) -> None:
            Counting.resets += 1

    def run(reset_after_ms):
        Counting.resets = 0
        tr = VadTracker(Counting(), reset_after_ms=reset_after_ms)
        sound = np.concatenate([0.5 * np.ones(16000, np.float32), np.zeros(40000, np.float32),
                                0.5 * np.ones(8000, np.float32), np.zeros(8000, np.float32)])
        kinds = []
        for i in range(0, len(sound), 320):
            kinds += [s.kind for s in tr.push(sound[i:i + 320], i / 16)]
        return Counting.resets, kinds.count("onset")
    assert run(1000) == (1, 2)   # 2.5 s of silence: one reset; 0.5 s after the last word: none
    assert run(None) == (0, 2)


def test_a_turn_answering_a_question_for_a_number_waits_for_its_first_transcript():
    """Smart Turn is sure (0.95) at the pause after the first digit of "8 8 1 4": after the
    agent asked for the order number, that pause waits for the transcript, which shows a number
    still open and holds the turn; without the question the model alone commits at once."""
    from rejoinder.dictation import asks_for_number
    asked = "Can you please provide the order number for the item?"
    assert asks_for_number(asked)
    assert asks_for_number("Sure. What's your zip code?")
    assert not asks_for_number("Which appointment would you like to move?")  # no number
    assert not asks_for_number("Your order 4217 shipped on Friday.")  # not a question
    assert not asks_for_number("What's the order number? I can look it up then.")  # last sentence
    for expect, want in ((False, [Commit(1, "model", 0.95, 400)]), (True, [])):
        t = taker()
        t.expect_number = expect
        assert t.speech_onset(0, 64) == [OpenTurn(1, 0)]
        t.speech_pause(400, 500)
        assert t.eot_result(1, 0.95, 510) == want
    # the transcript "8" is a number still open: the turn holds for the rest of the digits
    assert t.transcript_result(1, False, True, 560) == []
    assert t.next_deadline() == 400 + t.policy.digit_hold_ms
    # an answer that is no number commits on its transcript
    t = taker()
    t.expect_number = True
    t.speech_onset(0, 64)
    t.speech_pause(900, 1000)
    assert t.eot_result(1, 0.95, 1010) == []
    assert t.transcript_result(1, True, False, 1080) == [Commit(1, "model", 0.95, 900)]
