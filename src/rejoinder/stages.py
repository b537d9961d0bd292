"""Timing wrappers: the one place where port calls are stamped on the call clock.

Adapters never time themselves; every LLM and TTS request of a reply goes through these wrappers,
which emit ``llm_request`` / ``llm_first_token`` and ``tts_request`` / ``tts_first_audio``
boundaries. A fault-injection wrapper (if configured) sits *inside* these, so injected delays are
measured like real ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, AsyncIterator

from .clock import Clock
from .events import Boundary, Event, EventBus
from .ports import LLMPort, LLMRequest, TTSAudio, TTSPort


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


async def timed_llm(st: Stamper, turn_id: int, llm: LLMPort, request: LLMRequest) -> AsyncIterator[str]:
    """Stream ``llm`` for ``request``, stamping request and first token."""
    st.stamp("llm_request", turn_id, model=llm.model_name)
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
