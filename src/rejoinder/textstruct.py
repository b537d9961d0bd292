"""Normalisation of text structure and names for speech: markdown lists, Roman numerals, initials.

Part of :func:`rejoinder.textnorm.normalize_for_speech`. Each function takes the whole text (the
context, then the chunk being normalised from index ``start``) and rewrites only the chunk; what
they look back at is the context. Number words come from ``num2words``; Roman numerals are parsed
by ``roman-numerals`` (through :func:`rejoinder.textscan.roman_value`).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from num2words import num2words

from .textscan import (FUNCTION_WORDS, REGNAL_NAMES, ROMAN_CUES, ROMAN_CUES_STRONG, ROMAN_CUES_VERBY,
                       list_marker, roman_value)

__all__ = ["initials", "lists_to_sentences", "lower_item_starts", "roman_numerals", "sentence_end_after",
           "sub_from"]

# Marks the first word of a numbered list item until the end of normalisation, where that word
# is lower-cased ("1. Pickup" -> "One, pickup."): lower-casing it early would hide a month or a
# name from the later rules. A private-use character: never in LLM text.
ITEM_START = "\ue000"

_Repl = str | Callable[[re.Match[str]], str]


def sub_from(pattern: re.Pattern[str], repl: _Repl, text: str, start: int) -> str:
    """``pattern.sub(repl, text)`` for matches starting at or after ``start`` only; lookbehinds,
    ``\\b`` and ``^`` still see the text before ``start``."""
    if pattern.search(text, start) is None:  # most rules match nothing in a chunk: no copy
        return text
    fn = repl if callable(repl) else (lambda m: m.expand(repl))  # type: ignore[arg-type, return-value]
    parts, pos = [text[:start]], start
    for m in pattern.finditer(text, start):
        parts += [text[pos:m.start()], fn(m)]  # type: ignore[list-item]
        pos = m.end()
    parts.append(text[pos:])
    return "".join(parts)


def sentence_end_after(text: str, i: int) -> bool:
    """True if a sentence plausibly ends at ``text[i]`` after an abbreviation such as "p.m." or
    "etc.": the text ends there, a line ends, or a sentence-starting word follows ("Then")."""
    m = re.match(r"[ \t]*(?:\Z|\n)|\s+([A-Z][\w'’]*)", text[i:])
    return m is not None and (m.group(1) is None or m.group(1) in FUNCTION_WORDS)


# -- lists --------------------------------------------------------------------------------------
_BULLET = re.compile(r"^[ \t]*[-*+•][ \t]+(?=\S)", re.M)
_NUMBERED = re.compile(r"(?<!\S)\d{1,2}[.)][ \t]+(?=\S)")
_ENDS_SENTENCE = re.compile(r"[.!?:;,…]['\")\]’”]*\Z")


def lists_to_sentences(text: str, start: int) -> str:
    """Markdown bullets and numbered items (one per line or inline, see
    :func:`rejoinder.textscan.list_marker`) become sentences: "1. Pickup 2. Delivery" ->
    "One, pickup. Two, delivery."; "- Pickup" -> "Pickup.". An item ends at the next marker, at
    the end of its line or at the end of the text; it gets a "." unless it ends in punctuation."""
    marks = [(m.start(), m.end(), None) for m in _BULLET.finditer(text, start)]
    for m in _NUMBERED.finditer(text, start):
        k = list_marker(text, m.start())
        if k is not None:
            marks.append((m.start(), m.end(), k))
    if not marks:
        return text
    marks.sort()
    out, pos = [text[:start]], start
    for idx, (a, b, k) in enumerate(marks):
        if a < pos:
            continue
        line_end = text.find("\n", b)
        end = min(marks[idx + 1][0] if idx + 1 < len(marks) else len(text),
                  line_end if line_end >= 0 else len(text))
        item = text[b:end]
        body = item.rstrip()
        if body and not _ENDS_SENTENCE.search(body):
            item = body + "." + item[len(body):]
        head = "" if k is None else f"{_n(k).capitalize()}, {ITEM_START}"
        out += [text[pos:a], head, item]
        pos = end
    out.append(text[pos:])
    return "".join(out)


def lower_item_starts(text: str) -> str:
    """Lower-case a capitalised first word of each numbered item and drop the marks."""
    text = re.sub(ITEM_START + r"([A-Z][a-z]+)\b", lambda m: m.group(1).lower(), text)
    return text.replace(ITEM_START, "")


# -- Roman numerals ----------------------------------------------------------------------------
_ROMAN = re.compile(r"(?<![\w.'’])([A-Z][a-z]+)(\.?)([ \t]+)([IVXLCDM]+)(?![\w-]|\.\d)")
_PHRASE_END = re.compile(r"\s*(?:\Z|[.,;:!?)\]]|(?:of|and)\b|['’]s\b)")


def _roman(m: re.Match[str]) -> str:
    word, dot, gap, num = m.groups()
    value = roman_value(num)
    if value is None:
        return m.group()
    ends = _PHRASE_END.match(m.string, m.end()) is not None
    if word in ROMAN_CUES:
        if num.strip("IVX") and word not in ROMAN_CUES_STRONG:
            return m.group()
        if num == "I" and word in ROMAN_CUES_VERBY and not ends:
            return m.group()
        return f"{word}{dot}{gap}{_n(value).capitalize()}"
    if dot or word in FUNCTION_WORDS or num.strip("IVX") or value > 39:
        return m.group()
    if len(num) == 1 and (word not in REGNAL_NAMES or (num == "I" and not ends)):
        return m.group()
    return f"{word} the {_n(value, to='ordinal').capitalize()}"


def roman_numerals(text: str, start: int) -> str:
    """Roman numerals after a name or a title word: "Elizabeth II" -> "Elizabeth the Second",
    "Henry VIII" -> "Henry the Eighth", "Chapter IV" -> "Chapter Four", "World War II" -> "World
    War Two", "Super Bowl LX" -> "Super Bowl Sixty".

    Never touched: the pronoun "I" (a one-letter numeral counts only after a title word or a
    monarch's name, and "I" after a name only at the end of a phrase: "Elizabeth I of England");
    words that happen to be numerals ("MIX", "DIV", "CV", "DC", "XL": L, C, D and M only after the
    title words of :data:`rejoinder.textscan.ROMAN_CUES_STRONG`); a numeral after a function word
    ("An IV drip"). A capitalised word that is neither a title word nor a function word is taken
    for a name, so "Rocky II" reads "Rocky the Second".
    """
    return sub_from(_ROMAN, _roman, text, start)


# -- initials -----------------------------------------------------------------------------------
_INITIAL = re.compile(r"(?<![\w.'’])([A-Z])\.(?=[ \t]+(?:[A-Z]\.|([A-Z][\w'’-]*)))")


def initials(text: str, start: int) -> str:
    """Drop the period of an initial before a name ("J. R. Smith" -> "J R Smith"), so a TTS that
    splits sentences at ". " (Piper does) does not pause inside a name. A single capital followed
    by a sentence-starting word keeps its period ("Plan B. Then we go")."""
    def repl(m: re.Match[str]) -> str:
        return m.group() if m.group(2) in FUNCTION_WORDS else m.group(1)
    return sub_from(_INITIAL, repl, text, start)


def _n(value: int, **kw: str) -> str:
    return num2words(value, lang="en", **kw).replace(",", "")
