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
import os
import threading
import time
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


def cpu_seconds() -> tuple[float, float, int] | None:
    """(CPU seconds all processes have spent busy on the CPUs this process may run on, CPU
    seconds this process has spent, how many such CPUs), from psutil (``/proc/stat`` per CPU:
    user, nice, system, irq, softirq and steal; and this process's user + system time); None
    where it cannot be read."""
    try:
        import psutil

        mine = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        per = psutil.cpu_times(percpu=True)
        rows = [per[i] for i in mine if i < len(per)] if mine else per
        busy = sum(r.user + r.nice + r.system + getattr(r, "irq", 0.0) + getattr(r, "softirq", 0.0)
                   + getattr(r, "steal", 0.0) for r in rows)
        return busy, time.process_time(), len(rows)
    except (OSError, ImportError, AttributeError):
        return None


class BusyNeighbours:
    """Sheds a native library's threads while other processes keep the cores it needs busy.

    Why: llama.cpp's threads meet at a barrier after every graph node, so one of them that the
    OS deschedules holds the others. When *another process* keeps a core busy, there are more
    runnable threads than cores and that happens at every node. Measured on the 2-core box with
    SmolLM2-135M Q4_1 and one busy-loop process beside it (``/tmp`` probe, 2026-12-06): 2
    threads decoded a token in 109–140 ms and 1 thread in 9–11 ms (5 ms with both cores free);
    a 120-token prompt took 886–1,055 ms on 2 threads and 665 ms on 1. ``rejoinder demo``
    beside one busy process did not finish in 300 s. :class:`CoreClaims` covers this process's
    own work; this covers everyone else's.

    The signal is the CPU the *other* processes use: the busy time of the CPUs this process may
    run on (its affinity) less this process's own CPU time, over at least ``period_ms`` of wall
    time, in cores. Of ``n`` threads, as many are shed as the neighbours' cores overlap the
    cores the ``n`` threads need: a thread is shed when they use ``on`` of a core or more beyond
    the cores left free, and given back under ``off`` (hysteresis). Never all threads. Work of
    this process does not count: at 4 calls on 2 cores the process's own threads already keep
    both cores busy, and shedding a thread there slowed the LLM that every call queues for
    (a first version that read the llama.cpp thread's own run-queue wait did: the reference
    suite's V2V p95 went from 2,565 to 4,311 ms at 4 calls, run ``20261206-092457-7b0f``).

    Call :meth:`update` between native calls (cheap: a reading at most once per ``period_ms``);
    not thread-safe. ``read`` (:func:`cpu_seconds`'s shape) and ``now`` (seconds) are injectable
    for tests.
    """

    def __init__(self, period_ms: float = 250.0, on: float = 0.5, off: float = 0.25,
                 read: Callable[[], tuple[float, float, int] | None] = cpu_seconds,
                 now: Callable[[], float] = time.monotonic) -> None:
        self.period_s = period_ms / 1000.0
        self.on, self.off = on, off
        self._read, self._now = read, now
        first = read()  # the first period runs from here: warm-up, the first turn see it
        self._last: tuple[float, tuple[float, float, int]] | None = (
            None if first is None else (now(), first))
        self.others = 0.0  #: cores the other processes used over the last period
        self.shed = 0  #: threads shed now
        self.sheds = 0  #: times a thread was shed (lifetime)

    def update(self, threads: int) -> int:
        """How many of ``threads`` (the configured count) to shed now: 0 … ``threads`` − 1."""
        t = self._now()
        if self._last is None or t - self._last[0] >= self.period_s:
            self._measure(t, threads)
        return min(self.shed, max(0, threads - 1))

    def _measure(self, t: float, threads: int) -> None:
        got = self._read()
        if got is None:
            return
        last, self._last = self._last, (t, got)
        if last is None or t <= last[0]:
            return
        busy, mine, cpus = got[0] - last[1][0], got[1] - last[1][1], got[2]
        self.others = max(0.0, busy - mine) / (t - last[0])
        over = self.others - max(0, cpus - threads)  # beyond the cores the threads leave free
        want = self.shed
        while want < threads - 1 and over >= want + self.on:
            want += 1
        while want > 0 and over < want - 1 + self.off:
            want -= 1
        self.sheds += max(0, want - self.shed)
        self.shed = want


class ThreadFits:
    """Process-wide counts of llama.cpp steps (a token's decode or a prompt evaluation, each
    preceded by :meth:`rejoinder.adapters._llama_engine.ChatEngine.fit_threads`) and of those
    run with threads shed for other processes (:class:`BusyNeighbours`) or given up to this
    process's Piper (:class:`CoreClaims`). ``rejoinder bench`` reports the shares per level
    (``resources.llm_shed_pct``, ``llm_yield_pct``), so that a figure measured on a busy
    machine says so. Updated only on the process's llama.cpp thread."""

    def __init__(self) -> None:
        self.steps = self.shed = self.yielded = 0

    def add(self, shed: int, yielded: int) -> None:
        """Count one step: ``shed`` threads shed for neighbours, ``yielded`` given up to claims."""
        self.steps += 1
        self.shed += shed > 0
        self.yielded += yielded > 0

    def snapshot(self) -> tuple[int, int, int]:
        """(steps, steps with threads shed, steps with a thread given up to a claim)."""
        return self.steps, self.shed, self.yielded


#: the process's llama.cpp steps (counted by ChatEngine.fit_threads)
FITS = ThreadFits()
