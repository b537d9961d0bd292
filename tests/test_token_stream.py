"""LLM tokens stream through the watchdog without a task per token (virtual clock)."""

from __future__ import annotations

import asyncio

import pytest

from rejoinder.clock import VirtualClock
from rejoinder.stages import WatchdogTimeout, watch


async def tokens(clock: VirtualClock, n: int, every_ms: float, stall_at: int | None = None):
    for i in range(n):
        await clock.sleep_until(clock.now_ms() + (5000.0 if i == stall_at else every_ms))
        yield f" t{i}"


def counting_tasks(loop: asyncio.AbstractEventLoop) -> list[int]:
    made = [0]

    def factory(loop, coro, **kw):
        made[0] += 1
        return asyncio.Task(coro, loop=loop, **kw)
    loop.set_task_factory(factory)
    return made


async def consume(stream, out: list[str]) -> None:
    async for tok in stream:
        out.append(tok)


async def test_two_hundred_tokens_make_at_most_a_couple_of_tasks() -> None:
    clock = VirtualClock()
    made = counting_tasks(asyncio.get_running_loop())
    out: list[str] = []
    job = asyncio.ensure_future(consume(watch(tokens(clock, 200, 10.0), clock, 2500.0, 700.0, "llm"), out))
    before = made[0]
    while not job.done():
        await clock.advance(10.0)
    await job
    assert out == [f" t{i}" for i in range(200)]
    # the consumer's own task plus one watchdog timer (plus one restart when the limit shrinks
    # from first-token to gap): not one or two per token as before
    assert made[0] - before <= 3


async def test_a_stall_mid_stream_times_out_at_the_gap_limit() -> None:
    clock = VirtualClock()
    out: list[str] = []
    job = asyncio.ensure_future(consume(watch(tokens(clock, 50, 10.0, stall_at=20), clock,
                                              2500.0, 700.0, "llm"), out))
    while not job.done():
        await clock.advance(10.0)
    with pytest.raises(WatchdogTimeout, match="nothing for 700 ms"):
        await job
    assert len(out) == 20
    assert clock.now_ms() == pytest.approx(200.0 + 700.0, abs=10.0)  # last token at 200 ms


async def test_first_item_has_its_own_limit() -> None:
    clock = VirtualClock()
    out: list[str] = []

    async def slow_start():
        await clock.sleep_until(2000.0)
        yield "a"
        await clock.sleep_until(clock.now_ms() + 600.0)
        yield "b"
    job = asyncio.ensure_future(consume(watch(slow_start(), clock, 2500.0, 700.0, "llm"), out))
    while not job.done():
        await clock.advance(50.0)
    await job
    assert out == ["a", "b"]


async def test_barge_in_cancellation_stays_a_cancellation() -> None:
    clock = VirtualClock()
    out: list[str] = []
    job = asyncio.ensure_future(consume(watch(tokens(clock, 100, 10.0), clock, 2500.0, 700.0, "llm"), out))
    await clock.advance(105.0)
    job.cancel()
    with pytest.raises(asyncio.CancelledError):
        await job
    assert 5 <= len(out) <= 11
    await clock.advance(3000.0)  # the watchdog timer is gone: nothing fires later
    assert len(out) <= 11
