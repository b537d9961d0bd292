"""VAD batched across the calls of a process, off the per-frame path.

A per-call VAD runs its model once per 32 ms window per call, inline in the frame loop: at
hundreds of calls that is hundreds of model invocations (≈100–160 µs each for Silero) per tick.
:class:`VadBatcher` instead collects every call's full windows and runs the model **once per event
loop iteration** over all of them (one ``(k, window)`` batch, each row with its own recurrent
state), then hands each call its probability. With the shared pacer (:mod:`rejoinder.pacing`)
all calls' frames of one tick land in one iteration, so one batch serves every call; frames that
arrive from sockets are batched with whatever else arrived in the same iteration. Measured on the
2-core machine: Silero v6.2 costs ≈40 µs per window in batches of 32–1000 against ≈100–160 µs one
at a time (``bench/capacity.py --vad silero``).

A model whose ``offload`` attribute is true (Silero: its batch is real inference, ≈ 40 µs a window)
is run **off the event loop**, on one worker thread of its own (:func:`rejoinder._threads.
model_thread`): the loop gathers the batch, the worker scores it while the loop goes on with the
next frames, and the probabilities come back to the loop in batch order. Every call into that
model (``grow``, ``reset_slot``, ``run``) goes through the same single worker, first in first
out, so a stream's recurrent state is advanced, reset and grown in the order the loop asked for;
a slot is reused only once its windows in flight are delivered. One thread hop per batch, never
per frame; onnxruntime releases the GIL while it runs, so with 300 calls the ≈ 0.4 core of Silero
runs beside the loop's own work instead of inside it (``bench/capacity.py --vad silero``).

A model for the batcher implements :class:`BatchModel`: ``run(windows, slots)`` scores
``windows`` (float32 ``(k, window_samples)`` in [-1, 1]) for the given state ``slots`` (int array
``(k,)``) and advances those slots' state; ``grow(n)``, ``reset_slot(i)``. Each call holds a
:class:`BatchedVAD` stream (one slot): the :class:`~rejoinder.vad.VadTracker` submits windows
to it and is called back with ``(p, window_start_ms)``; results are delivered in submission
order per call (a call with a window already waiting flushes the batch first). Windows of int16
PCM are staged as int16 (one copy per window) and converted to float32 once per batch, for all
rows at once: a per-window ``int16 × scale`` costs ≈ 3 µs on the reference box, the copy ≈ 0.4.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from typing import Callable, Protocol

import numpy as np

_INT16 = np.dtype(np.int16)
log = logging.getLogger("rejoinder.vadbatch")


def _worker():
    """The batched VAD's own thread (one per process; batches and state changes in order)."""
    from ._threads import model_thread
    return model_thread("vad-batch")

class BatchModel(Protocol):
    sample_rate: int
    window_samples: int

    def grow(self, slots: int) -> None: ...

    def reset_slot(self, slot: int) -> None: ...

    def run(self, windows: np.ndarray, slots: np.ndarray) -> np.ndarray: ...


class VadBatcher:
    """Collects windows of many streams and scores them in one model call per loop iteration.

    Args:
        model: the :class:`BatchModel`.
        slots: initial number of streams (grows by doubling).
        offload: run the model on a worker thread of its own (default: the model's ``offload``
            attribute, else False: inline, at the end of the loop iteration).
    """

    def __init__(self, model: BatchModel, slots: int = 64, offload: bool | None = None) -> None:
        self.model = model
        self.offload = bool(getattr(model, "offload", False)) if offload is None else offload
        self._inflight: list[int] = []  # per slot: windows handed to the worker, not delivered
        self.window = model.window_samples
        self._cap = 0
        self._win = np.zeros((0, self.window), dtype=np.float32)
        self._raw16 = np.zeros((0, self.window), dtype=np.int16)  # int16 windows, as submitted
        self._floats: list[int] = []  # slots whose waiting window came as float32 (in _win)
        self._start: list[float] = []
        self._cb: list[Callable[[float, float], None] | None] = []
        self._free: list[int] = []
        self._pending: list[int] = []
        self._is_pending: list[bool] = []
        self._scheduled: asyncio.AbstractEventLoop | None = None
        self.batches = 0
        self.windows = 0
        self._grow(slots)

    def _grow(self, cap: int) -> None:
        win = np.zeros((cap, self.window), dtype=np.float32)
        win[:self._cap] = self._win
        self._win = win
        raw16 = np.zeros((cap, self.window), dtype=np.int16)
        raw16[:self._cap] = self._raw16
        self._raw16 = raw16
        self._start += [0.0] * (cap - self._cap)
        self._cb += [None] * (cap - self._cap)
        self._is_pending += [False] * (cap - self._cap)
        self._inflight += [0] * (cap - self._cap)
        self._free += list(range(cap - 1, self._cap - 1, -1))
        self._call(self.model.grow, cap)
        self._cap = cap

    def _call(self, fn: Callable, *args) -> None:
        """A state-changing model call: inline, or queued behind the batches in flight."""
        if self.offload:
            _worker().submit(fn, *args)
        else:
            fn(*args)

    # --- streams ------------------------------------------------------------------------------
    def open(self) -> int:
        """A free slot (its state reset)."""
        if not self._free:
            self._grow(2 * self._cap)
        slot = self._free.pop()
        self._call(self.model.reset_slot, slot)
        return slot

    def close(self, slot: int) -> None:
        self._cb[slot] = None
        if not self._is_pending[slot] and not self._inflight[slot]:
            self._free.append(slot)
        # (a slot with a window waiting or in flight is freed when its last window is delivered)

    def bind(self, slot: int, cb: Callable[[float, float], None]) -> None:
        self._cb[slot] = cb

    def submit(self, slot: int, raw: np.ndarray, scale: float, start_ms: float) -> None:
        """Queue one window (float32 values ``raw × scale``; int16 ``raw`` must come with
        ``scale`` 1/32768) of ``slot`` that starts at ``start_ms``; it is scored at the end of
        this loop iteration."""
        if self._is_pending[slot]:  # its previous window is still waiting: score that first
            self.flush()
        if raw.dtype is _INT16:
            self._raw16[slot] = raw
        else:
            np.multiply(raw, scale, out=self._win[slot])
            self._floats.append(slot)
        self._start[slot] = start_ms
        self._is_pending[slot] = True
        self._pending.append(slot)
        sched = self._scheduled
        if sched is None or sched.is_closed():  # (a flush scheduled on a loop that has ended never runs)
            self._scheduled = loop = asyncio.get_running_loop()
            loop.call_soon(self.flush)

    def flush(self) -> None:
        """Score every waiting window in one model call and deliver the probabilities."""
        self._scheduled = None
        pending = self._pending
        if not pending:
            return
        self._pending = []
        slots = np.fromiter(pending, dtype=np.intp, count=len(pending))
        windows = np.multiply(self._raw16[slots], np.float32(1.0 / 32768.0), dtype=np.float32)
        if self._floats:  # windows that came as float32 (already scaled)
            floats = set(self._floats)
            self._floats = []
            rows = [i for i, slot in enumerate(pending) if slot in floats]
            windows[rows] = self._win[slots[rows]]
        self.batches += 1
        self.windows += len(pending)
        starts = [self._start[slot] for slot in pending]
        flags = self._is_pending
        for slot in pending:
            flags[slot] = False
        if not self.offload:
            self._deliver(pending, starts, self.model.run(windows, slots).tolist())
            return
        inflight = self._inflight
        for slot in pending:
            inflight[slot] += 1
        loop = asyncio.get_running_loop()
        run = self.model.run

        def score() -> None:  # on the worker
            try:
                probs = run(windows, slots).tolist()
            except Exception:  # noqa: BLE001 — logged; the streams hear silence (p = 0)
                log.exception("batched VAD failed; %d windows scored as silence", len(pending))
                probs = [0.0] * len(pending)
            try:
                loop.call_soon_threadsafe(self._deliver, pending, starts, probs)
            except RuntimeError:  # the loop has closed: nobody is listening any more
                pass

        _worker().submit(score)

    def _deliver(self, pending: list[int], starts: list[float], probs: list[float]) -> None:
        """Hand each stream its probability, in submission order; free closed slots."""
        cbs, inflight, offload = self._cb, self._inflight, self.offload
        for slot, start, p in zip(pending, starts, probs):
            if offload:
                inflight[slot] -= 1
            cb = cbs[slot]
            if cb is not None:
                cb(p, start)
            elif not inflight[slot] and not self._is_pending[slot] and slot not in self._free:
                self._free.append(slot)  # closed while its windows were scored

    def reset(self, slot: int) -> None:
        self._call(self.model.reset_slot, slot)


class BatchedVAD:
    """One call's stream of a process-wide :class:`VadBatcher` (see the module docstring): the
    VAD port a :class:`~rejoinder.vad.VadTracker` uses, with ``submit`` instead of a synchronous
    ``speech_prob``. Subclasses name their model with :meth:`make_model`; one batcher per class
    per process."""

    _batchers: dict[type, VadBatcher] = {}
    _lock = threading.Lock()

    sample_rate = 16000
    window_samples = 512

    @classmethod
    def make_model(cls) -> BatchModel:
        raise NotImplementedError

    @classmethod
    def batcher(cls) -> VadBatcher:
        with cls._lock:
            b = cls._batchers.get(cls)
            if b is None:
                b = cls._batchers[cls] = VadBatcher(cls.make_model())
            return b

    def __init__(self) -> None:
        self._b = self.batcher()
        self.slot = self._b.open()
        self.sample_rate = self._b.model.sample_rate
        self.window_samples = self._b.window

    def bind(self, cb: Callable[[float, float], None]) -> None:
        self._b.bind(self.slot, cb)

    def submit(self, raw: np.ndarray, scale: float, start_ms: float) -> None:
        self._b.submit(self.slot, raw, scale, start_ms)

    def submitter(self) -> Callable[[np.ndarray, float, float], None]:
        """:meth:`submit` bound to this stream's slot with no Python frame of its own (the
        tracker calls it once per window); valid until :meth:`close`."""
        return functools.partial(self._b.submit, self.slot)

    def reset(self) -> None:
        self._b.reset(self.slot)

    def close(self) -> None:
        if self.slot >= 0:
            self._b.close(self.slot)
            self.slot = -1
