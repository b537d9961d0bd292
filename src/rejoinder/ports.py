"""The small streaming contracts every model stage implements.

An adapter implements exactly one of these protocols and nothing else: it never times itself,
never retries and never injects faults — :mod:`rejoinder.stages` wraps every port once for timing
(boundary stamps), and :mod:`rejoinder.adapters.faults` for fault injection.

Audio conventions: mono ``numpy.float32`` in [-1, 1] at the port's ``sample_rate`` (Hz) for model
inputs; agent audio is mono ``int16`` PCM at the TTS port's ``sample_rate``.

Blocking inference runs off the event loop once per *request* (utterance, reply, sentence), never
once per 20 ms frame: the only per-frame model is the VAD, which is cheap (≈130 µs per 32 ms
window) and is therefore a synchronous call made inline — or, batched across the calls of a
process, once per event-loop iteration for all of them (:mod:`rejoinder.vadbatch`).

Errors: adapters raise :class:`PortError` (or a subclass) for a failed request; a missing optional
dependency raises :class:`rejoinder.errors.MissingExtra` naming the ``pip install`` that fixes it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, AsyncIterable, AsyncIterator, Literal, Protocol, Union, runtime_checkable

import numpy as np


class PortError(RuntimeError):
    """A model stage failed to serve a request."""


@runtime_checkable
class VADPort(Protocol):
    """Voice activity detection over fixed windows.

    ``window_samples`` samples (float32 mono at ``sample_rate`` Hz) in, speech probability out.
    Stateful (recurrent) detectors keep state between calls; :meth:`reset` clears it.
    """

    sample_rate: int
    window_samples: int

    def reset(self) -> None: ...

    def speech_prob(self, window: np.ndarray) -> float: ...


@runtime_checkable
class TurnPort(Protocol):
    """End-of-turn (endpointing) model: probability that the caller has finished their turn,
    given the last ≤ 8 s of the turn's audio (float32 mono at ``sample_rate`` Hz)."""

    sample_rate: int

    async def completion_prob(self, audio: np.ndarray) -> float: ...


@dataclass(frozen=True, slots=True)
class Transcript:
    """STT output: ``final`` False for an interim hypothesis.

    Confidence, when the recogniser reports it (None otherwise): ``no_speech_prob`` in [0, 1] is
    the model's probability that the audio holds no speech (Whisper's ``<|nospeech|>`` token);
    ``avg_logprob`` (≤ 0) is the mean log-probability per decoded token. Whisper's own silence
    rule is ``no_speech_prob > 0.6 and avg_logprob < -1.0`` (OpenAI ``whisper/transcribe.py``).
    """

    text: str
    final: bool
    words: tuple[tuple[str, float, float], ...] = ()  # (word, start_ms, end_ms) when known
    no_speech_prob: float | None = None
    avg_logprob: float | None = None


@runtime_checkable
class STTPort(Protocol):
    """Speech to text over one utterance. Audio chunks (float32 mono at ``sample_rate``) stream in;
    interim transcripts may stream out while audio arrives; the last item is one final transcript,
    emitted after the input iterator ends. Batch models (Whisper) emit only the final."""

    sample_rate: int

    def stream(self, audio: AsyncIterable[np.ndarray]) -> AsyncIterator[Transcript]: ...


@dataclass(frozen=True, slots=True)
class ToolSchema:
    """A tool the LLM may call: ``parameters`` is a JSON Schema object (``{"type": "object",
    "properties": …, "required": …}``), as in OpenAI's function-calling API."""

    name: str
    description: str
    parameters: dict[str, Any]
    #: caller utterances that call for this tool (the tool gate's few-shot examples and
    #: calibration set, :mod:`rejoinder.calibrate`); never sent as part of the schema
    examples: tuple[str, ...] = ()
    #: whether its result holds facts the reply tells the caller (False: call control and
    #: background tools, whose results tell the LLM what happens next); never sent either
    tells: bool = True
    #: whether a call acts at once and cannot be undone: an irreversible tool that asks no
    #: confirmation question first (``end_call``, ``transfer_to_human``; a tool with
    #: ``confirm`` only asks at first). The embedded gate wants clearer evidence for it
    #: (:func:`rejoinder.adapters._which.clear_pick`); never sent
    irreversible: bool = False


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A complete tool call decided by the LLM: ``arguments`` is the parsed JSON object.
    ``id`` pairs the call with its result message (``ChatMessage.tool_call_id``)."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ToolDecision:
    """How a backend decided between speaking and calling a tool, yielded before the reply's
    first text or call by a backend that decides by scoring (the embedded llama.cpp adapter's
    ``tool_mode="gate"``, :mod:`rejoinder.adapters._gate`). The runtime stamps it
    (``tool_decided``) and records it per turn; it is never spoken.

    ``chosen``: the tool to call, or None (speak); ``scores``: natural-log probabilities,
    ``log P(call, tool)`` per tool and ``log P(no call)`` under ``"(none)"``; ``margin``:
    ``log Σ P(call, tool) − log P(no call)``; ``threshold``: the calibrated value the margin was
    compared with; ``source``: where the threshold came from (``"request"``, ``"model"``,
    ``"default"``); ``which``: what picked the tool once a call was decided (``"labels"``: the
    best-scoring label; ``"examples"``: the nearest tool example,
    :mod:`rejoinder.adapters._which`), with ``similarity`` (cosine, per tool) for the latter;
    ``"grounding"``: the best label's tool needs an argument the caller did not say (an order
    number), so the best-scoring tool that does not, or none: the agent talks); ``"value"``: the
    gate said talk, but the caller said nothing but the one typed argument of one tool (an order
    number alone), which is called; ``"alone"``: the same message decided without scoring
    (no ``scores``, an infinite ``margin``, recorded as null); ``"cue"``: the gate's choice was
    an irreversible tool the caller's words did not cue (``LLMRequest.withheld``), so the agent
    talks;
    ``"yesno"``: an answer to a confirmation question that opened with yes (the tool is called)
    or no (talk), decided without scoring (:mod:`rejoinder.adapters._yesno`); ``"confirm"``: one
    that opened with neither, judged by the margin and the nearer of the yes and no examples;
    ``"said"``: the gate said talk, but the caller said every
    typed argument of a tool (an order number inside a self-correction) and that tool's example
    lies nearest, small talk competing, so it is called. ``ask_for``: when the agent talks because the best tool's
    typed arguments were not said, how those arguments are named ("order number"): the reply
    is then one question for them (:mod:`rejoinder.adapters._ask`), and ``ask_tool`` is the
    tool they are for. ``set_aside``: irreversible
    tools whose example was nearest but not clearly (:func:`rejoinder.adapters._which.clear_pick`),
    so the choice was made among the rest. ``request_margin``: when the agent talks, how far a
    *request* leads *talk* in the caller's message (corrected natural-log likelihoods,
    :mod:`rejoinder.adapters._scope`; None: not asked); ``unserved``: it led by the threshold, so
    the caller asked for something no tool was chosen for, and the reply says what the agent
    can help with."""

    chosen: str | None
    scores: dict[str, float]
    margin: float
    threshold: float
    source: str = "model"
    which: str = "labels"
    similarity: dict[str, float] | None = None
    ask_for: tuple[str, ...] = ()
    set_aside: tuple[str, ...] = ()
    ask_tool: str | None = None
    request_margin: float | None = None
    unserved: bool = False

    def as_dict(self) -> dict[str, Any]:
        out = {"chosen": self.chosen,
               "margin": round(self.margin, 3) if math.isfinite(self.margin) else None,
               "threshold": round(self.threshold, 3), "source": self.source,
               "scores": {k: round(v, 3) for k, v in self.scores.items()}, "which": self.which}
        if self.similarity is not None:
            out["similarity"] = {k: round(v, 3) for k, v in self.similarity.items()}
        if self.ask_for:
            out["ask_for"] = list(self.ask_for)
            out["ask_tool"] = self.ask_tool
        if self.set_aside:
            out["set_aside"] = list(self.set_aside)
        if self.request_margin is not None:
            out["request_margin"] = round(self.request_margin, 3)
            out["unserved"] = self.unserved
        return out


@dataclass(frozen=True, slots=True)
class ServerTiming:
    """What an LLM server reported about serving one request, yielded last by a backend whose
    server reports it (never measured by the adapter: the server's own clock and counters).
    The runtime records it on the request's ``llm_end`` stamp and sums it per turn
    (``TurnRecord.llm_server``); it is never spoken. None: not reported.

    ``prompt_tokens``: prompt tokens the server evaluated, those not reused from its cache
    (llama.cpp server ``timings.prompt_n``, else ``usage.prompt_tokens`` less the cached ones);
    ``prompt_ms``: its time evaluating them (``timings.prompt_ms``); ``cached_tokens``: prompt
    tokens reused from its cache (``timings.cache_n``, else
    ``usage.prompt_tokens_details.cached_tokens``); ``generated_tokens``: tokens it generated
    (``timings.predicted_n``, else ``usage.completion_tokens``); ``generated_ms``: its time
    generating them (``timings.predicted_ms``). The names are those of llama.cpp's server
    (``timings`` in its last streamed chunk) and of OpenAI's ``usage`` (sent in a last chunk
    when the request asks with ``stream_options: {"include_usage": true}``)."""

    prompt_tokens: int | None = None
    prompt_ms: float | None = None
    generated_tokens: int | None = None
    generated_ms: float | None = None
    cached_tokens: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """The reported fields only (``{}`` when nothing was reported)."""
        out: dict[str, Any] = {}
        for k in ("prompt_tokens", "prompt_ms", "generated_tokens", "generated_ms", "cached_tokens"):
            v = getattr(self, k)
            if v is not None:
                out[k] = round(v, 3) if isinstance(v, float) else v
        return out


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One chat message. An assistant message that called tools carries them in ``tool_calls``
    (its ``content`` is the text said before the calls, often empty); a ``tool`` message carries
    one result as JSON text in ``content`` and the call's id in ``tool_call_id``."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str
    name: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None


ToolChoice = str  # "auto" | "none" | "required" | the name of one tool


@dataclass(frozen=True, slots=True)
class LLMRequest:
    """A chat completion request. ``json_schema`` constrains the output to JSON matching it
    (grammar-constrained decoding where the backend supports it). ``prefix`` is text the assistant
    message is forced to start with; the stream yields only what follows it.

    ``tools`` are the tools the model may call; ``tool_choice`` is ``"auto"`` (text or a call),
    ``"none"`` (text only), ``"required"`` (some call) or one tool's name. ``cache_key`` is a
    hint that requests with the same key share a growing prefix (one call's conversation), so a
    backend can keep that conversation's KV cache (OpenAI's ``prompt_cache_key``, a llama.cpp
    slot); it never changes the output. ``tool_threshold`` is the calibrated threshold of a
    scoring backend's talk-or-call decision for this agent (:class:`ToolDecision`; None: the
    backend's own calibration for its model) and ``talk_examples`` caller utterances that need
    no tool (the decision's counter-examples); other backends ignore both.

    ``allowed_tools`` restricts which of ``tools`` may be *called* (None: all): the prompt still
    describes every tool, only the call is held to these names (a conversation step's tools;
    on the 38 tool-choice items, required calls over one step's tools raised SmolLM2-135M's right
    tool from 65 to 77 %, while listing only those tools in the prompt lowered it: issue 16).
    ``confirming`` names the irreversible tool whose question the caller is answering
    (:attr:`rejoinder.tools.Tool.confirm_fn`): a yes/no turn, so a scoring backend decides it
    by its talk-or-call margin alone. ``scope`` is what the agent helps with
    (:attr:`rejoinder.agent.LLMSettings.scope`): a scoring backend that finds no tool for a
    caller's request says so in those words (:mod:`rejoinder.adapters._scope`); others ignore it.
    ``withheld`` names tools left out of ``allowed_tools`` because the caller's words lack their
    cue (:attr:`rejoinder.tools.Tool.cue`: ``end_call`` without a closing): a scoring backend
    still scores them; choosing an irreversible one means talking (else its share of the call
    would go to the next tool), while a reversible one is set aside and the rest compete (a
    move not asked for: the listing or the cancellation the words hold comes instead); others
    ignore it.
    Raises ``ValueError`` for a name not among ``tools``."""

    messages: tuple[ChatMessage, ...]
    max_tokens: int = 96
    temperature: float = 0.2
    json_schema: dict[str, Any] | None = None
    prefix: str = ""
    stop: tuple[str, ...] = ()
    tools: tuple[ToolSchema, ...] = ()
    tool_choice: ToolChoice = "auto"
    cache_key: str | None = None
    tool_threshold: float | None = None
    talk_examples: tuple[str, ...] = ()
    allowed_tools: tuple[str, ...] | None = None
    confirming: str | None = None
    scope: str = ""
    withheld: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.allowed_tools is not None:
            unknown = set(self.allowed_tools) - {t.name for t in self.tools}
            if unknown:
                raise ValueError(f"allowed_tools names undeclared tools: {', '.join(sorted(unknown))}")

    def callable_tools(self) -> tuple[ToolSchema, ...]:
        """The tools that may be called: ``tools`` restricted to ``allowed_tools``."""
        if self.allowed_tools is None:
            return self.tools
        return tuple(t for t in self.tools if t.name in self.allowed_tools)


LLMDelta = Union[str, ToolCall, ToolDecision, ServerTiming]


@runtime_checkable
class LLMPort(Protocol):
    """Streaming chat LLM: yields text deltas (``str``) as tokens arrive, and each tool call as one
    :class:`ToolCall` once its arguments are complete. A backend without tool support ignores
    ``request.tools`` only when ``tool_choice`` is ``"auto"`` or ``"none"``; it raises
    :class:`PortError` for ``"required"`` or a named tool."""

    model_name: str

    def stream(self, request: LLMRequest) -> AsyncIterator[LLMDelta]: ...

    # A backend that decides talk-or-call by scoring yields one :class:`ToolDecision` first;
    # one whose server reports its own timing yields one :class:`ServerTiming` last.
    # A backend may also offer ``prefill(request) -> concurrent.futures.Future``: evaluate the
    # next request (its last message the caller's, still empty) up to the caller's words while
    # the caller speaks (``LlamaLLM.prefill``); the session calls it after every reply heard.
    # A ``reading_prior_ms`` attribute (float) is its expected wait from tool results to its
    # first speakable words before any is observed (the filler policy's; LlamaLLM's).
    # ``in_process = True`` says its requests run on this machine's CPU (LlamaLLM): the reply
    # watches it with RecoveryPolicy's longer ``llm_in_process_*`` limits.


@dataclass(frozen=True, slots=True)
class TTSAudio:
    """A piece of synthesized speech: int16 mono PCM at the port's ``sample_rate``.
    ``words`` gives (word, start_ms, end_ms) when the engine reports timings, in ms from this
    piece's first sample; a streaming service's timings may reach beyond the piece (a word begun
    in an earlier piece, or ending in a later one), and a piece may carry timings only (empty
    ``pcm``) when they arrive after the audio."""

    pcm: np.ndarray
    words: tuple[tuple[str, float, float], ...] = field(default=())


@runtime_checkable
class TTSPort(Protocol):
    """Streaming TTS for one text chunk: yields audio pieces as they are synthesized."""

    sample_rate: int
    voice_name: str

    def stream(self, text: str) -> AsyncIterator[TTSAudio]: ...
