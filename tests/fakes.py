"""Deterministic fakes of the ports, driven by a virtual clock — for testing our own logic only.

Model adapters are tested with the real models in tests/adapters; nothing is declared done on these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import AsyncIterable, AsyncIterator

import numpy as np

from rejoinder.clock import VirtualClock
from rejoinder.ports import LLMRequest, Transcript, TTSAudio


class AmplitudeVAD:
    """Speech iff the window's peak amplitude ≥ 0.05 (scripted audio is tone or silence)."""

    sample_rate = 16000
    window_samples = 512

    def reset(self) -> None:
        pass

    def speech_prob(self, window: np.ndarray) -> float:
        return 0.95 if float(np.abs(window).max()) >= 0.05 else 0.02


@dataclass
class ScriptedTurn:
    clock: VirtualClock
    prob: float = 0.9
    delay_ms: float = 50.0
    calls: int = 0
    sample_rate: int = 16000

    async def completion_prob(self, audio: np.ndarray) -> float:
        self.calls += 1
        await self.clock.sleep_until(self.clock.now_ms() + self.delay_ms)
        return self.prob


@dataclass
class ScriptedSTT:
    """Returns texts[k] for the k-th request (last one repeated) after ``delay_ms``; an entry may
    be a :class:`Transcript` to script the recogniser's confidence too."""

    clock: VirtualClock
    texts: list[str | Transcript]
    delay_ms: float = 300.0
    sample_rate: int = 16000
    requests: list[float] = field(default_factory=list)  # seconds of audio per request

    async def stream(self, audio: AsyncIterable[np.ndarray]) -> AsyncIterator[Transcript]:
        n = 0
        async for chunk in audio:
            n += len(chunk)
        self.requests.append(n / self.sample_rate)
        text = self.texts[min(len(self.requests) - 1, len(self.texts) - 1)]
        await self.clock.sleep_until(self.clock.now_ms() + self.delay_ms)
        yield text if isinstance(text, Transcript) else Transcript(text, True)


@dataclass
class ScriptedLLM:
    clock: VirtualClock
    tokens: list[str]
    ttft_ms: float = 200.0
    per_token_ms: float = 10.0
    model_name: str = "scripted"
    requests: list[LLMRequest] = field(default_factory=list)

    async def stream(self, request: LLMRequest) -> AsyncIterator[str]:
        self.requests.append(request)
        await self.clock.sleep_until(self.clock.now_ms() + self.ttft_ms)
        # like a real LLM given an assistant prefix, continue after what is already there
        done = max((k for k in range(len(self.tokens) + 1)
                    if k and request.prefix.endswith("".join(self.tokens[:k]))), default=0)
        for tok in self.tokens[done:]:
            yield tok
            await self.clock.sleep_until(self.clock.now_ms() + self.per_token_ms)


@dataclass
class ToneTTS:
    """200 ms of 440 Hz tone per word after ``ttfb_ms``, with exact word timings; optional
    ``lead_silence_ms`` of silence first (it must count as waiting)."""

    clock: VirtualClock
    ttfb_ms: float = 80.0
    lead_silence_ms: float = 0.0
    sample_rate: int = 16000
    voice_name: str = "tone"
    texts: list[str] = field(default_factory=list)

    async def stream(self, text: str) -> AsyncIterator[TTSAudio]:
        self.texts.append(text)
        await self.clock.sleep_until(self.clock.now_ms() + self.ttfb_ms)
        words = text.split()
        per = int(0.2 * self.sample_rate)
        lead = int(self.lead_silence_ms * self.sample_rate / 1000)
        t = np.arange(per) / self.sample_rate
        tone = (0.3 * 32767 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)
        pcm = np.concatenate([np.zeros(lead, np.int16)] + [tone] * len(words))
        timings = tuple((w, (lead + i * per) * 1000 / self.sample_rate,
                         (lead + (i + 1) * per) * 1000 / self.sample_rate) for i, w in enumerate(words))
        yield TTSAudio(pcm, timings)


def tone(ms: float, rate: int = 16000, amp: float = 0.3) -> np.ndarray:
    t = np.arange(int(rate * ms / 1000)) / rate
    return (amp * 32767 * np.sin(2 * np.pi * 220 * t)).astype(np.int16)


def silence(ms: float, rate: int = 16000) -> np.ndarray:
    return np.zeros(int(rate * ms / 1000), dtype=np.int16)


@dataclass
class _Call:
    name: str
    args: dict


@dataclass
class _Tool:
    reversible: bool


@dataclass
class _Plan:
    tool_calls: list


@dataclass
class _Reply:
    first_clause: str
    llm_request: LLMRequest | None


class ScriptedApp:
    """A minimal application: every turn looks up order 4217 and answers with a fixed clause,
    then asks the LLM to continue. Records what the runtime reports as heard."""

    def __init__(self, first_clause: str = "Order 4217 has shipped,", use_llm: bool = True) -> None:
        self.tools = {"lookup_order": _Tool(True), "cancel_order": _Tool(False)}
        self.tool = "lookup_order"
        self.executed: list[str] = []
        self.compensated: list[str] = []
        self.first_clause = first_clause
        self.use_llm = use_llm
        self.planned: list[str] = []
        self.heard_log: list[str] = []

    def plan(self, text: str, commit: bool = True) -> _Plan:
        if commit:
            self.planned.append(text)
        return _Plan([_Call(self.tool, {"order_id": "4217", "text": text})])

    def adopt(self, plan: _Plan, text: str) -> None:
        self.planned.append(text)

    def execute(self, call: _Call) -> dict:
        self.executed.append(call.args["text"])
        return {"status": "shipped"}

    def compensate(self, call: _Call, result: dict) -> None:
        self.compensated.append(call.args["text"])

    def compose(self, plan: _Plan, results: list) -> _Reply:
        req = LLMRequest(messages=(), prefix=self.first_clause) if self.use_llm else None
        return _Reply(self.first_clause, req)

    def heard(self, text: str) -> None:
        self.heard_log.append(text)
