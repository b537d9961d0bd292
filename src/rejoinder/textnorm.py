"""Text normalisation for speech: turn one chunk of LLM output into what a TTS says.

All number words come from the ``num2words`` library (English).  The public entry
point is :func:`normalize_for_speech`; it is re-exported from :mod:`rejoinder.text`.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

from num2words import num2words

__all__ = ["normalize_for_speech"]

_MONTHS = (
    "January February March April May June July August September October November December"
).split()
_MONTH_RE = (r"(Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?"
             r"|Sept?(?:ember)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)")
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
           "i.e.": "that is", "approx.": "approximately", "a.m.": "a m", "p.m.": "p m"}
_ID_WORDS = (r"(order|number|no\.|#|id|code|account|ref|reference|ticket|confirmation|pin|invoice|case"
             r"|flight|room|extension|ext\.)")
_YEAR_CUES = r"(in|since|by|until|till|from|of|year|during|before|after|around|circa|through)"
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


def _strip_markdown(t: str) -> str:
    t = re.sub(r"^\s*(`{3,}|~{3,}).*$", " ", t, flags=re.M)  # code fences
    t = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", t)  # [text](url), ![alt](url)
    t = re.sub(r"`([^`]*)`", r"\1", t)
    t = re.sub(r"^[ \t]*#{1,6}[ \t]+", "", t, flags=re.M)  # headings
    t = re.sub(r"^[ \t]*>[ \t]?", "", t, flags=re.M)  # block quotes
    t = re.sub(r"^[ \t]*([-*+]|\d{1,3}[.)])[ \t]+", "", t, flags=re.M)  # bullets
    t = re.sub(r"^[ \t]*([-*_][ \t]*){3,}$", " ", t, flags=re.M)  # horizontal rules
    t = re.sub(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1", r"\2", t)
    t = re.sub(r"(?<![\w*])\*(?=\S)([^*]+?)(?<=\S)\*(?![\w*])", r"\1", t)
    t = re.sub(r"(?<!\w)_(?=\S)([^_]+?)(?<=\S)_(?!\w)", r"\1", t)
    return t.replace("**", "")


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


def _time(h: int, mins: str, secs: str | None, ampm: str | None) -> str:
    suffix = ""
    if ampm:
        suffix = " a m" if ampm[0].lower() == "a" else " p m"
    if mins == "00":
        words = _n(h) + (suffix or (" o'clock" if 1 <= h <= 12 else " hundred"))
    else:
        words = f"{_n(h)} {'oh ' + _n(mins) if mins[0] == '0' else _n(mins)}{suffix}"
    if secs:
        words += f" and {_n(secs)} second{'' if int(secs) == 1 else 's'}"
    return words


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


def _identifier(m: re.Match[str]) -> str:
    word = "number" if m.group(1).lower() in ("#", "no.") else m.group(1)
    comma = "," if "," in m.group(2) else ""
    return f"{word}{comma} {_digits(m.group(3))}"


def _version(m: re.Match[str]) -> str:
    prefix = "version " if m.group().startswith("v") else ""
    return prefix + " point ".join(_number(p) for p in m.group(1).split("."))


_Rule = tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]]
_NUM = r"\d+(?:\.\d+)?"
_AMPM = r"([AaPp]\.?[Mm]\b\.?)"
_UNIT_RE = "|".join(re.escape(u) for u in sorted(_UNITS, key=len, reverse=True))
_RULES: list[_Rule] = [
    (re.compile(r"…"), "..."),
    (re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+"), lambda m: _spell_address(m.group())),
    (re.compile(r"(?:https?://|www\.)\S+", re.I), _url),
    # dates
    (re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b"), _iso_date),
    (re.compile(r"\b(\d{1,2})/(\d{1,2})/(\d{4}|\d{2})\b"), _slash_date),
    (re.compile(rf"\b{_MONTH_RE}\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?\b(?:,?\s+(\d{{4}})\b)?"), _named_date),
    # times: 5:30 p.m., 17:45, 9:00 am, 5pm
    (re.compile(rf"\b([01]?\d|2[0-4]):([0-5]\d)(?::([0-5]\d))?(?:\s?{_AMPM})?"),
     lambda m: _time(int(m.group(1)), m.group(2), m.group(3), m.group(4))),
    (re.compile(rf"\b(1[0-2]|0?[1-9])\s?{_AMPM}"), lambda m: _time(int(m.group(1)), "00", None, m.group(2))),
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
    (re.compile(rf"\b{_YEAR_CUES}\s(1[1-9]\d\d|20\d\d)\b", re.I),
     lambda m: f"{m.group(1)} {_n(m.group(2), to='year')}"),
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


def normalize_for_speech(text: str) -> str:
    """Rewrite ``text`` (one chunk, any length) as the words a TTS engine should say.

    Handles: markdown (emphasis, code, headings, bullets, numbered lists, links ->
    link text), emoji (dropped, detected via ``unicodedata`` categories), e-mail
    addresses and URLs (spelled: "jane dot doe at example dot com"; URL scheme
    dropped), dates (ISO "2026-12-04" and "Dec 4" -> "December fourth[, twenty
    twenty-six]"; "12/05/2026" read as US month/day unless the first part exceeds
    12), times ("5:30 p.m." -> "five thirty p m", "17:45" -> "seventeen
    forty-five", "9:00 am" -> "nine a m", "9:00" -> "nine o'clock", "17:00" ->
    "seventeen hundred", "5:05" -> "five oh five"), phone numbers (digits singly,
    groups joined by ", "), currency ($ EUR GBP JPY signs; "$12.50" -> "twelve
    dollars and fifty cents"), percentages, identifiers (digits singly after
    order/number/no./#/id/code/..., "#4217" -> "number four two one seven", and
    any run of 5+ digits), units ("5 km" -> "five kilometers", "20 °C" -> "twenty
    degrees Celsius"), ordinals ("3rd" -> "third"), decades, years after words such
    as "in"/"since", version numbers ("1.2.3" -> "one point two point three"),
    ranges ("5-10" -> "five to ten"), decimals ("3.5" -> "three point five"),
    cardinals with thousands separators, the titles Dr./Mr./Mrs./Ms./St. and a few
    Latin abbreviations, dotted acronyms ("U.S." -> "U S"); whitespace is collapsed
    and the result stripped.

    All number words come from ``num2words`` (English, commas removed).  Running
    the function on its own output leaves it unchanged for everything it produces.

    Raises:
        TypeError: if ``text`` is not a ``str``.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")
    t = unicodedata.normalize("NFC", text)
    t = _strip_markdown(t)
    t = "".join(" " if _is_emoji(c) else c for c in t)
    for pattern, repl in _RULES:
        t = pattern.sub(repl, t)
    t = _ST_RE.sub(r"Saint\1", t)
    t = re.sub(r"(?<=[A-Za-z] )St\.", "Street", t)
    t = _ABBREV_RE.sub(lambda m: _ABBREV[m.group(1)], t)
    t = re.sub(r"[&@+=%]", lambda m: _SYMBOLS[m.group()], t)
    t = re.sub(r"[*`#~|<>]|(?<!\w)_|_(?!\w)", " ", t)
    t = re.sub(r"\s+([,.;:!?])", r"\1", t)
    return re.sub(r"\s+", " ", t).strip()
