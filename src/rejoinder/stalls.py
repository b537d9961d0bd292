"""Loop-stall attribution: why was this turn slow — GC, a blocking call, CPU starvation, or a model?

:class:`LoopWatch` is a watchdog thread beside the event loop. The loop beats a heartbeat every
``interval_ms`` (one timer for the process); when the thread sees the beat ``lag_ms`` late, an
*episode* opens: the thread samples the loop thread's stack (``sys._current_frames``) and its
CPU time (``pthread_getcpuclockid``) until the loop beats again. Each episode is classified by
:func:`classify`:

* ``gc`` — the cyclic collector was running (``rejoinder.gctune`` marks collections);
* ``blocking`` — the loop thread was busy (or blocked in a call) in code that is not the event
  loop's own wait: a blocking call on the loop, named by its stack;
* ``starvation`` — the loop thread was idle in its own wait (``select``/``epoll``) yet late, and
  used little CPU: it was runnable but not given a core (other processes, too many threads).

:func:`attribute` then takes a run's turns: every turn slower than the run's p95 V2V gets a
``cause``: the stall kind covering most of its excess over the median V2V (with the blocking
call's stack), or, when stalls explain less than half of it, ``model`` and the critical-path
segment that grew most over its own median (``llm_ttft``, ``tts_ttfb``, ``transcription``, …).
The harness records the result per level (``slow_turns``) in the run store.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Iterable

from . import gctune

@dataclass
class Stall:
    """One loop stall episode (perf_counter seconds)."""

    start: float
    end: float
    cause: str
    stack: list[str] = field(default_factory=list)
    cpu_share: float = 0.0

    @property
    def ms(self) -> float:
        return 1000.0 * (self.end - self.start)

    def as_dict(self) -> dict[str, Any]:
        return {"ms": round(self.ms, 1), "cause": self.cause, "cpu_share": round(self.cpu_share, 2),
                "stack": self.stack}


def classify(cpu_share: float, stack: list[str], in_gc: bool) -> str:
    """The kind of a stall from what the loop thread did during it: ``cpu_share`` (its CPU time
    over the stall's wall time, 0–1), its sampled ``stack`` (innermost last, ``file:line func``)
    and whether a collection was running."""
    if in_gc:
        return "gc"
    idle = bool(stack) and any(k in stack[-1] for k in ("selectors.py", "select", "epoll"))
    if idle and cpu_share < 0.5:
        return "starvation"
    if not stack:
        return "starvation" if cpu_share < 0.5 else "blocking"
    return "blocking"


def _stack_of(frame) -> list[str]:
    return [f"{fs.filename.rsplit('/', 2)[-1]}:{fs.lineno} {fs.name}"
            for fs in traceback.extract_stack(frame)[-8:]]


class LoopWatch:
    """Watches the running event loop from a thread (see the module docstring).

    Args:
        lag_ms: a heartbeat this late opens a stall episode.
        interval_ms: heartbeat and sampling period.
        keep: stall episodes kept (the oldest are dropped).
    """

    def __init__(self, lag_ms: float = 40.0, interval_ms: float = 10.0, keep: int = 10_000) -> None:
        self.lag_s = lag_ms / 1000.0
        self.interval_s = interval_ms / 1000.0
        self.keep = keep
        self.stalls: list[Stall] = []
        self._beat = time.perf_counter()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handle: asyncio.TimerHandle | None = None

    def start(self) -> None:
        """Start beating on the running loop and watching from a daemon thread."""
        loop = asyncio.get_running_loop()
        self._loop_tid = threading.get_ident()
        try:
            self._cpu_clock = time.pthread_getcpuclockid(self._loop_tid)
        except (AttributeError, OSError):  # not Linux/POSIX: no per-thread CPU clock
            self._cpu_clock = None
        gctune.track_pauses()
        self._beat = time.perf_counter()
        self._handle = loop.call_later(self.interval_s, self._tick, loop)
        self._thread = threading.Thread(target=self._watch, name="rejoinder-loopwatch", daemon=True)
        self._thread.start()

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        self._beat = time.perf_counter()
        self._handle = loop.call_later(self.interval_s, self._tick, loop)

    def stop(self) -> list[Stall]:
        self._stop.set()
        if self._handle is not None:
            self._handle.cancel()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        return self.stalls

    def _cpu(self) -> float:
        return time.clock_gettime(self._cpu_clock) if self._cpu_clock is not None else 0.0

    def _watch(self) -> None:
        episode: dict[str, Any] | None = None
        while not self._stop.wait(self.interval_s):
            now = time.perf_counter()
            late = now - self._beat - self.interval_s
            if late > self.lag_s:
                frame = sys._current_frames().get(self._loop_tid)
                stack = _stack_of(frame) if frame is not None else []
                if episode is None:
                    episode = {"start": self._beat + self.interval_s, "cpu0": self._cpu(), "wall0": now,
                               "stacks": [], "gc": False}
                episode["stacks"].append(stack)
                episode["gc"] = episode["gc"] or gctune.IN_GC[0]
            elif episode is not None:
                wall = max(1e-6, now - episode["wall0"])
                share = min(1.0, (self._cpu() - episode["cpu0"]) / wall) if self._cpu_clock is not None else 0.0
                stacks = [s for s in episode["stacks"] if s]
                stack = max(stacks, key=stacks.count) if stacks else []
                self.stalls.append(Stall(episode["start"], self._beat, classify(share, stack, episode["gc"]),
                                         stack, share))
                del self.stalls[:-self.keep]
                episode = None


@dataclass
class TurnWindow:
    """One turn's critical path on the process clock: from the caller's last word (``start``, s)
    to the first voiced agent audio (``end``), with its V2V and segments (ms)."""

    call_id: str
    turn_id: int
    start: float
    end: float
    v2v_ms: float
    segments: dict[str, float]


def _overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def attribute(turns: list[TurnWindow], stalls: Iterable[Stall],
              gc_pauses: Iterable[tuple[float, float]] = (), q: float = 95.0) -> list[dict[str, Any]]:
    """For every turn slower than the ``q``-th percentile of V2V: its ``cause`` (``gc``,
    ``blocking``, ``starvation`` or ``model``), the ms of each stall kind inside it, the excess
    over the median V2V, and for ``blocking`` the stack, for ``model`` the segment that grew
    most. ``gc_pauses``: (start s, ms) of collections (counted as ``gc`` where no stall episode
    already covers them)."""
    if len(turns) < 2:
        return []
    v2v = sorted(t.v2v_ms for t in turns)
    cut = v2v[min(len(v2v) - 1, int(len(v2v) * q / 100.0))]
    median = statistics.median(v2v)
    seg_names = {k for t in turns for k in t.segments}
    seg_median = {k: statistics.median(t.segments.get(k, 0.0) for t in turns) for k in seg_names}
    stalls = list(stalls)
    pauses = list(gc_pauses)
    out = []
    for t in turns:
        if t.v2v_ms <= cut:
            continue
        by: dict[str, float] = {}
        worst: Stall | None = None
        for s in stalls:
            ov = _overlap(t.start, t.end, s.start, s.end)
            if ov > 0:
                by[s.cause] = by.get(s.cause, 0.0) + 1000.0 * ov
                if s.cause == "blocking" and (worst is None or s.ms > worst.ms):
                    worst = s
        for p0, ms in pauses:
            ov = _overlap(t.start, t.end, p0, p0 + ms / 1000.0)
            covered = any(_overlap(p0, p0 + ms / 1000.0, s.start, s.end) > 0 for s in stalls)
            if ov > 0 and not covered:
                by["gc"] = by.get("gc", 0.0) + 1000.0 * ov
        excess = max(0.0, t.v2v_ms - median)
        rec: dict[str, Any] = {"call_id": t.call_id, "turn_id": t.turn_id, "v2v_ms": round(t.v2v_ms, 1),
                               "excess_ms": round(excess, 1),
                               "stall_ms": {k: round(v, 1) for k, v in sorted(by.items())}}
        if by and sum(by.values()) >= 0.5 * excess:
            rec["cause"] = max(by, key=by.get)
            if rec["cause"] == "blocking" and worst is not None:
                rec["stack"] = worst.stack
        else:
            grown = {k: t.segments.get(k, 0.0) - seg_median.get(k, 0.0) for k in seg_names}
            seg = max(grown, key=grown.get) if grown else None
            rec["cause"] = "model"
            if seg is not None:
                rec["segment"] = seg
                rec["segment_excess_ms"] = round(grown[seg], 1)
        out.append(rec)
    return out


def summarize(stalls: list[Stall]) -> dict[str, Any]:
    """Counts and total ms of stall episodes by cause, and the five longest."""
    by: dict[str, dict[str, float]] = {}
    for s in stalls:
        d = by.setdefault(s.cause, {"count": 0, "ms": 0.0})
        d["count"] += 1
        d["ms"] = round(d["ms"] + s.ms, 1)
    return {"by_cause": by, "longest": [s.as_dict() for s in sorted(stalls, key=lambda s: -s.ms)[:5]]}
