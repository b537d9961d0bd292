"""What the caller heard from a remote agent → agent replies → per-turn records.

The caller's ear (:class:`~.jitter.JitterBuffer`) yields *bursts* of contiguous playout. A
**reply** is one or more bursts:

* when the protocol names replies (rejoinder's ``/ws`` frames carry the turn id), bursts with the
  same id form one reply;
* otherwise (Twilio Media Streams: a black box), consecutive bursts stay one reply unless the
  target sent ``clear`` between them, a caller *request* ended while the agent was quiet between
  them (audio after a backchannel or a noise continues the earlier reply), or the gap exceeds
  :data:`NEW_REPLY_GAP_MS`.

Each caller utterance (ground truth from the caller's own audio) is owned by the first reply whose
first voiced sample comes after the utterance ended — the rule the in-process harness applies to
its end-of-turn decisions — so a reply that started while the caller was still talking owns nothing
and has no V2V. A reply is **cut** (``interrupted_at``) when the target cleared it while audible,
or when its audio stopped while a caller request was being spoken over it. Gaps between the bursts
of one reply are stalls (a pause the target asked for with ``pause``/``resume`` is not).

Stamps on the call clock (ms): ``user_speech_start``/``_end`` (truth), ``first_audio_in`` (the
reply's first packet reached the caller's socket), ``playout_start`` (its first sample plays, after
the jitter buffer), ``playback_start`` (its first voiced sample plays), ``answer_start`` (equal to
``playback_start``: a black-box target's filler audio cannot be told from its answer unless the
target reports it), ``playback_end`` or ``interrupted_at``, and ``stall``\\ s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...timeline import TurnRecord
from .jitter import Burst

NEW_REPLY_GAP_MS = 5000.0
CUT_GRACE_MS = 200.0


@dataclass
class Reply:
    key: int | None
    bursts: list[Burst] = field(default_factory=list)
    cleared: bool = False

    @property
    def first_in(self) -> float:
        return self.bursts[0].arrival_ms

    @property
    def start(self) -> float:
        return self.bursts[0].start_ms

    @property
    def voiced(self) -> float | None:
        return next((b.first_voiced_ms for b in self.bursts if b.first_voiced_ms is not None), None)

    @property
    def end(self) -> float:
        return max(b.end_ms or b.start_ms for b in self.bursts)

    @property
    def cut_ms(self) -> float | None:
        return self.bursts[-1].cut_ms

    def stalls(self) -> list[tuple[float, float]]:
        out = []
        for prev, b in zip(self.bursts, self.bursts[1:]):
            if not b.after_hold and prev.end_ms is not None and b.start_ms > prev.end_ms:
                out.append((prev.end_ms, b.start_ms - prev.end_ms))
        return out

    def audio(self) -> np.ndarray:
        parts = [b.audio() for b in self.bursts]
        return np.concatenate(parts) if parts else np.zeros(0, np.int16)

    def played_ms(self) -> float:
        return sum(b.played for b in self.bursts) / 16.0


def group_replies(bursts: list[Burst], *, clears: list[float], truth: list[tuple[int, float, float]],
                  requests: set[int], keyed: bool) -> list[Reply]:
    """Bursts → replies (see the module docstring). ``requests``: indexes of caller turns that are
    requests (not backchannels or noises)."""
    heard = [b for b in bursts if b.played]
    if keyed:
        by_key: dict[Any, Reply] = {}
        for b in heard:
            by_key.setdefault(b.key, Reply(b.key)).bursts.append(b)
        return sorted(by_key.values(), key=lambda r: r.start)
    ends = sorted(e for idx, _, e in truth if idx in requests)
    out: list[Reply] = []
    for b in heard:
        cur = out[-1] if out else None
        if cur is not None:
            prev = cur.bursts[-1]
            lo, hi = prev.end_ms or prev.start_ms, b.start_ms
            new = (prev.cut_ms is not None
                   or any(prev.arrival_ms <= c <= b.arrival_ms for c in clears)
                   or any(lo <= e <= hi for e in ends)
                   or hi - lo > NEW_REPLY_GAP_MS)
            if not new:
                cur.bursts.append(b)
                continue
        out.append(Reply(None, [b]))
    return out


def _cut_time(r: Reply, truth: list[tuple[int, float, float]], requests: set[int]) -> float | None:
    if r.cut_ms is not None:
        return r.cut_ms
    voiced = r.voiced
    if voiced is None:
        return None
    for idx, s, e in truth:  # its audio stopped while the caller was speaking a request over it
        if idx in requests and voiced < s < r.end <= e + CUT_GRACE_MS:
            return r.end
    return None


@dataclass
class Heard:
    """Per-turn records of a remote call and which caller turn each answers."""

    records: list[TurnRecord]
    owners: dict[int, int | None]
    replies: dict[int, Reply]          # turn id → the reply it was built from


def build_records(replies: list[Reply], truth: list[tuple[int, float, float]], requests: set[int],
                  *, keyed: bool) -> Heard:
    """Replies and the caller's truth → :class:`~rejoinder.timeline.TurnRecord`\\ s (one per reply,
    plus a ``no_reply`` record per caller request that no reply answered)."""
    owned: dict[int, list[tuple[int, float, float]]] = {}
    for idx, s, e in truth:
        owner = next((i for i, r in enumerate(replies) if r.voiced is not None and r.voiced >= e), None)
        if owner is not None:
            owned.setdefault(owner, []).append((idx, s, e))
    records: list[TurnRecord] = []
    owners: dict[int, int | None] = {}
    by_id: dict[int, Reply] = {}
    used = {r.key for r in replies if keyed and r.key is not None}
    next_id = max(used, default=0) + 1
    for i, r in enumerate(replies):
        tid = r.key if keyed and r.key is not None else len(records) + 1
        rec = TurnRecord(tid)
        st = rec.stamps
        mine = owned.get(i, [])
        if mine:
            st["user_speech_start"] = min(s for _, s, _ in mine)
            st["user_speech_end"] = max(e for _, _, e in mine)
        st["first_audio_in"] = r.first_in
        st["playout_start"] = r.start
        if r.voiced is not None:
            st["playback_start"] = r.voiced
            st["answer_start"] = r.voiced
        cut = _cut_time(r, truth, requests)
        if cut is not None:
            st["interrupted_at"] = cut
            rec.status = "interrupted"
        else:
            st["playback_end"] = r.end
        rec.stalls = r.stalls()
        records.append(rec)
        owners[tid] = max((idx for idx, _, _ in mine), default=None)
        by_id[tid] = r
        next_id = max(next_id, tid + 1)
    answered = {idx for rows in owned.values() for idx, _, _ in rows}
    for idx, s, e in truth:
        if idx in requests and idx not in answered:
            rec = TurnRecord(next_id, status="no_reply")
            rec.stamps.update(user_speech_start=s, user_speech_end=e)
            records.append(rec)
            owners[next_id] = idx
            next_id += 1
    records.sort(key=lambda r: r.stamps.get("playout_start", r.stamps.get("user_speech_end", 0.0)))
    if not keyed:  # number the turns in the order they happened
        remap = {rec.turn_id: k + 1 for k, rec in enumerate(records)}
        for rec in records:
            rec.turn_id = remap[rec.turn_id]
        owners = {remap[t]: o for t, o in owners.items()}
        by_id = {remap[t]: r for t, r in by_id.items()}
    return Heard(records, owners, by_id)
