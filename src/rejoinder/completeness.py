"""Does a caller's transcript read as finished? The words' half of the end-of-turn decision.

Smart Turn hears prosody; the speculative transcript (Whisper punctuates) tells what was said.
:func:`read_transcript` sorts a transcript of the turn so far into what the turn-taking
(:class:`rejoinder.turns.TurnTaker`) needs:

* ``complete``: it ends with ``?`` or ``!``, or with ``.`` after a last word that needs no
  continuation (not an ellipsis), or it is a closed phrase ("hello", "thank you", "that's all");
* ``dangling``: it ends mid-phrase — a trailing conjunction, article, preposition, possessive or
  hesitation ("… and", "my", "to", "uh") not closed by "?" or "!", a comma or an ellipsis, or it
  is only a lead-in ("Actually", "So"): the caller is very likely to go on, so the model alone
  must not end the turn;
* ``question``: it ends with a question mark (decisive with ``complete``);
* ``number_open`` / ``number_complete``: it ends in a number still being read out, or in a whole
  one of an expected format (:mod:`rejoinder.dictation`; the session passes them in, with the
  agent's last words and the caller's pauses as context). A whole number ends the turn by
  itself (decisive) only after a full stop; read out digit by digit without one ("3, 3, 8, 8":
  Whisper writes no full stop after a list) it is complete words, not decisive, so the
  end-of-turn model may still veto it (below ``eot_text_threshold``) — and a number said as one
  word without a full stop ("Where is order 4217") is not complete at all.

The word lists are English and small on purpose: each one is a word after which a finished
utterance is rare in support calls, not a grammar.
"""

from __future__ import annotations

from dataclasses import dataclass

CLOSED_PHRASES = frozenset({
    "hello", "hi", "hey", "yes", "no", "yeah", "nope", "thanks", "thank you", "okay", "ok", "bye",
    "goodbye", "that's all", "that's it", "sure", "correct"})
# a turn ending in one of these words is very likely to go on
DANGLING_WORDS = frozenset({
    "and", "or", "but", "because", "if", "the", "a", "an", "to", "of", "for", "with", "my", "your",
    "our", "is", "uh", "um", "er",
    # a verb whose complement is still to come: "Yeah, it's." was a caller's "Yeah, it's" before
    # she read her order number after a 300 ms pause (a suite run, 2026-12-05, Whisper base)
    "it's", "its", "that's", "i'm",
    # ... and a copula before it ("It ought to be." before an order number, 2026-12-05)
    "be"})
# discourse markers that open what the caller is about to say: a turn made of these alone
# ("Actually," then a pause, then "what about my other order?") goes on; after other words
# ("I'll keep it, actually.") they end it as any word does
LEAD_INS = frozenset({"actually", "so", "well", "anyway", "also", "besides", "plus", "and", "but"})


@dataclass(frozen=True, slots=True)
class Reading:
    """How a transcript of the turn so far reads (see the module docstring)."""

    complete: bool
    dangling: bool
    question: bool
    number_open: bool = False
    #: it ends in a whole number of an expected format after a full stop (decisive)
    number_complete: bool = False

    @property
    def decisive(self) -> bool:
        """Complete and ending in a question or a whole number: ends the turn by itself."""
        return self.complete and (self.question or self.number_complete)


def _lead_in_only(text: str) -> bool:
    """True when every word of ``text`` is one of :data:`LEAD_INS` ("Actually", "So, well")."""
    words = [w.strip(".!?,;:…") for w in text.lower().split()]
    return bool(words) and all(w in LEAD_INS for w in words)


def _last_word(text: str) -> str:
    parts = text.strip().lower().rstrip(".!?,;: ").split()
    return parts[-1] if parts else ""


def text_complete(text: str) -> bool:
    """True when ``text`` reads as a finished utterance: terminal punctuation (not an ellipsis)
    and no dangling last word, or a closed phrase such as "hello" or "thank you"."""
    t = text.strip().lower()
    if not t:
        return False
    if t.rstrip(".!?, ") in CLOSED_PHRASES:
        return True
    if t.endswith(("...", "…")) or not t.endswith((".", "!", "?")):
        return False
    return t.endswith(("?", "!")) or not (_lead_in_only(t) or _last_word(t) in DANGLING_WORDS)


def dangling(text: str) -> bool:
    """True when ``text`` ends mid-phrase: an ellipsis, a comma, a last word from
    :data:`DANGLING_WORDS` ("I'd like to check my", "4217 and"), or only :data:`LEAD_INS`
    ("Actually")."""
    t = text.strip().lower()
    if not t or t.rstrip(".!?, ") in CLOSED_PHRASES:
        return False
    if t.endswith(("...", "…", ",", ";", ":")):
        return True
    if t.endswith(("?", "!")):  # "Who am I talking to?" is finished
        return False
    return _lead_in_only(t) or _last_word(t) in DANGLING_WORDS


def read_transcript(text: str, *, number_open: bool = False, number_complete: bool = False,
                    announced: bool = False, read_out: bool = False) -> Reading:
    """:class:`Reading` of ``text`` (a speculative transcript of the turn so far). A number still
    being read out is never complete nor dangling: it has its own hold (``digit_hold_ms``).
    ``announced``: the text ends by naming a number not yet read ("Telephone number":
    :func:`rejoinder.dictation.announces_number`): dangling. ``read_out``: the whole number it
    ends with was read digit by digit (:func:`rejoinder.dictation.read_digit_by_digit`): complete
    without a full stop, but decisive only with one (``number_complete`` in the result)."""
    t = text.strip()
    whole = number_complete and not number_open
    punctuated = text_complete(t)
    listed = whole and read_out and not punctuated and not dangling(t)
    complete = (punctuated or listed) and not number_open and not announced
    return Reading(complete=complete, dangling=(dangling(t) or announced) and not number_open,
                   question=t.endswith("?"), number_open=number_open,
                   number_complete=whole and not listed)
