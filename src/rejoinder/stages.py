"""Timing wrappers: the one place where port calls are stamped on the call clock.

Adapters never time themselves; every LLM and TTS request of a reply goes through these wrappers,
which emit ``llm_request`` / ``llm_first_token`` and ``tts_request`` / ``tts_first_audio``
boundaries. A fault-injection wrapper (if configured) sits *inside* these, so injected delays are
measured like real ones.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, AsyncIterator

from .clock import Clock, wait_within
from .events import Boundary, Event, EventBus
from .ports import LLMDelta, LLMPort, LLMRequest, PortError, TTSAudio, TTSPort


class WatchdogTimeout(PortError):
    """A stage produced nothing within its watchdog limit."""


@dataclass
class Stamper:
    """Emits events for one call on its clock."""

    call_id: str
    clock: Clock
    bus: EventBus

    def now(self) -> float:
        return self.clock.now_ms()

    def stamp(self, boundary: str, turn_id: int, t_ms: float | None = None, /, *,
              estimated: bool = False, **data: Any) -> None:
        """Emit the boundary ``boundary`` for ``turn_id`` at ``t_ms`` (default: now)."""
        t = self.clock.now_ms() if t_ms is None else t_ms
        self.bus.emit(Boundary(boundary, t, self.call_id, turn_id, estimated, data))  # type: ignore[arg-type]

    def emit(self, event: Event) -> None:
        self.bus.emit(event)


async def timed_llm(st: Stamper, turn_id: int, llm: LLMPort,
                    request: LLMRequest) -> AsyncIterator[LLMDelta]:
    """Stream ``llm`` for ``request``, stamping ``llm_request`` (with the model, the number of
    messages and of tools offered) and ``llm_first_token`` (the first text or tool call)."""
    st.stamp("llm_request", turn_id, model=llm.model_name, messages=len(request.messages),
             tools=len(request.tools))
    first = True
    stream = llm.stream(request)
    try:
        async for delta in stream:
            if first and delta:
                st.stamp("llm_first_token", turn_id)
                first = False
            yield delta
    finally:
        await stream.aclose()  # type: ignore[attr-defined]


async def timed_tts(st: Stamper, turn_id: int, chunk: int, tts: TTSPort, text: str) -> AsyncIterator[TTSAudio]:
    """Stream ``tts`` for one text chunk, stamping request and first audio."""
    st.stamp("tts_request", turn_id, chunk=chunk, voice=tts.voice_name)
    first = True
    stream = tts.stream(text)
    try:
        async for piece in stream:
            if first and len(piece.pcm):
                st.stamp("tts_first_audio", turn_id, chunk=chunk)
                first = False
            yield piece
    finally:
        await stream.aclose()  # type: ignore[attr-defined]


async def watch(stream: AsyncIterator, clock: Clock, first_ms: float, gap_ms: float, what: str):
    """Re-yield ``stream``; raise :class:`WatchdogTimeout` when its first item takes longer than
    ``first_ms`` or a later one longer than ``gap_ms`` (ms on the call clock, so scripted
    timelines with a virtual clock exercise the watchdogs too)."""
    first = True
    nxt: asyncio.Future | None = None
    try:
        while True:
            limit = first_ms if first else gap_ms
            nxt = asyncio.ensure_future(anext(stream))
            try:
                item = await wait_within(clock, nxt, limit)
            except TimeoutError:
                raise WatchdogTimeout(f"{what}: nothing for {limit:.0f} ms") from None
            except StopAsyncIteration:
                return
            nxt = None
            first = False
            yield item
    finally:
        if nxt is not None and not nxt.done():  # never close a generator another task is running
            nxt.cancel()
            await asyncio.gather(nxt, return_exceptions=True)
        await stream.aclose()  # type: ignore[attr-defined]
