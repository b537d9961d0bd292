"""Per-call figures measured against the simulated caller's ground truth (its own audio, and
the agent audio it heard): end-of-turn delay and false cut-offs, and the longest silence the
caller heard in each turn.

**Endpointing delay** (eot-bench style): ``eot_decided − user_speech_end`` of each answered
caller turn, where ``user_speech_end`` is the caller's last voiced sample (the last
``eot_decided`` of a turn counts: a turn held open or reopened is decided again).

**False cut-off**: the runtime decided the caller's turn was over (any ``eot_decided``, also one
taken back later) while the caller went on speaking the same utterance within 1 s
(``FALSE_CUTOFF_WINDOW_MS``) — a voiced run of that scripted utterance starts in
``(decision, decision + 1 s]`` — and the decision was still standing then. The rate is over
the caller's utterances: an utterance with one or more false cut-offs counts once.
``in_numbers`` counts those whose turn's transcript ends in a number of ≥ 3 digits read out
(``rejoinder.dictation.dictated_digits``). A decision the runtime took back on its own before
the caller went on (the transcript showed an open number or a dangling "and": a ``retracted``
:class:`~rejoinder.events.TurnDecision`; the reply waits for the transcript, so nothing was
said and no LLM call made) is counted apart, as ``retracted``.

**Longest silence** of a turn: the longest stretch without voiced agent audio at the caller
from the caller's end of speech until the reply was heard out (or cut): the wait before the
first word (V2V) and every gap inside the reply (a filler then a slow tool, a stall).
"""

from __future__ import annotations

from typing import Any, Sequence

from .dictation import dictated_digits

FALSE_CUTOFF_WINDOW_MS = 1000.0


def endpointing_metrics(turns: Sequence[Any], speech_runs: Sequence[tuple[int, float, float]],
                        truth: Sequence[tuple[int, float, float]]) -> dict[str, Any]:
    """Endpointing delays (ms, answered caller turns) and false cut-offs of one call.

    ``turns``: :class:`rejoinder.timeline.TurnRecord` objects (their ``commits`` and stamps);
    ``speech_runs``: the caller's voiced runs (utterance index, start_ms, end_ms); ``truth``:
    its utterances (index, start_ms, end_ms), both on the call clock."""
    delays = [round(r.stamps["eot_decided"] - r.stamps["user_speech_end"], 3) for r in turns
              if r.initiated is None and "eot_decided" in r.stamps and "user_speech_end" in r.stamps
              and "playback_start" in r.stamps]
    cut: dict[int, bool] = {}  # utterance index → cut off inside a number read out
    events = retracted = 0
    for r in turns:
        numbers = dictated_digits(r.transcript or "") >= 3
        for c in r.commits:
            utt = next((u for u in reversed(truth) if u[1] <= c), None)
            if utt is None or c >= utt[2]:
                continue  # decided after the utterance ended: right
            resumed = [a for k, a, _ in speech_runs
                       if k == utt[0] and c < a <= c + FALSE_CUTOFF_WINDOW_MS]
            if not resumed:
                continue
            if any(c <= x <= min(resumed) for x in getattr(r, "retractions", ())):
                retracted += 1  # taken back by the transcript before the caller went on
                continue
            events += 1
            cut[utt[0]] = cut.get(utt[0], False) or numbers
    return {"delays_ms": delays, "utterances": len(truth), "cut_off": len(cut),
            "cut_off_in_numbers": sum(1 for v in cut.values() if v), "false_cutoff_events": events,
            "retracted": retracted}


def longest_silences(turns: Sequence[Any], heard_runs: Sequence[Sequence[float]],
                     end_ms: float) -> list[dict[str, Any]]:
    """Per turn with a reply the caller heard: ``{"turn_id", "longest_silence_ms", "tools"}``
    (``tools``: the turn called tools) from the agent audio the caller heard (``heard_runs``,
    [start, end] ms) between its ``user_speech_end`` and the reply's ``playback_end`` /
    ``interrupted_at`` (else ``end_ms``)."""
    out = []
    for r in turns:
        s = r.stamps
        if "playback_start" not in s:
            continue
        start = s.get("user_speech_end")
        if start is None:
            continue
        stop = s.get("playback_end", s.get("interrupted_at", end_ms))
        prev, longest = start, 0.0
        for a, b in heard_runs:
            if b <= prev or a >= stop:
                continue
            longest = max(longest, a - prev)
            prev = max(prev, b)
        out.append({"turn_id": r.turn_id, "longest_silence_ms": round(longest, 1),
                    "tools": bool(r.tools)})
    return out
