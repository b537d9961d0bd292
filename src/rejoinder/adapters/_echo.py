"""The no-echo rule of the embedded LLM: a reply to the caller may not *end* while its words are
still a copy of the caller's own.

A small model that cannot decide what to say repeats the caller: "Hello." → "Hello.",
"Thank you." → "Thank you." (SmolLM2-135M-Instruct does so at temperature 0 on the reference
agent's demo call). The engine does not forbid any word: when the model ends a reply that is a
contiguous run of the caller's last message (word for word, case and punctuation dropped,
spoken digits joined: "4, 2, 1, 7" = "4217"), alone or after an acknowledgement ("Got it. I'll
set an early alarm." to "I'll set an early alarm."), sampling resumes from that point with the
end-of-generation tokens masked until the reply says something of its own ("Hello." → "Hello.
I'm here to help …"). The model still writes every word; the rule is a decoding constraint, like
a grammar. Used by :class:`._llama_engine.ChatEngine` (``no_echo``, default on).

The same module holds the engine's other judgement of the words being written,
:func:`repeats_itself`: greedy decoding of a small model can fall into a loop ("a haircut a
haircut a haircut …" under a grounded-reply grammar, two held-out scenarios on 2026-12-02), and
the reply is ended once a run of words has come three times in a row.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Sequence

_WORD = re.compile(r"[a-z']+|\d+")


def echo_words(text: str) -> list[str]:
    """Lower-case words of ``text``, punctuation dropped, adjacent digit groups joined
    ("4, 2, 1, 7." → ``["4217"]``)."""
    out: list[str] = []
    for w in _WORD.findall(text.lower()):
        if w.isdigit() and out and out[-1].isdigit():
            out[-1] += w
        else:
            out.append(w)
    return out


#: Acknowledgements a reply may open with before copying the caller: "Got it. I'll set an early
#: alarm for an hour." to "Eh, I'll set an early alarm for an hour." is still an echo.
#: Qwen2.5-Coder-1.5B did so in 2 of 104 calls of the seven suites (run
#: ``20261207-185030-2b62``: ``blind-haircut-forward-to-monday-nine``, ``fresh-yoga-mat-zero-zero``).
_ACK = re.compile(r"^\W*(?:(?:got it|okay|ok|sure|alright|all right|right|great|perfect|understood"
                  r"|noted|i see|no problem|of course|certainly|absolutely|sounds good|yes|yeah)"
                  r"\b[\s,.!;:-]*)+")


def _within(r: list[str], t: list[str]) -> bool:
    return bool(r) and any(t[i:i + len(r)] == r for i in range(len(t) - len(r) + 1))


def is_echo(reply: str, caller: str) -> bool:
    """Whether ``reply``'s words are a contiguous run of ``caller``'s words (both non-empty),
    or are so after an opening acknowledgement (:data:`_ACK`: "Got it.", "Okay,", "Sure.")."""
    r, t = echo_words(reply), echo_words(caller)
    if not r or not t:
        return False
    return _within(r, t) or _within(echo_words(_ACK.sub("", reply.lower())), t)


def repeats_itself(text: str, times: int = 3, longest: int = 8) -> bool:
    """Whether ``text`` ends with a run of 1–``longest`` words said ``times`` times in a row,
    the run holding a word with letters ("a haircut a haircut a haircut"; spoken digits alone
    such as "5 5 5" never count: digits are joined, and a number is not a loop)."""
    w = echo_words(text)
    for k in range(1, longest + 1):
        if k * times > len(w):
            break
        unit = w[-k:]
        if any(not x.isdigit() for x in unit) and all(w[-k * (i + 1):len(w) - k * i] == unit
                                                      for i in range(1, times)):
            return True
    return False


def end_mask(banned: Sequence[int], echoing: Callable[[], bool]) -> Callable[[Any, Any], Any]:
    """A llama-cpp-python logits processor: the logits of ``banned`` (end-of-generation token
    ids) are set to −inf while ``echoing()`` holds; otherwise the scores pass unchanged."""
    import numpy as np

    ids = np.asarray(list(banned), dtype=np.intc)

    def process(_input_ids: Any, scores: Any) -> Any:
        if echoing():
            scores[ids] = -np.inf
        return scores

    return process
