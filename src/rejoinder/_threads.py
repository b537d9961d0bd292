"""Run blocking model code off the event loop, once per request (never once per audio frame)."""

from __future__ import annotations

import asyncio
import threading
from typing import AsyncIterator, Callable, Iterator, TypeVar

T = TypeVar("T")
_DONE = object()


async def iterate_in_thread(make_iter: Callable[[threading.Event], Iterator[T]]) -> AsyncIterator[T]:
    """Drive a blocking iterator in a worker thread and yield its items on the event loop.

    ``make_iter(stop)`` is called in the worker thread; the iterator should check ``stop.is_set()``
    between items (e.g. between LLM tokens) so that cancelling the consumer (barge-in) stops the
    work promptly. Exceptions raised in the worker are re-raised in the consumer.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()
    stop = threading.Event()

    def worker() -> None:
        try:
            for item in make_iter(stop):
                loop.call_soon_threadsafe(queue.put_nowait, item)
                if stop.is_set():
                    break
        except BaseException as exc:  # re-raised on the loop side
            loop.call_soon_threadsafe(queue.put_nowait, _Raised(exc))
        finally:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, _DONE)
            except RuntimeError:  # loop closed: nobody is listening any more
                pass

    thread = threading.Thread(target=worker, name="rejoinder-infer", daemon=True)
    thread.start()
    try:
        while True:
            item = await queue.get()
            if item is _DONE:
                return
            if isinstance(item, _Raised):
                raise item.exc
            yield item
    finally:
        stop.set()


class _Raised:
    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc
