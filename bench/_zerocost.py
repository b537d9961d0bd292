"""Zero-cost model ports for the capacity and memory benchmarks: every model answers at once, so
what is measured is the runtime's own orchestration (frame loops, VAD tracking, turn-taking,
the agent loop, chunking, playout) — the real audio path, with no inference behind it.

These implement the same port contracts as the real adapters and work with any rejoinder version
that has them (the benchmarks run today's main beside this branch).
"""

from __future__ import annotations

import numpy as np

from rejoinder.agent import Agent
from rejoinder.harness.caller import RenderedTurn, voiced_span
from rejoinder.ports import Transcript, TTSAudio
from rejoinder.scenario import CallerTurn, Segment

RATE = 16000


class PeakVAD:
    """Speech iff a 32 ms window's peak ≥ 0.05 (the bench caller says tones or silence)."""

    sample_rate = RATE
    window_samples = 512

    def reset(self) -> None:
        pass

    def speech_prob(self, window: np.ndarray) -> float:
        return 0.95 if float(window.max()) >= 0.05 else 0.02


class InstantTurn:
    sample_rate = RATE

    async def completion_prob(self, audio: np.ndarray) -> float:
        return 0.95


class InstantSTT:
    sample_rate = RATE

    async def stream(self, audio):
        async for _ in audio:
            pass
        yield Transcript("What is the status of my order?", True)


class InstantLLM:
    model_name = "zero-cost"
    provider = "bench"
    TOKENS = ["Your", " order", " has", " shipped", " and", " arrives", " on", " Friday", "."]

    async def stream(self, request):
        for tok in self.TOKENS:
            yield tok


class InstantTTS:
    """200 ms of tone per word, at once."""

    sample_rate = RATE
    voice_name = "tone"
    _word = (0.3 * 32767 * np.sin(2 * np.pi * 440 * np.arange(int(0.2 * RATE)) / RATE)).astype(np.int16)

    async def stream(self, text: str):
        n = max(1, len(text.split()))
        yield TTSAudio(np.tile(self._word, n))


def zero_cost_stack(vad=None):
    from rejoinder.session import Stack
    return Stack(vad=vad or PeakVAD(), turn=InstantTurn(), stt=InstantSTT(), llm=InstantLLM(),
                 tts=InstantTTS())


def agent() -> Agent:
    return Agent("You are the phone assistant of a small shop.", name="zero-cost",
                 llm={"temperature": 0.0, "max_tokens": 40, "max_steps": 1})


def tone(ms: float, amp: float = 0.3) -> np.ndarray:
    t = np.arange(int(RATE * ms / 1000)) / RATE
    return (amp * 32767 * np.sin(2 * np.pi * 220 * t)).astype(np.int16)


def caller_turns(n: int, speech_ms: float = 900.0, wait_ms: float = 400.0,
                 audio: np.ndarray | None = None) -> list[RenderedTurn]:
    """``n`` caller turns of ``speech_ms`` of tone (or ``audio``: int16 16 kHz real speech), each
    said ``wait_ms`` after the agent's reply was heard."""
    pcm = audio if audio is not None else tone(speech_ms)
    span = voiced_span(pcm)
    out = []
    for i in range(n):
        spec = CallerTurn(audio=[Segment(silence_ms=0)], **({} if i == 0 else {"after_agent_ms": wait_ms}))
        out.append(RenderedTurn(pcm, span, spec))
    return out


class PeakModel:
    """The zero-cost VAD as a batch model: P = 0.95 iff a window's peak ≥ 0.05."""

    sample_rate = RATE
    window_samples = 512

    def grow(self, slots: int) -> None:
        pass

    def reset_slot(self, slot: int) -> None:
        pass

    def run(self, windows: np.ndarray, slots: np.ndarray) -> np.ndarray:
        return np.where(windows.max(axis=1) >= 0.05, 0.95, 0.02)


_BATCHED: dict[str, type] = {}


def vad_factory(kind: str):
    """A function making one call's VAD: ``kind`` zero (the peak VAD) or silero; batched across
    calls where this rejoinder has ``rejoinder.vadbatch``, else one model per call."""
    try:
        from rejoinder.vadbatch import BatchedVAD
    except ImportError:  # today's main
        if kind == "silero":
            from rejoinder.adapters.silero_vad import SileroVAD
            return SileroVAD
        return PeakVAD
    if kind == "silero":
        from rejoinder.adapters.silero_batch import SileroBatchedVAD
        return SileroBatchedVAD
    if "peak" not in _BATCHED:
        class BatchedPeakVAD(BatchedVAD):
            @classmethod
            def make_model(cls):
                return PeakModel()
        _BATCHED["peak"] = BatchedPeakVAD
    return _BATCHED["peak"]
