"""Keep calibration and test apart: the caller utterances of a held-out suite must not be (nearly)
the utterances a tool decision was tuned or calibrated on.

Calibration utterances are whatever a gate or a prompt could have been fitted to: the ``examples``
of the agent's tools (``Tool.examples``) and the items of ``bench/tool_choice.py`` (the caller
turns used to choose the tool mode, schemas and worked examples). A held-out scenario's caller
utterances are the words of each caller turn — its ``say:`` text and the words of its Asterisk
prompts (:data:`PROMPT_WORDS`) joined — each ``say:`` segment alone, and each sentence of three
words or more in it (a calibration sentence pasted into a longer turn is still a copy).

Two utterances are *near* when, normalised (lower case, punctuation dropped), their word-level
edit distance divided by the longer one's length is below ``max_wer`` (0.3 by default; jiwer's
word error rate with the longer utterance as reference). That catches a copied utterance with a
word or two changed ("Can you check order 4217?" / "Can you check order 2459?" is 0.2 apart),
not a request for the same thing in other words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from ..scenario import CallerTurn, Scenario

#: The words of the Asterisk prompts the bundled suites play (Debian
#: asterisk-core-sounds-en's core-sounds-en.txt); ``digits/N`` is N and ``digits/day-N`` a weekday.
PROMPT_WORDS = {
    "hello": "hello", "auth-thankyou": "thank you", "privacy-thankyou": "thank you",
    "queue-thankyou": "thank you for your patience", "goodbye": "goodbye", "vm-goodbye": "goodbye",
    "number": "number", "telephone-number": "telephone number", "vm-no": "no", "im-sorry": "i'm sorry",
    "digits/oh": "oh", "digits/tomorrow": "tomorrow", "digits/today": "today", "letters/m": "m",
}
MIN_SENTENCE_WORDS = 3  # a sentence this long inside a turn is an utterance of its own
_DAYS = ("sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday")


def prompt_words(name: str) -> str | None:
    """The words an Asterisk prompt says, or None when this module does not know them."""
    if name in PROMPT_WORDS:
        return PROMPT_WORDS[name]
    m = re.fullmatch(r"digits/(\d+)", name)
    if m:
        return m.group(1)
    m = re.fullmatch(r"digits/day-([0-6])", name)
    return _DAYS[int(m.group(1))] if m else None


def normalise(text: str) -> str:
    """Lower case, punctuation dropped (apostrophes too), digits read one by one joined
    ("4, 2, 1, 7" → "4217"), single spaces."""
    out: list[str] = []
    for w in re.findall(r"[a-z0-9]+", text.lower().replace("'", "")):
        if len(w) == 1 and w.isdigit() and out and out[-1].isdigit():
            out[-1] += w
        else:
            out.append(w)
    return " ".join(out)


def turn_words(turn: CallerTurn) -> str:
    """The words a caller turn says: its ``say:`` text and, in a request, the words of its known
    Asterisk prompts, in order ("" for noise, babble, silence or unknown recordings)."""
    parts = []
    for seg in turn.audio:
        if seg.say:
            parts.append(seg.say)
        elif seg.asterisk and turn.kind == "request":
            words = prompt_words(seg.asterisk)
            if words:
                parts.append(words)
    return " ".join(parts)


def caller_utterances(sc: Scenario) -> list[str]:
    """Each caller turn's words (``say:`` text and known prompt words, in order), then each
    ``say:`` segment on its own, then each of its sentences of at least
    :data:`MIN_SENTENCE_WORDS` words; turns of noise, babble or silence give nothing."""
    turns = [w for w in map(turn_words, sc.turns) if w]
    says = [seg.say for turn in sc.turns for seg in turn.audio if seg.say]
    sentences = [x.strip() for say in says for x in re.split(r"(?<=[.?!])\s+", say)
                 if len(normalise(x).split()) >= MIN_SENTENCE_WORDS]
    return list(dict.fromkeys(u for u in turns + says + sentences if normalise(u)))


def distance(a: str, b: str) -> float:
    """Word edit distance of the normalised utterances over the longer one's word count (0 = the
    same words; 1 = nothing in common)."""
    import jiwer

    na, nb = normalise(a), normalise(b)
    if not na or not nb:
        return 0.0 if na == nb else 1.0
    ref, hyp = (na, nb) if len(na.split()) >= len(nb.split()) else (nb, na)
    return float(jiwer.wer(ref, hyp))


@dataclass(frozen=True)
class Overlap:
    scenario: str
    utterance: str
    calibration: str
    source: str
    distance: float

    def __str__(self) -> str:
        return (f"{self.scenario}: {self.utterance!r} is {self.distance:.2f} from the calibration "
                f"utterance {self.calibration!r} ({self.source})")


def overlaps(scenarios: Iterable[Scenario], calibration: dict[str, Iterable[str]],
             max_wer: float = 0.3) -> list[Overlap]:
    """Every (held-out utterance, calibration utterance) pair nearer than ``max_wer``;
    ``calibration`` maps a source name ("tool examples", "bench/tool_choice.py") to utterances."""
    calib = [(src, u) for src, us in calibration.items() for u in us]
    out = []
    for sc in scenarios:
        for u in caller_utterances(sc):
            for src, c in calib:
                d = distance(u, c)
                if d < max_wer:
                    out.append(Overlap(sc.name, u, c, src, round(d, 3)))
    return out
