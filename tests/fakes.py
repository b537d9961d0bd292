"""Deterministic fakes of the ports, driven by a virtual clock — for testing our own logic only.

Model adapters are tested with the real models in tests/adapters; nothing is declared done on these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import AsyncIterable, AsyncIterator

import numpy as np

from rejoinder.agent import Agent
from rejoinder.clock import VirtualClock
from rejoinder.ports import LLMRequest, ToolCall, Transcript, TTSAudio
from rejoinder.tools import CallContext, tool


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
    """Returns texts[k] for the k-th request (last one repeated) after ``delay_ms``."""

    clock: VirtualClock
    texts: list[str]
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
        yield Transcript(text, True)


@dataclass
class ScriptedLLM:
    """An LLM that answers every request after ``ttft_ms``: when the request's last message is
    the caller's (a new reply) and ``calls`` is set, it calls those tools (an argument value
    ``"{user}"`` becomes the caller's text); otherwise it says ``tokens`` — continuing after what a
    retry's ``prefix`` already holds, like a real LLM."""

    clock: VirtualClock
    tokens: list[str]
    ttft_ms: float = 200.0
    per_token_ms: float = 10.0
    model_name: str = "scripted"
    calls: list[ToolCall] = field(default_factory=list)
    requests: list[LLMRequest] = field(default_factory=list)

    async def stream(self, request: LLMRequest) -> AsyncIterator[str | ToolCall]:
        self.requests.append(request)
        await self.clock.sleep_until(self.clock.now_ms() + self.ttft_ms)
        last = request.messages[-1] if request.messages else None
        if self.calls and last is not None and last.role == "user" and request.tool_choice != "none":
            for c in self.calls:
                args = {k: (last.content if v == "{user}" else v) for k, v in c.arguments.items()}
                yield ToolCall(c.id, c.name, args)
            return
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


class ToolLog:
    """What the test agent's tools did: ``executed`` and ``compensated`` (their ``text`` args)."""

    def __init__(self) -> None:
        self.executed: list[str] = []
        self.compensated: list[str] = []


def scripted_agent(log: ToolLog | None = None, *, greeting: str | None = None) -> Agent:
    """A minimal agent: ``lookup_order`` (reversible, read-only, records its ``text`` argument)
    and ``cancel_order`` (irreversible)."""
    log = log if log is not None else ToolLog()

    async def undo(ctx: CallContext, result: dict, **args) -> None:
        log.compensated.append(args["text"])

    # async tools run inline (no thread hop), so the virtual clock stays deterministic
    @tool(reversible=True, compensate=undo)
    async def lookup_order(order_id: str, text: str = "") -> dict:
        """Look up an order."""
        log.executed.append(text)
        return {"order_id": order_id, "status": "shipped"}

    @tool
    async def cancel_order(order_id: str, text: str = "") -> dict:
        """Cancel an order."""
        log.executed.append(text)
        return {"cancelled": order_id}

    return Agent("You are a test agent.", tools=[lookup_order, cancel_order], greeting=greeting)


def lookup(tool: str = "lookup_order") -> list[ToolCall]:
    """The scripted LLM's tool call: ``tool`` for order 4217 with the caller's text."""
    return [ToolCall("", tool, {"order_id": "4217", "text": "{user}"})]


def heard(res) -> list[str]:
    """The assistant's words that entered the LLM context, per reply (what was heard)."""
    return [text for _, text in res.heard_log]
