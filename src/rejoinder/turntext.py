"""Judging a caller turn's text for turn-taking: pure functions, no I/O and no clock.

The session transcribes the turn at each pause (speculatively) and hands the transcript here;
what comes back is a :class:`TextVerdict` that the turn state machine
(:meth:`rejoinder.turns.TurnTaker.transcript_result`) and the preemptive LLM draft act on:

* **a number still being read out** (:func:`number_still_open`): the transcript ends in digits of
  an expected format not yet complete (:func:`rejoinder.dictation.number_open`), with the
  agent's last words as context ("your phone number?") and the digit groups the caller read at
  the turn's earlier long pauses (a phone number read 3-3-4 however the STT writes the digits).
  The turn then gets the digit hold (``TurnPolicy.digit_hold_ms``) instead of a reply.
  A transcript with *fewer* words than the last one that held, over more speech, keeps holding:
  the recogniser dropped digits it had written before, the caller did not take them back;
* **noise** (:func:`rejoinder.sounds.noise_verdict`): a whole turn that is a low-confidence
  hallucination on background sound is rejected, never answered;
* **how the text reads** (:func:`rejoinder.completeness.read_transcript`): complete, dangling
  ("and", "my", a lead-in alone such as "Actually", or a number named but not yet read:
  "Telephone number", :func:`rejoinder.dictation.announces_number`), a question, a whole
  number of three digits or more (decisive after a full stop; read digit by digit without one,
  "3, 3, 8, 8", complete words the end-of-turn model may still veto).

:func:`digit_group` says when speech resuming after a long pause closes a digit group.
:func:`lost_ending` says when the transcript of a longer stretch of the turn lost the words an
earlier pause's transcript ended with (the session then transcribes the rest on its own).
"""

from __future__ import annotations

from dataclasses import dataclass
from difflib import SequenceMatcher

from .completeness import Reading, read_transcript
from .dictation import (DIGIT_WORDS, announces_number, dictated_digits, number_open,
                        read_digit_by_digit)
from .sounds import Heard, noise_verdict, words
from .turns import State, TurnPolicy

DECISIVE_DIGITS = 3  # a transcript ending in a whole number this long reads as decisive


@dataclass(frozen=True)
class TextVerdict:
    """The judgement of the transcript of one pause of a turn (``end_ms``: the pause's start on
    the call clock, ms; ``heard``: the transcript with the STT's confidence and the voiced time)."""

    end_ms: float
    heard: Heard
    held: bool            # a number is still being read out: the digit hold applies
    noise: str | None     # why the whole turn is noise to ignore, or None (a real turn)
    reading: Reading      # how the text reads (complete, dangling, question, number)

    @property
    def fits(self) -> bool:
        """A draft started on an earlier pause may still answer this transcript (no number
        still open, not noise)."""
        return not self.held and self.noise is None

    @property
    def drafts(self) -> bool:
        """A preemptive LLM draft may start on this transcript: words, no open number, not
        noise, not a dangling ending."""
        return bool(self.heard.text) and self.fits and not self.reading.dangling


def number_still_open(text: str, policy: TurnPolicy, *, agent_said: str = "",
                      pauses: tuple[int, ...] = ()) -> bool:
    """True when ``text`` ends in a number still being read out (``agent_said``: the agent's
    last words, context for what number is asked for; ``pauses``: the digits read at each
    earlier long pause of the turn). Formats from ``policy.numbers``."""
    return number_open(text, agent_said, policy.numbers, pauses)


def number_incomplete(text: str) -> bool:
    """True when ``text`` ends in a number still being read out, with the default number
    formats and no context (:func:`rejoinder.dictation.number_open`)."""
    return number_open(text)


def judge_pause(end_ms: float, heard: Heard, policy: TurnPolicy, *,
                previous: TextVerdict | None = None, agent_said: str = "",
                pauses: tuple[int, ...] = ()) -> TextVerdict:
    """Judge ``heard`` (the transcript of the turn up to the pause at ``end_ms``, stripped).
    ``previous``: the verdict of the turn's last pause (None on its first). See the module
    docstring for the rules."""
    text = heard.text
    held = number_still_open(text, policy, agent_said=agent_said, pauses=pauses)
    if (not held and previous is not None and previous.held
            and len(_tokens(text)) < len(_tokens(previous.heard.text))):
        # more speech, fewer words (digits one by one: "415, 8, 6" after "4, 1, 5, 8" is no
        # loss): the STT dropped the digits; keep holding
        held = True
    reading = read_transcript(text, number_open=held,
                              number_complete=not held and dictated_digits(text) >= DECISIVE_DIGITS,
                              announced=announces_number(text, policy.numbers),
                              read_out=read_digit_by_digit(text))
    return TextVerdict(end_ms, heard, held, noise_verdict(heard, policy.sounds), reading)


def digit_group(last: TextVerdict | None, onset_ms: float, *, state: State, last_voiced_ms: float,
                policy: TurnPolicy) -> int:
    """How many digits close a group when the caller's speech resumes at ``onset_ms`` (0: none).

    A group closes when the turn was paused (``state`` user-paused or thinking), ``last`` is the
    verdict of that very pause (its ``end_ms`` is ``last_voiced_ms``, the turn's last voiced
    sample) and the pause lasted at least ``policy.numbers.group_pause_ms``: the digits that
    transcript ends with are the group."""
    if last is None or state not in (State.USER_PAUSED, State.THINKING):
        return 0
    if last.end_ms != last_voiced_ms or onset_ms - last_voiced_ms < policy.numbers.group_pause_ms:
        return 0
    return dictated_digits(last.heard.text)


def _tokens(text: str) -> list[str]:
    """``text``'s words with every digit its own token ("4217" and "four, two, one, seven" are
    both four tokens), so a number written as one run is not fewer words than read digit by digit."""
    out: list[str] = []
    for w in words(text):
        if w.isdigit():
            out.extend(w)
        else:
            out.append(DIGIT_WORDS.get(w, w))
    return out


def lost_ending(earlier: str, later: str) -> bool:
    """True when ``later`` (the transcript of the turn up to a later pause: more audio) lacks the
    words ``earlier`` (up to an earlier pause) ended with: aligned word by word (digits one by
    one, digit words as digits), ``earlier``'s last words match nothing in ``later`` and
    ``later`` is shorter.

    Whisper ends a segment early after a trailing ellipsis: measured in this repository's
    stored suite runs (2026-12-04, Whisper base, 1,141 turns), 20 final transcripts had fewer
    words than the turn's previous pause had, most of them digits read after a pause ("Yeah,
    it's... 5, 0, 3." at one pause, "Yeah, it's..." over the whole turn a second later). A
    transcript that only spells a number differently ("4158623079" after "4, 1, 5, 8, 6, 2,
    3, 0.") or replaces the last words ("o'clock" for "of claim") has lost nothing."""
    a, b = _tokens(earlier), _tokens(later)
    if not a or len(b) >= len(a):
        return False
    ops = SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    tag, _, i2, j1, _ = ops[-1]
    return tag == "delete" and i2 == len(a) and j1 == len(b)
