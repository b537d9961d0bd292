"""The pure turn-taking state machine, the VAD tracker and the critical path."""

from __future__ import annotations

import numpy as np
from hypothesis import given, strategies as st

from rejoinder.timeline import SEGMENTS, TurnRecord
from rejoinder.turns import (CancelReply, CheckBackchannel, Commit, Hold, OpenTurn, Resume,
                             Speculate, State, TurnPolicy, TurnTaker)
from rejoinder.vad import VadTracker

from fakes import AmplitudeVAD


def test_commit_by_model_then_reply_lifecycle():
    t = TurnTaker()
    assert t.speech_onset(100, 164) == [OpenTurn(1, 100)]
    assert t.speech_pause(900, 1060) == [Speculate(1, 900)]
    assert t.eot_result(1, 0.8, 1110) == [Commit(1, "model", 0.8, 900)]
    assert t.state is State.THINKING
    assert t.agent_audible(1, 1500) == [] and t.state is State.SPEAKING
    assert t.agent_done(1, 3000) == [] and t.state is State.LISTENING


def test_timeout_fallback_and_digit_hold():
    p = TurnPolicy(silence_timeout_ms=900, digit_hold_ms=1400)
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
    t = TurnTaker(TurnPolicy(eot_threshold=0.5, eot_text_threshold=0.12))
    t.speech_onset(0, 64)
    t.speech_pause(500, 660)
    assert t.eot_result(1, 0.2, 700) == []
    assert t.transcript_result(1, True, False, 900) == [Commit(1, "model+transcript", 0.2, 500)]


def test_open_number_in_transcript_blocks_model_commit():
    t = TurnTaker()
    t.speech_onset(0, 64)
    t.speech_pause(500, 660)
    assert t.transcript_result(1, False, True, 800) == []
    assert t.eot_result(1, 0.95, 820) == []  # "4 2" — a confident model must not end the turn
    assert t.next_deadline() == 500 + TurnPolicy().digit_hold_ms


def test_resumed_speech_reopens_same_turn_and_stale_results_are_ignored():
    t = TurnTaker()
    t.speech_onset(0, 64)
    t.speech_pause(500, 660)
    t.eot_result(1, 0.9, 700)
    assert t.speech_onset(900, 964) == [CancelReply(1, "reopen")]
    assert t.turn_id == 1 and t.state is State.USER_SPEAKING
    assert t.eot_result(1, 0.9, 1000) == []  # result of an old pause: not paused any more


def test_overlap_hold_then_backchannel_or_barge_in():
    p = TurnPolicy(barge_in_ms=400)
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


def test_vad_tracker_onset_and_pause_times():
    tr = VadTracker(AmplitudeVAD(), min_speech_ms=64, pause_ms=160)
    frame_ms = 20
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
    t = TurnTaker()
    t.speech_onset(0, 64)
    t.speech_pause(500, 660)
    t.eot_result(1, 0.02, 700)  # synthetic voices confuse Smart Turn's prosody cues
    assert t.transcript_result(1, True, False, 900, question=True) == [
        Commit(1, "model+transcript", 0.02, 500)]
