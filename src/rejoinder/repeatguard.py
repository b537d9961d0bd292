"""End a reply at the first sentence that repeats one it already said.

Small models fall into loops: SmolLM2-135M answered a question with "I'm sorry for any confusion,
but no, I'm sorry for any confusion. I'm sorry for any confusion. I'm sorry for any confusion"
until its token limit (the held-out suite, 2026-12-02). Repetition penalties act on single tokens
and would also push the model off digits it must copy; this guard acts on whole sentences
instead, and only ends the reply — every word spoken is still the LLM's, none is changed.

The stream's text passes through :meth:`RepeatGuard.feed`. A sentence that begins like one
already said (the same first words, case and punctuation aside) is held back while it stays so;
when it diverges it is released, when it ends as a repeat of a sentence of at least
:data:`MIN_WORDS` words it is dropped and the reply ends there. The first sentence of a reply is
never held, so the first text is not delayed.
"""

from __future__ import annotations

import re

MIN_WORDS = 3  # "Okay." twice is no loop
_END = re.compile(r"[.!?]+(?=\s)")
_WORD = re.compile(r"[a-z0-9']+")


def _words(text: str) -> tuple[str, ...]:
    return tuple(_WORD.findall(text.lower()))


class RepeatGuard:
    """The text of one reply (all its LLM steps), fed delta by delta."""

    def __init__(self) -> None:
        self.said: set[tuple[str, ...]] = set()
        self._sentence = ""  # the sentence being written: released text + held text
        self._held = ""  # its tail not yet released
        self.repeated: str | None = None  # the sentence that ended the reply, once it has

    def feed(self, delta: str) -> tuple[str, bool]:
        """Returns the text to say now and whether the reply must end here (a repeat)."""
        self._sentence += delta
        self._held += delta
        out = ""
        while (m := _END.search(self._sentence)) is not None:
            sentence, rest = self._sentence[:m.end()], self._sentence[m.end():]
            words = _words(sentence)
            if words in self.said:
                self.repeated = sentence.strip()
                return out, True
            out += self._held[:len(self._held) - len(rest)]  # rest began in this delta: held
            self._remember(words)
            self._sentence, self._held = rest, rest
        if not self._holding():
            out, self._held = out + self._held, ""
        return out, False

    def _holding(self) -> bool:
        """The sentence so far begins like one already said (held back until it differs)."""
        return self._holding_words(_words(self._sentence))

    def _holding_words(self, words: tuple[str, ...]) -> bool:
        if not words:
            return False
        # the same first words; its last word may still be growing ("confu" → "confusion")
        return any(p[:len(words) - 1] == words[:-1] and p[len(words) - 1].startswith(words[-1])
                   for p in self.said if len(p) >= len(words))

    def _remember(self, words: tuple[str, ...]) -> None:
        if len(words) >= MIN_WORDS:
            self.said.add(words)

    def flush(self) -> str:
        """The stream ended: the held text to say, unless it is a repeat or a repeat's start."""
        held, self._held = self._held, ""
        words = _words(self._sentence)
        self._sentence = ""
        if self._holding_words(words):  # a repeat, or the start of one
            return ""
        return held
