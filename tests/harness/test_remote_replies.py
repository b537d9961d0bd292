"""What the caller heard from a black-box target → replies and turns: grouping, ownership, cuts,
stalls and unanswered requests, from scripted bursts (no sockets, no clocks)."""

from __future__ import annotations

import numpy as np

from rejoinder.harness.remote.jitter import Burst
from rejoinder.harness.remote.replies import build_records, group_replies


def burst(i: int, start: float, end: float, *, key=None, voiced_at: float | None = None, cut=None, after_hold=False):
    b = Burst(i, key, arrival_ms=start - 60, start_ms=start, after_hold=after_hold)
    b.played = int(16 * (end - start))
    b.first_voiced_ms = start + 10 if voiced_at is None else voiced_at
    b.end_ms = end
    b.cut_ms = cut
    b.chunks = [np.full(b.played, 1000, np.int16)]
    return b


def test_a_request_ending_between_bursts_starts_a_new_reply_and_owns_it():
    truth = [(0, 500, 1500), (1, 4000, 5000)]
    bursts = [burst(0, 2000, 3000), burst(1, 5800, 7000)]
    replies = group_replies(bursts, clears=[], truth=truth, requests={0, 1}, keyed=False)
    assert [len(r.bursts) for r in replies] == [1, 1]
    heard = build_records(replies, truth, {0, 1}, keyed=False)
    r1, r2 = heard.records
    assert r1.v2v_ms() == 2010 - 1500 and r2.v2v_ms() == 5810 - 5000
    assert heard.owners == {1: 0, 2: 1}
    assert r1.stamps["first_audio_in"] == 1940 and r1.stamps["playout_start"] == 2000
    assert r1.stamps["answer_start"] == r1.stamps["playback_start"]   # no filler can be told apart


def test_audio_resumed_after_a_backchannel_continues_the_same_reply():
    truth = [(0, 500, 1500), (1, 3000, 3400)]        # turn 1 is "uh-huh" over the reply
    bursts = [burst(0, 2000, 3200), burst(1, 3600, 6000)]
    replies = group_replies(bursts, clears=[], truth=truth, requests={0}, keyed=False)
    assert len(replies) == 1 and len(replies[0].bursts) == 2
    heard = build_records(replies, truth, {0}, keyed=False)
    [rec] = heard.records
    assert rec.status == "completed" and rec.stamps["playback_end"] == 6000
    assert rec.stalls == [(3200, 400)]                 # the gap inside the reply is a stall
    assert heard.owners == {1: 0}                      # the backchannel owns no reply


def test_a_clear_between_bursts_splits_replies_and_a_clear_while_audible_is_a_cut():
    truth = [(0, 500, 1500), (1, 2500, 3500)]
    bursts = [burst(0, 2000, 2600, cut=2600), burst(1, 4300, 5000)]
    replies = group_replies(bursts, clears=[2590], truth=truth, requests={0, 1}, keyed=False)
    assert len(replies) == 2
    heard = build_records(replies, truth, {0, 1}, keyed=False)
    first, second = heard.records
    assert first.status == "interrupted" and first.stamps["interrupted_at"] == 2600
    assert second.v2v_ms() == 4310 - 3500


def test_audio_that_stops_while_a_request_is_spoken_over_it_counts_as_cut():
    truth = [(0, 500, 1500), (1, 2500, 4000)]
    bursts = [burst(0, 2000, 2700), burst(1, 4600, 5200)]   # stopped 200 ms into the barge-in
    heard = build_records(group_replies(bursts, clears=[], truth=truth, requests={0, 1}, keyed=False),
                          truth, {0, 1}, keyed=False)
    assert heard.records[0].status == "interrupted"
    assert heard.records[0].stamps["interrupted_at"] == 2700


def test_a_reply_that_starts_before_the_caller_finished_owns_nothing():
    truth = [(0, 500, 3000)]                            # the agent answered in a pause of the request
    bursts = [burst(0, 1800, 2200), burst(1, 3700, 4500)]
    heard = build_records(group_replies(bursts, clears=[], truth=truth, requests={0}, keyed=False),
                          truth, {0}, keyed=False)
    early, late = heard.records
    assert early.v2v_ms() is None and late.v2v_ms() == 3710 - 3000
    assert heard.owners[early.turn_id] is None and heard.owners[late.turn_id] == 0


def test_an_unanswered_request_is_a_no_reply_turn():
    truth = [(0, 500, 1500), (1, 4000, 5000)]
    heard = build_records(group_replies([burst(0, 2000, 3000)], clears=[], truth=truth, requests={0, 1},
                                        keyed=False), truth, {0, 1}, keyed=False)
    assert [r.status for r in heard.records] == ["completed", "no_reply"]
    assert heard.records[1].stamps == {"user_speech_start": 4000, "user_speech_end": 5000}
    assert heard.owners[heard.records[1].turn_id] == 1


def test_keyed_bursts_group_by_the_targets_turn_id():
    truth = [(0, 500, 1500)]
    bursts = [burst(0, 2000, 2500, key=4), burst(1, 2700, 3000, key=4), burst(2, 3100, 3300, key=4, after_hold=True)]
    replies = group_replies(bursts, clears=[], truth=truth, requests={0}, keyed=True)
    heard = build_records(replies, truth, {0}, keyed=True)
    [rec] = heard.records
    assert rec.turn_id == 4 and rec.stalls == [(2500, 200)]   # not the gap before the resumed burst
