"""End a reply where it starts to repeat itself: a sentence it already said, or a phrase looping.

Small models fall into loops: SmolLM2-135M answered a question with "I'm sorry for any confusion,
but no, I'm sorry for any confusion. I'm sorry for any confusion. I'm sorry for any confusion"
until its token limit (the held-out suite, 2026-12-02), and a barge-in's follow-up with "i'm
sorry for your nothing but i'm sorry for your nothing but …", with no sentence end at all (the
reference suite, 2026-12-03). Repetition penalties act on single tokens and would also push the
model off digits it must copy; this guard acts on whole word sequences instead, and only ends
the reply — every word spoken is still the LLM's, none is changed.

The stream's text passes through :meth:`RepeatGuard.feed`. Two rules, each holding text back
only while it may turn out to be a repeat, and releasing it as soon as it differs:

* **a repeated sentence**: a sentence that begins like one already said (the same first words,
  case and punctuation aside) is held back; when it ends as a repeat of a sentence of at least
  :data:`MIN_WORDS` words it is dropped and the reply ends there. The first sentence of a reply
  is never held by this rule, so the first text is not delayed.
* **a looping phrase**: words that repeat the words just before them (a span of
  :data:`MIN_WORDS` to :data:`MAX_LOOP_WORDS` words) are held while they match (a word or two
  at most, for text that is no loop). The loop is confirmed when the span has been written
  twice and a third copy begins ("X X x…"): the second copy is dropped and the reply ends after
  the first. A span said twice and then
  left ("It is four two. It is four two one seven.") is released unchanged.
"""

from __future__ import annotations

import re

MIN_WORDS = 3  # "Okay." twice is no loop
MAX_LOOP_WORDS = 30  # the longest looping phrase looked for (bounds the work per token)
_END = re.compile(r"[.!?]+(?=\s)")
_WORD = re.compile(r"[a-z0-9']+")


def _words(text: str) -> tuple[str, ...]:
    return tuple(_WORD.findall(text.lower()))


class RepeatGuard:
    """The text of one reply (all its LLM steps), fed delta by delta."""

    def __init__(self) -> None:
        self.said: set[tuple[str, ...]] = set()  # whole sentences said (≥ MIN_WORDS words)
        self._text = ""  # the reply's text so far
        self._out = 0  # how much of it has been released
        self._start = 0  # where the sentence being written begins
        self.repeated: str | None = None  # the text that ended the reply, once it has

    def feed(self, delta: str) -> tuple[str, bool]:
        """Returns the text to say now and whether the reply must end here (a repeat)."""
        self._text += delta
        while (m := _END.search(self._text, self._start)) is not None:
            sentence = self._text[self._start:m.end()]
            words = _words(sentence)
            if words in self.said:
                self.repeated = sentence.strip()
                return self._release(self._start), True
            if len(words) >= MIN_WORDS:
                self.said.add(words)
            self._start = m.end()
        hold, loop, _ = self._loop()
        if loop is not None:
            self.repeated = self._text[loop:].strip()
            return self._release(loop), True
        if self._holding_words(_words(self._text[self._start:])):
            hold = min(hold, self._start)
        return self._release(hold), False

    def _release(self, upto: int) -> str:
        out = self._text[self._out:upto] if upto > self._out else ""
        self._out = max(self._out, upto)
        return out

    def _loop(self) -> tuple[int, int | None, int | None]:
        """Where the held text of a looping phrase begins (or the text's end); where a confirmed
        loop's second copy begins (or None); where a whole second copy at the end begins (or
        None)."""
        spans = [(m.group(), m.start()) for m in _WORD.finditer(self._text.lower())]
        words = [w for w, _ in spans]
        n, hold, copy = len(words), len(self._text), None
        # the last word is complete once something other than a word character follows it
        ended = bool(self._text) and not (self._text[-1].isalnum() or self._text[-1] == "'")
        m = n if ended else n - 1  # the complete words
        for p in range(MIN_WORDS, min(MAX_LOOP_WORDS, n - 1) + 1):
            # X X x0 among the complete words: a third copy begins
            # (a unit of digits alone is a number read out, never a loop: "5 5 5 5 5 5 5")
            if m >= 2 * p + 1 and all(words[m - 1 - i] == words[m - 1 - i - p]
                                      for i in range(p + 1)) \
                    and not all(w.isdigit() for w in words[m - p:m]):
                return hold, spans[m - 1 - p][1], None
            j = 0  # how many of the last words repeat the words p before them
            while j < min(p + 1, n - p) and self._same(words[n - 1 - j - p], words[n - 1 - j],
                                                     last=j == 0 and not ended):
                j += 1
            if j:
                hold = min(hold, spans[n - j][1])
            if j >= p and copy is None and not all(w.isdigit() for w in words[n - p:]):
                copy = spans[n - p][1]
        return hold, None, copy

    @staticmethod
    def _same(earlier: str, word: str, *, last: bool) -> bool:
        # the text's last word may still be growing ("confu" → "confusion")
        return earlier.startswith(word) if last else earlier == word

    def _holding_words(self, words: tuple[str, ...]) -> bool:
        """The sentence so far begins like one already said (held back until it differs)."""
        if not words:
            return False
        return any(p[:len(words) - 1] == words[:-1] and p[len(words) - 1].startswith(words[-1])
                   for p in self.said if len(p) >= len(words))

    def flush(self) -> str:
        """The stream ended: the held text to say, unless it is a repeated sentence's start, or
        but for a looping phrase's whole second copy at its end."""
        words = _words(self._text[self._start:])
        if self._holding_words(words):
            return ""
        _, _, copy = self._loop()
        return self._release(len(self._text) if copy is None else copy)
