"""The caller's playout of a remote agent's audio: a jitter buffer of stated depth, sample-accurate.

Audio received from the target (int16 mono, 16 kHz after decoding) is scheduled on the call
clock's sample grid (16 samples per ms, sample 0 at t = 0 ms):

* a packet that arrives while earlier audio is still scheduled is appended right after it
  (continuous playout, whatever the packet sizes and however fast the target sends);
* a packet that arrives after everything scheduled has played — the buffer ran dry, or a new
  reply begins — starts a new **burst**, scheduled ``depth_ms`` after its arrival (the buffer
  primes again, like a telephone jitter buffer after an underrun).

:meth:`JitterBuffer.play` then gives the caller the 20 ms window it hears, with every sample at its
scheduled time, so ``playback_start`` (the first voiced sample heard, |x| ≥ 328) is exact to the
sample and includes the buffer's depth: the depth is part of what a caller waits, and a run
records it. Gaps between bursts of one reply are the stalls the caller hears.

Control from the target: ``clear`` drops everything not yet played (barge-in); ``hold`` /
``resume`` pause playout and keep the queue (rejoinder's ``pause``/``resume``); Twilio ``mark``\\ s
are echoed when playout reaches them, and at once for marks a ``clear`` flushes (what Twilio does).

Nothing here allocates per 20 ms window beyond slicing views into the received packets; each
burst keeps the samples it played (for transcription afterwards).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

RATE = 16000
PER_MS = RATE // 1000
FRAME = 320          # 20 ms at 16 kHz
VOICED = 328         # int16 peak ≈ -40 dBFS, the same threshold as the line and the caller


@dataclass(eq=False)
class Burst:
    """One stretch of contiguous playout (times in ms on the call clock)."""

    id: int
    key: int | None               # the target's reply id when the protocol carries one
    arrival_ms: float             # first packet arrived at the caller's socket
    start_ms: float               # its first sample plays
    after_hold: bool = False      # begun by ``resume``: the gap before it was a pause, not a stall
    played: int = 0               # samples played
    first_voiced_ms: float | None = None
    last_voiced_ms: float | None = None   # end of the last voiced sample
    end_ms: float | None = None           # end of the last sample played
    cut_ms: float | None = None           # audio stopped here by ``clear`` (None: not cut)
    received: int = 0             # samples received (played or not)
    chunks: list[np.ndarray] = field(default_factory=list)   # what was played, in order

    def audio(self) -> np.ndarray:
        return np.concatenate(self.chunks) if self.chunks else np.zeros(0, np.int16)


class JitterBuffer:
    """Sample-accurate playout of received audio with a jitter buffer ``depth_ms`` deep.

    Events for the protocol link (``(kind, key, t_ms, data)``) collect in :attr:`events` and are
    drained by the caller loop; for replies with a key: ``start`` (first voiced sample heard), ``stall``
    (a reply's audio resumed after running dry: ``data["duration_ms"]``), ``cut`` (a ``clear``
    stopped audible audio), ``end`` (a reply marked ended has played out), ``mark`` (a Twilio
    mark reached, ``data["name"]``).
    """

    def __init__(self, depth_ms: float = 60.0) -> None:
        if not 0 <= depth_ms <= 2000:
            raise ValueError(f"jitter buffer depth {depth_ms} ms: use 0–2000 ms")
        self.depth = int(round(depth_ms * PER_MS))
        self.depth_ms = depth_ms
        self._sched: deque[list[Any]] = deque()   # [start sample, int16 array, burst]
        self._end = 0                               # sample after the last one scheduled
        self._pos = 0                               # next sample to play
        self._held: list[tuple[np.ndarray, Burst]] | None = None
        self._marks: deque[tuple[int, str]] = deque()
        self._ended: set[int] = set()               # reply keys the target said are complete
        self._started: set[int] = set()
        self.bursts: list[Burst] = []
        self.clears: list[float] = []
        self.holds: list[tuple[float, float | None]] = []
        self.events: list[tuple[str, int | None, float, dict[str, Any]]] = []
        self.received_samples = 0
        self._out = np.zeros(FRAME, dtype=np.int16)

    # --- from the target --------------------------------------------------------------------
    def push(self, pcm: np.ndarray, arrival_ms: float, key: int | None = None) -> None:
        """Schedule int16 16 kHz ``pcm`` that arrived at ``arrival_ms``; ``key`` is the reply it
        belongs to when the protocol says (a new key starts a new burst)."""
        n = len(pcm)
        if n == 0:
            return
        self.received_samples += n
        if self._held is not None:
            last = self._held[-1][1] if self._held else None
            if last is None or (key is not None and last.key != key):
                last = self._new_burst(key, arrival_ms, math.inf)
            last.received += n
            self._held.append((pcm, last))
            return
        at = math.ceil(arrival_ms * PER_MS)
        cur = self.bursts[-1] if self.bursts else None
        if cur is None or self._end <= at or (key is not None and cur.key != key) or cur.cut_ms is not None:
            start = max(at + self.depth, self._end)
            cur = self._new_burst(key, arrival_ms, start / PER_MS)
        else:
            start = self._end
        cur.received += n
        self._sched.append([start, pcm, cur])
        self._end = start + n

    def _new_burst(self, key: int | None, arrival_ms: float, start_ms: float, after_hold: bool = False) -> Burst:
        b = Burst(len(self.bursts), key, arrival_ms, start_ms, after_hold)
        self.bursts.append(b)
        return b

    def mark(self, name: str, arrival_ms: float) -> None:
        """A Twilio mark: echoed when playout reaches the audio sent before it."""
        at = math.ceil(arrival_ms * PER_MS)
        self._marks.append((max(self._end, at), name))

    def end_reply(self, key: int) -> None:
        """The target sent the whole reply ``key`` (``reply_end``): report ``end`` once played."""
        self._ended.add(key)

    def clear(self, now_ms: float) -> bool:
        """Drop everything not yet played (barge-in); True when audible audio was cut."""
        at = max(math.ceil(now_ms * PER_MS), self._pos)
        self.clears.append(now_ms)
        cut = False
        held_at = self.holds[-1][0] if self._held is not None and self.holds else None
        for b in self._unplayed_bursts(at):
            if b.played and b.cut_ms is None:   # the caller was hearing it: it stops here
                b.cut_ms = held_at if held_at is not None else now_ms
                cut = True
                if b.key is not None:
                    self.events.append(("cut", b.key, b.cut_ms, {"played_ms": b.played / PER_MS}))
        self._sched = deque(s for s in self._sched if s[0] < at)
        if self._sched:
            s = self._sched[-1]
            if s[0] + len(s[1]) > at:
                s[1] = s[1][:at - s[0]]
        self._end = min(self._end, at)
        if self._held is not None:  # a clear ends the pause too: nothing is left to resume
            self._held = None
            self.holds[-1] = (self.holds[-1][0], now_ms)
        while self._marks:  # Twilio sends back every mark a clear flushed, at once
            self.events.append(("mark", None, now_ms, {"name": self._marks.popleft()[1], "cleared": True}))
        return cut

    def _unplayed_bursts(self, at: int) -> list[Burst]:
        """Bursts with audio scheduled at or after sample ``at``, or held."""
        out = [s[2] for s in self._sched if s[0] + len(s[1]) > at]
        if self._held:
            out += [b for _, b in self._held]
        return list(dict.fromkeys(out))

    def hold(self, now_ms: float) -> None:
        """Stop playing now and keep the rest (the target heard the caller start talking)."""
        if self._held is not None:
            return
        at = max(math.ceil(now_ms * PER_MS), self._pos)
        kept: list[tuple[np.ndarray, Burst]] = []
        while self._sched and self._sched[-1][0] + len(self._sched[-1][1]) > at:
            start, pcm, b = self._sched.pop()
            if start < at:
                kept.append((pcm[at - start:], b))
                self._sched.append([start, pcm[:at - start], b])
                break
            kept.append((pcm, b))
        self._held = kept[::-1]
        self._end = min(self._end, at)
        self.holds.append((now_ms, None))

    def resume(self, now_ms: float) -> None:
        """Play what was held, from now on (no stall is counted for the pause)."""
        held, self._held = self._held, None
        if held is None:
            return
        self.holds[-1] = (self.holds[-1][0], now_ms)
        start = max(math.ceil(now_ms * PER_MS), self._end, self._pos)
        bursts: dict[int, Burst] = {}
        for pcm, old in held:
            b = bursts.get(old.id)
            if b is None:
                b = bursts[old.id] = self._new_burst(old.key, now_ms, start / PER_MS, after_hold=True)
                b.received = 0
            b.received += len(pcm)
            self._sched.append([start, pcm, b])
            start += len(pcm)
        self._end = max(self._end, start)

    # --- to the caller's ear ----------------------------------------------------------------
    def play(self, t_ms: float) -> np.ndarray:
        """The int16 window of 20 ms starting at ``t_ms`` (a multiple of 20) as the caller hears
        it. The array is reused by the next call."""
        out = self._out
        out[:] = 0
        n0 = int(round(t_ms * PER_MS))
        n1 = n0 + FRAME
        while self._sched and self._sched[0][0] < n1:
            start, pcm, b = self._sched[0]
            a = max(start, n0)
            z = min(start + len(pcm), n1)
            if z > a:
                seg = pcm[a - start:z - start]
                out[a - n0:z - n0] = seg
                self._heard(b, seg, a)
            if start + len(pcm) <= n1:
                self._sched.popleft()
            else:
                break
        self._pos = n1
        while self._marks and self._marks[0][0] <= n1:
            idx, name = self._marks.popleft()
            self.events.append(("mark", None, max(idx, n0) / PER_MS, {"name": name}))
        self._check_ended(n1)
        return out

    def _heard(self, b: Burst, seg: np.ndarray, a: int) -> None:
        if b.played == 0:
            self._on_burst_start(b, a / PER_MS)
        b.played += len(seg)
        b.chunks.append(seg.copy())
        loud = np.flatnonzero(np.abs(seg.astype(np.int32)) >= VOICED)
        if len(loud):
            if b.first_voiced_ms is None:
                b.first_voiced_ms = (a + int(loud[0])) / PER_MS
                if b.key is not None and b.key not in self._started:
                    self._started.add(b.key)  # type: ignore[arg-type]
                    self.events.append(("start", b.key, b.first_voiced_ms, {}))
            b.last_voiced_ms = (a + int(loud[-1]) + 1) / PER_MS
        b.end_ms = (a + len(seg)) / PER_MS

    def _on_burst_start(self, b: Burst, t_ms: float) -> None:
        b.start_ms = t_ms
        if b.key is None or b.after_hold:
            return
        prev = next((p for p in reversed(self.bursts[:b.id]) if p.key == b.key and p.played), None)
        if prev is not None and prev.cut_ms is None and prev.end_ms is not None and t_ms > prev.end_ms:
            self.events.append(("stall", b.key, prev.end_ms, {"duration_ms": t_ms - prev.end_ms}))

    def _check_ended(self, n1: int) -> None:
        if not self._ended:
            return
        pending = {s[2].key for s in self._sched}
        if self._held:
            pending |= {b.key for _, b in self._held}
        for key in list(self._ended):
            if key in pending:
                continue
            last = next((b for b in reversed(self.bursts) if b.key == key), None)
            self._ended.discard(key)
            if last is not None and last.played and last.cut_ms is None and last.end_ms is not None:
                self.events.append(("end", key, last.end_ms, {}))

    @property
    def idle(self) -> bool:
        """Nothing scheduled or held."""
        return not self._sched and not self._held

    def drain_events(self) -> list[tuple[str, int | None, float, dict[str, Any]]]:
        ev, self.events = self.events, []
        return ev
