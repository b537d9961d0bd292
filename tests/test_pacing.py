"""The shared pacing timer on a virtual clock: many calls' frames in order, on the grid, no drift."""

from __future__ import annotations

import asyncio

import pytest

from rejoinder.clock import VirtualClock
from rejoinder.pacing import STOP, AgeHistogram, Pacer


class Offset:
    """A call clock that started ``origin`` ms after the pacer's (a call opened later)."""

    def __init__(self, base: VirtualClock, origin: float) -> None:
        self.base, self.origin = base, origin

    def now_ms(self) -> float:
        return self.base.now_ms() - self.origin


def test_many_calls_get_every_frame_in_order_on_one_timer() -> None:
    async def main() -> None:
        clock = VirtualClock()
        pacer = Pacer(clock)
        seen: dict[int, list[tuple[float, float]]] = {i: [] for i in range(50)}

        def stepper(i: int, call_clock: Offset, frames: int):
            def step(t: float):
                seen[i].append((t, call_clock.now_ms()))
                return STOP if len(seen[i]) == frames else None
            return step

        runs = []
        for i in range(50):
            await clock.advance(7.0 if i % 3 else 13.0)  # calls open at odd moments
            cc = Offset(clock, clock.now_ms())
            runs.append(asyncio.ensure_future(pacer.run(stepper(i, cc, 200 + i), cc)))
        await clock.advance(20.0 * 400)
        await asyncio.gather(*runs)
        for i, frames in seen.items():
            assert len(frames) == 200 + i
            ts = [t for t, _ in frames]
            assert all(b - a == 20.0 for a, b in zip(ts, ts[1:]))  # in order, exact period
            # each frame runs at its own due time on its call's clock: no drift, never early
            assert all(now == pytest.approx(t, abs=1e-9) for t, now in frames)
        # one timer: wakes are grid points, not frames × calls
        assert pacer.wakes <= 400 + 60
        assert pacer.ages.n == sum(200 + i for i in range(50))
        assert pacer.ages.max_ms == pytest.approx(0.0, abs=1e-9)
    asyncio.run(main())


def test_late_tick_catches_up_in_order_or_resyncs() -> None:
    async def main() -> None:
        clock = VirtualClock()
        pacer = Pacer(clock)
        plain: list[float] = []
        live: list[float] = []
        pacer.add(lambda t: plain.append(t), clock)
        pacer.add(lambda t: live.append(t), clock, resync_ms=200.0)
        await clock.advance(100.0)
        assert plain == [0.0, 20.0, 40.0, 60.0, 80.0, 100.0]
        # the loop is blocked for 1 s: the next tick finds 50 frames due
        clock._now += 1000.0
        assert pacer.tick() is True  # three frames per pass: still behind
        assert plain[-1] == 160.0
        while pacer.tick():
            pass
        assert plain[-1] == 1100.0 and len(plain) == 56  # caught up frame by frame
        assert all(b - a == 20.0 for a, b in zip(plain, plain[1:]))
        assert live[-1] == 1100.0 and len(live) < 10  # skipped ahead instead of bursting
        assert pacer.ages.max_ms == pytest.approx(980.0)  # frame 120 ran at 1100
        for lane in list(pacer.lanes):
            pacer.remove(lane)
        await clock.advance(40.0)
    asyncio.run(main())


def test_a_failing_step_ends_only_its_own_lane() -> None:
    async def main() -> None:
        clock = VirtualClock()
        pacer = Pacer(clock)
        other: list[float] = []
        hooks: list[int] = []
        pacer.after_tick.append(lambda: hooks.append(len(other)))

        def bad(t: float):
            if t >= 60.0:
                raise RuntimeError("transport gone")

        failing = asyncio.ensure_future(pacer.run(bad, clock))
        fine = asyncio.ensure_future(pacer.run(lambda t: STOP if t >= 200.0 else other.append(t), clock))
        await clock.advance(300.0)
        with pytest.raises(RuntimeError, match="transport gone"):
            await failing
        assert await fine == 220.0
        assert other == [20.0 * k for k in range(10)]
        assert hooks[:3] == [1, 2, 3]  # after-tick hooks run once per tick, after the lanes
    asyncio.run(main())


def test_age_histogram_percentiles() -> None:
    h = AgeHistogram(bucket_ms=1.0, max_ms=100.0)
    for x in range(100):
        h.add(float(x) + 0.5)
    assert h.percentile(50) == 50.0 and h.percentile(99) == 99.0
    h.add(10_000.0)  # beyond the last bucket: counted there, max kept exactly
    assert h.max_ms == 10_000.0 and h.percentile(100) == 101.0


def test_the_shared_pacer_runs_calls_on_the_real_clock() -> None:
    """Frame loops on real clocks share one pacer per event loop (functional: no timing)."""
    from rejoinder.clock import RealClock
    from rejoinder.pacing import shared_pacer

    async def main() -> list[list[float]]:
        seen: list[list[float]] = [[], []]

        def stepper(i: int):
            return lambda t: STOP if len(seen[i]) == 5 else seen[i].append(t)
        p = shared_pacer()
        assert shared_pacer() is p
        await asyncio.gather(*(p.run(stepper(i), RealClock()) for i in range(2)))
        return seen

    for _ in range(2):  # a second event loop gets its own pacer
        seen = asyncio.run(main())
        for ts in seen:
            assert len(ts) == 5 and all(b - a == pytest.approx(20.0) for a, b in zip(ts, ts[1:]))


def test_phases_spread_the_lanes_and_keep_each_lanes_period() -> None:
    """With four phases the lanes are spread 5 ms apart (the least-loaded phase first), each
    wake steps one phase's lanes, and every lane keeps its exact 20 ms period, never early."""
    async def main() -> None:
        clock = VirtualClock()
        pacer = Pacer(clock, phases=4)
        seen: dict[int, list[tuple[float, float]]] = {i: [] for i in range(8)}
        per_wake: list[int] = []
        count = [0]

        def stepper(i: int):
            def step(t: float):
                seen[i].append((t, clock.now_ms()))
                count[0] += 1
                return STOP if len(seen[i]) == 50 else None
            return step

        pacer.after_tick.append(lambda: (per_wake.append(count[0]), count.__setitem__(0, 0)))
        runs = [asyncio.ensure_future(pacer.run(stepper(i), clock)) for i in range(8)]
        await clock.advance(20.0 * 60)
        await asyncio.gather(*runs)
        starts = sorted(frames[0][0] for frames in seen.values())
        assert [s % 20.0 for s in starts] == [0.0, 0.0, 5.0, 5.0, 10.0, 10.0, 15.0, 15.0]
        for frames in seen.values():
            ts = [t for t, _ in frames]
            assert len(ts) == 50 and all(b - a == 20.0 for a, b in zip(ts, ts[1:]))
            assert all(now == pytest.approx(t, abs=1e-9) for t, now in frames)
        assert max(per_wake) == 2  # two lanes per phase: a wake steps two, not eight
        assert pacer.ages.n == 400 and pacer.ages.max_ms == pytest.approx(0.0, abs=1e-9)
    asyncio.run(main())
