"""Lexical look-ups shared by the speakable chunker and the speech normaliser.

The chunker (:mod:`rejoinder.text`) and the normaliser (:mod:`rejoinder.textnorm`) must agree on
what a date, a list marker, an initial, a title or a Roman numeral is: otherwise the chunker cuts
text that the normaliser then reads differently. Every predicate here takes the whole text seen so
far plus an index, never a chunk on its own, so a caller passes the earlier text of the reply as
part of the string (the chunker its emitted tail, the normaliser its context).

Roman numerals are parsed by the ``roman-numerals`` library (strict, well-formed numerals only).
"""

from __future__ import annotations

import re

from roman_numerals import InvalidRomanNumeralError, RomanNumeral

MONTHS = (
    "January February March April May June July August September October November December"
).split()
MONTH_RE = (r"(Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?"
            r"|Sept?(?:ember)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)")
WEEKDAY_RE = r"(Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)"
YEAR_RE = r"(1[1-9]\d\d|20\d\d)"  # the years read as years: 1100-2099

# Titles and abbreviations after which a "." never ends a sentence (case-sensitive ones; the rest
# are compared lower-cased), and titles written without a dot ("Mr Smith").
ABBREV_CASED = frozenset(
    "Dr Mr Mrs Ms Mx St Jr Sr Inc Ltd Co Corp Prof Rev Gen Col Capt Sgt Lt Mt Ave "
    "Blvd Rd Fig Vol Jan Feb Mar Apr Jun Jul Aug Sep Sept Oct Nov Dec".split()
)
ABBREV_LOWER = frozenset("vs etc approx e.g i.e a.m p.m cf al esp incl min max".split())
TITLES = frozenset("Dr Mr Mrs Ms Mx Prof St Rev Fr Sir Dame Lord Lady King Queen Pope Saint "
                   "Gen Col Capt Sgt Lt Hon Pres Gov Sen Rep".split())
# Capitalised words that start sentences: never a name before a Roman numeral, and a sentence
# start after a single letter ("Plan B. Then ..." ends a sentence; "J. R. Smith" does not).
FUNCTION_WORDS = frozenset(
    "A An The This That These Those It Its I I'm I'll I've I'd We You He She They Then There Here So "
    "But And Or Nor If When While Yes No Not Please Thanks Thank Also Now Today Tomorrow Yesterday "
    "What Why How Who Whom Whose Where Which Let Just Sure Okay OK Ok Well Oh My Our Your Their His "
    "Her Is Are Was Were Be Been Do Does Did Can Could Will Would Should Shall May Might Must Have "
    "Has Had For In On At To From By With As After Before Since Until Once Again Still However "
    "Meanwhile Otherwise Finally First Next Last Great Good Hi Hello Hey Bye Goodbye Sorry Hmm Um "
    "Uh Use Get See Go Call Try Make Take Give Tell Ask Book Check Note Is Any All Some Each Every "
    "Both Either Neither Many Much More Most Other Another Such Only Even Maybe Perhaps".split()
)
# Abbreviations that end a name ("Acme Inc.", "Bob Jr."): a chunk may end after one, never before.
SUFFIXES = frozenset("Inc Ltd Co Corp Jr Sr LLC PLC GmbH Esq PhD MD al".split())
CONJUNCTIONS = frozenset("and but so because which or then while when where although though "
                         "unless until whereas since if who whose nor yet".split())
# Words after which a Roman numeral reads as a cardinal ("Chapter IV" -> "Chapter Four"). The
# strong ones take any numeral; the rest only numerals made of I, V and X (so "Type C" stays).
ROMAN_CUES_STRONG = frozenset("Chapter Chapters Part Book Volume Vol Article Section Title Psalm "
                              "Episode Bowl Act Appendix Canto Stanza Amendment".split())
ROMAN_CUES = ROMAN_CUES_STRONG | frozenset(
    "Scene Phase Stage Level Type Class Category Season Round Tier Division War Apollo Gemini Mark Mk "
    "Schedule Track Disc Plate Table Figure Fig Step Lesson Module Grade Rule "
    "Series Vatican Olympiad".split())
# Cues that are also ordinary verbs: "Mark I will call" must keep its "I".
ROMAN_CUES_VERBY = frozenset("Mark Act Book Type Table Step Rule Track".split())
# Names that take a one-letter regnal numeral ("Henry V", "Elizabeth I"); longer numerals follow
# any capitalised name that is not a function word ("John Smith III").
REGNAL_NAMES = frozenset(
    "Elizabeth Henry Charles James George Edward William Richard Louis Napoleon Peter Catherine "
    "Mary Alexander Nicholas Frederick Philip Felipe Juan Carlos John Paul Pius Leo Gregory Benedict "
    "Innocent Clement Urban Boniface Alfonso Ferdinand Francis Frederick Gustav Harald Olaf Haakon "
    "Christian Wilhelm Ludwig Otto Rudolf Albert Victor Umberto Ivan Ramesses Ramses Thutmose "
    "Amenhotep Ptolemy Cleopatra Antiochus Darius Xerxes Artaxerxes Constantine Justinian Leopold "
    "Maximilian Sigismund Casimir Stanislaus Vladislaus Isabella Anne Victoria Margaret Malcolm "
    "David Robert Stephen Harold Canute Cnut Edmund Athelstan Alexios Manuel Baldwin Hugh Robert "
    "Sancho Pedro Afonso Joao Sebastian Mehmed Murad Selim Suleiman Abdul Rama Bhumibol".split()
) - {"Malcolm"}  # "Malcolm X" is a name, not a king

_CLAUSE_END = ",;:"
_NUMBERISH = re.compile(r"^[(\"'“‘]*[$€£¥#+\-−]?\d")
_JOINERS = frozenset("& + = @ / - – — x ×".split())
_OPEN = "\"'([{«“‘*_"
_CLOSE = "\"')]}»”’*_"


def roman_value(token: str) -> int | None:
    """The value of an upper-case, well-formed Roman numeral token ("XIV" -> 14), else None."""
    if not token or not token.isupper() or token.strip("IVXLCDM"):
        return None
    try:
        return int(RomanNumeral.from_string(token))
    except InvalidRomanNumeralError:
        return None


def is_abbrev(token: str) -> bool:
    """True if ``token`` (the word before a ".") is an abbreviation, a dotted acronym or an
    initial, after which a "." does not end a sentence."""
    tok = token.lstrip(_OPEN)
    if tok in ABBREV_CASED or tok.lower() in ABBREV_LOWER or re.fullmatch(r"(?:[A-Za-z]\.)+[A-Za-z]", tok):
        return True
    return len(tok) == 1 and tok.isupper()


# -- list markers -------------------------------------------------------------------------------
_MARKER = re.compile(r"(\d{1,2})([.)])[ \t]")
_MARKER_PREFIX = re.compile(r"\d{1,2}[.)]?")
_PARA_BREAK = re.compile(r"\n[ \t]*\n")


def marker_pending(text: str, i: int) -> bool:
    """True if ``text[i:]`` could still grow into a list marker ("1", "12.") but has not yet."""
    return _MARKER_PREFIX.fullmatch(text, i) is not None


def list_marker(text: str, i: int, _depth: int = 0) -> int | None:
    """Number ``k`` if a list marker "k." / "k)" followed by a space or tab starts at ``text[i]``.

    A marker stands at the start of a line (any ``k``), or inline: "1." at the start of the text
    or after a colon or a sentence end ("Steps: 1. Pickup"), and "k." (k >= 2) when marker k - 1
    came earlier in the same paragraph ("1. Pickup 2. Delivery"). "I counted to 2. Then" is no
    marker: no "1." came before it.
    """
    m = _MARKER.match(text, i)
    if m is None or (i > 0 and not text[i - 1].isspace()):
        return None
    k = int(m.group(1))
    line_start = text.rfind("\n", 0, i) + 1
    if not text[line_start:i].strip(" \t"):
        return k
    before = text[:i].rstrip()
    if k == 1:
        return k if before.endswith((":", ".", "!", "?")) and not before.endswith("..") else None
    if _depth > 40:
        return None
    para = max((p.end() for p in _PARA_BREAK.finditer(text, 0, i)), default=0)
    prev = re.compile(rf"(?<!\S){k - 1}{re.escape(m.group(2))}[ \t]")
    starts = [p.start() for p in prev.finditer(text, para, i)]
    return k if starts and list_marker(text, starts[-1], _depth + 1) == k - 1 else None


# -- dates ----------------------------------------------------------------------------------------
_ORD = r"(?:st|nd|rd|th)?"
_DATE_HEAD = re.compile(rf"(?:\b{MONTH_RE}\.?\s+\d{{1,2}}{_ORD}|\b\d{{1,2}}{_ORD}\s+(?:of\s+)?{MONTH_RE}"
                        rf"|\b{MONTH_RE})\Z")
_WEEKDAY_HEAD = re.compile(rf"\b{WEEKDAY_RE}\Z")
_MONTH_WORD = re.compile(rf"{MONTH_RE}\.?\b")


def date_comma(text: str, i: int) -> bool | None:
    """Whether the "," at ``text[i]`` sits inside a date, so a chunk must not end there.

    Inside a date: "March 3, 2027", "3rd of March, 2027", "March, 2027" (a year follows) and
    "Friday, March 3" / "Friday, 3 March" (a date follows a weekday). Returns None while the text
    after the comma is too short to tell.
    """
    head = text[max(0, i - 40):i]
    tail = text[i + 1:]
    if _DATE_HEAD.search(head):
        if re.fullmatch(r"\s*\d{0,3}", tail):
            return None
        return re.match(rf"\s+{YEAR_RE}(?!\d)", tail) is not None
    if _WEEKDAY_HEAD.search(head):
        m = re.match(r"\s*([A-Za-z]*|\d*)", tail)
        if m.end() == len(tail):  # type: ignore[union-attr]
            return None
        word = m.group(1)  # type: ignore[union-attr]
        return bool(word) and (word[0].isdigit() or _MONTH_WORD.fullmatch(word) is not None)
    return False


# -- safe places to cut between two words -------------------------------------------------------
def safe_gap(text: str, p: int, prev: str, nxt: str) -> bool:
    """True if a chunk may end at ``text[p]`` (a whitespace run), between word ``prev`` and
    word ``nxt``: not inside a number, date, time, price or phone number, not between a title or
    an initial and a name, not between a name and its numeral, not next to a joining symbol.
    (E-mail addresses, URLs and paths hold no whitespace, so no gap is inside one.)"""
    core = prev.rstrip(_CLOSE)
    ends_clause = core.endswith(tuple(_CLAUSE_END)) or prev.endswith(("—", "–"))
    if prev in _JOINERS or nxt in _JOINERS or prev.endswith(("&", "+", "@", "/")):
        return False
    if _NUMBERISH.match(nxt) and not ends_clause:
        return False  # "order | 4217", "at | 5 pm", "in | 2027", "March | 3"
    if _NUMBERISH.match(prev) and not (ends_clause or core.endswith((".", "!", "?"))):
        return False  # "5 | km", "2 | PM", "555 | 0142"
    if core.endswith(",") and date_comma(text, p - (len(prev) - len(core)) - 1):
        return False  # "March 3, | 2027"
    bare = core.rstrip(".").lstrip(_OPEN)
    if core.endswith(".") and is_abbrev(core[:-1]) and bare not in SUFFIXES and bare.lower() not in (
            "etc", "a.m", "p.m"):
        return False  # "Dr. | Smith", "J. | R. Smith", "approx. | 5"
    if nxt.rstrip(_CLOSE + ".,;:!?") in SUFFIXES:
        return False  # "Acme | Inc.", "Bob | Jr."
    if bare in TITLES or _MONTH_WORD.fullmatch(core.lstrip(_OPEN)):
        return ends_clause  # "Queen | Elizabeth", "March | third"
    if re.fullmatch(WEEKDAY_RE, bare) and _MONTH_WORD.match(nxt):
        return False  # "Friday | March 3"
    if re.fullmatch(r"[A-Z]\.", nxt.rstrip(_CLOSE)):
        return False  # "John | F. Kennedy"
    tok = nxt.rstrip(_CLOSE + ".,;:!?").removesuffix("'s").removesuffix("’s")
    if roman_value(tok) is not None and prev[:1].isupper() and not ends_clause:
        return len(tok) == 1 and bare not in REGNAL_NAMES and bare not in ROMAN_CUES  # "Elizabeth | II"
    return True


def natural_gap(prev: str, nxt: str) -> bool:
    """True if the gap between ``prev`` and ``nxt`` is a natural pause: after clause
    punctuation, or before a conjunction ("... the delivery | because ...")."""
    core = prev.rstrip(_CLOSE)
    if core.endswith(tuple(_CLAUSE_END + ".!?…")) or prev in ("-", "–", "—"):
        return True
    return nxt.strip(_OPEN + _CLOSE + ",.;:").lower() in CONJUNCTIONS
