"""The small streaming contracts every model stage implements.

An adapter implements exactly one of these protocols and nothing else: it never times itself,
never retries and never injects faults — :mod:`rejoinder.stages` wraps every port once for timing
(boundary stamps), and :mod:`rejoinder.adapters.faults` for fault injection.

Audio conventions: mono ``numpy.float32`` in [-1, 1] at the port's ``sample_rate`` (Hz) for model
inputs; agent audio is mono ``int16`` PCM at the TTS port's ``sample_rate``.

Blocking inference runs off the event loop once per *request* (utterance, reply, sentence), never
once per 20 ms frame: the only per-frame model is the VAD, which is cheap (≈130 µs per 32 ms
window) and is therefore a synchronous call made inline.

Errors: adapters raise :class:`PortError` (or a subclass) for a failed request; a missing optional
dependency raises :class:`rejoinder.errors.MissingExtra` naming the ``pip install`` that fixes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, AsyncIterable, AsyncIterator, Literal, Protocol, runtime_checkable

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
    """STT output: ``final`` False for an interim hypothesis."""

    text: str
    final: bool
    words: tuple[tuple[str, float, float], ...] = ()  # (word, start_ms, end_ms) when known


@runtime_checkable
class STTPort(Protocol):
    """Speech to text over one utterance. Audio chunks (float32 mono at ``sample_rate``) stream in;
    interim transcripts may stream out while audio arrives; the last item is one final transcript,
    emitted after the input iterator ends. Batch models (Whisper) emit only the final."""

    sample_rate: int

    def stream(self, audio: AsyncIterable[np.ndarray]) -> AsyncIterator[Transcript]: ...


@dataclass(frozen=True, slots=True)
class ChatMessage:
    role: Literal["system", "user", "assistant", "tool"]
    content: str
    name: str | None = None


@dataclass(frozen=True, slots=True)
class LLMRequest:
    """A chat completion request. ``json_schema`` constrains the output to JSON matching it
    (grammar-constrained decoding where the backend supports it). ``prefix`` is text the assistant
    message is forced to start with; the stream yields only what follows it."""

    messages: tuple[ChatMessage, ...]
    max_tokens: int = 96
    temperature: float = 0.2
    json_schema: dict[str, Any] | None = None
    prefix: str = ""
    stop: tuple[str, ...] = ()


@runtime_checkable
class LLMPort(Protocol):
    """Streaming chat LLM: yields text deltas (str) as tokens arrive."""

    model_name: str

    def stream(self, request: LLMRequest) -> AsyncIterator[str]: ...


@dataclass(frozen=True, slots=True)
class TTSAudio:
    """A piece of synthesized speech: int16 mono PCM at the port's ``sample_rate``.
    ``words`` gives (word, start_ms, end_ms) within this piece when the engine reports timings."""

    pcm: np.ndarray
    words: tuple[tuple[str, float, float], ...] = field(default=())


@runtime_checkable
class TTSPort(Protocol):
    """Streaming TTS for one text chunk: yields audio pieces as they are synthesized."""

    sample_rate: int
    voice_name: str

    def stream(self, text: str) -> AsyncIterator[TTSAudio]: ...
