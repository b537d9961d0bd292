"""The simulated caller's cues, ground truth and what it hears (driven frame by frame)."""

from __future__ import annotations

import numpy as np

from fakes import silence, tone
from rejoinder.harness.caller import FRAME, RenderedTurn, SimulatedCaller, voiced_span
from rejoinder.scenario import CallerTurn, Segment


def turn(pcm, **timing) -> RenderedTurn:
    return RenderedTurn(pcm, voiced_span(pcm), CallerTurn(audio=[Segment(silence_ms=0)], **timing))


def drive(caller, until_ms, agent=None):
    """Run the caller for ``until_ms``; ``agent(t)`` gives the agent frame heard at t."""
    t = 0.0
    while t < until_ms and not caller.done:
        caller.next_frame(t)
        caller.hear(agent(t) if agent else np.zeros(FRAME, np.int16), t)
        t += 20.0
    return t


def test_barge_in_without_agent_speech_times_out_and_is_flagged():
    c = SimulatedCaller([turn(tone(400)), turn(tone(300), barge_in_ms=500)], no_reply_timeout_ms=2000,
                        tail_ms=500)
    drive(c, 6000)
    assert [x["cue"] for x in c.cues] == ["start", "timeout"]
    assert c.cues[1]["missed"] and not c.cues[0]["missed"]
    assert c.done


def test_barge_in_fires_into_the_agent_reply():
    reply = tone(200).astype(np.int16)
    loud = np.tile(reply[:FRAME], 1)

    def agent(t):  # the agent talks from 1500 ms on
        return loud if t >= 1500 else np.zeros(FRAME, np.int16)

    c = SimulatedCaller([turn(tone(400)), turn(tone(300), barge_in_ms=600)])
    drive(c, 3000, agent)
    assert c.cues[1]["cue"] == "barge_in" and c.cues[1]["at_ms"] == 2100.0
    assert abs(c.heard_onsets[0] - 1500.0) <= 1.0  # first sample above the level


def test_dead_air_has_no_truth_and_ends_after_the_tail():
    c = SimulatedCaller([turn(silence(1000))], tail_ms=500)
    end = drive(c, 20000)
    assert c.truth == [] and c.done and end < 2500


def test_truth_is_the_voiced_span_and_onsets_are_sample_accurate():
    pcm = np.concatenate([silence(100), tone(500)])
    c = SimulatedCaller([turn(pcm)], start_ms=200, tail_ms=300)
    frame = np.zeros(FRAME, np.int16)
    frame[37:] = 5000

    def agent(t):
        return frame if t == 1400 else (np.full(FRAME, 5000, np.int16) if t > 1400 and t < 1600 else
                                        np.zeros(FRAME, np.int16))

    drive(c, 5000, agent)
    (_, start, end), = c.truth
    assert abs(start - (200 + 100)) <= 1  # the first voiced sample, after 100 ms of leading silence
    assert abs(end - (200 + 600)) <= 1
    assert c.heard_onsets == [1400 + 1000 * 37 / 16000]


def test_a_cue_waited_for_moves_with_agent_speech_heard_while_waiting():
    # the caller's first turn (from 500 ms) ends at 900 ms; the agent talks 1000–1400 ms,
    # pauses, and talks again 1600–1800 ms: the second turn is cued 500 ms after the *last*
    # word heard (2300 ms), not after the first stretch (1900 ms), though the frames in
    # between skip the cue check
    loud = np.full(FRAME, 5000, np.int16)

    def agent(t):
        return loud if 1000 <= t < 1400 or 1600 <= t < 1800 else np.zeros(FRAME, np.int16)

    c = SimulatedCaller([turn(tone(400)), turn(tone(300), after_agent_ms=500)], tail_ms=300)
    drive(c, 4000, agent)
    assert [(x["cue"], x["at_ms"]) for x in c.cues] == [("start", 500.0), ("after_agent", 2300.0)]


def test_a_cue_due_at_a_frame_boundary_falls_on_that_frame():
    c = SimulatedCaller([turn(tone(400)), turn(tone(300), at_ms=1000.0)], tail_ms=300)
    drive(c, 3000)
    assert [(x["cue"], x["at_ms"]) for x in c.cues] == [("start", 500.0), ("at", 1000.0)]
