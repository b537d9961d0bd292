"""The agent's playout: a reply's audio in one buffer, frames handed out as views with their
peaks computed in bulk, underruns padded, truncation and barge-in book-keeping."""

from __future__ import annotations

import numpy as np

from rejoinder.line import Playout


def make() -> tuple[Playout, list[tuple[str, int, float, dict]]]:
    stamps: list[tuple[str, int, float, dict]] = []
    p = Playout(16000, lambda name, turn, t, **kw: stamps.append((name, turn, t, kw)))
    return p, stamps


def test_frames_are_the_queued_audio_in_order_with_exact_peaks() -> None:
    p, stamps = make()
    rng = np.random.default_rng(7)
    audio = (rng.standard_normal(16000) * 3000).clip(-32768, 32767).astype(np.int16)
    audio[:800] = 0  # 50 ms of leading silence
    audio[5000] = -32768  # the most negative sample: its peak is 32768
    p.begin(1)
    for piece in np.array_split(audio, 7):  # TTS chunks of odd lengths
        p.send(1, piece, 0.0)
    p.end_reply(1)
    out, peaks, t = [], [], 0.0
    while p.reply is not None:
        f = p.tick(t)
        out.append(f.copy())
        peaks.append(p.last_peak)
        t += 20.0
    heard = np.concatenate(out)
    assert np.array_equal(heard[:16000], audio) and not heard[16000:].any()
    frames = heard.reshape(-1, 320).astype(np.int32)
    assert peaks == np.abs(frames).max(axis=1).tolist()
    names = [s[0] for s in stamps]
    assert names == ["first_audio_out", "playout_start", "playback_start", "playback_end"]
    first_voiced = int(np.flatnonzero(np.abs(audio.astype(np.int32)) >= 328)[0])
    assert stamps[2][2] == 1000.0 * first_voiced / 16000


def test_an_underrun_pads_the_frame_stamps_the_stall_and_the_grid_follows_the_audio() -> None:
    p, stamps = make()
    p.begin(2)
    p.send(2, np.full(500, 1000, np.int16), 0.0)  # one frame and a bit
    assert p.tick(0.0).tolist() == [1000] * 320 and p.last_peak == 1000
    f = p.tick(20.0)  # 180 samples left: played, padded with silence
    assert f[:180].tolist() == [1000] * 180 and not f[180:].any() and p.last_peak == 1000
    assert not p.tick(40.0).any() and p.last_peak == 0  # dry: a stall begins
    p.send(2, np.arange(1, 641, dtype=np.int16), 60.0)
    assert p.tick(60.0).tolist() == list(range(1, 321)) and p.last_peak == 320
    assert p.tick(80.0).tolist() == list(range(321, 641)) and p.last_peak == 640
    assert [s for s in stamps if s[0] == "stall"][0][2:] == (40.0, {"duration_ms": 20.0, "estimated": False})
    assert p.reply.played == 1140


def test_truncate_drops_only_unplayed_audio_and_clear_keeps_what_was_sent() -> None:
    p, _ = make()
    r = p.begin(3)
    p.send(3, np.full(3200, 500, np.int16), 0.0)
    p.tick(0.0)
    assert p.truncate(3, 100) == 3200 - 320  # never below what was played
    assert r.queued == 320 and r.pending == 0
    p.send(3, np.full(640, -700, np.int16), 20.0)  # resumed audio follows what was kept
    assert p.tick(20.0).tolist() == [-700] * 320 and p.last_peak == 700
    cut = p.clear(40.0)
    assert cut is r and r.ended and r.queued == 960 and r.played == 640 and p.reply is None
    p.begin(4)
    assert p.overlaps == 0  # the cleared reply left nothing to overlap
