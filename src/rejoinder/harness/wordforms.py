"""Word forms for matching what a caller heard against what a scenario expects: normalised words,
digits read one by one joined back into numbers, and the ways a TTS may say a number (num2words).
Shared by :mod:`.expect` and :mod:`.answers`."""

from __future__ import annotations

import re


def _words(text: str) -> str:
    return " " + " ".join(re.findall(r"[a-z0-9']+", text.lower().replace("-", " "))) + " "


def _digit_runs(words: str) -> str:
    """``" 4 2 1 7 "`` → ``" 4217 "``: a transcript may write a number read digit by digit with
    spaces or dashes (Whisper: "4-2-1-7"); joined, it matches the number as written."""
    return re.sub(r"(?<= )(\d)(?: (\d)(?= ))+", lambda m: m.group(0).replace(" ", ""), words)


def _spoken_forms(words: str) -> list[str]:
    """``words`` as written and as a TTS may say its numbers: "5031" is also "five thousand and
    thirty one", "fifty thirty one" and "five zero three one" / "five oh three one" (num2words)."""
    from num2words import num2words

    forms = [words]
    nums = re.findall(r"\d+", words)
    if not nums or len(nums) > 3:
        return forms
    variants: list[list[str]] = []
    for n in nums:
        opts = [n, num2words(int(n)), num2words(int(n)).replace(" and ", " "),
                " ".join(num2words(int(d)) for d in n), " ".join("oh" if d == "0" else num2words(int(d)) for d in n)]
        if 1000 <= int(n) <= 9999:
            opts.append(num2words(int(n), to="year"))
        variants.append(opts)
    out = [words]
    for i, n in enumerate(nums):
        out = [re.sub(rf"\b{n}\b", alt, w, count=1) for w in out for alt in variants[i]]
    return list(dict.fromkeys(out))
