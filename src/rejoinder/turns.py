"""Turn-taking: a pure, clock-driven state machine (listening / thinking / speaking).

It holds no I/O and no timers of its own: the session feeds it observations stamped with the call
clock and performs the :class:`Action` objects it returns, so scripted timelines drive it in tests
with exact times.

States::

    LISTENING ──onset──▶ USER_SPEAKING ──pause──▶ USER_PAUSED ──eot/timeout──▶ THINKING
        ▲                      ▲  └──────────onset────────┘                   │   │
        │                      └──────────────onset (reopen, same turn)───────┘   │ agent audio
        └────────────── agent done ────── SPEAKING ◀───────────────────────────────┘
                                             │ onset (≥ barge_in_ms voiced) ──▶ barge-in, new turn

Policy (defaults in :class:`TurnPolicy`):

* The *first short pause* is ``early_pause_ms`` (96 ms) of VAD silence after speech. On it the
  session transcribes the turn so far (speculatively) and asks the end-of-turn model, so both
  answers come 64 ms sooner than at a 160 ms pause. (The VAD's own hangover, Silero's
  probability decaying after the last word, comes on top: the harness measures from the caller's
  last voiced sample.)
* The turn is committed (:meth:`TurnTaker._settle`), strongest evidence first:

  - the end-of-turn model's probability ≥ ``eot_confident`` (0.9): at once, at the short pause;
    ≥ ``eot_threshold`` (0.5): once the silence reaches ``pause_ms`` (160 ms) or the transcript
    reads complete (``"model"``) — in both cases only once this pause's transcript has come (or
    the silence has reached ``text_wait_ms``, 500 ms: a late STT), so that its words can still
    say the caller is not done: Smart Turn was 0.97 sure after "Actually," and the caller's
    "what about my other order?" began 64 ms before the transcript took that commit back, a
    false cut-off on the metric. The reply needs the transcript anyway, so the wait costs no
    V2V; the STT's time then shows inside ``endpointing``. Never on the model alone while the
    turn's last transcript ended in a number still being read out (:mod:`rejoinder.dictation`),
    nor before the first transcript of a turn that answers the agent's question for a number
    ("What's the order number?": Smart Turn was 0.95 sure at the pause after the first digit
    of "8 8 1 4");
  - the speculative transcript reads complete (terminal punctuation, a closed phrase; not a
    trailing "and"/"the", not mid-number: :mod:`rejoinder.completeness`) and the model's
    probability ≥ ``eot_text_threshold``, or the transcript is *decisive* (ends with a question
    mark or a whole number of an expected format), or the silence has reached ``pause_ms`` and
    the model has not answered yet (it runs beside the STT and may come later on a loaded CPU)
    — a complete transcript is then not held back by the model (``"model+transcript"`` /
    ``"transcript"``); only a model verdict below ``eot_text_threshold`` vetoes it;
  - otherwise after ``silence_timeout_ms`` of silence (the fallback recommended for Smart Turn,
    which calls many mid-sentence pauses complete on read speech — MODELS.md), or
    ``digit_hold_ms`` when the transcript ends in a number still being read out — or when this
    pause's transcript has not come yet and the turn's last one did (a slow STT on a loaded CPU
    must not turn the digit hold into the shorter timeout).

  A commit made on the model alone (the STT later than ``text_wait_ms``) is taken back when the
  transcript then shows the caller is not done (a *dangling* ending such as "and" or "my", or an
  open number): the reply waits for the transcript, so nothing has been said yet.
* Speech that resumes before the reply is audible reopens the *same* turn (its reply is cancelled):
  two transcripts close together get one reply, never two. So does speech while only a filler
  of the reply has played ("One moment." before a tool round, :class:`rejoinder.reply.FillerPolicy`):
  a filler is not the answer, and the caller who paused after "Yeah." and goes on "please do,
  there's no way round it" within ``filler_reopen_ms`` (1 s) of their last word is still saying
  their turn (the tools it ran are kept, :class:`rejoinder.turnrun.TurnRun`). Later speech, and
  any once the answer's own words are audible, is a hold and maybe a barge-in, below.
  The same hold applies to a number still being read out in any grouping (a 3-3-4 phone number
  with 1 s pauses; :mod:`rejoinder.dictation`) as soon as the speculative transcript shows it —
  taking back a commit already made while the reply is not yet audible — and never to a turn
  that ends in a complete number ("order 4217").
* Caller speech while the agent is audible *holds* the agent's audio at once (it stops at the
  caller within a VAD window). ``barge_in_ms`` of voiced speech confirms a barge-in: the reply is
  cut and a new turn opens at the onset. Shorter speech is transcribed when it ends and judged on
  its duration, the recogniser's confidence and its words together
  (:func:`rejoinder.sounds.overlap_verdict`): a backchannel ("uh-huh", "mm-hmm" heard as "M."),
  a noise or an unclear fragment resumes the reply exactly where it stopped and triggers no LLM
  call; anything else ("no", "stop", "Thursday!") is a barge-in.
* A caller turn that is only a low-confidence hallucination ("The" on background babble;
  :func:`rejoinder.sounds.noise_verdict`) is *rejected*: no reply, recorded as rejected noise.
* Idle (``idle``, off by default): ``idle.reprompt_ms`` after the agent's last audio finished
  *playing at the caller* (or after the caller's last sound) with no caller speech, the agent
  reprompts ("Are you still there?"); ``idle.hangup_ms`` after that reprompt finished playing it
  says goodbye and ends the call. Both are agent-initiated turns with their own turn id.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .dictation import NumberPolicy
from .sounds import SoundPolicy, only_phrases, words


class State(enum.Enum):
    LISTENING = "listening"
    USER_SPEAKING = "user_speaking"
    USER_PAUSED = "user_paused"
    THINKING = "thinking"
    SPEAKING = "speaking"


_NO_ACTIONS: list = []  # nothing to do (shared: never appended to)


class IdlePolicy(BaseModel):
    """No-input handling (ms); off while ``reprompt_ms`` is None. The timer starts when the
    agent's audio has finished playing at the caller, so it never fires after a long reply."""

    model_config = ConfigDict(extra="forbid")
    reprompt_ms: float | None = Field(None, gt=0, description="caller silence before the reprompt")
    hangup_ms: float | None = Field(None, gt=0, description="further silence after the reprompt "
                                    "before the agent says goodbye and hangs up (None: never)")
    reprompt_text: str = Field("Are you still there?", min_length=1)
    goodbye_text: str = Field("I haven't heard anything, so I'll end the call now. Goodbye!",
                              min_length=1)


class TurnPolicy(BaseModel):
    """Turn-taking thresholds (ms unless stated)."""

    model_config = ConfigDict(extra="forbid")

    vad_threshold: float = Field(0.5, gt=0, lt=1, description="VAD speech probability that starts "
                                 "speech")
    vad_neg_threshold: float = Field(0.35, gt=0, lt=1, description="VAD probability under which a "
                                     "window is silence (hysteresis; ≤ vad_threshold)")
    min_speech_ms: float = Field(64, ge=0, description="voiced time before a VAD onset counts "
                                 "(shorter clicks and bursts are ignored)")
    vad_reset_ms: float | None = Field(1000, gt=0, description="silence after which the VAD "
                                       "model's state is reset (None: never; rejoinder.vad)")
    early_pause_ms: float = Field(96, ge=0, description="VAD silence (the first short pause) at "
                                  "which the turn so far is transcribed and the end-of-turn model "
                                  "asked")
    pause_ms: float = Field(160, ge=0, description="silence after which the end-of-turn model "
                            "alone (p ≥ eot_threshold) ends the turn")
    eot_threshold: float = Field(0.5, ge=0, le=1, description="end-of-turn probability to commit")
    eot_confident: float = Field(0.9, ge=0, le=1, description="end-of-turn probability that ends "
                                 "the turn at the first short pause, without waiting for pause_ms")
    text_wait_ms: float = Field(500, ge=0, description="silence up to which a commit on the "
                                "end-of-turn model alone waits for the pause's transcript, so the "
                                "words can still say the caller is not done (\"Actually,\" at "
                                "p 0.97); after it a late STT no longer holds the model back; "
                                "0: never waits")
    eot_text_threshold: float = Field(0.12, ge=0, le=1, description="lower probability that commits "
                                      "when the speculative transcript also reads as complete")
    silence_timeout_ms: float = Field(900, gt=0, description="silence after which the turn ends anyway")
    digit_hold_ms: float = Field(1400, gt=0, description="silence timeout when the turn ends in a digit")
    dangling_hold_ms: float = Field(1400, gt=0, description="silence timeout when the turn's "
                                    "transcript ends mid-phrase (\"It ought to be\", \"my\": "
                                    "rejoinder.completeness.dangling)")
    barge_in_ms: float = Field(700, ge=0, description="voiced time over the agent that cuts it off "
                               "without waiting for a transcript")
    filler_reopen_ms: float = Field(1000, ge=0, description="caller speech while only a filler of "
                                    "the reply has played, starting at most this long after the "
                                    "caller's last voiced sample, goes on with the same turn "
                                    "(the caller paused mid-utterance); later speech is a "
                                    "barge-in as over any reply; 0: never")
    overlap_join_ms: float = Field(1500, ge=0, description="a short sound the reply resumed over "
                                   "(a backchannel, an unclear word) that ended at most this long "
                                   "before the caller's next turn starts that turn: its words are "
                                   "transcribed with the turn's, never lost")
    backchannels: tuple[str, ...] = Field(
        ("uh-huh", "mm-hmm", "mhm", "hmm", "mm", "huh", "yeah", "yes", "yep", "right", "okay", "ok",
         "sure", "i see", "got it", "alright", "uh", "um", "ah", "oh"),
        description="short utterances that acknowledge without taking the turn")
    promote_interim_ms: float = Field(2500, gt=0, description="commit a turn with only interim text")
    sounds: SoundPolicy = Field(default_factory=SoundPolicy, description="backchannels, noise and "
                                "hallucinations (rejoinder.sounds)")
    numbers: NumberPolicy = Field(default_factory=NumberPolicy, description="numbers callers read "
                                  "out (rejoinder.dictation)")
    idle: IdlePolicy = Field(default_factory=IdlePolicy, description="no-input reprompt and hang-up")

    def merged(self, overrides: dict) -> "TurnPolicy":
        """A copy with ``overrides`` merged over it (nested settings merged key by key), e.g.
        ``{"idle": {"reprompt_ms": 4000}}``. Raises pydantic's ValidationError for a bad key."""
        if not overrides:
            return self

        def merge(a: dict, b: dict) -> dict:
            return {**a, **{k: merge(a[k], v) if isinstance(v, dict) and isinstance(a.get(k), dict)
                            else v for k, v in b.items()}}
        return TurnPolicy.model_validate(merge(self.model_dump(), overrides))

    @model_validator(mode="after")
    def _hysteresis(self) -> "TurnPolicy":
        if self.vad_neg_threshold > self.vad_threshold:
            raise ValueError(f"vad_neg_threshold ({self.vad_neg_threshold}) must not exceed "
                             f"vad_threshold ({self.vad_threshold})")
        if self.early_pause_ms > self.pause_ms:
            raise ValueError(f"early_pause_ms ({self.early_pause_ms}) must not exceed pause_ms "
                             f"({self.pause_ms}): the first short pause comes first")
        return self


@dataclass(frozen=True, slots=True)
class OpenTurn:
    turn_id: int
    onset_ms: float


@dataclass(frozen=True, slots=True)
class Speculate:
    """Transcribe the turn's audio up to ``end_ms`` and run the end-of-turn model on it."""

    turn_id: int
    end_ms: float


@dataclass(frozen=True, slots=True)
class Commit:
    turn_id: int
    reason: str  # "model" | "model+transcript" | "transcript" | "timeout" | "promoted"
    probability: float
    last_voiced_ms: float


@dataclass(frozen=True, slots=True)
class Hold:
    """Caller sound over the agent: stop the agent's audio at once, keep the rest queued."""

    turn_id: int


@dataclass(frozen=True, slots=True)
class Resume:
    """It was a backchannel or noise: resume the held reply where it stopped. ``reason`` is the
    verdict (:func:`rejoinder.sounds.overlap_verdict`)."""

    turn_id: int
    reason: str = "backchannel"


@dataclass(frozen=True, slots=True)
class Reject:
    """The turn was only noise or a hallucination: no reply (``reason`` from
    :func:`rejoinder.sounds.noise_verdict`)."""

    turn_id: int
    reason: str


@dataclass(frozen=True, slots=True)
class Reprompt:
    """The caller has been silent for ``idle.reprompt_ms``: say the reprompt as turn ``turn_id``."""

    turn_id: int


@dataclass(frozen=True, slots=True)
class EndCall:
    """Say goodbye as turn ``turn_id``, then hang up once it has played (``reason``: why)."""

    turn_id: int
    reason: str


@dataclass(frozen=True, slots=True)
class CheckBackchannel:
    """Short caller speech over the agent ended: transcribe it and call
    :meth:`TurnTaker.backchannel_result` (``start_ms``..``end_ms`` on the call clock)."""

    turn_id: int
    start_ms: float
    end_ms: float


@dataclass(frozen=True, slots=True)
class CancelReply:
    turn_id: int
    reason: str  # "reopen" | "barge_in" | "digit_hold" | "incomplete" | "noise"


Action = (OpenTurn | Speculate | Commit | CancelReply | Hold | Resume | CheckBackchannel | Reject
          | Reprompt | EndCall)


def is_backchannel(text: str, policy: "TurnPolicy") -> bool:
    """True when ``text`` (a transcript of short overlapping speech) is empty (noise, a cough) or
    made only of backchannel words such as "uh-huh", "yeah", "right" (``policy.backchannels``),
    matched word by word, longest phrase first. The lexical part of the verdict only: the
    session decides with :func:`rejoinder.sounds.overlap_verdict`, which also weighs the
    sound's duration and the recogniser's confidence."""
    return only_phrases(words(text), policy.backchannels)


class TurnTaker:
    """The turn-taking state machine. Every method takes ``now`` (call clock, ms) and returns
    the actions to perform, in order."""

    def __init__(self, policy: TurnPolicy | None = None) -> None:
        self.policy = policy or TurnPolicy()
        self.state = State.LISTENING
        self.turn_id = 0
        self.last_voiced_ms = 0.0
        self._speech_since: float | None = None  # onset of current speech run (ms)
        self._filler_only = False  # the audible reply has played only a filler so far
        self._eot_prob: float | None = None
        self._ends_in_digit = False
        self._overlap: tuple[float, float] | None = None  # short speech over the agent
        #: (start, end) of the short sounds the reply resumed over, back to back (each within
        #: ``overlap_join_ms`` of the last): the next turn starts at ``start`` if it comes soon
        self._resumed_over: tuple[float, float] | None = None
        self._text_complete = False
        self._decisive = False
        self._text_known = False  # the current pause's transcript has arrived
        self._dangling = False  # ... and it ends mid-phrase ("and", "my", "…")
        self._dictating = False  # the turn's last transcript ended in a number being read out
        #: the agent's last words asked for a number (:func:`rejoinder.dictation.asks_for_number`,
        #: set by the session): the next turn starts as if dictating, so the model alone does
        #: not end it at the first digit's pause before the transcript has shown the number
        self.expect_number = False
        self._commit_reason: str | None = None
        self._noise: str | None = None  # the current pause's transcript is only noise
        self._idle_since: float | None = None  # when the caller's silence started to count
        self._reprompted = False  # a reprompt was said since the caller last took a turn
        self.goodbye_turn: int | None = None  # the turn saying goodbye (the call ends after it)
        idle = self.policy.idle  # the shortest idle wait (ms): no idle action comes sooner
        waits = [w for w in (idle.reprompt_ms, idle.hangup_ms) if w is not None]
        self._idle_soonest = min(waits) if idle.reprompt_ms is not None else math.inf

    # --- observations -------------------------------------------------------------------
    def speech_onset(self, at_ms: float, now: float) -> list[Action]:
        """VAD says the caller started speaking; ``at_ms`` is the first voiced sample."""
        self._speech_since = at_ms
        self._idle_since = None
        if self.state is State.LISTENING:
            return self._open(at_ms)
        if self.state is State.USER_PAUSED:
            self.state = State.USER_SPEAKING
            return []
        if self.state is State.THINKING:
            if self.turn_id == 0:  # the caller spoke before the greeting was heard: drop it
                return [CancelReply(0, "barge_in"), *self._open(at_ms)]
            return self._reopen()
        if self.state is State.SPEAKING:
            if self._goes_on(at_ms):  # no answer heard yet: the caller goes on with the turn
                return self._reopen()
            if self.policy.barge_in_ms <= 0:
                return self._barge_in(at_ms)
            return [Hold(self.turn_id)]
        return []

    def speech_continues(self, now: float) -> list[Action]:
        """Called for each voiced VAD window; confirms a barge-in once long enough."""
        if self.state is State.SPEAKING and self._speech_since is not None and self._goes_on(
                self._speech_since):
            return self._reopen()
        if (self.state is State.SPEAKING and self._speech_since is not None
                and now - self._speech_since >= self.policy.barge_in_ms):
            return self._barge_in(self._speech_since)
        return []

    def speech_pause(self, last_voiced_ms: float, now: float) -> list[Action]:
        """VAD silence reached ``pause_ms``; ``last_voiced_ms`` is the last voiced sample."""
        since, self._speech_since = self._speech_since, None
        if self.state is State.SPEAKING and since is not None:
            self._overlap = (since, last_voiced_ms)
            return [CheckBackchannel(self.turn_id, since, last_voiced_ms)]
        if self.state is not State.USER_SPEAKING:
            return []
        self.state = State.USER_PAUSED
        self.last_voiced_ms = last_voiced_ms
        self._eot_prob = None
        self._text_complete = False
        self._decisive = False
        self._text_known = False
        self._dangling = False
        self._ends_in_digit = False
        self._noise = None
        return [Speculate(self.turn_id, last_voiced_ms)]

    def eot_result(self, turn_id: int, probability: float, now: float) -> list[Action]:
        """The end-of-turn model answered for the current pause of ``turn_id``."""
        if turn_id != self.turn_id or self.state is not State.USER_PAUSED:
            return []
        self._eot_prob = probability
        return self._decide(now)

    def transcript_result(self, turn_id: int, complete: bool, number_open: bool,
                          now: float, question: bool = False, noise: str | None = None,
                          number_complete: bool = False, dangling: bool = False) -> list[Action]:
        """The speculative transcript of the current pause is ready: ``complete`` when it reads
        as a finished utterance (terminal punctuation, or a closed phrase such as "thank you");
        ``number_open`` when it ends in a number still being read out (holds the turn, taking
        back a commit whose reply is not audible yet); ``question`` when it ends with a question
        mark, ``number_complete`` when it ends in a whole number of an expected format ("order
        4217.": Smart Turn hears list intonation in digits read out) — with ``complete``, either
        ends the turn whatever the model says, without waiting for it; ``dangling`` when it ends
        mid-phrase ("… and", "my", an ellipsis: :func:`rejoinder.completeness.read_transcript`)
        — no commit on the model alone, and one made already is taken back; ``noise`` (a reason)
        when the turn so far is only noise or a hallucination: if it ends here, it is rejected
        instead of committed."""
        if turn_id != self.turn_id:
            return []
        if self.state is State.THINKING:  # committed before the transcript came: reconsider
            if noise is not None:
                self.state = State.LISTENING
                return [CancelReply(turn_id, "noise"), Reject(turn_id, noise)]
            if number_open:
                self._dictating = True
                return self.hold_for_digits(turn_id, now)
            if dangling and self._commit_reason == "model" and not self._dangling:
                self.state = State.USER_PAUSED  # the model alone ended it; the words say not yet
                self._dangling = True
                self._text_known = True
                return [CancelReply(turn_id, "incomplete"), *self.tick(now)]
            return []
        if self.state is not State.USER_PAUSED:
            return []
        self._text_known = True
        self._text_complete = complete and not number_open and not dangling
        self._decisive = question or (number_complete and not number_open)
        self._dangling = dangling and not number_open
        self._noise = noise
        self._dictating = number_open
        if number_open:
            self._ends_in_digit = True
        return self._decide(now)

    def _decide(self, now: float) -> list[Action]:
        """Commit when the evidence so far is strong enough (module docstring), else apply the
        silence timeouts."""
        act = self._settle(now)
        return act if act is not None else self._timeouts(now)

    def _settle(self, now: float) -> list[Action] | None:
        if self.state is not State.USER_PAUSED or self._ends_in_digit or self._dangling:
            return None
        pol, p = self.policy, self._eot_prob
        if p is not None and p >= pol.eot_threshold:
            if not self._text_known and (self._dictating
                                         or now - self.last_voiced_ms < pol.text_wait_ms):
                return None  # wait for this pause's transcript: its words may say "not done"
            if (self._text_complete or p >= pol.eot_confident
                    or now - self.last_voiced_ms >= pol.pause_ms):
                return self._commit("model", p)
        if self._text_complete and self._decisive:
            return self._commit("transcript" if p is None else "model+transcript",
                                p if p is not None else 0.0)
        if self._text_complete and p is not None and p >= pol.eot_text_threshold:
            return self._commit("model+transcript", p)
        if self._text_complete and p is None and now - self.last_voiced_ms >= pol.pause_ms:
            return self._commit("transcript", 0.0)  # complete words, the model is late: go
        return None

    def _model_wait(self) -> float | None:
        """When the model's pending verdict commits by itself (end of ``pause_ms``, or of
        ``text_wait_ms`` while this pause's transcript has not come), or None."""
        p, pol = self._eot_prob, self.policy
        if (self.state is State.USER_PAUSED and p is not None and p >= pol.eot_threshold
                and not self._ends_in_digit and not self._dangling
                and not (self._dictating and not self._text_known)):
            wait = pol.pause_ms if self._text_known else max(pol.pause_ms, pol.text_wait_ms)
            return self.last_voiced_ms + wait
        return None

    def hold_for_digits(self, turn_id: int, now: float) -> list[Action]:
        """The committed turn's transcript ends in a digit (a number being read out): take the
        commit back and wait up to ``digit_hold_ms`` of silence, unless speech resumes first."""
        if turn_id != self.turn_id or self.state is not State.THINKING or self._ends_in_digit:
            return []
        self.state = State.USER_PAUSED
        self._ends_in_digit = True
        return [CancelReply(turn_id, "digit_hold"), *self.tick(now)]

    def tick(self, now: float) -> list[Action]:
        """Time passes: the model's verdict after ``pause_ms``, the silence timeout, and the idle
        reprompt / hang-up. Called every frame: with nothing to do it returns a shared empty
        list (never append to a result)."""
        state = self.state
        if state is State.USER_PAUSED:
            wait = self._model_wait()
            if wait is not None and now >= wait:
                return self._decide(now)
            return self._timeouts(now)
        if state is State.LISTENING and self._speech_since is None:
            since = self._idle_since
            if since is not None and now - since < self._idle_soonest:  # (most frames)
                return _NO_ACTIONS
            return self._idle(now)
        return _NO_ACTIONS

    def _limit(self) -> float:
        """The silence timeout of this pause: ``digit_hold_ms`` while a number is being read out
        (this pause's transcript ends in one, or it has not come yet and the last one did);
        ``dangling_hold_ms`` when the transcript ends mid-phrase (a blind-suite caller's "It
        ought to be." was ended by the 900 ms timeout a breath before her order number, run
        ``20261205-223530-c8c9``)."""
        if self._ends_in_digit or (self._dictating and not self._text_known):
            return self.policy.digit_hold_ms
        if self._dangling:  # "It ought to be", then a breath before the number
            return max(self.policy.dangling_hold_ms, self.policy.silence_timeout_ms)
        return self.policy.silence_timeout_ms

    def _timeouts(self, now: float) -> list[Action]:
        if self.state is State.USER_PAUSED:
            limit = self._limit()
            if now - self.last_voiced_ms >= limit:
                return self._commit("timeout", self._eot_prob if self._eot_prob is not None else 0.0)
        return []

    def next_deadline(self) -> float | None:
        """When :meth:`tick` may next produce an action (ms), or None."""
        if self.state is State.USER_PAUSED:
            timeout = self.last_voiced_ms + self._limit()
            wait = self._model_wait()
            return timeout if wait is None else min(wait, timeout)
        wait = self._idle_wait()
        if self.state is State.LISTENING and wait is not None and self._idle_since is not None:
            return self._idle_since + wait
        return None

    def _idle_wait(self) -> float | None:
        idle = self.policy.idle
        if idle.reprompt_ms is None or self.goodbye_turn is not None:
            return None
        return idle.hangup_ms if self._reprompted else idle.reprompt_ms

    def _idle(self, now: float) -> list[Action]:
        wait = self._idle_wait()
        if wait is None:
            return []
        if self._idle_since is None:  # silence counts from now (call start, a rejected noise)
            self._idle_since = now
            return []
        if now - self._idle_since < wait:
            return []
        self._idle_since = None
        self.turn_id += 1
        self.state = State.THINKING
        if not self._reprompted:
            self._reprompted = True
            return [Reprompt(self.turn_id)]
        self.goodbye_turn = self.turn_id
        return [EndCall(self.turn_id, "no_input")]

    def backchannel_result(self, turn_id: int, backchannel: bool, now: float,
                           reason: str = "backchannel") -> list[Action]:
        """Verdict on short overlapping speech: resume the reply (``reason`` says why), or treat
        it as a barge-in."""
        overlap, self._overlap = self._overlap, None
        if turn_id != self.turn_id or self.state is not State.SPEAKING or overlap is None:
            return []
        if self._speech_since is not None:  # the caller is talking again: let barge-in decide
            return []
        if backchannel:
            prev = self._resumed_over
            joined = prev is not None and overlap[0] - prev[1] <= self.policy.overlap_join_ms
            self._resumed_over = (prev[0] if joined else overlap[0], overlap[1])
            return [Resume(turn_id, reason)]
        actions = self._barge_in(overlap[0])
        return actions + self.speech_pause(overlap[1], now)

    def agent_audible(self, turn_id: int, now: float, *, filler: bool = False) -> list[Action]:
        """The reply of ``turn_id`` became audible to the caller; ``filler``: what plays is a
        filler, not yet the answer (until :meth:`answer_audible`), so caller speech within
        ``filler_reopen_ms`` of the caller's last word reopens the turn (a caller turn's reply
        only: never the greeting's)."""
        if turn_id == self.turn_id and self.state is State.THINKING:
            self.state = State.SPEAKING
            self._filler_only = filler and turn_id > 0
            if self._speech_since is not None:  # caller already talking over it
                return self.speech_continues(now)
        return []

    def answer_audible(self, turn_id: int) -> None:
        """The answer's own words (LLM-written audio) of ``turn_id``'s reply became audible:
        caller speech now holds the reply and may barge in."""
        if turn_id == self.turn_id:
            self._filler_only = False

    def agent_initiates(self) -> bool:
        """The agent speaks first (a greeting, before any caller turn): True when it may, i.e.
        nothing has happened yet; the greeting is then "turn 0" and the caller can talk over it
        (hold, backchannel, barge-in) like over any reply."""
        if self.state is State.LISTENING and self.turn_id == 0:
            self.state = State.THINKING
            return True
        return False

    def agent_follows_up(self, now: float) -> int | None:
        """The agent takes the floor on its own (a background tool's result came in): the id of
        a new agent-initiated turn when the line is free (listening, the caller silent), else
        None (the session tries again when the line frees up)."""
        if self.state is State.LISTENING and self._speech_since is None:
            self._idle_since = None
            self.turn_id += 1
            self.state = State.THINKING
            return self.turn_id
        return None

    def agent_done(self, turn_id: int, now: float) -> list[Action]:
        """The reply of ``turn_id`` finished (or failed) without being cut; ``now`` is when its
        last sample played at the caller, where the idle timer starts."""
        if turn_id == self.turn_id and self.state in (State.SPEAKING, State.THINKING):
            self.state = State.LISTENING
            self._idle_since = now
        return []

    # --- transitions --------------------------------------------------------------------
    def _open(self, at_ms: float) -> list[Action]:
        """A new caller turn whose first voiced sample is ``at_ms``, or earlier: the start of the
        short sounds the reply resumed over just before (``overlap_join_ms``), so that a caller's
        "6." taken for a backchannel and then "oh, 5, 8" is transcribed as one turn."""
        resumed, self._resumed_over = self._resumed_over, None
        if resumed is not None and at_ms - resumed[1] <= self.policy.overlap_join_ms:
            at_ms = min(at_ms, resumed[0])
        self.turn_id += 1
        self.state = State.USER_SPEAKING
        self._ends_in_digit = False
        self._dictating = self.expect_number
        self._commit_reason = None
        return [OpenTurn(self.turn_id, at_ms)]

    def _commit(self, reason: str, probability: float) -> list[Action]:
        if self._noise is not None:  # the turn was only noise: no reply
            self.state = State.LISTENING
            return [Reject(self.turn_id, self._noise)]
        self.state = State.THINKING
        self._commit_reason = reason
        self._reprompted = False  # the caller took a turn: idle handling starts over
        return [Commit(self.turn_id, reason, probability, self.last_voiced_ms)]

    def _goes_on(self, at_ms: float) -> bool:
        """Speech from ``at_ms`` continues the caller's turn over the reply: only a filler of it
        has played, and the caller paused at most ``filler_reopen_ms`` before."""
        return self._filler_only and at_ms - self.last_voiced_ms <= self.policy.filler_reopen_ms

    def _reopen(self) -> list[Action]:
        """Speech before the caller heard the reply's answer: the same turn goes on."""
        self.state = State.USER_SPEAKING
        self._filler_only = False
        return [CancelReply(self.turn_id, "reopen")]

    def _barge_in(self, at_ms: float) -> list[Action]:
        cut = CancelReply(self.turn_id, "barge_in")
        if self.goodbye_turn == self.turn_id:  # the caller spoke up over the goodbye: stay
            self.goodbye_turn = None
            self._reprompted = False
        return [cut, *self._open(at_ms)]
