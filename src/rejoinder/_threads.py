"""Run blocking model code off the event loop, once per request (never once per audio frame).

Native libraries that parallelise with OpenMP (llama.cpp and CTranslate2 both link a libgomp)
must always be entered from *one* OS thread per library (:func:`model_thread`). libgomp gives
every thread that opens a parallel region a team of worker threads of its own and keeps it while
that thread lives; once the process holds more OpenMP threads than CPUs, libgomp's barriers stop
spinning and sleep on a futex (its "throttled" spin count, libgomp ``env.c`` /
``gomp_throttled_spin_count_var``), and llama.cpp crosses a barrier after every graph node.
Measured on the 2-core CI machine with SmolLM2-135M (2 threads): 14.5 ms per token when every
llama.cpp call came from one thread, 47 ms once one warm-up had run in an ``asyncio.to_thread``
worker beside it (``OMP_WAIT_POLICY=passive`` gives the same 52 ms from the start).
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import AsyncIterator, Callable, Iterator, TypeVar

T = TypeVar("T")
_DONE = object()
_POOLS: dict[str, "ModelThread"] = {}
_OWNERS: dict[int, str] = {}  # thread ident → the library whose thread it is
_POOLS_LOCK = threading.Lock()


class ModelThread(ThreadPoolExecutor):
    """A single-worker executor that knows how many submitted jobs have not started yet
    (:attr:`waiting`), so that a long job can step aside for them (``iterate_in_thread``'s
    ``pause``)."""

    def __init__(self, name: str) -> None:
        def own() -> None:
            _OWNERS[threading.get_ident()] = name
        super().__init__(1, thread_name_prefix=f"rejoinder-{name}", initializer=own)
        self._count = threading.Lock()
        self._waiting = 0

    def submit(self, fn, /, *args, **kwargs):  # type: ignore[override]
        def run():
            with self._count:
                self._waiting -= 1
            return fn(*args, **kwargs)
        with self._count:
            self._waiting += 1
        try:
            return super().submit(run)
        except BaseException:
            with self._count:
                self._waiting -= 1
            raise

    @property
    def waiting(self) -> int:
        """Jobs submitted and not started yet."""
        return self._waiting


def model_thread(name: str) -> ModelThread:
    """The process's one thread for every call into the native library ``name`` (``"llama"``,
    ``"ctranslate2"``): a single-worker executor, created on first use (see the module
    docstring for why)."""
    with _POOLS_LOCK:
        pool = _POOLS.get(name)
        if pool is None:
            pool = _POOLS[name] = ModelThread(name)
        return pool


def on_model_thread(name: str, fn: Callable[..., T], *args, **kwargs) -> T:
    """Run ``fn(*args, **kwargs)`` on :func:`model_thread` ``name`` and wait for it (blocking);
    directly when already there. Exceptions propagate."""
    if _OWNERS.get(threading.get_ident()) == name:
        return fn(*args, **kwargs)
    return model_thread(name).submit(fn, *args, **kwargs).result()


async def iterate_in_thread(make_iter: Callable[[threading.Event], Iterator[T]],
                            executor: ThreadPoolExecutor | None = None,
                            pause: Callable[[T], bool] | None = None) -> AsyncIterator[T]:
    """Drive a blocking iterator in a worker thread and yield its items on the event loop.

    ``make_iter(stop)`` is called in the worker thread; the iterator should check ``stop.is_set()``
    between items (e.g. between LLM tokens) so that cancelling the consumer (barge-in) stops the
    work promptly. Exceptions raised in the worker are re-raised in the consumer. ``executor``:
    run it there (e.g. :func:`model_thread`; a request queued behind another starts when that one
    ends) instead of on a new thread.

    ``pause(item)``, with a :class:`ModelThread` executor: called after each item; when it says
    True and other jobs are waiting there, the iteration steps aside: it is submitted again
    behind them and goes on from the next item once they have run (the iterator must allow
    that: another job uses the thread in between). A cancelled consumer's paused iterator is
    closed on the thread without taking another item.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()
    stop = threading.Event()
    held: list[Iterator[T]] = []  # the iterator, once made (a paused one is resumed from it)

    def worker() -> None:
        resumed = False
        try:
            if not held:
                held.append(make_iter(stop))
            elif stop.is_set():
                return
            for item in held[0]:
                loop.call_soon_threadsafe(queue.put_nowait, item)
                if stop.is_set():
                    break
                if pause is not None and getattr(executor, "waiting", 0) and pause(item):
                    executor.submit(worker)  # type: ignore[union-attr]
                    resumed = True
                    return
        except BaseException as exc:  # re-raised on the loop side
            loop.call_soon_threadsafe(queue.put_nowait, _Raised(exc))
        finally:
            if not resumed:
                close = getattr(held[0], "close", None) if held else None
                if close is not None:
                    try:
                        close()
                    except Exception:  # noqa: BLE001 (its error, if any, was already sent)
                        pass
                try:
                    loop.call_soon_threadsafe(queue.put_nowait, _DONE)
                except RuntimeError:  # loop closed: nobody is listening any more
                    pass

    if executor is not None:
        executor.submit(worker)
    else:
        threading.Thread(target=worker, name="rejoinder-infer", daemon=True).start()
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


class CoreClaims:
    """Model work that wants a core to itself while it runs, counted process-wide.

    A Piper synthesis (one onnxruntime thread) claims a core for as long as it runs; llama.cpp's
    token-by-token decoding (``n_threads`` threads, a barrier after every graph node) then
    decodes with one thread fewer per claim (never under one) and takes its threads back when
    the claims end (:meth:`rejoinder.adapters._llama_engine.ChatEngine.fit_threads`). Why:
    with both on a 2-core machine, three busy threads share two cores; a llama.cpp thread that
    is descheduled holds its partner at the barrier, and tokens that took 11 ms took 165-198 ms
    while Piper synthesised beside them, and Piper's own first audio slowed too (bench/v2v.py,
    2026-12-03). Prompt evaluation (batches, compute-bound) keeps all its threads.
    Thread-safe."""

    def __init__(self) -> None:
        self._n = 0
        self._lock = threading.Lock()

    @property
    def active(self) -> int:
        """Claims held now (≥ 0)."""
        return self._n

    @contextmanager
    def claim(self) -> Iterator[None]:
        """Hold one claim for the ``with`` block."""
        with self._lock:
            self._n += 1
        try:
            yield
        finally:
            with self._lock:
                self._n -= 1


#: the process's claims (Piper claims; llama.cpp yields)
CORES = CoreClaims()
