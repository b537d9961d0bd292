"""VAD batched across calls: one model call per loop iteration, per-call order and state kept."""

from __future__ import annotations

import asyncio

import numpy as np

from rejoinder.harness.callrun import run_call
from rejoinder.clock import VirtualClock
from rejoinder.vad import VadTracker
from rejoinder.vadbatch import BatchedVAD, VadBatcher

from fakes import AmplitudeVAD, scripted_agent, silence, tone
from test_session import make_stack, turn


class CountingModel:
    """P = the window's peak; a per-slot counter is the 'recurrent state'."""

    sample_rate = 16000
    window_samples = 512

    def __init__(self) -> None:
        self.calls: list[list[int]] = []
        self.state: list[int] = []

    def grow(self, slots: int) -> None:
        self.state += [0] * (slots - len(self.state))

    def reset_slot(self, slot: int) -> None:
        self.state[slot] = 0

    def run(self, windows: np.ndarray, slots: np.ndarray) -> np.ndarray:
        self.calls.append(slots.tolist())
        for s in slots:
            self.state[s] += 1
        return windows.max(axis=1).astype(np.float64)


async def test_one_model_call_serves_every_stream_of_the_iteration() -> None:
    model = CountingModel()
    b = VadBatcher(model, slots=2)  # grows past 2 streams
    got: dict[int, list[tuple[float, float]]] = {}
    slots = []
    for i in range(5):
        s = b.open()
        slots.append(s)
        b.bind(s, lambda p, t, i=i: got.setdefault(i, []).append((round(p, 3), t)))
    for k in range(3):  # three ticks: every stream submits one window per tick
        for i, s in enumerate(slots):
            b.submit(s, np.full(512, 0.1 * (i + 1), np.float32), 1.0, 32.0 * k)
        assert len(model.calls) == k  # nothing scored until the iteration ends
        await asyncio.sleep(0)  # the loop iteration ends: one batch
    assert len(model.calls) == 3 and all(len(c) == 5 for c in model.calls)
    assert {i: [p for p, _ in v] for i, v in got.items()} == {i: [round(0.1 * (i + 1), 3)] * 3 for i in range(5)}
    assert all([t for _, t in v] == [0.0, 32.0, 64.0] for v in got.values())
    assert model.state[slots[0]] == 3


async def test_a_second_window_before_the_flush_keeps_per_stream_order() -> None:
    model = CountingModel()
    b = VadBatcher(model)
    s = b.open()
    seen: list[float] = []
    b.bind(s, lambda p, t: seen.append(t))
    b.submit(s, np.zeros(512, np.float32), 1.0, 0.0)
    b.submit(s, np.zeros(512, np.float32), 1.0, 32.0)  # flushes the first one at once
    await asyncio.sleep(0)
    assert seen == [0.0, 32.0] and len(model.calls) == 2


async def test_closed_streams_free_their_slot_and_get_nothing() -> None:
    model = CountingModel()
    b = VadBatcher(model, slots=4)
    s = b.open()
    seen: list[float] = []
    b.bind(s, lambda p, t: seen.append(p))
    b.submit(s, np.ones(512, np.float32), 1.0, 0.0)
    b.close(s)  # the call ended with a window waiting
    await asyncio.sleep(0)
    assert seen == []
    again = b.open()
    assert again == s and model.state[s] == 0  # reused, its state reset


class BatchedAmplitude(BatchedVAD):
    @classmethod
    def make_model(cls):
        class Amplitude(CountingModel):
            def run(self, windows, slots):
                super().run(windows, slots)
                return np.where(np.abs(windows).max(axis=1) >= 0.05, 0.95, 0.02)
        return Amplitude()


async def test_tracker_signals_arrive_after_the_batch_int16_frames() -> None:
    tr = VadTracker(BatchedAmplitude(), min_speech_ms=64, pause_ms=160)
    sigs: list[tuple[str, float]] = []
    tr.on_signals = lambda out: sigs.extend((s.kind, s.at_ms) for s in out)
    sound = np.concatenate([np.zeros(16000, np.int16), tone(1000), np.zeros(16000, np.int16)])
    for i in range(0, len(sound), 320):
        assert tr.push(sound[i:i + 320], i / 16) == []  # nothing inline
        await asyncio.sleep(0)
    kinds = [k for k, _ in sigs]
    assert kinds[0] == "onset" and kinds[-1] == "pause" and kinds.count("onset") == 1
    assert abs(sigs[0][1] - 1000) <= 32 and abs(sigs[-1][1] - 2000) <= 32
    tr.close()


async def test_speech_going_on_reaches_on_voiced_without_a_list_and_matches_the_inline_signals() -> None:
    # two runs of speech with a 100 ms dip inside the first (shorter than the pause) and a
    # reset-length silence between: onset, voiced ×n, a dip, voiced again, pause, onset, …
    sound = np.concatenate([silence(1200), tone(600), silence(100), tone(500), silence(1500),
                            tone(400), silence(800)])
    inline = VadTracker(AmplitudeVAD(), min_speech_ms=64, pause_ms=160)
    want: list[tuple[str, float]] = []
    for i in range(0, len(sound), 320):
        want += [(s.kind, s.at_ms) for s in inline.push(sound[i:i + 320], i / 16)]
    batched = VadTracker(BatchedAmplitude(), min_speech_ms=64, pause_ms=160)
    got: list[tuple[str, float]] = []
    lists: list[list[str]] = []
    batched.on_signals = lambda out: (got.extend((s.kind, s.at_ms) for s in out),
                                      lists.append([s.kind for s in out]))
    batched.on_voiced = lambda end_ms: got.append(("voiced", end_ms))
    for i in range(0, len(sound), 320):
        batched.push(sound[i:i + 320], i / 16)
        await asyncio.sleep(0)
    assert got == want
    assert [k for k, _ in want].count("onset") == 2 and [k for k, _ in want].count("pause") == 2
    # every "voiced" of speech already begun (after the dip too) went to on_voiced: the lists
    # hold only the onsets, each with its first "voiced", and the pauses
    assert lists == [["onset", "voiced"], ["pause"], ["onset", "voiced"], ["pause"]]
    assert sum(k == "voiced" for k, _ in want) == 48
    batched.close()


async def test_a_call_with_the_batched_vad_is_answered_like_with_an_inline_one() -> None:
    results = []
    for vad in (None, BatchedAmplitude()):
        clock = VirtualClock()
        stack = make_stack(clock, ["Where is my order?"])
        if vad is not None:
            stack.vad = vad
        res = await run_call([turn(tone(700))], stack, scripted_agent(), clock=clock, tail_ms=1200)
        assert res.error is None
        [rec] = [r for r in res.turns if "eot_decided" in r.stamps]
        results.append({k: v for k, v in rec.stamps.items()})
    inline, batched = results
    assert batched["eot_decided"] == inline["eot_decided"]
    assert batched["playback_start"] == inline["playback_start"]


def test_a_flush_left_on_an_ended_loop_does_not_stall_the_next_one() -> None:
    model = CountingModel()
    b = VadBatcher(model)
    s = b.open()
    seen: list[float] = []
    b.bind(s, lambda p, t: seen.append(t))

    async def submit_and_end(t: float) -> None:
        b.submit(s, np.zeros(512, np.float32), 1.0, t)  # the loop ends before its flush runs

    asyncio.run(submit_and_end(0.0))

    async def next_call() -> None:
        b.submit(s, np.zeros(512, np.float32), 1.0, 32.0)
        await asyncio.sleep(0)
    asyncio.run(next_call())
    assert seen == [0.0, 32.0]  # the stranded window was scored first, then the new one


async def test_int16_windows_are_scored_as_the_same_floats_in_a_mixed_batch() -> None:
    """int16 windows are staged as int16 and scaled once per batch: the model sees exactly
    ``x / 32768``, in a batch that also holds a float32 window, each delivered to its stream."""
    seen: list[np.ndarray] = []

    class Recording(CountingModel):
        def run(self, windows: np.ndarray, slots: np.ndarray) -> np.ndarray:
            seen.append(windows.copy())
            return super().run(windows, slots)

    b = VadBatcher(Recording(), slots=4)
    got: dict[int, float] = {}
    pcm = (np.arange(512, dtype=np.int32) * 61 - 15000).astype(np.int16)
    a, f, c = b.open(), b.open(), b.open()
    for s in (a, f, c):
        b.bind(s, lambda p, t, s=s: got.__setitem__(s, p))
    b.submit(a, pcm, 1.0 / 32768.0, 0.0)
    b.submit(f, np.full(512, 0.25, np.float32), 1.0, 0.0)
    b.submit(c, pcm[::-1].copy(), 1.0 / 32768.0, 0.0)
    await asyncio.sleep(0)
    assert len(seen) == 1 and seen[0].dtype == np.float32 and seen[0].shape == (3, 512)
    np.testing.assert_array_equal(seen[0][0], pcm.astype(np.float32) / 32768.0)
    np.testing.assert_array_equal(seen[0][1], np.full(512, 0.25, np.float32))
    np.testing.assert_array_equal(seen[0][2], pcm[::-1].astype(np.float32) / 32768.0)
    assert got == {a: float(pcm.max()) / 32768.0, f: 0.25, c: float(pcm.max()) / 32768.0}


async def test_an_offloaded_model_scores_on_its_worker_in_order_and_frees_slots_only_after() -> None:
    """``offload``: batches run on the batcher's worker thread while the loop goes on; each
    stream's probabilities come back in order, state changes (reset, grow) are queued behind the
    batches in flight, and a slot closed with windows in flight is reused only after they are
    delivered (never to the next call)."""
    import threading

    gate = threading.Event()
    threads: set[str] = set()

    class Slow(CountingModel):
        offload = True

        def run(self, windows: np.ndarray, slots: np.ndarray) -> np.ndarray:
            threads.add(threading.current_thread().name)
            gate.wait(5.0)  # the loop must not wait for this
            return super().run(windows, slots)

    model = Slow()
    b = VadBatcher(model, slots=1)
    got: list[tuple[int, float, float]] = []
    a, c = b.open(), b.open()  # the second grows the batcher (queued on the worker)
    for s in (a, c):
        b.bind(s, lambda p, t, s=s: got.append((s, round(p, 3), t)))
    for k in range(3):
        b.submit(a, np.full(512, 0.1 * (k + 1), np.float32), 1.0, 32.0 * k)
        b.submit(c, np.full(512, 0.5, np.float32), 1.0, 32.0 * k)
        await asyncio.sleep(0)  # a batch is handed over; the loop is free at once
    assert got == [] and b.batches == 3
    b.close(c)  # closed with three windows in flight
    assert b.open() != c  # ... so its slot is not handed out yet
    gate.set()
    for _ in range(200):
        if len(got) == 3:
            break
        await asyncio.sleep(0.01)
    assert got == [(a, 0.1, 0.0), (a, 0.2, 32.0), (a, 0.3, 64.0)]  # c was closed: not delivered
    assert threads == {"rejoinder-vad-batch_0"}
    assert model.state[a] == 3 and c in b._free
