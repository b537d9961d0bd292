"""What a caller sound was: a backchannel, a noise, a hallucination, or a real turn.

Two decisions are made here, both from what the recogniser heard (:class:`Heard`: the transcript,
its voiced duration and the model's confidence) and never from a word list alone:

* **Short sound over the agent** (:func:`overlap_verdict`). Caller sound while the agent is
  audible holds its audio at once; when the sound ends before ``barge_in_ms`` of voiced speech,
  this says whether the reply *resumes* where it paused or the sound was a *barge-in*. In order:

  1. an explicit barge-in word (``barge_in_words``: "no", "stop", "wait", …) → ``barge_in``,
     however short or unsure;
  2. no lexical content — empty, punctuation, a bracketed tag, fillers and lone letters such as
     "M.", "Hmm", "uh" (:func:`is_filler`) → resume, ``non_speech``;
  3. only backchannel phrases ("uh-huh", "yeah", "right"; ``TurnPolicy.backchannels``) →
     resume, ``backchannel``;
  4. Whisper's own silence rule, ``no_speech_prob > no_speech_prob`` and ``avg_logprob <
     unclear_logprob`` → resume, ``non_speech``;
  5. only digits ("6.", "Four, two."; "oh" among them, not alone) → ``barge_in``: a caller
     reading a number over the agent is taking the turn, and a digit resumed over is a digit
     lost (a blind-suite caller's "6." over the reply was resumed over as ``unclear`` and her
     order number heard as "5, 8", run ``20261205-215427-1db5``);
  6. at most ``unclear_max_words`` words and either shorter than ``short_sound_ms`` of voiced
     audio (a 0.3 s fragment transcribed as "Order.") or ``avg_logprob < unclear_logprob`` (a
     0.4 s "mm-hmm" transcribed as "Ememson") → resume, ``unclear``;
  7. anything else ("Thursday!", "what about the other one") → ``barge_in``.

* **A whole caller turn that is only a hallucination** (:func:`noise_verdict`). Whisper writes
  words on noise and multi-talker babble ("The" at avg log-prob ≈ -3; "Call for a day." at
  -2.0; "All right." at -1.0 with no-speech probability 0.56, on babble 35–45 dB below full
  scale). Such a turn gets no reply and is recorded as rejected noise: no lexical words at all
  (``no_words``); Whisper's silence rule (``no_speech``); a repetitive decode, compression ratio
  above ``noise_compression_ratio`` (``repetitive``); ``avg_logprob < noise_logprob`` at any
  length — Whisper itself treats such a decode as failed (``low_confidence``); or, for at most
  ``noise_max_words`` words, ``avg_logprob < unsure_logprob`` with ``no_speech_prob >
  unsure_no_speech_prob`` (``unsure``); or a *quiet* turn (speech level under ``quiet_dbfs``, as
  background voices are) with ``avg_logprob < quiet_logprob`` (``quiet_unsure``: "Set your
  order." at -0.97 on babble 40 dB down; "Order numbers.", words of the recogniser's own
  prompt, at -0.67 and -41.8 dBFS on a 2-core AMD EPYC box, where the same turn had stayed
  under the -0.7 of ``unsure_logprob`` on the boxes it was first measured on; that box decodes
  the real short answers 40 dB down at -0.10 to -0.36). Real answers ("Yes.", "No.",
  "Thank you.", a digit, a sentence) decode at ≥ -0.7 with no-speech probability ≤ 0.25, even
  40 dB below full scale, so they pass. A *clear* voice in the background is speech, not a hallucination: it is answered.

Sources of the thresholds: OpenAI Whisper ``transcribe.py`` (``no_speech_threshold=0.6``,
``logprob_threshold=-1.0``, ``compression_ratio_threshold=2.4``; also faster-whisper's
defaults); the figures above were measured with Whisper base (int8) on the Asterisk prompts,
LibriVox fragments and babble mixtures (``bench/sounds.py`` prints them).
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from .dictation import DIGIT_WORDS

# lone letters (not "a"/"i"), hums and hesitation sounds: "m", "mm", "hmm", "mhm", "uh", "um", "er"
_FILLER = re.compile(r"^(?:[hm]+|u+[hm]+|a+h+|e+r+m?|[b-hj-z])$")
_TAG = re.compile(r"[\[(][^\])]*[\])]")  # "[Music]", "(coughs)"


class SoundPolicy(BaseModel):
    """Thresholds for telling backchannels, noise and hallucinations from real turns."""

    model_config = ConfigDict(extra="forbid")

    short_sound_ms: float = Field(400, ge=0, description="voiced time (ms) under which a sound of "
                                  "at most unclear_max_words words over the agent is not a turn")
    unclear_logprob: float = Field(-1.0, le=0, description="average log-probability under which a "
                                   "short transcript over the agent is not trusted")
    unclear_max_words: int = Field(2, ge=0, description="most words a sound over the agent may "
                                   "have and still be ignored as unclear")
    no_speech_prob: float = Field(0.6, ge=0, le=1, description="Whisper's no-speech threshold")
    barge_in_words: tuple[str, ...] = Field(
        ("no", "stop", "wait", "hold on", "hang on", "sorry", "excuse me", "pardon", "what",
         "actually", "but", "cancel"),
        description="words that always take the turn, however short or unsure")
    reject_noise: bool = Field(True, description="give no reply to a turn that is only a "
                               "low-confidence hallucination (recorded as rejected noise)")
    noise_logprob: float = Field(-1.0, le=0, description="average log-probability under which a "
                                 "caller turn is a hallucination, at any length")
    noise_max_words: int = Field(3, ge=0, description="most words of a short turn judged 'unsure'")
    unsure_logprob: float = Field(-0.7, le=0, description="a short turn under this average "
                                  "log-probability and over unsure_no_speech_prob is a hallucination")
    unsure_no_speech_prob: float = Field(0.3, ge=0, le=1)
    quiet_dbfs: float = Field(-35.0, le=0, description="speech level (RMS dBFS over the turn) "
                              "under which a turn must decode at quiet_logprob or better")
    quiet_logprob: float = Field(-0.6, le=0, description="the average log-probability a quiet "
                                 "turn (under quiet_dbfs) must reach to be speech")
    noise_compression_ratio: float = Field(2.4, gt=0, description="a decode more repetitive than "
                                           "this (zlib compression ratio) is a hallucination")


@dataclass(frozen=True, slots=True)
class Heard:
    """What the recogniser made of one caller sound. ``duration_ms``: voiced time (VAD onset to
    last voiced sample); ``no_speech_prob`` / ``avg_logprob``: the STT's confidence, None when
    the recogniser does not report it."""

    text: str
    duration_ms: float
    no_speech_prob: float | None = None
    avg_logprob: float | None = None
    level_dbfs: float | None = None  # RMS level of the sound (dB below full scale)

    def as_dict(self) -> dict:
        return {"text": self.text, "duration_ms": round(self.duration_ms, 1),
                "no_speech_prob": _r(self.no_speech_prob), "avg_logprob": _r(self.avg_logprob),
                "level_dbfs": _r(self.level_dbfs)}


def _r(x: float | None) -> float | None:
    return None if x is None else round(float(x), 3)


def words(text: str) -> list[str]:
    """Lower-case words of ``text``, hyphens split ("uh-huh" → "uh", "huh"), tags removed."""
    return re.findall(r"[a-z0-9']+", _TAG.sub(" ", text.lower()).replace("-", " "))


def is_digit(word: str) -> bool:
    """True for digits ("6", "4217") and digit words but "oh"/"o" ("four", "zero")."""
    return word.isdigit() or (word in DIGIT_WORDS and word not in ("oh", "o"))


def is_filler(word: str) -> bool:
    """True for a hum, hesitation or lone letter ("m", "hmm", "mhm", "uh", "um", "er", "x")."""
    return bool(_FILLER.match(word))


def only_phrases(ws: list[str], phrases: tuple[str, ...]) -> bool:
    """True when ``ws`` is made only of ``phrases`` (matched word by word, longest first)."""
    pats = sorted((words(p) for p in phrases), key=len, reverse=True)
    i = 0
    while i < len(ws):
        for ph in pats:
            if ph and ws[i:i + len(ph)] == ph:
                i += len(ph)
                break
        else:
            return False
    return True


def _contains_phrase(ws: list[str], phrases: tuple[str, ...]) -> bool:
    for p in phrases:
        ph = words(p)
        if ph and any(ws[i:i + len(ph)] == ph for i in range(len(ws) - len(ph) + 1)):
            return True
    return False


def _whisper_silence(h: Heard, policy: SoundPolicy) -> bool:
    return (h.no_speech_prob is not None and h.avg_logprob is not None
            and h.no_speech_prob > policy.no_speech_prob and h.avg_logprob < policy.unclear_logprob)


def overlap_verdict(h: Heard, backchannels: tuple[str, ...], policy: SoundPolicy) -> str:
    """Verdict on a short sound the caller made over the agent (see the module docstring):
    ``"barge_in"``, or why the reply resumes: ``"non_speech"``, ``"backchannel"``, ``"unclear"``."""
    ws = words(h.text)
    if _contains_phrase(ws, policy.barge_in_words):
        return "barge_in"
    lexical = [w for w in ws if not is_filler(w)]
    if not lexical:
        return "non_speech"
    if only_phrases(ws, backchannels):
        return "backchannel"
    if _whisper_silence(h, policy):
        return "non_speech"
    if any(map(is_digit, lexical)) and all(is_digit(w) or w in ("oh", "o") for w in lexical):
        return "barge_in"  # digits read out ("6.", "Four, two.")
    if len(lexical) <= policy.unclear_max_words:
        if h.duration_ms < policy.short_sound_ms:
            return "unclear"
        if h.avg_logprob is not None and h.avg_logprob < policy.unclear_logprob:
            return "unclear"
    return "barge_in"


def compression_ratio(text: str) -> float:
    """len(text) / len(zlib(text)) in UTF-8 bytes, as Whisper measures repetitive decodes."""
    raw = text.encode("utf-8")
    return len(raw) / len(zlib.compress(raw)) if raw else 0.0


def noise_verdict(h: Heard, policy: SoundPolicy) -> str | None:
    """Why a whole caller turn is noise to ignore (``"no_words"``, ``"no_speech"``,
    ``"repetitive"``, ``"low_confidence"``, ``"unsure"``), or None for a real turn that gets a
    reply (see the module docstring)."""
    if not policy.reject_noise:
        return None
    ws = words(h.text)
    if not ws:
        return "no_words"
    if _whisper_silence(h, policy):
        return "no_speech"
    if compression_ratio(h.text) > policy.noise_compression_ratio:
        return "repetitive"
    if h.avg_logprob is None:
        return None
    if h.avg_logprob < policy.noise_logprob:
        return "low_confidence"
    if (len(ws) <= policy.noise_max_words and h.avg_logprob < policy.unsure_logprob
            and h.no_speech_prob is not None and h.no_speech_prob > policy.unsure_no_speech_prob):
        return "unsure"
    if h.level_dbfs is not None and h.level_dbfs < policy.quiet_dbfs and h.avg_logprob < policy.quiet_logprob:
        return "quiet_unsure"
    return None


def level_dbfs(x) -> float:
    """RMS level of float audio (full scale 1.0) in dBFS; -120 for silence."""
    import numpy as np
    ms = float(np.mean(np.square(x, dtype=np.float64))) if len(x) else 0.0
    return 10.0 * np.log10(ms) if ms > 1e-12 else -120.0
