"""The bounded caller-audio ring: old audio is evicted, the recorder still gets everything."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from rejoinder.audioring import AudioRing
from rejoinder.harness.callrun import run_call
from rejoinder.clock import VirtualClock
from rejoinder.events import EventBus
from rejoinder.session import AUDIO_RING_S, LINE_RATE, Session
from rejoinder.stages import Stamper

from fakes import scripted_agent, silence, tone
from test_session import make_stack, turn


def frames(pcm: np.ndarray, n: int = 320):
    for i in range(0, len(pcm), n):
        yield pcm[i:i + n]


def test_ring_keeps_the_last_seconds_addressed_by_call_time() -> None:
    ring = AudioRing(rate=1000, seconds=1.0)  # 1000 samples kept
    ramp = (np.arange(3000) % 30000).astype(np.int16)
    t = 250.0  # the call clock's time of the first frame
    for f in frames(ramp, 10):
        ring.write(f, t)
        t += 10.0
    assert ring.n == 3000 and ring.oldest == 2000
    # the last second is there, exactly, across the wrap-around
    seg = ring.segment(250.0 + 2000.0, 250.0 + 3000.0)
    assert np.array_equal(np.round(seg * 32768.0).astype(np.int16), ramp[2000:3000])
    inner = ring.segment(250.0 + 2345.0, 250.0 + 2789.0)
    assert np.array_equal(np.round(inner * 32768.0).astype(np.int16), ramp[2345:2789])
    # older audio was evicted: a request reaching back starts at the oldest sample kept
    old = ring.segment(250.0, 250.0 + 2100.0)
    assert np.array_equal(np.round(old * 32768.0).astype(np.int16), ramp[2000:2100])
    assert len(ring.segment(250.0, 250.0 + 1500.0)) == 0
    assert ring._buf.nbytes == 2000  # int16, fixed size


async def test_a_long_call_keeps_bounded_audio_but_records_it_all(tmp_path) -> None:
    """A turn 40 s into the call is transcribed from its own audio while the first turn's audio
    has been evicted; call.wav still has every frame of the call."""
    clock = VirtualClock()
    stack = make_stack(clock, ["Check order 4217.", "Thanks."])
    first, second = turn(tone(700)), turn(tone(900), at_ms=40_000.0)
    res = await run_call([first, second], stack, scripted_agent(), clock=clock, tail_ms=800,
                         out_dir=tmp_path)
    assert res.error is None
    assert len([r for r in res.turns if "eot_decided" in r.stamps]) == 2
    # each STT request got its own turn's audio: onset − 300 ms pre-roll … end + 120 ms tail
    assert stack.stt.requests[0] > 0.7 and abs(stack.stt.requests[-1] - (0.9 + 0.3 + 0.12)) < 0.1
    wav, rate = sf.read(tmp_path / "call.wav", dtype="int16")
    assert rate == LINE_RATE
    assert len(wav) == int(res.duration_ms * LINE_RATE / 1000)  # the recorder got everything
    assert res.duration_ms > 40_000.0 + 900.0 > AUDIO_RING_S * 1000.0
    # the caller's channel holds both turns: the first one's tone is on disk, not in memory
    assert np.abs(wav[:int(2.0 * LINE_RATE), 0].astype(np.int32)).max() > 5000


async def test_session_memory_is_flat_in_call_length() -> None:
    clock = VirtualClock()
    st = Stamper("c1", clock, EventBus())
    session = Session(st, make_stack(clock, ["Hello."]), scripted_agent())
    size = session.audio._buf.nbytes
    loud = tone(20)
    t = 0.0
    for _ in range(int(3 * AUDIO_RING_S * 1000 / 20)):  # three ring lengths of caller audio
        session.on_frame(loud if int(t) % 5000 < 1000 else silence(20), t)
        t += 20.0
    assert session.audio._buf.nbytes == size == int(AUDIO_RING_S * LINE_RATE) * 2
    assert len(session._segment(0.0, 1000.0)) == 0  # the call's first second is gone
    recent = session._segment(t - 6000.0, t)
    assert len(recent) == 6000 * LINE_RATE // 1000
    await session.close()


class _Recorder:
    """An inline window VAD that records what it was given: p = 0.9 iff the window's peak ≥ 0.1."""

    sample_rate = 16000
    window_samples = 512

    def __init__(self) -> None:
        self.windows: list[np.ndarray] = []

    def reset(self) -> None:
        pass

    def speech_prob(self, window: np.ndarray) -> float:
        self.windows.append(window.copy())
        return 0.9 if float(np.abs(window).max()) >= 0.1 else 0.0


def test_vad_windows_read_from_the_ring_equal_the_staged_ones_across_its_wrap() -> None:
    from rejoinder.vad import VadTracker

    rng = np.random.default_rng(7)
    # 3 s of speech-like bursts and silence; a 1.01 s ring wraps inside a 512-sample window
    pcm = np.zeros(48000, dtype=np.int16)
    for a, b in ((3000, 12000), (20000, 31000), (40000, 46000)):
        pcm[a:b] = rng.integers(-12000, 12000, b - a, dtype=np.int16)
    ring = AudioRing(rate=16000, seconds=1.01)
    assert ring.capacity % 512 != 0
    staged_vad, ring_vad = _Recorder(), _Recorder()
    staged, in_ring = VadTracker(staged_vad), VadTracker(ring_vad)
    t, sig_staged, sig_ring = 40.0, [], []
    for f in frames(pcm):
        sig_staged += staged.push(f, t)
        ring.write(f, t)
        sig_ring += in_ring.push_ring(ring, len(f))
        t += 20.0
    assert len(ring_vad.windows) == len(staged_vad.windows) == 48000 // 512
    for x, y in zip(ring_vad.windows, staged_vad.windows):
        assert np.array_equal(x, y)
    assert sig_ring == sig_staged
    assert [s.kind for s in sig_ring].count("onset") == 3
    assert sig_ring[0].at_ms == 40.0 + 1000.0 * (3000 // 512 * 512) / 16000


async def test_an_ended_calls_ring_buffer_is_reused_by_the_next_call_and_never_written_again() -> None:
    from rejoinder import audioring

    clock = VirtualClock()
    st = Stamper("c1", clock, EventBus())
    first = Session(st, make_stack(clock, ["Hello."]), scripted_agent())
    buf = first.audio._buf
    for i in range(50):
        first.on_frame(tone(20), 20.0 * i)
    before = audioring.pooled_buffers()
    await first.close()
    assert audioring.pooled_buffers() == before + 1
    assert len(first._segment(0.0, 1000.0)) == 0  # released: nothing to read
    first.on_frame(tone(20), 1000.0)  # a transport still sending after the end: dropped
    with pytest.raises(RuntimeError, match="released"):
        first.audio.write(tone(20), 1020.0)
    second = Session(Stamper("c2", clock, EventBus()), make_stack(clock, ["Hi."]), scripted_agent())
    assert second.audio._buf is buf and audioring.pooled_buffers() == before
    # the old call's samples are never read: the new ring starts empty
    assert second.audio.n == 0 and len(second._segment(0.0, 1000.0)) == 0
    quiet = silence(20)
    for i in range(50):
        second.on_frame(quiet, 20.0 * i)
    assert not second._segment(0.0, 1000.0).any()  # the first call's tone is not in it
    await second.close()
