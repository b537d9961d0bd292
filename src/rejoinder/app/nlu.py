"""Deterministic understanding of one caller turn as Whisper writes it.

:func:`analyze` turns the final transcript into :class:`Utterance`: lower-cased words, number
runs ("Four, two, one, seven." / "4 2 1 7" / "forty-two seventeen" / "double four" → one digit
string), candidate order numbers, weekdays and times — each list in spoken order, so the LAST
value wins when the caller corrects themself ("Friday? Wait, no, Thursday afternoon."). A value
right after "not" ("4217, not 5031") is dropped.

Times are 24 h ``"HH:MM"`` strings, or the markers :data:`MORNING` / :data:`AFTERNOON` that the
policy resolves against free slots. A bare hour without am/pm is read in business hours:
1–7 → PM, 8–11 → AM.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from rejoinder.app.db import WEEKDAYS

MORNING = "morning"
AFTERNOON = "afternoon"

DIGIT_WORDS = {
    "zero": 0, "oh": 0, "o": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5,
    "six": 6, "seven": 7, "eight": 8, "nine": 9,
}  # fmt: skip
TEEN_WORDS = {
    "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
    "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19,
}  # fmt: skip
TENS_WORDS = {
    "twenty": 20, "thirty": 30, "forty": 40, "fourty": 40, "fifty": 50, "sixty": 60,
    "seventy": 70, "eighty": 80, "ninety": 90,
}  # fmt: skip
REPEAT_WORDS = {"double": 2, "triple": 3}
CORRECTION_MARKERS = ("wait", "no", "sorry", "actually", "i mean", "rather", "make that",
                      "scratch that", "instead", "oops")  # fmt: skip

_NUMBER_WORDS = set(DIGIT_WORDS) | set(TEEN_WORDS) | set(TENS_WORDS) | set(REPEAT_WORDS)
_NUMBER_WORDS |= {"hundred"}
_JOINERS = {",", "-", "."}
_TOKEN_RE = re.compile(r"\d{1,2}:\d{2}|\d+|[a-z]+(?:'[a-z]+)?|[^\sa-z\d]")
_PRONOUN_ONE_BEFORE = {"that", "this", "the", "other", "which", "another", "a", "right", "wrong",
                       "different", "each", "no", "any", "first", "second", "last", "new"}  # fmt: skip


@dataclass(frozen=True)
class NumberRun:
    """A spoken number: ``digits`` (the concatenation) and its ``pieces`` (one per spoken group,
    e.g. "two thirty" → ("2", "30")), spanning tokens ``[start, end)``."""

    digits: str
    pieces: tuple[str, ...]
    start: int
    end: int


@dataclass(frozen=True)
class Utterance:
    """Everything the policy needs from one transcript; lists are in spoken order."""

    text: str
    tokens: tuple[str, ...]
    numbers: tuple[NumberRun, ...]
    order_ids: tuple[str, ...]  # 3–6 digit numbers not read as times
    phones: tuple[str, ...]  # 7–12 digit numbers
    days: tuple[str, ...]  # capitalised weekday names
    times: tuple[str, ...]  # "HH:MM" or MORNING / AFTERNOON
    corrected: bool  # a correction marker occurs
    words: frozenset[str] = field(default_factory=frozenset)

    def has(self, *phrases: str) -> bool:
        """True when any phrase (one or more words) occurs as whole words."""
        joined = " " + " ".join(t for t in self.tokens if t not in _JOINERS | {"?", "!"}) + " "
        return any(f" {p} " in joined for p in phrases)

    def last_order_id(self) -> str | None:
        return self.order_ids[-1] if self.order_ids else None

    def last_day(self) -> str | None:
        return self.days[-1] if self.days else None

    def last_time(self) -> str | None:
        return self.times[-1] if self.times else None


def tokenize(text: str) -> list[str]:
    """Lower-case tokens: words (with apostrophes), digit strings, "H:MM" times, punctuation.
    "p.m."/"a.m." become "pm"/"am", "o'clock" becomes "oclock"."""
    t = text.lower().replace("\u2019", "'")
    t = re.sub(r"\bp\.\s?m\b\.?", " pm ", t)
    t = re.sub(r"\ba\.\s?m\b\.?", " am ", t)
    t = re.sub(r"(\d)(am|pm)\b", r"\1 \2", t)
    t = t.replace("o'clock", " oclock ")
    return _TOKEN_RE.findall(t)


def _is_number_token(tokens: list[str], i: int) -> bool:
    tok = tokens[i]
    if tok.isdigit():
        return True
    if tok not in _NUMBER_WORDS:
        return False
    nxt = _next_word(tokens, i)
    if tok in REPEAT_WORDS:
        return nxt is not None and (nxt in DIGIT_WORDS or (nxt.isdigit() and len(nxt) == 1))
    if tok == "hundred":
        return i > 0 and _is_number_token(tokens, i - 1)
    if tok in ("oh", "o"):  # "oh" is zero only inside a number
        prev = _prev_word(tokens, i)
        return any(
            w is not None and (w.isdigit() or (w in _NUMBER_WORDS and w not in ("oh", "o")))
            for w in (prev, nxt)
        )
    if tok == "one":  # "not that one", "the other one" are pronouns
        prev = _prev_word(tokens, i)
        neighbours_numeric = any(
            w is not None and (w.isdigit() or w in _NUMBER_WORDS) for w in (prev, nxt)
        )
        return prev not in _PRONOUN_ONE_BEFORE or neighbours_numeric
    return True


def _prev_word(tokens: list[str], i: int) -> str | None:
    j = i - 1
    while j >= 0 and tokens[j] in _JOINERS:
        j -= 1
    return tokens[j] if j >= 0 else None


def _next_word(tokens: list[str], i: int) -> str | None:
    j = i + 1
    while j < len(tokens) and tokens[j] in _JOINERS:
        j += 1
    return tokens[j] if j < len(tokens) else None


def _pieces(words: list[str]) -> list[str]:
    """Spoken number words/digits of one run → digit groups ("forty", "two" → "42")."""
    out: list[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        if w.isdigit():
            out.append(w)
        elif w in DIGIT_WORDS:
            out.append(str(DIGIT_WORDS[w]))
        elif w in TEEN_WORDS:
            out.append(str(TEEN_WORDS[w]))
        elif w in TENS_WORDS:
            nxt = words[i + 1] if i + 1 < len(words) else None
            if nxt in DIGIT_WORDS and DIGIT_WORDS[nxt] > 0 and nxt not in ("oh", "o"):
                out.append(str(TENS_WORDS[w] + DIGIT_WORDS[nxt]))
                i += 1
            else:
                out.append(str(TENS_WORDS[w]))
        elif w in REPEAT_WORDS and i + 1 < len(words):
            nxt = words[i + 1]
            d = str(DIGIT_WORDS[nxt]) if nxt in DIGIT_WORDS else nxt
            out.append(d * REPEAT_WORDS[w])
            i += 1
        elif w == "hundred" and out:
            nxt = words[i + 1] if i + 1 < len(words) else None
            nxt2 = words[i + 2] if i + 2 < len(words) else None
            if nxt in TENS_WORDS and nxt2 in DIGIT_WORDS and DIGIT_WORDS[nxt2] > 0:
                out[-1] += str(TENS_WORDS[nxt] + DIGIT_WORDS[nxt2])
                i += 2
            elif nxt in TENS_WORDS or nxt in TEEN_WORDS:
                out[-1] += str({**TENS_WORDS, **TEEN_WORDS}[nxt])
                i += 1
            elif nxt in ("and",):
                out[-1] += "00"
            else:
                out[-1] += "00"
        i += 1
    return out


def number_runs(tokens: list[str]) -> list[NumberRun]:
    """Maximal runs of number tokens, joined across spaces, commas, hyphens and periods."""
    runs: list[NumberRun] = []
    i = 0
    while i < len(tokens):
        if not _is_number_token(tokens, i):
            i += 1
            continue
        start, words, j = i, [tokens[i]], i + 1
        while j < len(tokens):
            k = j
            while k < len(tokens) and tokens[k] in _JOINERS:
                k += 1
            if k < len(tokens) and _is_number_token(tokens, k):
                words.append(tokens[k])
                j = k + 1
            else:
                break
        pieces = _pieces(words)
        if pieces:
            runs.append(NumberRun("".join(pieces), tuple(pieces), start, j))
        i = j
    return runs


def _negated(tokens: list[str], start: int) -> bool:
    """True for "not 5031", "not on Friday", "not order 5031" (no punctuation in between)."""
    j = start - 1
    while j >= 0 and tokens[j] in ("on", "the", "order", "number", "at", "that", "for"):
        j -= 1
    return j >= 0 and tokens[j] in ("not", "isn't")


def _time_of(run: NumberRun, tokens: list[str], force: bool = False) -> str | None:
    """The run as a clock time when its context says so (am/pm/o'clock, "at"/"around", or
    ``force`` for a correction of an earlier time), else None."""
    after = tokens[run.end] if run.end < len(tokens) else ""
    after3 = " ".join(tokens[run.end : run.end + 3])
    before = _prev_word(tokens, run.start) or ""
    explicit = after in ("am", "pm", "oclock")
    if not (explicit or force) and before not in ("at", "around", "about", "by", "until"):
        return None
    p = run.pieces
    if len(p) == 1 and len(p[0]) in (3, 4) and int(p[0][-2:]) < 60:  # "230 pm", "1430"
        hour, minute = int(p[0][:-2]), int(p[0][-2:])
    elif len(p) == 1:
        hour, minute = int(p[0]), 0
    elif len(p) == 2 and len(p[1]) == 2 and int(p[1]) < 60:  # "two thirty", "2.30"
        hour, minute = int(p[0]), int(p[1])
    else:
        return None
    if hour > 23:
        return None
    if after == "pm" or after3 in ("in the afternoon", "in the evening"):
        hour = hour + 12 if hour < 12 else hour
    elif after == "am" or after3 == "in the morning":
        hour = 0 if hour == 12 else hour
    elif 1 <= hour <= 7:
        hour += 12
    return f"{hour:02d}:{minute:02d}"


def analyze(text: str) -> Utterance:
    """Parse one final transcript. Never raises; an empty text gives an empty utterance."""
    tokens = tokenize(text)
    runs = number_runs(tokens)
    order_ids: list[tuple[int, str]] = []
    phones: list[str] = []
    times: list[tuple[int, str]] = []
    modifier_at: set[int] = set()
    for run in runs:
        t = _time_of(run, tokens)
        if t is None and times and len(run.digits) <= 4:  # "3 PM, no wait, 4" corrects a time
            between = " ".join(tokens[times[-1][0] : run.start])
            if any(re.search(rf"\b{re.escape(m)}\b", between) for m in CORRECTION_MARKERS):
                t = _time_of(run, tokens, force=True)
        if t is not None:
            times.append((run.start, t))
            if " ".join(tokens[run.end : run.end + 2]) == "in the":
                modifier_at.add(run.end + 2)
        elif _negated(tokens, run.start):
            continue
        elif 3 <= len(run.digits) <= 6:
            order_ids.append((run.start, run.digits))
        elif 7 <= len(run.digits) <= 12:
            phones.append(run.digits)
    for i, tok in enumerate(tokens):
        if i in modifier_at:
            continue
        if tok == "morning" and _prev_word(tokens, i) != "good":
            times.append((i, MORNING))
        elif tok == "afternoon" and _prev_word(tokens, i) != "good":
            times.append((i, AFTERNOON))
        elif tok in ("noon", "midday", "lunchtime"):
            times.append((i, "12:00"))
        elif re.fullmatch(r"\d{1,2}:\d{2}", tok):
            hour, minute = (int(x) for x in tok.split(":"))
            nxt = tokens[i + 1] if i + 1 < len(tokens) else ""
            if nxt == "pm" and hour < 12:
                hour += 12
            elif nxt != "am" and 1 <= hour <= 7:
                hour += 12
            if hour < 24 and minute < 60:
                times.append((i, f"{hour:02d}:{minute:02d}"))
    days = [
        (i, tok.capitalize())
        for i, tok in enumerate(tokens)
        if tok.rstrip("s") in WEEKDAYS or tok in WEEKDAYS
        if not _negated(tokens, i)
    ]
    days = [(i, d if d.lower() in WEEKDAYS else d[:-1]) for i, d in days]
    times = [(i, t) for i, t in times if not _negated(tokens, i)]
    joined = " ".join(tokens)
    corrected = any(re.search(rf"\b{re.escape(m)}\b", joined) for m in CORRECTION_MARKERS)
    return Utterance(
        text=text,
        tokens=tuple(tokens),
        numbers=tuple(runs),
        order_ids=tuple(v for _, v in sorted(order_ids)),
        phones=tuple(phones),
        days=tuple(v for _, v in sorted(days)),
        times=tuple(v for _, v in sorted(times)),
        corrected=corrected,
        words=frozenset(tokens),
    )
