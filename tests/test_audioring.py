"""The bounded caller-audio ring: old audio is evicted, the recorder still gets everything."""

from __future__ import annotations

import numpy as np
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
