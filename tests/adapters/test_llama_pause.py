"""A reply steps aside on the llama.cpp thread for waiting requests and goes on behind them
(round robin, ``rejoinder.adapters.llama_llm.PAUSE_EVERY``, off by default): the thread's scheduling on plain
Python iterators, then the real SmolLM2 adapter, whose interleaved replies must be exactly the
replies it writes alone (KV state, sampler and grammar put back on resuming)."""

from __future__ import annotations

import asyncio
import json
import threading

from rejoinder._threads import ModelThread, iterate_in_thread
from rejoinder.ports import ChatMessage, LLMRequest, ToolCall

from tool_cases import SUPPORT


async def test_an_iteration_steps_aside_for_a_waiting_job_and_goes_on_behind_it():
    pool = ModelThread("test-pause")
    log: list[str] = []
    started, go = threading.Event(), threading.Event()

    def items(stop: threading.Event):
        for i in range(6):
            if i == 0:
                started.set()
                go.wait(10)
            log.append(f"A{i}")
            yield i

    async def consume() -> list[int]:
        return [i async for i in iterate_in_thread(items, pool, pause=lambda i: i % 2 == 1)]

    task = asyncio.ensure_future(consume())
    await asyncio.to_thread(started.wait, 10)
    job = pool.submit(log.append, "B")
    assert pool.waiting == 1
    go.set()
    assert await task == [0, 1, 2, 3, 4, 5]  # every item, in order
    job.result(10)
    assert log == ["A0", "A1", "B", "A2", "A3", "A4", "A5"]  # B ran at A's first pause point
    assert pool.waiting == 0
    # with nothing waiting, an iteration never steps aside
    log.clear()
    assert [i async for i in iterate_in_thread(items, pool, pause=lambda i: True)] == list(range(6))
    pool.shutdown()


async def test_a_cancelled_consumer_closes_its_paused_iterator_without_another_item():
    pool = ModelThread("test-pause-cancel")
    taken: list[int] = []
    closed = threading.Event()
    started, go, blocker_in = threading.Event(), threading.Event(), threading.Event()

    def items(stop: threading.Event):
        try:
            for i in range(100):
                if i == 0:
                    started.set()
                    go.wait(10)
                taken.append(i)
                yield i
        finally:
            closed.set()

    got: list[int] = []

    async def consume() -> None:
        async for i in iterate_in_thread(items, pool, pause=lambda i: True):
            got.append(i)

    task = asyncio.ensure_future(consume())
    await asyncio.to_thread(started.wait, 10)
    release = threading.Event()
    blocker = pool.submit(lambda: (blocker_in.set(), release.wait(10)))  # holds the thread
    go.set()
    await asyncio.to_thread(blocker_in.wait, 10)  # item 0 given, the iteration paused behind it
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    release.set()
    blocker.result(10)
    await asyncio.to_thread(closed.wait, 10)
    assert taken == [0]  # closed where it paused: no item taken after the cancel
    pool.shutdown()


def _reading() -> LLMRequest:
    """A reading of a lookup's result: the grounded-reply grammar constrains every token."""
    call = ToolCall("c0", "lookup_order", {"order_id": "4217"})
    result = {"order 4217": "the wireless headphones of order 4217 shipped on Friday, "
                            "December 4 and should arrive Wednesday, December 9"}
    msgs = (SUPPORT, ChatMessage("user", "Where is order 4217?"),
            ChatMessage("assistant", "", tool_calls=(call,)),
            ChatMessage("tool", json.dumps(result), name="lookup_order", tool_call_id="c0"))
    return LLMRequest(msgs, max_tokens=40, temperature=0.0, cache_key="pause-A")


def _chat() -> LLMRequest:
    msgs = (ChatMessage("system", "You are a friendly pizza shop's phone agent."),
            ChatMessage("user", "Hi! Tell me about your pizzas, please."))
    return LLMRequest(msgs, max_tokens=40, temperature=0.7, cache_key="pause-B")


async def test_interleaved_replies_are_the_replies_written_alone(llama_llm, monkeypatch):
    """Reply A (grammar-constrained) pauses every few tokens for B (sampled at temperature
    0.7, seeded) and for the next turn's prefill of A's own conversation; each text is the one
    it writes alone, and B's first words come before A's last."""
    async def alone(req: LLMRequest) -> str:
        for key in ("pause-A", "pause-B"):
            await asyncio.wrap_future(llama_llm.forget(key))
        return "".join(d for d in [x async for x in llama_llm.stream(req)] if isinstance(d, str))

    from rejoinder.adapters import llama_llm as mod

    monkeypatch.setattr(mod, "PAUSE_EVERY", 8)  # (off by default: see its comment)
    a_alone, b_alone = await alone(_reading()), await alone(_chat())
    assert len(a_alone.split()) >= 6 and len(b_alone.split()) >= 6
    for key in ("pause-A", "pause-B"):
        await asyncio.wrap_future(llama_llm.forget(key))

    order: list[str] = []

    async def run(req: LLMRequest, tag: str, first: asyncio.Event | None = None) -> str:
        out = ""
        async for d in llama_llm.stream(req):
            if isinstance(d, str):
                out += d
                order.append(tag)
                if first is not None:
                    first.set()
        return out

    a_first = asyncio.Event()
    a_task = asyncio.ensure_future(run(_reading(), "A", a_first))
    await a_first.wait()
    # while A streams: the next turn's prefill of A's conversation, then B
    nxt = LLMRequest((*_reading().messages, ChatMessage("assistant", a_alone),
                      ChatMessage("user", "")), cache_key="pause-A")
    llama_llm.prefill(nxt)
    b_text = await run(_chat(), "B")
    a_text = await a_task
    assert a_text == a_alone and b_text == b_alone
    assert order.index("B") < len(order) - 1 - order[::-1].index("A")  # B began before A ended
    assert llama_llm.cache.pinned == set()
    assert not any("paused" in k for k in llama_llm.cache._saved)
