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
heard words in the LLM context. Ticks never allocate: frames are views into the queued chunks.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

FRAME_MS = 20.0


@dataclass
class ReplyAudio:
    """Book-keeping for one reply's audio on the line."""

    turn_id: int
    chunks: deque = field(default_factory=deque)  # np.ndarray int16 pieces not yet played
    queued: int = 0       # samples ever queued
    played: int = 0       # samples played to the caller
    ended: bool = False   # no more audio will be sent
    started_voiced: bool = False
    stall_since: float | None = None
    first_out: bool = False
    answer_at: int | None = None  # first sample of LLM-written audio (reply-relative)
    answered: bool = False


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
        self._silence = np.zeros(self.frame, dtype=np.int16)
        self._out = np.zeros(self.frame, dtype=np.int16)
        self.last_peak = 0  # peak |sample| of the frame the last tick returned (int16 units)
        self.on_reply_done: Callable[[ReplyAudio, bool], None] | None = None

    # --- agent side ---------------------------------------------------------------------
    def begin(self, turn_id: int) -> ReplyAudio:
        """Start a new reply; any previous one must have been ended or cleared. A reply begun
        while another still has audio queued is counted in :attr:`overlaps` (the old one is
        dropped: two agent voices are never mixed) — a non-zero count is a turn-taking bug."""
        if self.reply is not None and self.reply.chunks:
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
        r.chunks.append(pcm)
        r.queued += len(pcm)
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
        keep = max(keep, r.played)
        drop = r.queued - keep
        dropped = 0
        while drop > 0 and r.chunks:
            tail = r.chunks[-1]
            if len(tail) <= drop:
                r.chunks.pop()
                drop -= len(tail)
                dropped += len(tail)
            else:
                r.chunks[-1] = tail[:len(tail) - drop]
                dropped += drop
                drop = 0
        r.queued -= dropped
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
        r.chunks.clear()
        r.ended = True
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
            return self._silence
        if not r.chunks:
            if r.ended:
                self.reply = None
                if r.played:
                    self._stamp("playback_end", r.turn_id, now, estimated=not self.caller_side)
                if self.on_reply_done:
                    self.on_reply_done(r, False)
            elif r.played and r.stall_since is None:
                r.stall_since = now
            return self._silence
        if r.stall_since is not None:
            self._stamp("stall", r.turn_id, r.stall_since, duration_ms=now - r.stall_since,
                        estimated=not self.caller_side)
            r.stall_since = None
        out = self._out
        filled = 0
        while filled < self.frame and r.chunks:
            head = r.chunks[0]
            take = min(self.frame - filled, len(head))
            out[filled:filled + take] = head[:take]
            if take == len(head):
                r.chunks.popleft()
            else:
                r.chunks[0] = head[take:]
            filled += take
        if filled < self.frame:
            out[filled:] = 0
        if r.played == 0:
            self._stamp("playout_start", r.turn_id, now, estimated=not self.caller_side)
        if not r.started_voiced:
            at = self._first_voiced(out, 0, filled)
            if at is not None:
                r.started_voiced = True
                self._stamp("playback_start", r.turn_id, now + 1000.0 * at / self.rate,
                            estimated=not self.caller_side)
        if r.answer_at is not None and not r.answered and r.played + filled > r.answer_at:
            at = self._first_voiced(out, max(0, r.answer_at - r.played), filled)
            if at is not None:
                r.answered = True
                self._stamp("answer_start", r.turn_id, now + 1000.0 * at / self.rate,
                            estimated=not self.caller_side)
        r.played += filled
        self.last_peak = max(int(out.max()), -int(out.min()))
        return out
