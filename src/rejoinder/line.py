"""The agent's side of the transport: an outgoing audio queue played out in real time.

:class:`Playout` is the transport contract the session talks to (``send`` / ``end_reply`` /
``hold`` / ``resume`` / ``clear``). It plays 20 ms frames at ``rate`` Hz (int16 mono), one per
:meth:`tick`, from the reply currently queued. It is the *caller side* of the measurement: it stamps

* ``playback_start`` — first voiced sample (|x| ≥ ``voiced_level``) of a reply the caller hears;
  leading silence in TTS audio therefore counts as waiting, as the measurement contract requires;
* ``answer_start`` — first voiced sample of the reply's LLM-written audio (marked by the reply
  with :meth:`Playout.mark_answer`; later than ``playback_start`` when the runtime spoke first);
* ``stall`` — each interval where the reply was not finished but the buffer ran dry (underrun);
* ``playback_end`` / ``interrupted_at`` — the end of the reply as heard, or the cut.

It also tracks how many samples of each reply were heard so the session can keep exactly the
heard words in the LLM context.

A reply's audio is kept in one contiguous int16 buffer (grown by doubling as TTS chunks arrive),
so a tick hands out a *view* of the next 20 ms: no copy and no allocation per frame. The frames'
peaks (|sample|, needed every frame to know whether the agent is audible) are computed in bulk —
one vectorised pass over every whole frame queued ahead of the play position, redone only when
new audio arrives or an underrun shifts the frame grid — instead of two numpy reductions per
frame (≈ 4 µs each frame on the 2-core reference box; ``bench/capacity.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

FRAME_MS = 20.0


@dataclass
class ReplyAudio:
    """Book-keeping for one reply's audio on the line. ``buf[:queued]`` is every sample queued
    (int16, reply-relative), ``buf[played:queued]`` what the caller has not heard yet."""

    turn_id: int
    buf: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int16))
    queued: int = 0       # samples ever queued (less any truncated)
    played: int = 0       # samples played to the caller
    ended: bool = False   # no more audio will be sent
    started_voiced: bool = False
    stall_since: float | None = None
    first_out: bool = False
    answer_at: int | None = None  # first sample of LLM-written audio (reply-relative)
    answered: bool = False
    peaks: list = field(default_factory=list)  # peak |sample| of the whole frames from peaks_at
    peaks_at: int = -1    # reply-relative sample where ``peaks[0]``'s frame starts

    @property
    def pending(self) -> int:
        """Samples queued and not yet played."""
        return self.queued - self.played

    def append(self, pcm: np.ndarray) -> None:
        """Queue int16 ``pcm`` after what is queued (one copy; the buffer doubles when full)."""
        end = self.queued + len(pcm)
        if end > len(self.buf):
            grown = np.zeros(max(end, 2 * len(self.buf), 16000), dtype=np.int16)
            grown[:self.queued] = self.buf[:self.queued]
            self.buf = grown
        self.buf[self.queued:end] = pcm
        self.queued = end
        self.peaks_at = -1  # new whole frames: recompute the peaks at the next tick

    def frame_peak(self, frame: int) -> int:
        """Peak |sample| of the whole frame of ``frame`` samples starting at :attr:`played`."""
        k = (self.played - self.peaks_at) // frame if self.peaks_at >= 0 else -1
        if k < 0 or (self.played - self.peaks_at) % frame or k >= len(self.peaks):
            n = (self.queued - self.played) // frame
            block = self.buf[self.played:self.played + n * frame].reshape(n, frame)
            hi = block.max(axis=1).astype(np.int32)
            lo = block.min(axis=1).astype(np.int32)
            self.peaks = np.maximum(hi, -lo).tolist()
            self.peaks_at = self.played
            k = 0
        return self.peaks[k]


class Playout:
    """Real-time playout of agent audio (int16 mono at ``rate`` Hz) in 20 ms frames.

    ``stamp(name, turn_id, t_ms, **data)`` is called for caller-side boundaries.
    """

    def __init__(self, rate: int, stamp: Callable[..., None], *, voiced_level: int = 328,
                 caller_side: bool = True) -> None:
        """``caller_side`` False (live transports): this playout runs at the server, so its
        caller-side stamps are estimates (flagged); the client reports the real moments."""
        self.rate = rate
        self.caller_side = caller_side
        self.frame = int(rate * FRAME_MS / 1000)
        self.voiced_level = voiced_level  # int16 peak ≈ -40 dBFS
        self._stamp = stamp
        self.reply: ReplyAudio | None = None
        self.held = False
        self.held_at = 0.0
        self.overlaps = 0
        self.silence = np.zeros(self.frame, dtype=np.int16)  #: the frame heard between replies
        self._out = np.zeros(self.frame, dtype=np.int16)
        self.last_peak = 0  # peak |sample| of the frame the last tick returned (int16 units)
        self.on_reply_done: Callable[[ReplyAudio, bool], None] | None = None

    # --- agent side ---------------------------------------------------------------------
    def begin(self, turn_id: int) -> ReplyAudio:
        """Start a new reply; any previous one must have been ended or cleared. A reply begun
        while another still has audio queued is counted in :attr:`overlaps` (the old one is
        dropped: two agent voices are never mixed) — a non-zero count is a turn-taking bug."""
        if self.reply is not None and self.reply.pending:
            self.overlaps += 1
        self.reply = ReplyAudio(turn_id)
        self.held = False
        return self.reply

    def send(self, turn_id: int, pcm: np.ndarray, now: float) -> bool:
        """Queue int16 audio for ``turn_id``. Returns False (dropped) when the turn is stale."""
        r = self.reply
        if r is None or r.turn_id != turn_id or r.ended:
            return False
        if len(pcm) == 0:
            return True
        r.append(pcm)
        if not r.first_out:
            r.first_out = True
            self._stamp("first_audio_out", turn_id, now)
        return True

    def mark_answer(self, turn_id: int, at_sample: int) -> None:
        """The LLM's answer starts at reply-relative sample ``at_sample`` of ``turn_id``: stamp
        ``answer_start`` when its first voiced sample plays."""
        r = self.reply
        if r is not None and r.turn_id == turn_id and r.answer_at is None:
            r.answer_at = at_sample

    def truncate(self, turn_id: int, keep: int) -> int:
        """Drop queued audio of ``turn_id`` beyond sample ``keep`` (reply-relative) that has not
        been played yet; returns how many samples were dropped. Used to cut a failed TTS chunk
        back to its last whole word before resuming, so nothing is heard twice."""
        r = self.reply
        if r is None or r.turn_id != turn_id:
            return 0
        keep = min(max(keep, r.played), r.queued)
        dropped = r.queued - keep
        r.queued = keep
        if dropped:
            r.peaks_at = -1
        return dropped

    def end_reply(self, turn_id: int) -> None:
        if self.reply is not None and self.reply.turn_id == turn_id:
            self.reply.ended = True

    def hold(self, now: float) -> None:
        """Stop playing at once but keep the queue (possible backchannel)."""
        if not self.held:
            self.held = True
            self.held_at = now

    def resume(self) -> None:
        self.held = False

    def clear(self, now: float) -> ReplyAudio | None:
        """Barge-in: discard everything queued and end the reply at the current sample."""
        r = self.reply
        if r is None:
            return None
        r.ended = True  # (``queued`` stays: what was sent, for the heard share of the reply)
        self.reply = None
        cut_at = self.held_at if self.held else now  # audio stopped when it was held
        self.held = False
        if r.played:
            self._stamp("interrupted_at", r.turn_id, cut_at, played_ms=1000.0 * r.played / self.rate,
                        estimated=not self.caller_side)
        if self.on_reply_done:
            self.on_reply_done(r, True)
        return r

    def _first_voiced(self, frame: np.ndarray, a: int, b: int) -> int | None:
        loud = np.flatnonzero(np.abs(frame[a:b].astype(np.int32)) >= self.voiced_level)
        return a + int(loud[0]) if len(loud) else None

    # --- caller side ----------------------------------------------------------------------
    def tick(self, now: float) -> np.ndarray:
        """Play one 20 ms frame starting at ``now`` (ms); returns the int16 frame heard."""
        r = self.reply
        self.last_peak = 0
        if r is None or self.held:
            return self.silence
        left = r.queued - r.played
        if left <= 0:
            if r.ended:
                self.reply = None
                if r.played:
                    self._stamp("playback_end", r.turn_id, now, estimated=not self.caller_side)
                if self.on_reply_done:
                    self.on_reply_done(r, False)
            elif r.played and r.stall_since is None:
                r.stall_since = now
            return self.silence
        if r.stall_since is not None:
            self._stamp("stall", r.turn_id, r.stall_since, duration_ms=now - r.stall_since,
                        estimated=not self.caller_side)
            r.stall_since = None
        at = r.played
        if left >= self.frame:  # a whole frame: a view of the reply's buffer, its peak known
            filled = self.frame
            out = r.buf[at:at + filled]
            peak = r.frame_peak(filled)
        else:  # the last samples queued (the reply's end, or an underrun): padded with silence
            filled = left
            out = self._out
            out[:filled] = r.buf[at:at + filled]
            out[filled:] = 0
            peak = max(int(out.max()), -int(out.min()))
        if at == 0:
            self._stamp("playout_start", r.turn_id, now, estimated=not self.caller_side)
        if not r.started_voiced and peak >= self.voiced_level:
            first = self._first_voiced(out, 0, filled)
            r.started_voiced = True
            self._stamp("playback_start", r.turn_id, now + 1000.0 * first / self.rate,
                        estimated=not self.caller_side)
        if (r.answer_at is not None and not r.answered and at + filled > r.answer_at
                and peak >= self.voiced_level):
            first = self._first_voiced(out, max(0, r.answer_at - at), filled)
            if first is not None:
                r.answered = True
                self._stamp("answer_start", r.turn_id, now + 1000.0 * first / self.rate,
                            estimated=not self.caller_side)
        r.played = at + filled
        self.last_peak = peak
        return out
