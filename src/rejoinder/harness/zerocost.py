"""Zero-cost models: every model stage answers at once, so a run measures the orchestration
(sessions, simulated callers, transport, the event loop, the load generator) and nothing else.

``rejoinder bench --zero-cost`` (and ``serve --zero-cost``) swap the stack for these ports; the
session, turn-taking, playout, callers and the run store are the real code. What they do:

* VAD: speech iff a 32 ms window's peak ≥ 0.02 full scale (≈ −34 dBFS): the caller's recordings
  are speech or digital silence between turns;
* end of turn: complete with probability 1.0, at once (the turn policy's silence still applies);
* STT: the final transcript ``"Where is my order?"`` when the turn's audio ends;
* LLM: the reply ``"Your order has shipped."`` token by token, no wait;
* TTS: 200 ms of a 440 Hz tone per word (int16 at 16 kHz, −10 dBFS), word timings exact.

A V2V measured on them is the floor the runtime itself adds: the end-of-turn silence, playout
framing and event-loop delays. The conditions of such a run say ``models: zero-cost``. Nothing
here times itself: the runtime stamps every boundary as for real models.
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterable, AsyncIterator

import numpy as np

from ..agent import Agent
from ..ports import LLMRequest, Transcript, TTSAudio
from ..runtime import Runtime
from ..session import Stack

RATE = 16000
WORD_MS = 200.0
REPLY = ("Your", " order", " has", " shipped.")
TRANSCRIPT = "Where is my order?"
DESCRIPTION = {"name": "zero-cost", "vad": "peak ≥ 0.02 full scale per 32 ms window",
               "turn": "complete at once (p = 1.0)", "stt": f"final {TRANSCRIPT!r} at once",
               "llm": f"{''.join(REPLY)!r} at once", "tts": f"{WORD_MS:.0f} ms of 440 Hz per word at once"}

AGENT = Agent("You are a load-test agent. Answer every caller turn with one short sentence.",
              name="zero-cost", greeting="Hello.", source="rejoinder.harness.zerocost:AGENT")


class ZeroVAD:
    """Peak-amplitude VAD: 0.95 when a window's peak ≥ 0.02 (float32 full scale), else 0.02."""

    sample_rate = RATE
    window_samples = 512

    def reset(self) -> None:
        pass

    def speech_prob(self, window: np.ndarray) -> float:
        return 0.95 if float(np.abs(window).max()) >= 0.02 else 0.02


class ZeroTurn:
    """The end-of-turn model: every pause ends the turn (probability 1.0), at once."""

    sample_rate = RATE

    async def completion_prob(self, audio: np.ndarray) -> float:
        return 1.0


class ZeroSTT:
    """One final transcript per turn, yielded as soon as the turn's audio ends."""

    sample_rate = RATE

    async def stream(self, audio: AsyncIterable[np.ndarray]) -> AsyncIterator[Transcript]:
        async for _ in audio:
            pass
        yield Transcript(TRANSCRIPT, True)


class ZeroLLM:
    """The same short reply to every request, all tokens at once; calls no tool."""

    model_name = "zero-cost"

    async def stream(self, request: LLMRequest) -> AsyncIterator[str]:
        done = max((k for k in range(len(REPLY) + 1) if k and request.prefix.endswith("".join(REPLY[:k]))),
                   default=0)  # a retry continues after what its prefix already holds
        for tok in REPLY[done:]:
            await asyncio.sleep(0)  # a stream yields to the loop between tokens, as any backend's does
            yield tok


class ZeroTTS:
    """200 ms of a 440 Hz tone per word, at once, with exact word timings."""

    sample_rate = RATE
    voice_name = "tone"

    def __init__(self) -> None:
        t = np.arange(int(WORD_MS * RATE / 1000)) / RATE
        self._word = (0.3 * 32767 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)

    async def stream(self, text: str) -> AsyncIterator[TTSAudio]:
        words = text.split()
        if not words:
            return
        pcm = np.tile(self._word, len(words))
        yield TTSAudio(pcm, tuple((w, i * WORD_MS, (i + 1) * WORD_MS) for i, w in enumerate(words)))


class ZeroCostRuntime(Runtime):
    """A :class:`~rejoinder.runtime.Runtime` whose models are the zero-cost ports above; the
    agent is ``agent``, else the configuration's, else :data:`AGENT` (no tools, a one-word greeting)."""

    def __init__(self, cfg: Any = None, agent: Agent | str | None = None) -> None:
        named = cfg is not None and getattr(cfg, "agent", None)
        super().__init__(cfg, agent if agent is not None else (None if named else AGENT))

    async def warmup(self) -> None:
        if self._stack is None:
            self._backup_tts = None
            self._stack = Stack(vad=ZeroVAD(), turn=ZeroTurn(), stt=ZeroSTT(), llm=ZeroLLM(), tts=ZeroTTS())


def mark_conditions(conds: dict[str, Any]) -> dict[str, Any]:
    """A run's conditions with the models replaced by the zero-cost description."""
    conds["models"] = dict(DESCRIPTION)
    conds.setdefault("hosting", None)
    return conds
