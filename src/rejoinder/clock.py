"""One monotonic clock per call: real for live calls, virtual for deterministic tests.

Times are float milliseconds since the clock's origin (the call start). ``RealClock`` reads
``time.perf_counter_ns``; ``VirtualClock`` only moves when a test advances it, so scripted
timelines run instantly and deterministically.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> float: ...

    async def sleep_until(self, t_ms: float) -> None: ...

    async def pace(self, t_ms: float) -> None:
        """Frame-loop pacing: wait until ``t_ms`` (real) or move time to ``t_ms`` (virtual)."""


class RealClock:
    """Monotonic wall clock; ``origin_ns`` (perf_counter_ns) is t = 0 ms."""

    __slots__ = ("origin_ns",)

    def __init__(self, origin_ns: int | None = None) -> None:
        self.origin_ns = time.perf_counter_ns() if origin_ns is None else origin_ns

    def now_ms(self) -> float:
        return (time.perf_counter_ns() - self.origin_ns) / 1e6

    async def sleep_until(self, t_ms: float) -> None:
        delay = (t_ms - self.now_ms()) / 1000.0
        if delay > 0:
            await asyncio.sleep(delay)
        else:
            await asyncio.sleep(0)

    async def pace(self, t_ms: float) -> None:
        await self.sleep_until(t_ms)


class VirtualClock:
    """A clock that moves only when :meth:`advance` / :meth:`advance_to` is awaited.

    Sleepers are woken in deadline order, and the event loop is drained between wake-ups so that
    work triggered at one instant completes before time moves on.
    """

    def __init__(self, start_ms: float = 0.0) -> None:
        self._now = start_ms
        self._sleepers: list[tuple[float, int, asyncio.Future]] = []
        self._seq = itertools.count()

    def now_ms(self) -> float:
        return self._now

    async def sleep_until(self, t_ms: float) -> None:
        if t_ms <= self._now:
            await asyncio.sleep(0)
            return
        fut = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (t_ms, next(self._seq), fut))
        await fut

    async def settle(self, rounds: int = 20) -> None:
        """Let ready tasks run (several loop iterations) without moving time."""
        for _ in range(rounds):
            await asyncio.sleep(0)

    async def advance_to(self, t_ms: float) -> None:
        await self.settle()
        while self._sleepers and self._sleepers[0][0] <= t_ms:
            deadline, _, fut = heapq.heappop(self._sleepers)
            self._now = max(self._now, deadline)
            if not fut.done():
                fut.set_result(None)
            await self.settle()
        self._now = max(self._now, t_ms)
        await self.settle()

    async def advance(self, ms: float) -> None:
        await self.advance_to(self._now + ms)

    async def pace(self, t_ms: float) -> None:
        await self.advance_to(t_ms)


async def wait_within(clock: Clock, task: "asyncio.Future", limit_ms: float):
    """``await task`` but raise TimeoutError after ``limit_ms`` on ``clock`` (the task keeps
    running; the caller decides whether to cancel it). Watchdogs use this so that a virtual clock
    drives them in tests exactly like the real one in calls."""
    timer = asyncio.ensure_future(clock.sleep_until(clock.now_ms() + limit_ms))
    try:
        await asyncio.wait((task, timer), return_when=asyncio.FIRST_COMPLETED)
    finally:
        timer.cancel()
    if not task.done():
        raise TimeoutError
    return task.result()
