"""Yes or no, from the words an answer to a confirmation question starts with.

Before an irreversible tool runs ("Shall I cancel your haircut on Friday at 2 PM?"), the caller's
answer decides it (:attr:`rejoinder.ports.LLMRequest.confirming`). Answers to a yes/no question
put their polarity first: a *type-conforming* answer opens with the yes or no token and then
says more (Raymond, "Grammar and social organization: yes/no interrogatives and the structure of
responding", American Sociological Review 68, 2003). Voice platforms recognise that opening with
a small fixed grammar (W3C VoiceXML 2.0, §P.1, the built-in ``boolean`` grammar: "yes" and "no"
and their common variants), not with a statistical model. :func:`answer_polarity` does the same
on the transcript: leading fillers ("um", "hmm", "actually") are skipped, and the first phrase
says yes (:data:`YES_LEADS`), no (:data:`NO_LEADS`) or nothing.

Why not the model: on SmolLM2-135M the tool gate's margin and the nearest of the yes and no
examples (:data:`._which.CONFIRM_YES`) left "Yes.", "Go ahead." and "Correct, that's the one."
unconfirmed (margins 3.57–3.94 under the calibrated 4.16), and in a 4-call suite run on
2026-12-06 (run ``20261206-131511-1cf1``) an answer that began "Hmm, no. On reflection …" was
taken for a yes and the haircut was cancelled. The two errors are not alike: a no taken for a yes
does what cannot be undone, a yes taken for a no costs the caller one more sentence. So a no
lead decides at once; a yes lead decides unless a no follows it straight away ("yeah, no").
An acknowledgement ("okay", "great") is skipped like a filler: in a 4-call run of that day,
"Great, I'll pop it in my diary." answered a question the agent should not have asked, and the
model took it for a yes. Anything else (no lead, another language) is left to the model (None).

The phrase lists are English and were written for rejoinder from general usage, apart from every
benchmark scenario.
"""

from __future__ import annotations

import re

#: openings that answer yes (longest first where one is the start of another)
YES_LEADS = ("yes please", "yes", "yeah", "yep", "yup", "yea", "ya", "sure", "please do", "please go ahead",
             "go ahead", "go for it", "do it", "do that", "correct", "that's correct", "that's right",
             "that is right", "that's it", "that's the one", "absolutely", "definitely", "certainly",
             "of course", "exactly", "indeed", "affirmative", "mm-hmm", "uh-huh", "mhm", "you bet",
             "why not", "no problem", "no worries", "by all means")
#: openings that answer no
NO_LEADS = ("no", "nope", "nah", "not", "don't", "do not", "dont", "wait", "hold on", "hang on", "stop",
            "never mind", "nevermind", "leave it", "keep it", "i'd rather not", "rather not",
            "on second thought", "on second thoughts", "on reflection", "i've changed my mind",
            "i have changed my mind", "i changed my mind", "changed my mind", "scratch that", "negative")
#: words skipped before the lead: fillers, and acknowledgements that open a yes as often as a no
#: ("okay, no, leave it") or answer something else ("great, I'll pop it in my diary")
FILLERS = frozenset({"um", "umm", "uh", "uhh", "er", "erm", "hmm", "hm", "mm", "oh", "ah", "well", "so",
                     "actually", "and", "but", "look", "listen", "okay", "ok", "alright", "right", "great",
                     "fine", "good", "perfect", "cool", "lovely", "brilliant"})
#: words that undo a yes lead when they follow it at once
_NO_WORDS = frozenset({"no", "nope", "nah", "not", "don't", "dont", "keep", "leave", "wait"})
_WORD = re.compile(r"[a-z']+(?:-[a-z']+)*")


def _split(lead: str) -> tuple[str, ...]:
    return tuple(lead.split())


_YES = sorted(map(_split, YES_LEADS), key=len, reverse=True)
_NO = sorted(map(_split, NO_LEADS), key=len, reverse=True)


def _lead(words: list[str], at: int, leads: list[tuple[str, ...]]) -> int:
    """How many words of ``words[at:]`` one of ``leads`` covers (0: none)."""
    for lead in leads:
        if tuple(words[at:at + len(lead)]) == lead:
            return len(lead)
    return 0


def answer_polarity(text: str) -> bool | None:
    """True (yes), False (no) or None (neither: the model decides) for ``text``, the caller's
    answer to a yes/no question. Only the first sentence is read.

    >>> answer_polarity("Hmm, no. On reflection I'll keep it."), answer_polarity("Yes.")
    (False, True)
    >>> answer_polarity("Okay, no, leave it."), answer_polarity("Great, I'll pop it in my diary.")
    (False, None)
    """
    first = re.split(r"[.!?;]", text.lower().replace("\u2019", "'"), maxsplit=1)[0]
    words = _WORD.findall(first)
    at = 0
    while at < len(words) and words[at] in FILLERS:
        at += 1
    if at == len(words):
        return None
    if n := _lead(words, at, _YES):  # tried first: "no problem" is a yes that starts like "no"
        return None if at + n < len(words) and words[at + n] in _NO_WORDS else True
    return False if _lead(words, at, _NO) else None
