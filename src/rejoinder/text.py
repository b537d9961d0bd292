"""The text path between a streaming LLM and a streaming TTS.

Two pieces live here:

* :class:`SpeakableChunker` cuts a stream of LLM token deltas into chunks that
  are safe to hand to a TTS engine one at a time.
* :func:`normalize_for_speech` (implemented in :mod:`rejoinder.textnorm`, re-exported
  here) turns one chunk into the words a TTS engine should say; all number
  words come from the ``num2words`` library.

Chunking policy
---------------
The chunker never adds, drops or reorders characters: ``"".join(chunks)`` over
every ``push`` and the final ``flush`` equals ``"".join(deltas)`` exactly.  A
chunk ends right after its punctuation (plus any closing quotes/brackets); the
whitespace that follows a boundary is carried as the *leading* whitespace of the
next chunk (for a newline boundary the newline starts the next chunk).

* **First chunk** - emitted as early as is safe, at the first *clause boundary*
  (``,`` ``;`` ``:`` followed by whitespace; a spaced dash `` - `` / `` – `` /
  `` — ``; an em dash between words; a pause ellipsis) whose chunk holds at least
  ``min_first_words`` words, or at the first *sentence end* (``min_first_sentence``
  words: one by default, so "Hello." or "Sure!" is spoken at once).  The agent can
  start speaking the first clause while the LLM is still generating the rest.
* **First-chunk budget** - the first chunk never waits for punctuation beyond
  ``first_max_words`` words / ``first_max_chars`` characters (default 10 words,
  60 characters).  Why: Piper synthesises a whole sentence before it yields any
  audio, so its time to first audio grows with the chunk; a 60-token run-on
  sentence from a small LLM (or a file path) held the first audio for ~1 s while
  the chunker waited for a boundary and then took Piper over 600 ms.  Sixty
  characters (about ten words) are about 3-4 s of speech: long enough to sound
  natural, short enough for a fast first synthesis (Piper's cost grows with the
  characters it reads), and the rest is generated and synthesised while it plays.  When
  the budget is exceeded with no boundary inside it, the chunk ends at the best
  *safe gap* inside the budget: after clause punctuation or before a conjunction
  ("and", "but", "so", "because", "which", ...) if one leaves at least
  ``min_first_words`` words, else the last safe gap.  A gap is safe unless it is
  inside a number, date, time, price or phone number, between a title or an
  initial and a name, or between a name and its numeral (see
  :func:`rejoinder.textscan.safe_gap`); e-mail addresses, URLs and paths hold no
  whitespace, so they are never cut.  If no safe gap fits (one very long token),
  the chunk ends at the first safe gap after it.
* **Later chunks** - emitted only at sentence ends: ``.`` ``!`` ``?`` (optionally
  followed by closing quotes/brackets) followed by whitespace, a newline, or the
  gap before an inline list marker ("1. Pickup 2. Delivery": each item is a
  sentence).  A sentence with fewer than ``min_words`` words is merged into the
  next one.
* **Safety** - a boundary is only acted on once the text after it has arrived
  (``"3."`` may become ``"3.14"``; ``"1,"`` may become ``"1,000"``; ``"March 3,"``
  may be followed by a year).  Never a boundary: a ``.``/``,``/``:`` followed by
  a non-space character (decimals, prices, thousands separators, times, dates,
  e-mail addresses, URLs, version numbers); the comma inside a date ("March 3,
  2027", "Friday, March 3"); a ``.`` after a known abbreviation (Dr. Mr. Mrs. Ms.
  St. vs. etc. e.g. i.e. U.S. U.K. Inc. Ltd. Jr. Sr. approx. ...), after a dotted
  acronym, after a single capital letter (initials such as "J. R. R. Tolkien")
  or after "No." when a number follows; the "." of a list marker (``"1. "`` at
  the start of a line, after a colon or a sentence end, or "k." after marker
  k - 1).  "a.m."/"p.m." end a sentence only when a sentence-starting word
  ("Then", "We", "The", ...) follows.
* **Ellipses** (``...`` or ``…``) are a pause: a clause boundary, and a sentence
  end only when whitespace and then a capital letter follow.
* **Size cap** - when no acceptable boundary appears within ``max_chars``
  characters, the chunk is cut at the best safe gap within ``max_chars`` (the
  same preference as the first-chunk budget; any whitespace if no gap is safe,
  hard at ``max_chars`` if there is none), so no chunk is longer than
  ``max_chars`` characters (the final flushed chunk included).

Chunk boundaries depend only on the text, not on how it was split into deltas
(barring pathological runs of over 16 whitespace/closing characters).
"""

from __future__ import annotations

import re

from rejoinder.errors import ConfigError
from rejoinder.textnorm import SpeechNormalizer, normalize_for_speech
from rejoinder.textscan import (FUNCTION_WORDS, date_comma, is_abbrev, list_marker, marker_pending,
                                natural_gap, safe_gap)

__all__ = ["SpeakableChunker", "SpeechNormalizer", "normalize_for_speech"]

_CLOSERS = "\"')]}»”’"
_WORD = re.compile(r"\w")
_TOKEN = re.compile(r"\S+")
_WORD_END = re.compile(r"\S\s")
_COMPLETE_WORD = re.compile(r"\s+\S+\s")
_NEXT_WORD = re.compile(r"[ \t]*([\w'’]*)")
_LOOKAHEAD = 16  # chars kept past max_chars so pending boundaries can resolve
# A gap's safety depends on at most the first 24 characters of the word after it (a Roman
# numeral is at most 15 letters), so a longer word need not be complete to decide the first cap.
_LONG_WORD = 24
_CONTEXT = 300  # chars of emitted text kept as context (list markers look back for "k - 1.")

_CLAUSE, _SENTENCE = 1, 2
_PENDING = object()


def _count_words(text: str) -> int:
    return sum(1 for tok in text.split() if _WORD.search(tok))


def _gaps(text: str, end: int) -> list[tuple[int, str, str]]:
    """Whitespace gaps between two words of ``text[:end]``: (index where the gap starts, the
    word before it, the word after it)."""
    toks = [(m.start(), m.group()) for m in _TOKEN.finditer(text, 0, end)]
    return [(a + len(w), w, nw) for (a, w), (_b, nw) in zip(toks, toks[1:])]


class SpeakableChunker:
    """Cut a stream of LLM text deltas into TTS-sized chunks (see module docstring).

    Args:
        min_first_words: words (whitespace-separated tokens containing a letter or
            digit) the first chunk needs before a clause boundary may end it; >= 1.
        min_first_sentence: words the first chunk needs before a *sentence end* may end
            it (default 1: a reply that opens "Hello." or "Sure!" is spoken at once, while the
            rest is generated; "Hi," still waits for ``min_first_words``); >= 1.
        min_words: words a later chunk needs before a sentence end may end it;
            shorter sentences are merged with the next; >= 1 (1 disables merging).
        max_chars: hard upper bound on a chunk's length in characters; >= 8.
        first_max_words: the first chunk's word budget: past it, the chunk ends at
            a safe gap without waiting for punctuation; >= ``min_first_words``.
        first_max_chars: the first chunk's character budget (same rule); >= 8
            (``max_chars`` applies when it is smaller).

    Raises:
        ConfigError: (a ``ValueError``) if a parameter is out of range.

    The chunker is single-stream and not thread-safe; :meth:`flush` resets it so
    it can be reused for the next utterance.
    """

    def __init__(self, min_first_words: int = 3, min_words: int = 4, max_chars: int = 250,
                 first_max_words: int = 10, first_max_chars: int = 60,
                 min_first_sentence: int = 1) -> None:
        if min_first_words < 1 or min_words < 1 or min_first_sentence < 1:
            raise ConfigError("min_first_words, min_words and min_first_sentence must be >= 1")
        if max_chars < 8:
            raise ConfigError(f"max_chars must be >= 8, got {max_chars}")
        if first_max_words < min_first_words:
            raise ConfigError(f"first_max_words ({first_max_words}) must be >= min_first_words "
                              f"({min_first_words})")
        if first_max_chars < 8:
            raise ConfigError(f"first_max_chars must be >= 8, got {first_max_chars}")
        self.min_first_words = min_first_words
        self.min_first_sentence = min(min_first_sentence, min_first_words)
        self.min_words = min_words
        self.max_chars = max_chars
        self.first_max_words = first_max_words
        self.first_max_chars = first_max_chars
        self._buf = ""
        self._ctx = ""  # the tail of the text already emitted in this utterance
        self._first = True

    def push(self, delta: str) -> list[str]:
        """Add one LLM delta; return the chunks (possibly none) that are now final.

        Args:
            delta: the next piece of generated text, any length (``""`` is fine).

        Returns:
            Zero or more non-blank chunks, in order, each at most ``max_chars``
            characters.

        Raises:
            TypeError: if ``delta`` is not a ``str``.
        """
        if not isinstance(delta, str):
            raise TypeError(f"delta must be str, got {type(delta).__name__}")
        self._buf += delta
        out: list[str] = []
        while (cut := self._find_cut()) is not None:
            out.append(self._take(cut))
        return out

    def flush(self) -> list[str]:
        """End the stream: return the remaining text as chunks and reset the chunker.

        Returns:
            The remainder split only by the ``max_chars`` cap (usually one chunk,
            or none if nothing is left).  The last chunk may be whitespace-only
            when the stream ended in whitespace; callers may skip blank chunks.
        """
        out: list[str] = []
        while len(self._buf) > self.max_chars:
            out.append(self._take(self._forced_cut()))
        if self._buf:
            out.append(self._take(len(self._buf)))
        self._first = True
        self._ctx = ""
        return out

    def take_clause(self) -> str | None:
        """Take the buffered text up to its last safe clause boundary or sentence end now, as
        one chunk, when at least ``min_first_words`` words precede it; None (nothing taken)
        otherwise. For a listener about to hear silence: a later chunk normally waits for its
        sentence's end, and a small LLM's run-on sentence then leaves the line quiet while it
        is generated (:class:`rejoinder.reply.Reply` calls this when the audio queued ahead of
        the caller runs low). The same boundary rules apply as for the first chunk."""
        buf, i, n, best = self._buf, 0, len(self._buf), None
        while i < n:
            res = self._boundary(buf, i)
            if res is _PENDING:
                break
            if res is None:
                i += 1
                continue
            _, cut = res  # type: ignore[misc]
            if cut > self.max_chars:
                break
            if _count_words(buf[:cut]) >= self.min_first_words:
                best = cut
            i = max(cut, i + 1)
        return self._take(best) if best is not None else None

    def take_short(self) -> str | None:
        """Take the head of the buffered text now, cut as a first chunk is (its first clause or
        sentence boundary with ``min_first_words`` before it, else a safe gap within the first
        chunk's budget, ``first_max_words`` / ``first_max_chars``); None when no such cut
        exists yet. For the end of a stream while the listener is about to hear silence: the
        rest of a reply would otherwise go as one chunk, and a TTS that synthesizes a chunk
        whole before its first audio (Piper: ≈ 650 ms for 90 characters on a busy 2-core box)
        leaves the line quiet that long; the head's audio comes sooner and the rest is
        synthesized while it plays."""
        first, self._first = self._first, True
        try:
            cut = self._find_cut()
        finally:
            self._first = first
        if cut is None or cut >= len(self._buf.rstrip()):
            return None
        return self._take(cut)

    # -- internals -----------------------------------------------------------

    def _take(self, cut: int) -> str:
        chunk, self._buf = self._buf[:cut], self._buf[cut:]
        self._ctx = (self._ctx + chunk)[-_CONTEXT:]
        self._first = False
        return chunk

    def _find_cut(self) -> int | None:
        """Index to cut the buffer at now, or None to wait for more text."""
        buf, i, n = self._buf, 0, len(self._buf)
        first = self._first
        need = self.min_first_words if first else self.min_words
        limit = self._budget() if first else self.max_chars
        while i < n:
            res = self._boundary(buf, i)
            if res is _PENDING:
                if first and i > limit:
                    break  # beyond the budget: the cap decides
                return self._forced_cut() if n > self.max_chars + _LOOKAHEAD else None
            if res is None:
                i += 1
                continue
            kind, cut = res  # type: ignore[misc]
            if cut > limit:
                break
            if (kind == _SENTENCE or first) and _count_words(buf[:cut]) >= (
                    self.min_first_sentence if first and kind == _SENTENCE else need):
                return cut
            i = max(cut, i + 1)
        if first and (cap := self._first_cap(limit)) is not None:
            return cap
        if n > self.max_chars + _LOOKAHEAD:
            return self._forced_cut()
        return None

    def _budget(self) -> int:
        """Longest prefix of the buffer that fits the first-chunk budget (chars and words)."""
        words = [m.start() for m in _TOKEN.finditer(self._buf) if _WORD.search(m.group())]
        limit = min(self.first_max_chars, self.max_chars)
        if len(words) > self.first_max_words:
            limit = min(limit, words[self.first_max_words])
        return limit

    def _first_cap(self, limit: int) -> int | None:
        """The first chunk's cut once the buffer has run past its budget with no boundary.

        Judged on the first ``max_chars + 17`` characters only, like :meth:`_forced_cut`, so
        which of the two decides does not depend on how much text has arrived."""
        buf = self._buf[:self.max_chars + _LOOKAHEAD + 1]
        over = _WORD_END.search(buf, limit)
        if over is not None:
            end = over.start() + 1
        elif len(buf) > limit and not buf[-1].isspace() and len(buf.split()[-1]) >= _LONG_WORD:
            end = len(buf)  # a long word (a path, a URL) crosses the budget: its first chars decide
        else:
            return None  # the word that crosses the budget is not complete yet
        gaps = _gaps(buf, end)
        best = self._best_gap(buf, [g for g in gaps if g[0] <= limit])
        if best is not None:
            return best
        for p, prev, nxt in _gaps(buf, len(buf)):  # one long token: the first safe gap after it
            if p > self.max_chars:
                break
            if p > limit and self._complete_after(buf, p) and safe_gap(self._ctx + buf, len(self._ctx) + p,
                                                                       prev, nxt):
                return p
        return None

    @staticmethod
    def _complete_after(buf: str, p: int) -> bool:
        return _COMPLETE_WORD.match(buf, p) is not None

    def _best_gap(self, buf: str, gaps: list[tuple[int, str, str]]) -> int | None:
        """Latest natural safe gap leaving enough words (``min_first_words`` for the first chunk,
        ``min_words`` later), else the latest safe gap with that many, else the latest safe gap."""
        ctx, off = self._ctx + buf, len(self._ctx)
        need = self.min_first_words if self._first else self.min_words
        safe = [(p, prev, nxt) for p, prev, nxt in gaps if safe_gap(ctx, off + p, prev, nxt)]
        enough = [g for g in safe if _count_words(buf[:g[0]]) >= need]
        natural = [g for g in enough if natural_gap(g[1], g[2])]
        for group in (natural, enough, safe):
            if group:
                return group[-1][0]
        return None

    def _forced_cut(self) -> int:
        """Where to cut a buffer that has no boundary within ``max_chars``: the best safe gap
        within it (judged on the first ``max_chars + 16`` characters only, so the cut does not
        depend on how much text has arrived), else the last whitespace, else ``max_chars``."""
        buf = self._buf
        view = buf[:self.max_chars + _LOOKAHEAD + 1]
        gaps = [g for g in _gaps(view, len(view)) if g[0] <= self.max_chars]
        best = self._best_gap(view, gaps)
        if best is not None:
            return best
        first_text = len(buf) - len(buf.lstrip())
        for i in range(min(self.max_chars, len(buf) - 1), first_text, -1):
            if buf[i].isspace():
                return i
        return self.max_chars

    def _boundary(self, buf: str, i: int) -> tuple[int, int] | object | None:
        """Classify position ``i``: None (no boundary), _PENDING, or (kind, cut)."""
        ch = buf[i]
        if ch == "\n":
            return (_SENTENCE, i) if i > 0 else None
        if ch in " \t":
            return self._before_marker(buf, i)
        if ch in ",;:":
            res = self._after(buf, i + 1, _CLAUSE)
            if ch == "," and isinstance(res, tuple):
                inside = date_comma(self._ctx + buf, len(self._ctx) + i)
                return _PENDING if inside is None else (None if inside else res)
            return res
        if ch in "-–—":
            return self._dash(buf, i)
        if ch not in ".!?…":
            return None
        if i > 0 and buf[i - 1] in ".!?…":
            return None  # only look at the start of a run of terminators
        j = i
        while j < len(buf) and buf[j] in ".!?…":
            j += 1
        run = buf[i:j]
        ellipsis = "…" in run or run.count(".") >= 2
        if run == "." and self._no_split_before(buf, i):
            if buf[:i].split()[-1].lower() not in ("a.m", "p.m"):
                return None
            nxt = self._next_word(buf, j)  # "at 9 a.m. Then ..." ends a sentence
            if nxt is _PENDING or nxt not in FUNCTION_WORDS:
                return nxt if nxt is _PENDING else None
        if run == "." and buf[:i].split()[-1:] == ["No"]:
            # "No. 5" is an abbreviation, "No. I won't" is a sentence.
            nxt = self._next_visible(buf, j)
            if nxt is _PENDING:
                return _PENDING
            if isinstance(nxt, str) and (nxt.isdigit() or nxt == "#"):
                return None
        if run == "." and self._list_marker(buf, i) is not None:
            return None
        res = self._after(buf, j, _SENTENCE)
        if not ellipsis or res is None or res is _PENDING:
            return res
        nxt = self._next_visible(buf, res[1])  # type: ignore[index]
        if nxt is _PENDING:
            return _PENDING
        return res if (nxt is not None and nxt.isupper()) else (_CLAUSE, res[1])  # type: ignore[index]

    def _before_marker(self, buf: str, i: int) -> tuple[int, int] | object | None:
        """A sentence boundary at the gap before an inline list marker ("1. Pickup 2. Delivery")."""
        if i == 0 or buf[i - 1].isspace():
            return None
        j = i
        while j < len(buf) and buf[j] in " \t":
            j += 1
        if j < len(buf) and buf[j] == "\n":
            return None  # the newline is the boundary
        if j == len(buf) or marker_pending(buf, j):
            return _PENDING
        if not buf[j].isdigit():
            return None
        return (_SENTENCE, i) if list_marker(self._ctx + buf, len(self._ctx) + j) is not None else None

    def _list_marker(self, buf: str, i: int) -> int | None:
        """The list number if the "." / ")" at ``i`` ends a list marker such as "1." or "12)"."""
        k = i
        while k > 0 and buf[k - 1].isdigit():
            k -= 1
        if k == i or i + 1 >= len(buf):
            return None
        return list_marker(self._ctx + buf, len(self._ctx) + k)

    @staticmethod
    def _after(buf: str, j: int, kind: int) -> tuple[int, int] | object | None:
        """Boundary ending at ``j`` (plus closers) if whitespace follows."""
        while j < len(buf) and buf[j] in _CLOSERS:
            j += 1
        if j >= len(buf):
            return _PENDING
        return (kind, j) if buf[j].isspace() else None

    @staticmethod
    def _next_visible(buf: str, j: int) -> str | object | None:
        """First non-space char at or after ``j`` (``_PENDING`` if not arrived yet).

        Returns None when a newline comes first (a newline is its own boundary).
        """
        while j < len(buf) and buf[j].isspace():
            if buf[j] == "\n":
                return None
            j += 1
        return buf[j] if j < len(buf) else _PENDING

    @staticmethod
    def _next_word(buf: str, j: int) -> str | object | None:
        """The word after ``j`` once it has ended (``_PENDING`` before), or its first 13
        characters (longer than any sentence-starting word, so the verdict is the same)."""
        m = _NEXT_WORD.match(buf, j)
        if m.end() == len(buf) and len(m.group(1)) < 13:  # type: ignore[union-attr]
            return _PENDING
        return m.group(1)  # type: ignore[union-attr]

    @staticmethod
    def _dash(buf: str, i: int) -> tuple[int, int] | object | None:
        prev = buf[i - 1] if i > 0 else "\n"
        if prev == " " and i > 1 and not buf[i - 2].isspace():
            return SpeakableChunker._after(buf, i + 1, _CLAUSE)  # "word - word"
        if buf[i] == "—" and prev.isalpha():
            if i + 1 >= len(buf):
                return _PENDING
            return (_CLAUSE, i + 1) if buf[i + 1].isalpha() else None  # "word—word"
        return None

    @staticmethod
    def _no_split_before(buf: str, i: int) -> bool:
        """True if the "." at ``i`` ends an abbreviation or an initial."""
        head = buf[:i].split()
        if not head or buf[i - 1].isspace():
            return False
        return is_abbrev(head[-1])
