"""Speculation you can audit: what each preemptive draft bought and what it cost.

A *speculative* draft (:class:`rejoinder.respond.Draft` started with ``tentative=True``) is the
agent loop run on a pause's transcript before the turn is decided over. Its fate is one
:class:`rejoinder.events.Speculation` event per draft, emitted by the session:

* ``kept``: the final transcript is the speculative one (same words, case and punctuation aside);
* ``extended``: the final transcript only *extends* it with words that ask for nothing more
  ("… please", "… thank you", "uh": :data:`COURTESY`): the draft answers it as well, so it is
  kept (:func:`same_request`);
* ``discarded``: the caller went on and said something else, the turn was noise, or the reply
  was cancelled before it was confirmed — its LLM requests, tokens and reversible tool runs
  (compensated) were wasted.

**Time saved** by a kept draft: without speculation the same work would have started at the
confirmation (the commit with its final transcript) and produced its first text ``D`` later;
with it, the first text was ready at ``max(start + D, confirm)``. The difference is
``min(confirm, first_text) − start`` (:func:`saved_ms`): all the time it ran before the
confirmation, capped by how long it actually needed. Nothing a draft writes is spoken before
it is confirmed (``0 unconfirmed words``; :class:`SpeculationAudit` checks it on the events).
"""

from __future__ import annotations

import re
from typing import Any

from .events import Event, SpeakableText, Speculation, TurnDecision

COURTESY = frozenset({"please", "thanks", "thank", "you", "uh", "um", "er", "okay", "ok", "so",
                      "yeah", "yes", "right", "now"})
_WORD = re.compile(r"[a-z0-9']+")


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def same_request(speculative: str, final: str) -> str | None:
    """``"kept"`` when ``final`` has the words of ``speculative`` (case and punctuation aside),
    ``"extended"`` when it only adds :data:`COURTESY` words after them, else None (the draft
    answers another request)."""
    a, b = _words(speculative), _words(final)
    if not a:
        return None
    if a == b:
        return "kept"
    if len(b) > len(a) and b[:len(a)] == a and all(w in COURTESY for w in b[len(a):]):
        return "extended"
    return None


def saved_ms(started_ms: float, confirmed_ms: float, first_text_ms: float | None) -> float:
    """How much sooner a kept draft's first text was ready than had it started at the
    confirmation: ``min(confirmed, first_text) − started`` (ms, ≥ 0)."""
    end = confirmed_ms if first_text_ms is None else min(confirmed_ms, first_text_ms)
    return round(max(0.0, end - started_ms), 3)


def speculation_event(draft: Any, outcome: str, reason: str, now: float) -> Speculation:
    """The :class:`Speculation` record of ``draft`` (a :class:`rejoinder.respond.Draft`) at
    ``now`` (call clock, ms): ``outcome`` kept / extended / discarded, ``reason`` why."""
    st = draft.conv.st
    kept = outcome != "discarded"
    return Speculation(outcome, reason,
                       saved_ms(draft.started_ms, now, draft.first_text_ms) if kept else 0.0,
                       draft.llm_requests, draft.tokens, len(draft._tool_tasks), draft.started_ms,
                       now, st.call_id, draft.turn_id)


class SpeculationAudit:
    """Observer: LLM-written words handed to TTS for a turn before any commit of that turn
    (:attr:`unconfirmed_words`, must stay 0), and every :class:`Speculation` event seen."""

    def __init__(self) -> None:
        self.unconfirmed_words = 0
        self.records: list[Speculation] = []
        self._committed: set[int] = set()

    def __call__(self, event: Event) -> None:
        if isinstance(event, TurnDecision) and event.committed:
            self._committed.add(event.turn_id)
        elif isinstance(event, Speculation):
            self.records.append(event)
        elif (isinstance(event, SpeakableText) and event.source == "llm" and event.turn_id > 0
              and event.turn_id not in self._committed):
            self.unconfirmed_words += len(event.spoken.split())


def speculation_metrics(turns: list[Any], unconfirmed_words: int = 0) -> dict[str, Any]:
    """Per-call figures from :class:`rejoinder.timeline.TurnRecord` objects: caller turns with
    a reply, LLM requests (all, and those of discarded speculative drafts), replies started
    (``llm_replies``: each draft's first request, speculative or not — a tool round's next step
    and a retry are the same reply, so what speculation adds per turn is
    ``llm_replies / turns − 1``), speculative drafts
    by outcome, ms saved by each kept one, tokens and tool runs wasted."""
    caller = [r for r in turns if r.initiated is None and "eot_decided" in r.stamps]
    specs = [s for r in caller for s in r.speculation]
    lost = [s for s in specs if s["outcome"] == "discarded"]
    return {
        "turns": len(caller),
        "llm_requests": sum(r.llm_requests for r in caller),
        "llm_replies": sum(r.llm_replies for r in caller),
        "speculative": len(specs),
        "kept": sum(1 for s in specs if s["outcome"] == "kept"),
        "extended": sum(1 for s in specs if s["outcome"] == "extended"),
        "discarded": len(lost),
        "saved_ms": [s["saved_ms"] for s in specs if s["outcome"] != "discarded"],
        "wasted_llm_requests": sum(s["llm_requests"] for s in lost),
        "wasted_tokens": sum(s["tokens"] for s in lost),
        "wasted_tool_runs": sum(s["tool_runs"] for s in lost),
        "discard_reasons": _count(s["reason"] for s in lost),
        "unconfirmed_words": unconfirmed_words,
    }


def _count(items) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return out
