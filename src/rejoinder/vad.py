"""Frame-level voice activity tracking: 20 ms transport frames → onset / voiced / pause signals.

The VAD model (a :class:`~rejoinder.ports.VADPort`) scores fixed windows (512 samples = 32 ms at
16 kHz for Silero). :class:`VadTracker` re-blocks incoming frames into those windows in a
preallocated buffer (no per-frame allocation), or, for a session, reads each window in place from
the call's caller-audio ring (:meth:`VadTracker.push_ring`: no second copy), and applies
hysteresis:

* onset: a window with p ≥ ``threshold`` followed by windows with p ≥ ``neg_threshold`` lasting
  ``min_speech_ms`` in all; the onset time is the start of the first of them (the first voiced
  sample, to window resolution);
* pause: ``pause_ms`` of consecutive windows with p < ``neg_threshold``; the reported time is the
  end of the last voiced window;
* after ``reset_after_ms`` of such silence the model's recurrent state is reset once (until the
  next speech): Silero's state after seconds of background babble damps the next word — the first
  digit read 2.5 s after the reference suite's babble (40 dB down) peaks at p 0.6 instead of
  0.88 and can be missed (``tests/adapters/test_stt_confidence.py``); a fresh state hears it.
  Long *digital* silence ages it too: after the 20 s a caller listens to a long reply, a state
  reset 19 s earlier missed both 8s of the held-out "8 8 1 4" read in real speech (aged 4 s it
  still heard them, aged 6 s not). So the session also resets it when a reply has finished
  playing (:meth:`VadTracker.reset_model`), the moment before a caller usually speaks. Resetting
  after *every* second of silence was tried and dropped: the bundled call then lost its first
  digit ("2, 1, 7.") in one call of each of two 10-call runs (``bench/v2v.py``, 2026-12-05),
  most likely a reset landing on the word's first windows, which delays its onset past the
  session's pre-roll.

Frames may be float32 in [-1, 1] or int16 PCM (scaled by 1/32768 once per window, not per frame).
A VAD that batches across calls (:mod:`rejoinder.adapters.silero_batch`: it has ``submit``) is
given each full window and answers later, once per batch for every call of the process; the
tracker then judges the window and hands its signals to :attr:`VadTracker.on_signals` (the
session) — :meth:`VadTracker.push` returns none itself. An inline VAD (``speech_prob``) is
judged at once and ``push`` returns the signals.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .audioring import AudioRing
from .ports import VADPort


_NONE: list = []  # no signals (shared, never appended to)


@dataclass(frozen=True, slots=True)
class VadSignal:
    kind: str  # "onset" | "voiced" | "pause"
    at_ms: float


class VadTracker:
    """Hysteresis over a window VAD. ``push`` takes float32 mono frames at the VAD's rate."""

    def __init__(self, vad: VADPort, *, threshold: float = 0.5, neg_threshold: float = 0.35,
                 min_speech_ms: float = 64.0, pause_ms: float = 160.0,
                 reset_after_ms: float | None = 1000.0) -> None:
        self.vad = vad
        self.reset_after_ms = reset_after_ms
        self._silent_ms = 0.0  # consecutive silence (p < neg_threshold) since the last reset
        self.threshold = threshold
        self.neg_threshold = neg_threshold
        self.min_speech_ms = min_speech_ms
        self.pause_ms = pause_ms
        self.window = vad.window_samples
        self.window_ms = 1000.0 * self.window / vad.sample_rate
        # staging: samples [_pos, _fill) are not judged yet; compacted only when full. Made at
        # the first push: a session reads its windows from its ring (push_ring) and never stages
        self._buf: np.ndarray | None = None
        self._pos = 0
        self._win = np.zeros(self.window, dtype=np.float32)  # one window, scaled
        self._scale = 1.0
        self._fill = 0
        self._buf_start_ms = 0.0
        self.speaking = False
        self._run_start: float | None = None  # start of consecutive voiced windows
        self._last_voiced_end = 0.0
        self.last_prob = 0.0
        self._ring_at = -1  # push_ring: ring index of the next window's first sample (-1: unset)
        self._batched = hasattr(vad, "submit")
        #: called with the signals of windows judged later (a batching VAD); set by the session
        self.on_signals: Callable[[list[VadSignal]], None] | None = None
        #: a batching VAD's window that goes on with speech already begun (a lone "voiced"
        #: signal, its end in ms): called instead of :attr:`on_signals` when set, with no list
        self.on_voiced: Callable[[float], None] | None = None
        if self._batched:
            vad.bind(self._on_prob)  # type: ignore[attr-defined]
            sub = getattr(vad, "submitter", None)
            self._submit = sub() if sub is not None else vad.submit  # type: ignore[attr-defined]

    def reset(self) -> None:
        self.vad.reset()
        self._fill = 0
        self._pos = 0
        self._ring_at = -1  # push_ring: the next window starts at the ring's next sample
        self.speaking = False
        self._run_start = None

    def close(self) -> None:
        """Release a batching VAD's slot (the call ended)."""
        close = getattr(self.vad, "close", None)
        if close is not None:
            close()

    def _on_prob(self, p: float, start_ms: float) -> None:
        """A batching VAD's answer for the window that started at ``start_ms``."""
        self.last_prob = p
        if self.speaking:
            if p >= self.threshold and p >= self.neg_threshold:  # speech goes on: no list
                self._silent_ms = 0.0
                self._last_voiced_end = end_ms = start_ms + self.window_ms
                if self._run_start is None:
                    self._run_start = start_ms
                if self.on_voiced is not None:
                    self.on_voiced(end_ms)
                elif self.on_signals is not None:
                    self.on_signals([VadSignal("voiced", end_ms)])
                return
        elif (p < self.neg_threshold and p < self.threshold and self._run_start is None
              and self._silent_ms < 0.0):  # a long silence goes on (most windows): nothing moves
            return
        elif self._silence_goes_on(p):  # silence: no signal, no list
            return
        out: list[VadSignal] = []
        self._judge(p, start_ms, out)
        if out and self.on_signals is not None:
            self.on_signals(out)

    def push(self, frame: np.ndarray, frame_start_ms: float) -> list[VadSignal]:
        """Add one frame (float32 in [-1, 1] or int16, mono, VAD rate) that starts at
        ``frame_start_ms``; returns the signals of the windows it completed (none with a
        batching VAD: they go to :attr:`on_signals` once judged)."""
        n = len(frame)
        buf = self._buf
        if buf is None:
            buf = self._buf = np.zeros(self.window * 8, dtype=np.float32)
        if frame.dtype is not buf.dtype:  # int16 stays int16 until a window is full
            self._convert(frame.dtype)
            buf = self._buf
        fill, pos = self._fill, self._pos
        if fill == pos:  # nothing waiting: the buffer restarts with this frame
            fill = pos = 0
            self._buf_start_ms = frame_start_ms
        elif fill + n > len(buf):  # full: move the waiting samples to the front
            if fill - pos + n > len(buf):
                raise ValueError(f"frame of {n} samples is larger than the VAD buffer; use ≤ 20 ms frames")
            buf[:fill - pos] = buf[pos:fill]
            fill -= pos
            pos = 0
        buf[fill:fill + n] = frame
        fill += n
        self._fill = fill
        win = self.window
        if fill - pos < win:
            self._pos = pos
            return _NONE
        out: list[VadSignal] = []
        while fill - pos >= win:
            start_ms = self._buf_start_ms
            self._buf_start_ms = start_ms + self.window_ms
            raw = buf[pos:pos + win]
            pos += win
            if self._batched:
                self._submit(raw, self._scale, start_ms)
            else:
                w = raw if self._scale == 1.0 else np.multiply(raw, self._scale, out=self._win)
                p = self.vad.speech_prob(w)
                self.last_prob = p
                self._judge(p, start_ms, out)
        self._pos = pos
        return out

    def push_ring(self, ring: AudioRing, n_new: int) -> list[VadSignal]:
        """The ``n_new`` int16 samples just written to ``ring`` (the caller's audio at the VAD's
        rate, time from the ring's origin): like :meth:`push`, but every whole window is read
        from the ring in place (:meth:`AudioRing.window`), so the frame path copies the caller's
        audio once. Feed one tracker through either this or :meth:`push`, not both."""
        k = self._ring_at
        if k < 0:
            k = ring.n - n_new
        win = self.window
        n = ring.n
        if n - k < win:
            self._ring_at = k
            return _NONE
        out: list[VadSignal] = []
        origin = ring.origin_ms or 0.0
        ms_per_sample = 1000.0 / ring.rate
        scale = 1.0 / 32768.0
        while n - k >= win:
            raw = ring.window(k, win)
            start_ms = origin + k * ms_per_sample
            k += win
            if self._batched:
                self._submit(raw, scale, start_ms)
            else:
                p = self.vad.speech_prob(np.multiply(raw, scale, out=self._win))
                self.last_prob = p
                self._judge(p, start_ms, out)
        self._ring_at = k
        return out

    def _convert(self, dtype: np.dtype) -> None:
        """Frames switched between int16 and float32: re-type the partial window kept."""
        is16 = dtype == np.int16
        kept = self._buf[self._pos:self._fill].astype(np.float32) * self._scale
        self._buf = np.zeros(len(self._buf), dtype=np.int16 if is16 else np.float32)
        self._scale = 1.0 / 32768.0 if is16 else 1.0
        self._buf[:len(kept)] = kept / self._scale
        self._fill, self._pos = len(kept), 0

    def reset_model(self) -> None:
        """Reset the VAD model's recurrent state now (the session calls it when a reply has
        finished playing), unless speech is starting or going on; the once-per-silence reset
        after ``reset_after_ms`` is unaffected."""
        if not self.speaking and self._run_start is None:
            self.vad.reset()

    def _silence_goes_on(self, p: float) -> bool:
        """A silent window while no speech is starting or going on: only the reset count moves
        (what :meth:`_judge` would do, without its signal list). False: judge the window."""
        if (p >= self.neg_threshold or p >= self.threshold or self._run_start is not None
                or self.speaking):
            return False
        if self._silent_ms >= 0.0:
            self._silent_ms += self.window_ms
            if self.reset_after_ms is not None and self._silent_ms >= self.reset_after_ms:
                self.vad.reset()  # once per silence: -1 marks "already reset"
                self._silent_ms = -1.0
        return True

    def _judge(self, p: float, start_ms: float, out: list[VadSignal]) -> None:
        if self._silence_goes_on(p):
            return
        end_ms = start_ms + self.window_ms
        if p >= self.neg_threshold:
            self._silent_ms = 0.0
        elif self._silent_ms >= 0.0:
            self._silent_ms += self.window_ms
            if (self.reset_after_ms is not None and not self.speaking
                    and self._silent_ms >= self.reset_after_ms):
                self.vad.reset()  # once per silence: -1 marks "already reset"
                self._silent_ms = -1.0
        if p >= self.threshold:
            self._last_voiced_end = end_ms
            if self._run_start is None:
                self._run_start = start_ms
            if self.speaking:
                out.append(VadSignal("voiced", end_ms))
            elif end_ms - self._run_start >= self.min_speech_ms:
                self.speaking = True
                out.append(VadSignal("onset", self._run_start))
                out.append(VadSignal("voiced", end_ms))
        elif p < self.neg_threshold:
            self._run_start = None
            if self.speaking and end_ms - self._last_voiced_end >= self.pause_ms:
                self.speaking = False
                out.append(VadSignal("pause", self._last_voiced_end))
        elif self.speaking:  # between thresholds while speaking: still voiced
            self._last_voiced_end = end_ms
        elif self._run_start is not None:  # between thresholds in a starting run: keep counting
            if end_ms - self._run_start >= self.min_speech_ms:
                self.speaking = True
                self._last_voiced_end = end_ms
                out.append(VadSignal("onset", self._run_start))
                out.append(VadSignal("voiced", end_ms))
