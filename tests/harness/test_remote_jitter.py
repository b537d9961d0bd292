"""The caller's jitter buffer: sample-accurate playout times, bursts, stalls, clear, hold, marks."""

from __future__ import annotations

import numpy as np
import pytest

from rejoinder.harness.remote.jitter import JitterBuffer


def tone(ms: float, amp: int = 8000) -> np.ndarray:
    return np.full(int(16 * ms), amp, dtype=np.int16)


def play_until(jb: JitterBuffer, t_end: float, t0: float = 0.0) -> np.ndarray:
    """Play windows [t0, t_end) and return everything heard."""
    return np.concatenate([jb.play(t).copy() for t in np.arange(t0, t_end, 20.0)])


def test_first_voiced_sample_plays_exactly_depth_after_arrival():
    jb = JitterBuffer(60)
    pcm = np.concatenate([np.zeros(80, np.int16), tone(100)])   # 5 ms of leading silence
    jb.push(pcm, arrival_ms=103.3)
    heard = play_until(jb, 400)
    b = jb.bursts[0]
    # scheduled on the 16 kHz grid at ceil(103.3 * 16) / 16 + 60 ms, then 5 ms of silence
    assert b.start_ms == pytest.approx(1653 / 16 + 60)
    assert b.first_voiced_ms == pytest.approx(1653 / 16 + 60 + 5)
    assert np.flatnonzero(heard)[0] == 1653 + 960 + 80          # the same sample in what was heard
    assert [e[0] for e in jb.drain_events()] == []               # no key: nothing to report


def test_audio_sent_faster_than_real_time_plays_contiguously():
    jb = JitterBuffer(40)
    for k in range(10):                                          # 10 × 20 ms sent every 10 ms (2×)
        jb.push(tone(20), arrival_ms=100 + 10 * k, key=7)
    play_until(jb, 600)
    assert len(jb.bursts) == 1
    b = jb.bursts[0]
    assert b.start_ms == 140 and b.end_ms == 340 and b.played == 3200


def test_underrun_starts_a_new_burst_and_reports_the_stall():
    jb = JitterBuffer(40)
    jb.push(tone(40), 100, key=1)          # plays 140–180
    play_until(jb, 200)
    jb.push(tone(40), 250, key=1)          # arrives after the buffer ran dry: plays from 290
    play_until(jb, 400, 200)
    jb.end_reply(1)
    play_until(jb, 440, 400)
    ev = jb.drain_events()
    assert ("start", 1, 140.0, {}) in ev
    stall = [e for e in ev if e[0] == "stall"]
    assert stall == [("stall", 1, 180.0, {"duration_ms": 110.0})]
    assert [e for e in ev if e[0] == "end"] == [("end", 1, 330.0, {})]
    assert [b.start_ms for b in jb.bursts] == [140.0, 290.0]


def test_clear_cuts_audible_audio_and_flushes_marks():
    jb = JitterBuffer(20)
    jb.push(tone(500), 0)
    jb.mark("e1", 5)                       # due after the 500 ms of audio
    play_until(jb, 180)                    # the loop has played up to 180 ms when clear arrives
    assert jb.clear(195.0) is True
    heard = play_until(jb, 400, 180)
    assert np.count_nonzero(heard) == 15 * 16   # 180–195 ms still plays, nothing after the clear
    b = jb.bursts[0]
    assert b.cut_ms == 195.0 and b.played == (195 - 20) * 16
    ev = jb.drain_events()
    assert ("mark", None, 195.0, {"name": "e1", "cleared": True}) in ev


def test_marks_are_echoed_when_playout_reaches_them():
    jb = JitterBuffer(0)
    jb.push(tone(100), 0)
    jb.mark("s1", 1)
    play_until(jb, 80)
    assert jb.drain_events() == []
    play_until(jb, 100, 80)                # the window that plays the last sample before it
    assert jb.drain_events() == [("mark", None, 100.0, {"name": "s1"})]


def test_hold_keeps_the_rest_and_resume_plays_it_without_a_stall():
    jb = JitterBuffer(0)
    jb.push(tone(200), 0, key=3)
    play_until(jb, 60)
    jb.hold(60)
    assert not play_until(jb, 200, 60).any()
    jb.resume(200)
    heard = play_until(jb, 400, 200)
    assert np.count_nonzero(heard) == 140 * 16          # the 140 ms left, all of it
    assert np.flatnonzero(heard)[0] == 0                # from the moment of resume
    assert not [e for e in jb.drain_events() if e[0] == "stall"]
    assert jb.bursts[-1].after_hold


def test_clear_while_held_cuts_at_the_hold():
    jb = JitterBuffer(0)
    jb.push(tone(300), 0, key=2)
    play_until(jb, 100)
    jb.hold(100)
    play_until(jb, 160, 100)
    assert jb.clear(150.0)
    assert jb.bursts[0].cut_ms == 100.0
    assert not play_until(jb, 400, 160).any()


def test_a_new_reply_key_starts_a_new_burst():
    jb = JitterBuffer(20)
    jb.push(tone(100), 0, key=1)
    jb.push(tone(100), 10, key=2)
    play_until(jb, 400)
    assert [(b.key, b.start_ms) for b in jb.bursts] == [(1, 20.0), (2, 120.0)]


def test_depth_out_of_range_is_refused():
    with pytest.raises(ValueError, match="0–2000 ms"):
        JitterBuffer(5000)
