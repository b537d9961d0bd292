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
  `` — ``; an em dash between words; a pause ellipsis) or *sentence end* whose
  chunk holds at least ``min_first_words`` words.  The agent can start speaking
  the first clause while the LLM is still generating the rest.
* **Later chunks** - emitted only at sentence ends: ``.`` ``!`` ``?`` (optionally
  followed by closing quotes/brackets) followed by whitespace, or a newline.  A
  sentence with fewer than ``min_words`` words is merged into the next one.
* **Safety** - a boundary is only acted on once the character after it has
  arrived (``"3."`` may become ``"3.14"``; ``"1,"`` may become ``"1,000"``).  Never
  a boundary: a ``.``/``,``/``:`` followed by a non-space character (decimals,
  prices, thousands separators, times, dates, e-mail addresses, URLs, version
  numbers); a ``.`` after a known abbreviation (Dr. Mr. Mrs. Ms. St. vs. etc.
  e.g. i.e. a.m. p.m. U.S. U.K. Inc. Ltd. Jr. Sr. approx. ...), after a dotted
  acronym, after a single capital letter (initials such as "J. R. R. Tolkien")
  or after "No." when a number follows; a list marker such as ``"1. "`` at the
  start of a line.
* **Ellipses** (``...`` or ``…``) are a pause: a clause boundary, and a sentence
  end only when whitespace and then a capital letter follow.
* **Size cap** - when no acceptable boundary appears within ``max_chars``
  characters, the chunk is cut at the last whitespace within ``max_chars`` (or
  hard at ``max_chars`` if there is none), so no chunk is longer than
  ``max_chars`` characters (the final flushed chunk included).

Chunk boundaries depend only on the text, not on how it was split into deltas
(barring pathological runs of over 16 whitespace/closing characters).
"""

from __future__ import annotations

import re

from rejoinder.errors import ConfigError
from rejoinder.textnorm import normalize_for_speech

__all__ = ["SpeakableChunker", "normalize_for_speech"]

# Abbreviations after which a "." never ends a sentence.  Case-sensitive ones are
# titles/company suffixes; the rest are compared lower-cased.
_ABBREV_CASED = frozenset(
    "Dr Mr Mrs Ms Mx St Jr Sr Inc Ltd Co Corp Prof Rev Gen Col Capt Sgt Lt Mt Ave "
    "Blvd Rd Fig Vol Jan Feb Mar Apr Jun Jul Aug Sep Sept Oct Nov Dec".split()
)
_ABBREV_LOWER = frozenset("vs etc approx e.g i.e a.m p.m cf al esp incl min max".split())
_DOTTED = re.compile(r"^(?:[A-Za-z]\.)+[A-Za-z]$")  # U.S  e.g  a.m  Ph.D-like initials
_CLOSERS = "\"')]}»”’"
_OPEN_STRIP = "\"'([{«“‘*_"
_WORD = re.compile(r"\w")
_LOOKAHEAD = 16  # chars kept past max_chars so pending boundaries can resolve

_CLAUSE, _SENTENCE = 1, 2
_PENDING = object()


def _count_words(text: str) -> int:
    return sum(1 for tok in text.split() if _WORD.search(tok))


class SpeakableChunker:
    """Cut a stream of LLM text deltas into TTS-sized chunks (see module docstring).

    Args:
        min_first_words: words (whitespace-separated tokens containing a letter or
            digit) the first chunk needs before a clause boundary may end it; >= 1.
        min_words: words a later chunk needs before a sentence end may end it;
            shorter sentences are merged with the next; >= 1 (1 disables merging).
        max_chars: hard upper bound on a chunk's length in characters; >= 8.

    Raises:
        ConfigError: (a ``ValueError``) if a parameter is out of range.

    The chunker is single-stream and not thread-safe; :meth:`flush` resets it so
    it can be reused for the next utterance.
    """

    def __init__(self, min_first_words: int = 3, min_words: int = 4, max_chars: int = 250) -> None:
        if min_first_words < 1 or min_words < 1:
            raise ConfigError("min_first_words and min_words must be >= 1")
        if max_chars < 8:
            raise ConfigError(f"max_chars must be >= 8, got {max_chars}")
        self.min_first_words = min_first_words
        self.min_words = min_words
        self.max_chars = max_chars
        self._buf = ""
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
        return out

    # -- internals -----------------------------------------------------------

    def _take(self, cut: int) -> str:
        chunk, self._buf = self._buf[:cut], self._buf[cut:]
        self._first = False
        return chunk

    def _find_cut(self) -> int | None:
        """Index to cut the buffer at now, or None to wait for more text."""
        buf, i, n = self._buf, 0, len(self._buf)
        need = self.min_first_words if self._first else self.min_words
        while i < n:
            res = self._boundary(buf, i)
            if res is _PENDING:
                break
            if res is None:
                i += 1
                continue
            kind, cut = res  # type: ignore[misc]
            if cut > self.max_chars:
                break
            if (kind == _SENTENCE or self._first) and _count_words(buf[:cut]) >= need:
                return cut
            i = max(cut, i + 1)
        if n > self.max_chars + _LOOKAHEAD:
            return self._forced_cut()
        return None

    def _forced_cut(self) -> int:
        buf = self._buf
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
        if ch in ",;:":
            return self._after(buf, i + 1, _CLAUSE)
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
            return None
        if run == "." and buf[:i].split()[-1:] == ["No"]:
            # "No. 5" is an abbreviation, "No. I won't" is a sentence.
            nxt = self._next_visible(buf, j)
            if nxt is _PENDING:
                return _PENDING
            if isinstance(nxt, str) and (nxt.isdigit() or nxt == "#"):
                return None
        if run == "." and self._list_marker(buf, i):
            return None
        res = self._after(buf, j, _SENTENCE)
        if not ellipsis or res is None or res is _PENDING:
            return res
        nxt = self._next_visible(buf, res[1])  # type: ignore[index]
        if nxt is _PENDING:
            return _PENDING
        return res if (nxt is not None and nxt.isupper()) else (_CLAUSE, res[1])  # type: ignore[index]

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
        tok = head[-1].lstrip(_OPEN_STRIP)
        if tok in _ABBREV_CASED or tok.lower() in _ABBREV_LOWER or _DOTTED.match(tok):
            return True
        return len(tok) == 1 and tok.isupper()

    def _list_marker(self, buf: str, i: int) -> bool:
        """True for "1." / "12." standing alone at the start of a line."""
        k = i
        while k > 0 and buf[k - 1].isdigit():
            k -= 1
        if k == i:
            return False
        line_start = buf.rfind("\n", 0, k) + 1
        if buf[line_start:k].strip(" \t"):
            return False
        return line_start > 0 or (self._first and not buf[:k].strip())
