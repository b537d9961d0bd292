"""Garbage-collector policy for an agent process, and GC pause accounting.

CPython's cyclic collector pauses the event loop; with the models, pydantic schemas and the
agent loaded, a full collection walked every long-lived object and took 26–91 ms (issue 18) —
a stall every caller hears. :func:`tune` is called once after warm-up: it collects, then
``gc.freeze()`` moves everything alive into the permanent generation (never scanned again), and
raises the thresholds so that the young generation is collected less often (the per-frame path
allocates no containers, so what is collected is per-turn work). :data:`PAUSES` accumulates every
collection's duration (``gc.callbacks``), so that stall attribution (:mod:`rejoinder.stalls`)
can say a slow turn was slowed by GC.

Sources: the ``gc.freeze`` documentation (CPython 3.7+) and Instagram's account of freezing the
heap after start-up ("Dismissing Python Garbage Collection at Instagram", 2017).
"""

from __future__ import annotations

import gc
import time
from collections import deque

#: (perf_counter start s, duration ms, generation) of recent collections (bounded)
PAUSES: deque[tuple[float, float, int]] = deque(maxlen=4096)
IN_GC = [False]  #: a collection is running (read by the stall watchdog thread)
_started: list[float] = [0.0]
_installed = [False]


def _callback(phase: str, info: dict) -> None:
    if phase == "start":
        IN_GC[0] = True
        _started[0] = time.perf_counter()
    else:
        IN_GC[0] = False
        t0 = _started[0]
        PAUSES.append((t0, (time.perf_counter() - t0) * 1000.0, info.get("generation", -1)))


def track_pauses() -> None:
    """Record every collection's duration in :data:`PAUSES` (idempotent)."""
    if not _installed[0]:
        gc.callbacks.append(_callback)
        _installed[0] = True


def tune(threshold0: int = 20_000, threshold1: int = 20, threshold2: int = 100) -> None:
    """After warm-up: collect once, freeze what is alive, raise the thresholds, and record
    pauses. Call again after loading more (a later freeze adds the new survivors).

    Thresholds (CPython's defaults are 700, 10, 10): the young generation is collected after
    ``threshold0`` net container allocations, the middle one every ``threshold1`` young
    collections, the old one every ``threshold2`` middle collections (and only when a quarter of
    the long-lived objects is new, CPython's own rule)."""
    track_pauses()
    gc.collect()
    gc.freeze()
    gc.set_threshold(threshold0, threshold1, threshold2)


def pauses_between(t0: float, t1: float) -> list[tuple[float, int]]:
    """(duration ms, generation) of the collections that started in [t0, t1] (perf_counter s)."""
    return [(ms, g) for s, ms, g in PAUSES if t0 <= s <= t1]
