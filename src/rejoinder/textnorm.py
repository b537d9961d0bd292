"""Text normalisation for speech: turn one chunk of LLM output into what a TTS says.

All number words come from the ``num2words`` library (English).  The public entry
points are :func:`normalize_for_speech` (one text, optionally with the text that came
before it as context) and :class:`SpeechNormalizer` (one reply's chunks in order, each
normalised with the reply's earlier text as context); both are re-exported from
:mod:`rejoinder.text`.  Lists, Roman numerals and initials are in
:mod:`rejoinder.textstruct`.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

from num2words import num2words

from .textscan import MONTH_RE as _MONTH_RE
from .textscan import MONTHS as _MONTHS
from .textscan import YEAR_RE
from .textstruct import (initials, lists_to_sentences, lower_item_starts, roman_numerals,
                         sentence_end_after, sub_from)

__all__ = ["SpeechNormalizer", "normalize_for_speech"]

_CURRENCY = {"$": ("dollar", "dollars", "cent", "cents"), "€": ("euro", "euros", "cent", "cents"),
             "£": ("pound", "pounds", "penny", "pence"), "¥": ("yen", "yen", "", "")}
_SCALES = {"k": "thousand", "thousand": "thousand", "m": "million", "million": "million",
           "bn": "billion", "b": "billion", "billion": "billion", "trillion": "trillion"}
# unit symbol -> (singular, plural); multi-word units pluralise their first word.
_UNITS: dict[str, tuple[str, str]] = {
    "km/h": ("kilometer per hour", "kilometers per hour"), "mph": ("mile per hour", "miles per hour"),
    "°C": ("degree Celsius", "degrees Celsius"), "°F": ("degree Fahrenheit", "degrees Fahrenheit"),
    "km": ("kilometer", "kilometers"), "cm": ("centimeter", "centimeters"),
    "mm": ("millimeter", "millimeters"), "m": ("meter", "meters"), "mi": ("mile", "miles"),
    "ft": ("foot", "feet"), "kg": ("kilogram", "kilograms"), "mg": ("milligram", "milligrams"),
    "g": ("gram", "grams"), "lb": ("pound", "pounds"), "lbs": ("pound", "pounds"),
    "oz": ("ounce", "ounces"), "ml": ("milliliter", "milliliters"), "mL": ("milliliter", "milliliters"),
    "l": ("liter", "liters"), "L": ("liter", "liters"), "ms": ("millisecond", "milliseconds"),
    "s": ("second", "seconds"), "sec": ("second", "seconds"), "min": ("minute", "minutes"),
    "h": ("hour", "hours"), "hr": ("hour", "hours"), "hrs": ("hour", "hours"),
    "Hz": ("hertz", "hertz"), "kHz": ("kilohertz", "kilohertz"), "MHz": ("megahertz", "megahertz"),
    "GHz": ("gigahertz", "gigahertz"), "KB": ("kilobyte", "kilobytes"), "kB": ("kilobyte", "kilobytes"),
    "MB": ("megabyte", "megabytes"), "GB": ("gigabyte", "gigabytes"), "TB": ("terabyte", "terabytes"),
    "Mbps": ("megabit per second", "megabits per second"), "W": ("watt", "watts"),
    "kW": ("kilowatt", "kilowatts"), "kWh": ("kilowatt hour", "kilowatt hours"), "V": ("volt", "volts"),
    "°": ("degree", "degrees"),
}
_ABBREV = {"Dr.": "Doctor", "Mr.": "Mister", "Mrs.": "Missus", "Ms.": "Miz", "Jr.": "Junior",
           "Sr.": "Senior", "vs.": "versus", "etc.": "et cetera", "e.g.": "for example",
           "i.e.": "that is", "approx.": "approximately", "a.m.": "a m", "p.m.": "p m",
           "Prof.": "Professor", "Inc.": "Incorporated", "Ltd.": "Limited", "Corp.": "Corporation",
           "Ave.": "Avenue", "Vol.": "Volume", "Blvd.": "Boulevard", "Mt.": "Mount"}
_TITLES = frozenset(("Dr.", "Mr.", "Mrs.", "Ms.", "Prof."))
_ID_WORDS = (r"(order|number|no\.|#|id|code|account|ref|reference|ticket|confirmation|pin|invoice|case"
             r"|flight|room|extension|ext\.)")
_YEAR_CUES = (r"(?i:in|since|by|until|till|from|of|year|during|before|after|around|circa|through|between"
              r"|spring|summer|fall|autumn|winter|fiscal|FY|Q[1-4])")
_SYMBOLS = {"&": " and ", "@": " at ", "+": " plus ", "=": " equals ", "%": " percent "}


def _n(value: int | str, **kw: str) -> str:
    """num2words without the commas it puts after thousands ("one thousand two hundred")."""
    return num2words(int(value), lang="en", **kw).replace(",", "")


def _digits(s: str) -> str:
    """Read every digit of ``s`` singly ("4217" -> "four two one seven")."""
    return " ".join(_n(d) for d in s if d.isdigit())


def _number(s: str) -> str:
    """Cardinal or decimal reading of "1,299", "3.14", "-2.5" (digits after the point singly)."""
    s = s.replace(",", "")
    sign = "minus " if s[:1] in "-−" else ""
    whole, _, frac = s.lstrip("-−").partition(".")
    words = _n(whole or "0")
    return sign + (f"{words} point {_digits(frac)}" if frac else words)


_MARKDOWN: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"^\s*(`{3,}|~{3,}).*$", re.M), " "),  # code fences
    (re.compile(r"!?\[([^\]]*)\]\([^)]*\)"), r"\1"),  # [text](url), ![alt](url)
    (re.compile(r"`([^`]*)`"), r"\1"),
    (re.compile(r"^[ \t]*#{1,6}[ \t]+", re.M), ""),  # headings
    (re.compile(r"^[ \t]*>[ \t]?", re.M), ""),  # block quotes
    (re.compile(r"^[ \t]*([-*_][ \t]*){3,}$", re.M), " "),  # horizontal rules
]
_EMPHASIS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1"), r"\2"),
    (re.compile(r"(?<![\w*])\*(?=\S)([^*]+?)(?<=\S)\*(?![\w*])"), r"\1"),
    (re.compile(r"(?<!\w)_(?=\S)([^_]+?)(?<=\S)_(?!\w)"), r"\1"),
    (re.compile(r"\*\*"), ""),
]


def _strip_markdown(t: str, start: int) -> str:
    for pattern, repl in _MARKDOWN:
        t = sub_from(pattern, repl, t, start)
    t = lists_to_sentences(t, start)  # bullets and numbered items become sentences
    for pattern, repl in _EMPHASIS:
        t = sub_from(pattern, repl, t, start)
    return t


def _is_emoji(ch: str) -> bool:
    cp = ord(ch)
    if cp in (0x200D, 0x20E3, 0xFE0E, 0xFE0F) or 0x1F3FB <= cp <= 0x1F3FF or 0xE0020 <= cp <= 0xE007F:
        return True
    return unicodedata.category(ch) == "So" and cp >= 0x2190


def _spell_address(s: str) -> str:
    """Speak an e-mail address or URL: dots, slashes and friends as words."""
    names = {".": " dot ", "@": " at ", "/": " slash ", "-": " dash ", "_": " underscore ",
             "?": " question mark ", "=": " equals ", "&": " and ", "+": " plus ", ":": " colon ",
             "#": " hash ", "~": " tilde ", "%": " percent "}
    s = re.sub(r"\d+", lambda m: f" {_digits(m.group())} ", s)
    return "".join(names.get(c, c) for c in s)


def _url(m: re.Match[str]) -> str:
    url, tail = re.match(r"(.*?)([.,;:!?)\]]*)$", m.group()).groups()  # type: ignore[union-attr]
    url = re.sub(r"^[a-z]+://", "", url).rstrip("/")
    url = re.sub(r"^www\.", "w w w.", url)
    return _spell_address(url) + tail


def _money(m: re.Match[str]) -> str:
    sym, whole, frac, scale = m.group(1), m.group(2).replace(",", ""), m.group(3), m.group(4)
    one, many, sub_one, sub_many = _CURRENCY[sym]
    if scale:
        amount = _number(whole + (f".{frac}" if frac else ""))
        return f"{amount} {_SCALES[scale.strip().lower()]} {many}"
    cents = int((frac or "0").ljust(2, "0")[:2]) if sub_one else 0
    parts = []
    if int(whole) or not cents:
        parts.append(f"{_n(whole)} {one if int(whole) == 1 else many}")
    if cents:
        parts.append(f"{_n(cents)} {sub_one if cents == 1 else sub_many}")
    return " and ".join(parts)


def _time(m: re.Match[str], h: int, mins: str, secs: str | None, ampm: str | None) -> str:
    """A clock time; a dotted "p.m." that ends a sentence keeps the sentence's period."""
    suffix = ""
    if ampm:
        suffix = " a m" if ampm[0].lower() == "a" else " p m"
    if mins == "00":
        words = _n(h) + (suffix or (" o'clock" if 1 <= h <= 12 else " hundred"))
    else:
        words = f"{_n(h)} {'oh ' + _n(mins) if mins[0] == '0' else _n(mins)}{suffix}"
    if secs:
        words += f" and {_n(secs)} second{'' if int(secs) == 1 else 's'}"
    return words + _kept_period(m, ampm or "")


def _kept_period(m: re.Match[str], abbrev: str) -> str:
    """"." if ``abbrev`` (matched by ``m``) ends in a period that also ends a sentence."""
    return "." if abbrev.endswith(".") and sentence_end_after(m.string, m.end()) else ""


def _date(month: int, day: int, year: str | None) -> str:
    words = f"{_MONTHS[month - 1]} {_n(day, to='ordinal')}"
    return f"{words}, {_n(year, to='year')}" if year else words


def _month_num(name: str) -> int:
    return [mo[:3] for mo in _MONTHS].index(name[:3].capitalize()) + 1


def _slash_date(m: re.Match[str]) -> str:
    a, b, year = int(m.group(1)), int(m.group(2)), m.group(3)
    month, day = (a, b) if a <= 12 else (b, a)  # US month/day unless the first part can't be a month
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return " slash ".join(_number(g) for g in m.groups())
    return _date(month, day, year if len(year) == 4 else None)


def _phone(m: re.Match[str]) -> str:
    s = m.group()
    head = "plus " if s.startswith("+") else ""
    return head + ", ".join(_digits(g) for g in re.findall(r"\d+", s))


def _unit(m: re.Match[str]) -> str:
    num, unit = m.group(1), m.group(2)
    single, plural = _UNITS[unit]
    rng = re.fullmatch(r"(\d+(?:\.\d+)?)\s?[-–]\s?(\d+(?:\.\d+)?)", num)
    amount = f"{_number(rng.group(1))} to {_number(rng.group(2))}" if rng else _number(num)
    return f"{amount} {single if num in ('1', '-1') else plural}"


def _decade(m: re.Match[str]) -> str:
    words = _n(m.group(1), to="year") if len(m.group(1)) == 4 else _n(m.group(1))
    return words[:-1] + "ies" if words.endswith("y") else words + "s"


def _iso_date(m: re.Match[str]) -> str:
    month, day = int(m.group(2)), int(m.group(3))
    return _date(month, day, m.group(1)) if 1 <= month <= 12 and 1 <= day <= 31 else m.group()


def _named_date(m: re.Match[str]) -> str:
    day = int(m.group(2))
    return _date(_month_num(m.group(1)), day, m.group(3)) if 1 <= day <= 31 else m.group()


def _day_month(m: re.Match[str]) -> str:
    """"3 March 2027" / "3rd of March, 2027" -> "the third of March, twenty twenty-seven"."""
    day = int(m.group(1))
    if not 1 <= day <= 31:
        return m.group()
    the = "" if re.search(r"\bthe\s+\Z", m.string[max(0, m.start() - 8):m.start()], re.I) else "the "
    words = f"{the}{_n(day, to='ordinal')} of {_MONTHS[_month_num(m.group(2)) - 1]}"
    return f"{words}, {_n(m.group(3), to='year')}" if m.group(3) else words


def _year(m: re.Match[str]) -> str:
    """A year (or a span of two) after a cue word or a date, looked for in the text before the
    match, context included: "since 1980", "in early 2027", "March 3, | 2027" (a year split
    from its date by a chunk boundary), "between 2020 and 2027". Otherwise left for the number
    rules ("2027 people"). A span of two years from 1900-2099 reads as years without a cue
    ("the 2020-2025 plan")."""
    span = m.group(3) and 1900 <= int(m.group(1)) < int(m.group(3)) <= 2099
    if not span and not _YEAR_HEAD.search(m.string, max(0, m.start() - 60), m.start()):
        return m.group()
    words = _n(m.group(1), to="year")
    if m.group(3):
        sep = m.group(2).strip()
        words += f" {'to' if sep in ('-', '–') else sep} {_n(m.group(3), to='year')}"
    return words


def _identifier(m: re.Match[str]) -> str:
    word = "number" if m.group(1).lower() in ("#", "no.") else m.group(1)
    comma = "," if "," in m.group(2) else ""
    return f"{word}{comma} {_digits(m.group(3))}"


def _version(m: re.Match[str]) -> str:
    prefix = "version " if m.group().startswith("v") else ""
    return prefix + " point ".join(_number(p) for p in m.group(1).split("."))


_Rule = tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]]
_NUM = r"\d+(?:\.\d+)?"
_AMPM = r"([AaPp]\.[Mm]\.|[AaPp]\.?[Mm]\b)"
_ORD = r"(?:st|nd|rd|th)?"
_YEAR_HEAD = re.compile(
    rf"(?:\b{_YEAR_CUES}|\b{_MONTH_RE}\.?,?|\b{_MONTH_RE}\.?\s+\d{{1,2}}{_ORD},?"
    rf"|\b\d{{1,2}}{_ORD}\s+(?:of\s+)?{_MONTH_RE},?)"
    r"\s+(?:the\s+year\s+|(?i:early|late|mid)[\s-]+|(?i:spring|summer|fall|autumn|winter)\s+(?:of\s+)?)?\Z")
_UNIT_RE = "|".join(re.escape(u) for u in sorted(_UNITS, key=len, reverse=True))
_RULES: list[_Rule] = [
    (re.compile(r"…"), "..."),
    (re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+"), lambda m: _spell_address(m.group())),
    (re.compile(r"(?:https?://|www\.)\S+", re.I), _url),
    # dates
    (re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b"), _iso_date),
    (re.compile(r"\b(\d{1,2})/(\d{1,2})/(\d{4}|\d{2})\b"), _slash_date),
    (re.compile(rf"\b{_MONTH_RE}\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?\b(?:,?\s+(\d{{4}})\b)?"), _named_date),
    (re.compile(rf"(?<![\w.,$€£¥#])(\d{{1,2}}){_ORD}\s+(?:of\s+)?{_MONTH_RE}\b\.?"
                rf"(?:,?\s+{YEAR_RE}\b(?![.,:]\d))?"), _day_month),
    (re.compile(rf"\b{_MONTH_RE}\.?,?\s+{YEAR_RE}\b(?![.,:]\d)"),
     lambda m: f"{_MONTHS[_month_num(m.group(1)) - 1]} {_n(m.group(2), to='year')}"),
    # times: 5:30 p.m., 17:45, 9:00 am, 5pm
    (re.compile(rf"\b([01]?\d|2[0-4]):([0-5]\d)(?::([0-5]\d))?(?:\s?{_AMPM})?"),
     lambda m: _time(m, int(m.group(1)), m.group(2), m.group(3), m.group(4))),
    (re.compile(rf"\b(1[0-2]|0?[1-9])\s?{_AMPM}"), lambda m: _time(m, int(m.group(1)), "00", None, m.group(2))),
    # phone numbers: +1 555 123 4567, (555) 123-4567, 1-800-555-0199, 555-0142
    (re.compile(r"(?<![\w+])\+\d{1,3}(?:[ .-]?\(?\d{1,4}\)?){2,5}(?!\w)"), _phone),
    (re.compile(r"(?<![\w-])(?:1[ .-])?(?:\(\d{3}\)\s?|\d{3}[ .-])\d{3}[ .-]\d{4}(?![\w-])"), _phone),
    (re.compile(r"(?<![\w.,-])\d{3}-\d{4}(?![\w-])"), _phone),
    # money and percentages
    (re.compile(r"([$€£¥])\s?(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?"
                r"(\s?(?:thousand|million|billion|trillion|bn|[kKmMbB])\b)?"), _money),
    (re.compile(r"(-?\d[\d,]*(?:\.\d+)?)\s?%"), lambda m: f"{_number(m.group(1))} percent"),
    # identifiers: order 4217, #4217, No. 12, and any run of 5+ digits
    (re.compile(rf"(?<!\w){_ID_WORDS}(,?\s?#?\s?)(\d+)\b", re.I), _identifier),
    (re.compile(r"(?<![\w.,])\d{5,}(?!\w|[.,]\d)"), lambda m: _digits(m.group())),
    (re.compile(r"\b(\d{2}0|1\d{2}0|20\d0)s\b"), _decade),
    # units (also "5-10 km"), ordinals, years after a cue word
    (re.compile(rf"((?:(?<![\w.])-)?{_NUM}(?:\s?[-–]\s?{_NUM})?)\s?({_UNIT_RE})(?![\w/])"), _unit),
    (re.compile(r"\b(\d+)(?:st|nd|rd|th)\b"), lambda m: _n(m.group(1), to="ordinal")),
    (re.compile(rf"(?<![\w.,$€£¥#/-]){YEAR_RE}(?:(\s*(?:-|–|\bto\b|\band\b|\bthrough\b|\buntil\b)\s*)"
                rf"{YEAR_RE})?(?![\w%]|[.,:/]\d)"), _year),
    # versions, ranges, plain numbers, dotted acronyms
    (re.compile(r"\bv?(\d+(?:\.\d+){2,})\b"), _version),
    (re.compile(r"\bv(\d+\.\d+)\b"), _version),
    (re.compile(rf"(?<![\w.])({_NUM})\s?[-–]\s?({_NUM})(?!\w|\.\d)"),
     lambda m: f"{_number(m.group(1))} to {_number(m.group(2))}"),
    (re.compile(r"(?:(?<![\w.])[-−])?(?<![\d.,])(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?(?!\d)"),
     lambda m: f" {_number(m.group())} "),
    (re.compile(r"\b(?:[A-Z]\.){2,}"), lambda m: " ".join(m.group().replace(".", ""))),
]


_ABBREV_RE = re.compile(
    r"(?<!\w)(" + "|".join(re.escape(a) for a in sorted(_ABBREV, key=len, reverse=True)) + r")(?!\w)"
)
_ST_RE = re.compile(r"(?<!\w)St\.(\s+)(?=[A-Z])")
_STREET_RE = re.compile(r"(?<=[A-Za-z] )St\.")


def _abbrev(m: re.Match[str]) -> str:
    """An abbreviation in words; one that ends a sentence keeps the period ("etc." -> "et cetera.");
    a title never does (it stands before a name: "Dr. A. Jones")."""
    abbrev = m.group(1)
    return _ABBREV[abbrev] + ("" if abbrev in _TITLES else _kept_period(m, abbrev))


def normalize_for_speech(text: str, context: str = "") -> str:
    """Rewrite ``text`` (one chunk, any length) as the words a TTS engine should say.

    Args:
        text: the text to normalise.
        context: the text that came before it in the same reply (raw, as written). It is
            not spoken; rules look back into it: a year whose cue word or date ended the
            previous chunk ("March 3," then "2027"), a list item numbered after the
            previous chunk's item ("1. Pickup" then "2. Delivery"). ``""`` for none.

    Handles: markdown (emphasis, code, headings, links -> link text; bullets and
    numbered items become sentences: "1. Pickup 2. Delivery" -> "One, pickup. Two,
    delivery."), emoji (dropped, detected via ``unicodedata`` categories), e-mail
    addresses and URLs (spelled: "jane dot doe at example dot com"; URL scheme
    dropped), dates (ISO "2026-12-04" and "Dec 4" -> "December fourth[, twenty
    twenty-six]"; "3 March 2027" -> "the third of March, twenty twenty-seven";
    "12/05/2026" read as US month/day unless the first part exceeds 12), years
    after a date or a cue word such as "in"/"since"/"between" (num2words' year
    reading: "twenty twenty-seven", "nineteen eighty", "two thousand and five"),
    times ("5:30 p.m." -> "five thirty p m", "17:45" -> "seventeen forty-five",
    "9:00 am" -> "nine a m", "9:00" -> "nine o'clock", "17:00" -> "seventeen
    hundred", "5:05" -> "five oh five"; a sentence ending in "p.m." keeps its
    period), phone numbers (digits singly, groups joined by ", "), currency ($ EUR
    GBP JPY signs; "$12.50" -> "twelve dollars and fifty cents"), percentages,
    identifiers (digits singly after order/number/no./#/id/code/..., "#4217" ->
    "number four two one seven", and any run of 5+ digits), units ("5 km" -> "five
    kilometers", "20 °C" -> "twenty degrees Celsius"), ordinals ("3rd" ->
    "third"), decades, version numbers ("1.2.3" -> "one point two point three"),
    ranges ("5-10" -> "five to ten"), decimals ("3.5" -> "three point five"),
    cardinals with thousands separators, Roman numerals after names and title words
    ("Elizabeth II" -> "Elizabeth the Second", "Chapter IV" -> "Chapter Four"; see
    :func:`rejoinder.textstruct.roman_numerals`), initials ("J. R. Smith" -> "J R
    Smith": no ". " for the TTS to take as a sentence end), the titles
    Dr./Mr./Mrs./Ms./Prof./St. and a few Latin and company abbreviations (an
    abbreviation that ends a sentence keeps the period), dotted acronyms ("U.S." ->
    "U S"); whitespace is collapsed and the result stripped.

    All number words come from ``num2words`` (English, commas removed).  Running
    the function on its own output leaves it unchanged for everything it produces.

    Raises:
        TypeError: if ``text`` or ``context`` is not a ``str``.
    """
    if not isinstance(text, str) or not isinstance(context, str):
        bad = text if not isinstance(text, str) else context
        raise TypeError(f"text and context must be str, got {type(bad).__name__}")
    ctx = unicodedata.normalize("NFC", context)
    t, start = ctx + unicodedata.normalize("NFC", text), len(ctx)
    t = _strip_markdown(t, start)
    if not t.isascii():  # (emoji and their modifiers are never ASCII)
        t = t[:start] + "".join(" " if _is_emoji(c) else c for c in t[start:])
    t = roman_numerals(t, start)
    for pattern, repl in _RULES:
        t = sub_from(pattern, repl, t, start)
    t = sub_from(_ST_RE, r"Saint\1", t, start)
    t = sub_from(_STREET_RE, lambda m: "Street" + _kept_period(m, "."), t, start)
    t = initials(t, start)
    t = sub_from(_ABBREV_RE, _abbrev, t, start)
    t = t[start:]
    t = re.sub(r"[&@+=%]", lambda m: _SYMBOLS[m.group()], t)
    t = re.sub(r"[*`#~|<>]|(?<!\w)_|_(?!\w)", " ", t)
    t = lower_item_starts(t)
    t = re.sub(r"\s+([,.;:!?])", r"\1", t)
    return re.sub(r"\s+", " ", t).strip()


class SpeechNormalizer:
    """Normalise one reply's chunks in order, each with the reply's earlier text as context.

    Use one per reply (or call :meth:`reset` between replies)::

        norm = SpeechNormalizer()
        for chunk in chunks:           # e.g. from SpeakableChunker
            spoken = norm.feed(chunk)  # == normalize_for_speech(chunk, context=<text before it>)

    Args:
        context_chars: how much earlier text (characters) is kept as context; >= 0.

    Raises:
        ValueError: if ``context_chars`` is negative.
    """

    def __init__(self, context_chars: int = 600) -> None:
        if context_chars < 0:
            raise ValueError(f"context_chars must be >= 0, got {context_chars}")
        self.context_chars = context_chars
        self._before = ""

    def feed(self, chunk: str) -> str:
        """The words to say for ``chunk`` (the next chunk of this reply); remembers it.

        Raises:
            TypeError: if ``chunk`` is not a ``str``.
        """
        spoken = normalize_for_speech(chunk, context=self._before)
        self._before = (self._before + chunk)[-self.context_chars:] if self.context_chars else ""
        return spoken

    def reset(self) -> None:
        """Forget the context (the next chunk starts a new reply)."""
        self._before = ""
