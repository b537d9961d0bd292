"""Dictated numbers: is the caller still reading a number out?

Callers read phone, order and card numbers in groups with pauses ("415 — 555 — 0101", "4242 —
4242 — …"). A pause inside such a number must not end the turn, but a turn that ends in a
*complete* number ("order 4217") must not wait longer than any other.

:func:`number_open` looks at the digits the transcript ends with (digits, digit words and "oh",
in any grouping: "4 2", "415 555", "four one five, five five five") and at the words before
them — in the caller's turn, else in what the agent last said ("What's your phone number?") —
to pick the kinds of number that may be meant (:class:`NumberFormat`: context words and
groupings such as 3-3-4). The number is *open* (still being read out) when no expected length
has been reached yet, or when the groups heard so far are a proper prefix of a longer grouping
(15 digits read as 4-4-4-3 of a 4-4-4-4 card), or all but the last are and the last is shorter
than its group (415 862 3 of a 3-3-4 phone number: seven digits, yet still open). It is
*complete* at an expected length, and once it is longer than every expected length (nothing
left to wait for).

The grouping comes from the caller's pauses when the session knows them (``pauses``: how many
digits had been read at each earlier pause of at least ``group_pause_ms`` in this turn — "1",
then "1 800" is groups 1-3 however Whisper wrote them), else from the transcript's own digit
groups ("415 555" is 3-3). Digits written one by one ("4, 2, 1, 7") or as a single group
("4217") with no pause known say nothing about grouping, so only their count is used.

Without a context word, the expected lengths are those of the ``bare`` formats (4, 7, 10, 11,
15, 16 by default): "4 2" is open, "4217" complete, "415 555" and "1 800" open. A 4-digit first
group of a card read without the word "card" therefore counts as complete.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

#: Digits read as words, as a recogniser writes them ("oh" and "o" for zero).
DIGIT_WORDS = {"zero": "0", "oh": "0", "o": "0", "one": "1", "two": "2", "three": "3",
               "four": "4", "five": "5", "six": "6", "seven": "7", "eight": "8", "nine": "9"}
_DIGIT_WORDS = DIGIT_WORDS
_TOKEN = re.compile(r"\d+|[a-z]+(?:'[a-z]+)?")


class NumberFormat(BaseModel):
    """A kind of number callers read out: the words that announce it and its groupings."""

    model_config = ConfigDict(extra="forbid")
    name: str
    context: tuple[str, ...] = Field(description="words or phrases that announce it (lower case)")
    groupings: tuple[tuple[int, ...], ...] = Field(min_length=1, description="digit groups, "
                                                   "e.g. (3, 3, 4) for a US phone number")
    bare: bool = Field(True, description="expected without a context word too")

    def lengths(self) -> set[int]:
        return {sum(g) for g in self.groupings}


class NumberPolicy(BaseModel):
    """The number formats the turn-taking expects (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")
    group_pause_ms: float = Field(700, ge=0, description="a pause at least this long inside a "
                                  "number read out marks the end of a digit group")
    formats: tuple[NumberFormat, ...] = (
        NumberFormat(name="order", context=("order", "orders", "order number", "tracking"),
                     groupings=((4,),)),
        NumberFormat(name="appointment", context=("appointment", "booking"), groupings=((3,),),
                     bare=False),
        NumberFormat(name="phone", context=("phone", "telephone", "cell", "mobile", "call me",
                                            "reach me", "callback", "phone number"),
                     groupings=((3, 4), (3, 3, 4), (1, 3, 3, 4))),
        NumberFormat(name="card", context=("card", "credit card", "debit card", "card number"),
                     groupings=((4, 4, 4, 4), (4, 6, 5))),
        NumberFormat(name="zip", context=("zip", "zip code", "postcode", "postal code"),
                     groupings=((5,),), bare=False),
    )


@dataclass(frozen=True, slots=True)
class TrailingNumber:
    """The digits a transcript ends with: ``digits`` as a string, ``groups`` their sizes as
    written (all 1 when read digit by digit), ``before`` the words that precede them."""

    digits: str
    groups: tuple[int, ...]
    before: tuple[str, ...]


def trailing_number(text: str) -> TrailingNumber | None:
    """The number ``text`` ends with (ignoring trailing punctuation), or None."""
    tokens = _TOKEN.findall(text.lower())
    groups: list[str] = []
    real = False  # a digit other than "oh"/"o" ("Oh." alone is not a number)
    i = len(tokens)
    while i > 0:
        tok = tokens[i - 1]
        if tok.isdigit() or tok in _DIGIT_WORDS:
            groups.append(tok if tok.isdigit() else _DIGIT_WORDS[tok])
            real = real or tok not in ("oh", "o")
        else:
            break
        i -= 1
    if not real:
        return None
    groups.reverse()
    return TrailingNumber("".join(groups), tuple(len(g) for g in groups), tuple(tokens[:i]))


def _format_for(words: tuple[str, ...], policy: NumberPolicy) -> NumberFormat | None:
    """The format announced by the context word nearest the end of ``words``."""
    best: tuple[int, int, NumberFormat] | None = None  # (end position, phrase length, format)
    for fmt in policy.formats:
        for phrase in fmt.context:
            ph = tuple(phrase.split())
            n = len(ph)
            for end in range(len(words), n - 1, -1):
                if words[end - n:end] == ph:
                    key = (end, n, fmt)
                    if best is None or key[:2] > best[:2]:
                        best = key
                    break
    return best[2] if best else None


def _groups(num: TrailingNumber, pauses: tuple[int, ...]) -> tuple[int, ...] | None:
    """The caller's digit groups: from the pauses when they fit the digits, else as written;
    None when neither shows a grouping (digits one by one, or one group)."""
    n = len(num.digits)
    marks = [p for p in pauses if 0 < p < n]
    if marks and all(a < b for a, b in zip(marks, marks[1:])):
        cuts = [0, *marks, n]
        return tuple(b - a for a, b in zip(cuts, cuts[1:]))
    if len(num.groups) >= 2 and any(size > 1 for size in num.groups):
        return num.groups
    return None


def number_open(text: str, context: str = "", policy: NumberPolicy | None = None,
                pauses: tuple[int, ...] = ()) -> bool:
    """True when ``text`` (a caller's transcript so far) ends in a number still being read out.

    ``context`` is what the agent last said (it may announce the number: "your phone number?");
    ``pauses`` how many digits the number had at each earlier long pause of this turn.
    """
    num = trailing_number(text)
    if num is None:
        return False
    policy = policy or NumberPolicy()
    fmt = _format_for(num.before, policy)
    if fmt is None and context:
        fmt = _format_for(tuple(_TOKEN.findall(context.lower())), policy)
    formats = (fmt,) if fmt is not None else tuple(f for f in policy.formats if f.bare)
    groupings = [g for f in formats for g in f.groupings]
    n = len(num.digits)
    if not groupings or n >= max(sum(g) for g in groupings):
        return False
    # the caller's grouping is known: a proper prefix of a longer grouping (415 555 of
    # 415 555 0101) waits for the rest, and so does a group still being read (415 862 3 of
    # 415 862 3079: seven digits, but not the 3-4 of a local number)
    groups = _groups(num, pauses)
    if groups is not None:
        k, last = len(groups), groups[-1]
        if any(len(g) >= k and g[:k - 1] == groups[:-1]
               and (last < g[k - 1] or (last == g[k - 1] and len(g) > k)) for g in groupings):
            return True
    return n not in {sum(g) for g in groupings}


def asks_for_number(agent_said: str, policy: NumberPolicy | None = None) -> bool:
    """Whether ``agent_said`` (the agent's last words) ends with a question asking for a kind of
    number: its last sentence ends in "?", names a format's context word and says "number",
    "code" or "digits" ("Can you please provide the order number?", "What's your zip code?";
    not "Which appointment would you like to move?" nor "Order 4217 shipped on Friday.")."""
    sentences = [x for x in re.split(r"(?<=[.!?])\s+", agent_said.strip()) if x]
    if not sentences or not sentences[-1].endswith("?"):
        return False
    words = tuple(_TOKEN.findall(sentences[-1].lower()))
    if not {"number", "code", "digits"} & set(words):
        return False
    return _format_for(words, policy or NumberPolicy()) is not None


def announces_number(text: str, policy: NumberPolicy | None = None) -> bool:
    """Whether ``text`` (a caller's transcript so far) ends by naming a kind of number that has
    not been read yet: "Telephone number", "and my order number" — the digits come next.
    A format's context word among the last four words and a last word "number", "code" or
    "digits", with no punctuation after it, or a full stop after a phrase of at most three
    words ("Telephone number.", "My order number."; Whisper ends a phrase with a full stop at
    the caller's pause; words as written, so Whisper's "Call-a-phone number." for "Telephone
    number" is two); "I lost my order number." ends a sentence, and a question mark a
    question: not this."""
    t = text.strip()
    if not t or t[-1] in "?!":
        return False
    words = tuple(_TOKEN.findall(t.lower()))
    if not words or (t[-1] == "." and len(t.split()) > 3):
        return False
    return (words[-1] in ("number", "code", "digits")
            and _format_for(words[-4:], policy or NumberPolicy()) is not None)


def read_digit_by_digit(text: str) -> bool:
    """True when ``text`` ends in a number written one digit per word, at least two of them
    ("3, 3, 8, 8", "four two one seven"): a number read out, not said as one ("4217")."""
    num = trailing_number(text)
    return num is not None and len(num.groups) >= 2 and all(g == 1 for g in num.groups)


def dictated_digits(text: str) -> int:
    """How many digits ``text`` ends with (0 when it does not end in a number)."""
    num = trailing_number(text)
    return len(num.digits) if num else 0
