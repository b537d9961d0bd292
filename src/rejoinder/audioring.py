"""The caller's recent audio in a bounded ring: memory per call is flat in call length.

A session needs the caller's audio only to transcribe a turn (from its onset), to judge a short
sound over a reply and to run the end-of-turn model (the last ≤ 8 s). :class:`AudioRing` keeps
the last ``seconds`` of it as int16 (2 bytes a sample: 32 s at 16 kHz is 1 MB), addressed by
call-clock time; older audio is overwritten. The whole call goes to disk through the recorder
(:mod:`rejoinder.harness.callrun`'s ``call.wav``, the server's ``caller.wav``), never into
memory: a 10-minute call kept whole as float32 was about 37 MB (issue 17, failure kind 9).

Writing a frame is one copy into the ring: no allocation per frame.
"""

from __future__ import annotations

import numpy as np


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
        if b <= a:
            return np.zeros(0, dtype=np.float32)
        i, j = a % self.capacity, b % self.capacity
        if i < j or (j == 0 and b > a):
            part = self._buf[i:j or self.capacity]
        else:
            part = np.concatenate([self._buf[i:], self._buf[:j]])
        return part.astype(np.float32) * np.float32(1.0 / 32768.0)
