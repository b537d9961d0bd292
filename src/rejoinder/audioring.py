"""The caller's recent audio in a bounded ring: memory per call is flat in call length.

A session needs the caller's audio only to transcribe a turn (from its onset), to judge a short
sound over a reply and to run the end-of-turn model (the last ≤ 8 s). :class:`AudioRing` keeps
the last ``seconds`` of it as int16 (2 bytes a sample: 32 s at 16 kHz is 1 MB), addressed by
call-clock time; older audio is overwritten. The whole call goes to disk through the recorder
(:mod:`rejoinder.harness.callrun`'s ``call.wav``, the server's ``caller.wav``), never into
memory: a 10-minute call kept whole as float32 was about 37 MB (issue 17, failure kind 9).

Writing a frame is one copy into the ring: no allocation per frame. A ring's buffer goes back to a
process-wide pool when its call ends (:meth:`AudioRing.release`; at most :data:`POOL_MAX` kept)
and the next call's ring takes it: a server that has held N calls holds N buffers, and a new call
writes into memory the process already has instead of faulting in fresh pages all through its
first 32 s. In a 600-call process that had served a round of calls before, on the 2-core
reference VM with the test suite beside it, a frame's write into the ring took 2.64 µs on average
with 1.12 % of the writes over 20 µs (a first touch of a fresh page) without the pool, 1.99 µs and
0.12 % with it (``bench/capacity.py --warm-seconds 34 --time-ring``). The VAD reads its windows
from the ring in place (:meth:`AudioRing.window`, :meth:`rejoinder.vad.VadTracker.push_ring`): the
caller's audio is copied once on the frame path, not once more into a VAD staging buffer.
"""

from __future__ import annotations

import numpy as np

POOL_MAX = 2048  #: ring buffers kept for reuse after their calls ended (1 MB each at 16 kHz, 32 s)
_POOL: dict[int, list[np.ndarray]] = {}  # capacity (samples) → free buffers
_RELEASED = np.zeros(0, dtype=np.int16)


def pooled_buffers() -> int:
    """How many released ring buffers the process keeps for reuse."""
    return sum(len(v) for v in _POOL.values())


class AudioRing:
    """The last ``seconds`` of int16 mono audio at ``rate`` Hz, addressed in call-clock ms.

    Args:
        rate: sample rate (Hz).
        seconds: how much is kept (default 32 s: Whisper's 30 s window plus the turn's
            pre-roll and tail).
    """

    def __init__(self, rate: int = 16000, seconds: float = 32.0) -> None:
        self.rate = rate
        self.capacity = int(rate * seconds)
        try:  # a reused buffer keeps its old samples: nothing before ``n`` is ever read
            self._buf = _POOL[self.capacity].pop()
        except (KeyError, IndexError):  # (pop, not a test first: sessions of other threads)
            self._buf = np.zeros(self.capacity, dtype=np.int16)
        self.n = 0  # samples ever written
        self._at = 0  # where the next sample goes (n mod capacity)
        self.origin_ms: float | None = None  # call-clock time of sample 0

    def write(self, pcm: np.ndarray, t_ms: float) -> None:
        """Append int16 ``pcm`` that starts at ``t_ms`` (the first write fixes the origin; later
        frames are taken as contiguous)."""
        if self.origin_ms is None:
            self.origin_ms = t_ms
        n = len(pcm)
        at = self._at
        end = at + n
        if end < self.capacity:  # the common case: no wrap
            self._buf[at:end] = pcm
            self._at = end
            self.n += n
            return
        if self._buf is _RELEASED:
            raise RuntimeError("this caller-audio ring was released (its call has ended)")
        if n > self.capacity:
            raise ValueError(f"a frame of {n} samples does not fit a ring of {self.capacity}")
        if end == self.capacity:
            self._buf[at:] = pcm
        else:
            split = self.capacity - at
            self._buf[at:] = pcm[:split]
            self._buf[:end - self.capacity] = pcm[split:]
        self._at = end - self.capacity
        self.n += n

    def release(self) -> None:
        """The call has ended: hand the buffer to the process's pool (kept while it holds fewer
        than :data:`POOL_MAX`). A write after this raises RuntimeError; a segment is empty."""
        buf = self._buf
        if buf is _RELEASED:
            return
        self._buf = _RELEASED
        self.n = self._at = self.capacity = 0
        free = _POOL.setdefault(len(buf), [])
        if pooled_buffers() < POOL_MAX:
            free.append(buf)

    def window(self, start: int, n: int) -> np.ndarray:
        """Samples ``[start, start + n)`` (indices since the origin; still kept) as int16: a view
        of the ring, valid until the next write, or a copy when they straddle its wrap."""
        i = start % self.capacity
        j = i + n
        if j <= self.capacity:
            return self._buf[i:j]
        return np.concatenate((self._buf[i:], self._buf[:j - self.capacity]))

    @property
    def oldest(self) -> int:
        """Index (samples since the origin) of the oldest sample still kept."""
        return max(0, self.n - self.capacity)

    def segment(self, start_ms: float, end_ms: float) -> np.ndarray:
        """A float32 copy of the audio in [start_ms, end_ms), clipped to what is written and still
        kept (older audio has been overwritten: the segment then starts later)."""
        origin = self.origin_ms or 0.0
        a = max(self.oldest, int((start_ms - origin) * self.rate / 1000))
        b = min(self.n, int((end_ms - origin) * self.rate / 1000))
        if b <= a or self._buf is _RELEASED:
            return np.zeros(0, dtype=np.float32)
        i, j = a % self.capacity, b % self.capacity
        if i < j or (j == 0 and b > a):
            part = self._buf[i:j or self.capacity]
        else:
            part = np.concatenate([self._buf[i:], self._buf[:j]])
        return part.astype(np.float32) * np.float32(1.0 / 32768.0)
