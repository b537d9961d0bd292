"""The closed set of typed events that flow through a call.

Every event is an immutable, slotted dataclass carrying ``call_id``, ``turn_id`` and ``t_ms`` —
milliseconds on the call's one monotonic clock (see :mod:`rejoinder.clock`). ``turn_id`` is the
caller turn the event belongs to (0 before the first turn is opened). Observers (timeline, recorder,
metrics) read events from the :class:`EventBus`; they never sit in the data path.

The measurement contract (README, "The measurement contract") is carried by :class:`Boundary` events whose
``name`` is one of :data:`BOUNDARIES`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Union, get_args

BoundaryName = Literal[
    "user_speech_start",
    "user_speech_end",
    "eot_decided",
    "transcript_final",
    "stt_request",
    "stt_end",
    "llm_request",
    "llm_first_token",
    "tool_decided",
    "llm_end",
    "tool_start",
    "tool_end",
    "first_speakable_text",
    "tts_request",
    "tts_first_audio",
    "tts_end",
    "first_audio_out",
    "first_audio_in",
    "playout_start",
    "playback_start",
    "answer_start",
    "playback_end",
    "interrupted_at",
    "stall",
]
BOUNDARIES: tuple[str, ...] = get_args(BoundaryName)


@dataclass(frozen=True, slots=True)
class Boundary:
    """A named moment of the measurement contract.

    ``estimated`` is True when the moment was inferred rather than observed (e.g. a live VAD's
    ``user_speech_end``). ``data`` holds extras: tool name/args, chunk index, stall ``duration_ms``.
    """

    name: BoundaryName
    t_ms: float
    call_id: str
    turn_id: int
    estimated: bool = False
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class VadChange:
    """VAD flipped: ``speaking`` True at onset, False after the hangover; ``at_ms`` is the
    estimated first/last voiced sample (earlier than ``t_ms``, when the decision was made)."""

    speaking: bool
    at_ms: float
    t_ms: float
    call_id: str
    turn_id: int


@dataclass(frozen=True, slots=True)
class TranscriptEvent:
    """An interim (``final=False``) or final transcript of the caller's turn."""

    text: str
    final: bool
    t_ms: float
    call_id: str
    turn_id: int
    speculative: bool = False


@dataclass(frozen=True, slots=True)
class TurnDecision:
    """The runtime's decision about who has the floor. Committed (the caller's turn is over):
    ``reason`` is ``"model"`` / ``"model+transcript"`` (end-of-turn model), ``"transcript"``
    (the words alone: :mod:`rejoinder.turns`), ``"timeout"``
    (silence fallback) or ``"promoted"``. Not committed: the agent talks on after a sound over
    its reply (``"backchannel"``, ``"non_speech"``, ``"unclear"``; on the reply's turn), the
    caller's turn was only noise and gets no reply (``"rejected_noise"``), the transcript took
    a commit back before anything was said (``"retracted"``; ``data["why"]``: ``digit_hold``,
    ``incomplete``), or the agent takes the floor on its own (``"idle_prompt"``: an idle
    reprompt or goodbye). ``data`` holds
    details: the transcript and the recogniser's confidence, the text said."""

    committed: bool
    probability: float
    reason: str
    t_ms: float
    call_id: str
    turn_id: int
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LlmToken:
    text: str
    t_ms: float
    call_id: str
    turn_id: int


@dataclass(frozen=True, slots=True)
class ToolCallEvent:
    """A tool call (``result`` None at start) with its reversibility declared by the tool."""

    name: str
    args: dict[str, Any]
    reversible: bool
    t_ms: float
    call_id: str
    turn_id: int
    result: Any = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class SpeakableText:
    """A chunk handed to TTS: ``text`` as written, ``spoken`` after normalisation. ``source`` is
    who wrote it: ``"llm"``, or words the runtime said on its own (``"greeting"``, ``"filler"``,
    ``"recovery"``, ``"idle"``, ``"goodbye"``, ``"transfer"``, ``"confirm"``: an irreversible
    tool's own question, :attr:`rejoinder.tools.Tool.confirm_fn`) — declared policies, so the
    timeline can tell them apart."""

    text: str
    spoken: str
    index: int
    t_ms: float
    call_id: str
    turn_id: int
    source: str = "llm"


@dataclass(frozen=True, slots=True)
class AgentSpeech:
    """What the caller actually heard of a reply (written when it ends or is cut).
    ``repeated_words``: spoken words of it the caller heard twice because a recovery said them
    again (:meth:`rejoinder.reply.Reply.repeated_words`; 0 when nothing was repeated).
    ``call_ended``: the reply was still playing when the call ended (the caller hung up, or the
    call hit its limit): ``interrupted`` is then True but no one barged in."""

    heard_text: str
    full_text: str
    interrupted: bool
    estimated: bool
    t_ms: float
    call_id: str
    turn_id: int
    repeated_words: int = 0
    call_ended: bool = False


@dataclass(frozen=True, slots=True)
class ErrorEvent:
    """A stage failed. ``recovered`` says whether the call went on."""

    stage: str
    message: str
    recovered: bool
    t_ms: float
    call_id: str
    turn_id: int


@dataclass(frozen=True, slots=True)
class Recovery:
    """The runtime recovered from a failure: ``stage`` (llm|tts|stt), ``action`` (retry|backup|
    recovery_line|give_up|buffered|stop_repeat: a reply ended at a sentence it had already said,
    :mod:`rejoinder.repeatguard`; promoted: an STT interim taken as final; mended: a transcript
    that lost its last words completed from the rest of the audio), ``reason`` (the error or watchdog), ``resume_from`` (the text it resumed
    with, starting at the last word heard)."""

    stage: str
    action: str
    reason: str
    resume_from: str
    t_ms: float
    call_id: str
    turn_id: int


@dataclass(frozen=True, slots=True)
class StepEntered:
    """The conversation moved to ``step`` of ``agent`` (:mod:`rejoinder.flow`) from ``previous``.
    ``reason``: ``start`` (the call opened), ``next`` (the step's ``next`` after ``tool``
    succeeded), ``goto`` (``tool`` returned a GoTo), ``handoff`` (``tool`` handed the call to
    ``agent``; ``data.previous_agent``)."""

    agent: str
    step: str | None
    previous: str | None
    reason: str
    tool: str | None
    t_ms: float
    call_id: str
    turn_id: int
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CallEnd:
    """The agent ends the call after turn ``turn_id``'s reply: ``kind`` ``hangup`` or
    ``transfer`` (to ``target``), ``reason`` why (``end_call``, ``no_input``…). ``status``:
    ``requested`` (the reply is still playing), ``confirmed`` (the transport confirmed the reply
    played to its end: the line closes now), ``unconfirmed`` (no confirmation within the
    watchdog: closed anyway), ``cancelled`` (the caller spoke over it: the call goes on).
    ``data``: the transport's transfer action and its outcome, the watchdog's wait."""

    kind: str
    reason: str
    target: str | None
    status: str
    t_ms: float
    call_id: str
    turn_id: int
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Speculation:
    """The fate of one speculative (preemptive) draft of ``turn_id`` (:mod:`rejoinder.speculation`):
    ``outcome`` ``"kept"``, ``"extended"`` (the final transcript only added courtesy words) or
    ``"discarded"`` (``reason``: ``transcript_changed``, ``reopen``, ``noise``, ``barge_in`` …);
    ``saved_ms`` how much sooner a kept draft's first text was ready than without it; what it
    cost: ``llm_requests``, ``tokens`` (text deltas) and ``tool_runs`` (reversible, compensated
    when discarded); ``started_ms`` when it started, ``t_ms`` when it was decided."""

    outcome: str
    reason: str
    saved_ms: float
    llm_requests: int
    tokens: int
    tool_runs: int
    started_ms: float
    t_ms: float
    call_id: str
    turn_id: int


Event = Union[Boundary, VadChange, TranscriptEvent, TurnDecision, LlmToken, ToolCallEvent,
              SpeakableText, AgentSpeech, ErrorEvent, Recovery, StepEntered, CallEnd,
              Speculation]
EVENT_TYPES: tuple[type, ...] = get_args(Event)

Observer = Callable[[Event], None]


class EventBus:
    """Fan-out of events to observers. Observers must be quick and must not raise; an observer
    that raises is removed and the error is kept in :attr:`observer_errors` (the call goes on)."""

    __slots__ = ("_observers", "observer_errors")

    def __init__(self) -> None:
        self._observers: list[Observer] = []
        self.observer_errors: list[str] = []

    def subscribe(self, observer: Observer) -> None:
        self._observers.append(observer)

    def emit(self, event: Event) -> None:
        for obs in tuple(self._observers):
            try:
                obs(event)
            except Exception as exc:  # an observer must never break the data path
                self.observer_errors.append(f"{obs!r}: {exc!r}")
                self._observers.remove(obs)


def event_to_dict(event: Event) -> dict[str, Any]:
    """JSON-ready dict with a ``type`` tag (the class name)."""
    out: dict[str, Any] = {"type": type(event).__name__}
    for name in event.__slots__:  # type: ignore[attr-defined]
        out[name] = getattr(event, name)
    return out
