"""One pacing timer per process: every call's 20 ms frame loop runs off a single shared tick.

A frame loop written as ``while …: await clock.pace(t); step(t); t += 20`` costs one timer, one
task wake-up and one loop iteration per frame per call: at hundreds of calls that is most of the
event loop's work. :class:`Pacer` instead keeps one timer for the whole process. Each call
registers a *lane* — a synchronous ``step(t_ms)`` callback on the call's own clock — and the pacer
wakes once per grid point (every ``frame_ms`` on its own clock), calls every lane that is due, in
registration order, and then runs its ``after_tick`` hooks once (the cross-call VAD batch is
not one: it runs right after the tick, as an event-loop callback, :mod:`rejoinder.vadbatch`).
A lane's frames are placed on the pacer's grid: its first frame is the first grid point
at or after it was added, and frame *k* is due exactly ``k × frame_ms`` later (integer frame
count times the period, so there is no drift however long the call).

With ``phases`` > 1 (the process's shared pacer uses :data:`PHASES`) the lanes are spread over
that many evenly spaced phases of the period, the least-loaded phase for each new lane, and the
pacer wakes once per phase: each wake steps only its phase's lanes. Frames arriving from real
callers are spread over the period anyway (each caller's clock has its own phase); stepping every
call at one instant instead makes a burst whose last frames wait for all the others, so with
``N`` calls of ``c`` µs each a frame waits up to ``N × c`` — with four phases up to a quarter of it,
for the same CPU.

When the loop is late (a blocked event loop, CPU starvation) a lane catches up frame by frame,
in order, at most three frames per lane per pass, with the event loop served between passes; a lane that is more than ``resync_ms`` behind skips ahead instead of bursting (live
transports: audio that late is useless). Every frame's *age* — how late its step ran after it
was due, in ms — goes into :attr:`Pacer.ages` (a fixed-bucket histogram: no allocation per frame),
the figure the capacity benchmark reads (``bench/capacity.py``).

A lane ends when its step returns :data:`STOP` or raises; the coroutine awaiting
:meth:`Pacer.run` then returns or re-raises. Cancelling that coroutine removes the lane.

:func:`shared_pacer` gives the process's pacer for the running event loop (real clock). Tests build
a :class:`Pacer` on a :class:`~rejoinder.clock.VirtualClock` and drive it with ``advance``.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Callable

from .clock import Clock, RealClock

log = logging.getLogger("rejoinder.pacing")

STOP = object()  #: returned by a lane's step to end the lane normally
FRAME_MS = 20.0
PHASES = 4  #: phases of the process's shared pacer (5 ms apart at 20 ms frames)


class AgeHistogram:
    """Frame ages (ms) in fixed buckets of ``bucket_ms`` up to ``max_ms`` (the last bucket holds
    everything later). ``add`` allocates nothing; percentiles are bucket upper edges."""

    def __init__(self, bucket_ms: float = 0.25, max_ms: float = 500.0) -> None:
        self.bucket_ms = bucket_ms
        self._scale = 1.0 / bucket_ms
        self.counts = [0] * (int(max_ms / bucket_ms) + 1)
        self._last = len(self.counts) - 1
        self.n = 0
        self.max_ms = 0.0

    def add(self, age_ms: float) -> None:
        i = int(age_ms * self._scale) if age_ms > 0 else 0
        self.counts[i if i < self._last else self._last] += 1
        self.n += 1
        if age_ms > self.max_ms:
            self.max_ms = age_ms

    def percentile(self, q: float) -> float | None:
        """The ``q``-th percentile (0–100) in ms (a bucket's upper edge), None when empty."""
        if not self.n:
            return None
        rank = math.ceil(self.n * q / 100.0)
        seen = 0
        for i, c in enumerate(self.counts):
            seen += c
            if seen >= rank:
                return round((i + 1) * self.bucket_ms, 3)
        return round(self.max_ms, 3)

    def summary(self) -> dict:
        return {"frames": self.n, "p50": self.percentile(50), "p95": self.percentile(95),
                "p99": self.percentile(99), "max": round(self.max_ms, 3)}

    def reset(self) -> None:
        self.counts = [0] * len(self.counts)
        self.n = 0
        self.max_ms = 0.0


class Lane:
    """One registered frame loop (see :meth:`Pacer.add`)."""

    __slots__ = ("step", "offset_ms", "first_ms", "k", "resync_frames", "done", "name", "phase")

    def __init__(self, step: Callable[[float], object], offset_ms: float, first_ms: float,
                 resync_frames: int | None, done: asyncio.Future, name: str, phase: int = 0) -> None:
        self.step = step
        self.offset_ms = offset_ms      # pacer time − lane clock time
        self.first_ms = first_ms        # lane-clock time of frame 0
        self.k = 0                      # next frame index
        self.resync_frames = resync_frames
        self.done = done
        self.name = name
        self.phase = phase              # which of the pacer's phases steps it


class Pacer:
    """The shared frame timer (see the module docstring).

    Args:
        clock: the pacer's time base (default: a real clock started now).
        frame_ms: the period (default 20 ms).
        phases: evenly spaced phases of the period the lanes are spread over (default 1: every
            lane on the same grid).
    """

    def __init__(self, clock: Clock | None = None, frame_ms: float = FRAME_MS,
                 phases: int = 1) -> None:
        self.clock = clock or RealClock()
        self.frame_ms = frame_ms
        self.phases = max(1, int(phases))
        self._sub_ms = frame_ms / self.phases  # the wake grid
        self.lanes: list[Lane] = []
        self._by_phase: list[list[Lane]] = [[] for _ in range(self.phases)]
        self.after_tick: list[Callable[[], None]] = []
        self.ages = AgeHistogram()
        self.wakes = 0
        self.catchups = 0  # extra ticks while lanes were behind
        self._ticked_ms = -math.inf  # the last grid point ticked
        self._task: asyncio.Task | None = None

    # --- lanes ---------------------------------------------------------------------------------
    def add(self, step: Callable[[float], object], clock: Clock, *, resync_ms: float | None = None,
            name: str = "lane") -> Lane:
        """Register ``step``; returns its lane. Frame *k* calls ``step(first + k × frame_ms)`` on
        ``clock`` (the call's clock), where ``first`` is the lane-clock time of the first pacer
        grid point from now (:attr:`Lane.first_ms`)."""
        now = self.clock.now_ms()
        offset = now - clock.now_ms()
        phase = min(range(self.phases), key=lambda p: len(self._by_phase[p]))
        sub = self._sub_ms
        g = math.ceil(now / sub)  # the first wake point from now that is this lane's phase
        g += (phase - g) % self.phases
        if g * sub <= self._ticked_ms:  # that point has been ticked already: the next period
            g += self.phases
        grid = g * sub
        loop = asyncio.get_running_loop()
        resync = None if resync_ms is None else max(1, int(resync_ms / self.frame_ms))
        lane = Lane(step, offset, grid - offset, resync, loop.create_future(), name, phase)
        self.lanes.append(lane)
        self._by_phase[phase].append(lane)
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._run(), name="rejoinder:pacer")
        return lane

    def remove(self, lane: Lane) -> None:
        self._drop(lane)
        if not lane.done.done():
            lane.done.set_result(None)

    async def run(self, step: Callable[[float], object], clock: Clock, *,
                  resync_ms: float | None = None, name: str = "lane") -> float:
        """Run ``step`` once per frame until it returns :data:`STOP` (or raises: re-raised here).
        Returns the lane-clock time of the frame after the last one stepped."""
        lane = self.add(step, clock, resync_ms=resync_ms, name=name)
        try:
            await lane.done
        finally:
            self.remove(lane)
        return lane.first_ms + lane.k * self.frame_ms

    # --- the tick ------------------------------------------------------------------------------
    async def _run(self) -> None:
        try:
            await self._loop()
        except BaseException as exc:  # never leave a lane waiting on a dead timer
            for lane in list(self.lanes):
                self._finish(lane, exc if isinstance(exc, Exception) else RuntimeError("pacer stopped"))
            raise

    async def _loop(self) -> None:
        clock, sub, phases = self.clock, self._sub_ms, self.phases
        k = math.ceil(clock.now_ms() / sub)
        last = k - 1
        while self.lanes:
            await clock.sleep_until(k * sub)
            self.wakes += 1
            self._ticked_ms = k * sub
            if phases == 1 or k - last >= phases:
                due = None  # every lane
            else:  # the phases of the wake points since the last wake
                due = [lane for g in range(last + 1, k + 1) for lane in self._by_phase[g % phases]]
            last = k
            while self.tick(lanes=due):  # lanes still behind: let other tasks run, then catch up
                await asyncio.sleep(0)
                self.catchups += 1
                due = None
            k = max(k + 1, math.floor(clock.now_ms() / sub) + 1) if self.lanes else k

    def tick(self, rounds: int = 3, lanes: list[Lane] | None = None) -> bool:
        """Step every lane whose frames are due (of ``lanes``, default all), catching up at most
        ``rounds`` frames per lane, then run the ``after_tick`` hooks once. Returns True when
        lanes are still behind (the caller yields to the event loop first, so that an overloaded
        process keeps serving its replies while its frame loops catch up)."""
        clock = self.clock
        now = clock.now_ms()
        frame = self.frame_ms
        ages = self.ages
        pending = list(self.lanes) if lanes is None else lanes
        while pending and rounds > 0:
            rounds -= 1
            behind: list[Lane] = []
            for lane in pending:
                if lane.done.done():
                    continue
                due = lane.first_ms + lane.k * frame + lane.offset_ms
                if due > now + 1e-6:
                    continue
                if lane.resync_frames is not None and now - due > lane.resync_frames * frame:
                    lane.k += int((now - due) // frame)  # too late: skip ahead, no burst
                    due = lane.first_ms + lane.k * frame + lane.offset_ms
                t = lane.first_ms + lane.k * frame
                ages.add(clock.now_ms() - due)
                try:
                    out = lane.step(t)
                except Exception as exc:  # noqa: BLE001 — handed to the lane's owner
                    self._finish(lane, exc)
                    continue
                lane.k += 1
                if out is STOP:
                    self._finish(lane, None)
                elif lane.first_ms + lane.k * frame + lane.offset_ms <= now + 1e-6:
                    behind.append(lane)
            pending = behind
        for hook in self.after_tick:
            try:
                hook()
            except Exception:  # noqa: BLE001 — a hook's failure must not stop every call's frames
                log.exception("pacer after_tick hook failed")
        return bool(pending)

    def _drop(self, lane: Lane) -> None:
        if lane in self.lanes:
            self.lanes.remove(lane)
            self._by_phase[lane.phase].remove(lane)

    def _finish(self, lane: Lane, exc: BaseException | None) -> None:
        self._drop(lane)
        if not lane.done.done():
            if exc is None:
                lane.done.set_result(None)
            else:
                lane.done.set_exception(exc)


_PACERS: dict[int, Pacer] = {}


def shared_pacer() -> Pacer:
    """The process's pacer for the running event loop (created on first use, real clock,
    :data:`PHASES` phases)."""
    loop = asyncio.get_running_loop()
    p = _PACERS.get(id(loop))
    if p is None or getattr(p, "_owner_loop", None) is not loop:
        p = Pacer(phases=PHASES)
        p._owner_loop = loop  # type: ignore[attr-defined]
        _PACERS.clear()  # one loop at a time per process (asyncio.run); drop older loops' pacers
        _PACERS[id(loop)] = p
    return p


def uses_shared_pacer(clock: Clock) -> bool:
    """Frame loops on a real clock share the process's pacer; a virtual clock is driven by its
    own loop (tests advance it frame by frame)."""
    return isinstance(clock, RealClock)
