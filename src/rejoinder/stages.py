"""Timing wrappers: the one place where port calls are stamped on the call clock.

Adapters never time themselves; every STT, LLM and TTS request goes through these wrappers, which
emit ``stt_request`` / ``stt_end``, ``llm_request`` / ``llm_first_token`` / ``llm_end`` and
``tts_request`` / ``tts_first_audio`` / ``tts_end`` boundaries. An ``*_end`` boundary is stamped
when the request's stream is closed, however it ended: ``data["outcome"]`` is ``ok``,
``cancelled`` (barge-in, a newer speculative transcription, a watchdog) or ``error``. A
fault-injection wrapper (if configured) sits *inside* these, so injected delays are measured like
real ones; :func:`watch` puts watchdogs on any stream.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, AsyncIterable, AsyncIterator, Callable

from .clock import Clock
from .events import Boundary, Event, EventBus
from .ports import (LLMDelta, LLMPort, LLMRequest, PortError, ServerTiming, STTPort, ToolDecision,
                    Transcript, TTSAudio, TTSPort)


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


def _outcome(exc: BaseException | None) -> str:
    if exc is None:
        return "ok"
    return "cancelled" if isinstance(exc, (asyncio.CancelledError, GeneratorExit)) else "error"


async def _until_closed(st: Stamper, turn_id: int, stream: AsyncIterator[Any], end: str,
                        each: Callable[[Any], None], data: dict[str, Any]) -> AsyncIterator[Any]:
    """Re-yield ``stream`` (``each`` sees every item); when it closes, however it ended, close the
    port's stream and stamp ``end`` with its outcome and ``data`` (read at that moment)."""
    exc = None
    try:
        async for item in stream:
            each(item)
            yield item
    except BaseException as e:
        exc = e
        raise
    finally:
        await stream.aclose()  # type: ignore[attr-defined]
        st.stamp(end, turn_id, outcome=_outcome(exc), **data)


async def timed_stt(st: Stamper, turn_id: int, stt: STTPort,
                    audio: AsyncIterable[Any]) -> AsyncIterator[Transcript]:
    """Stream ``stt`` over one utterance, stamping ``stt_request`` and ``stt_end``
    (``data``: ``outcome``, ``final`` — whether a final transcript came back)."""
    st.stamp("stt_request", turn_id)
    data = {"final": False}

    def each(tr: Transcript) -> None:
        data["final"] = data["final"] or tr.final

    async for tr in _until_closed(st, turn_id, stt.stream(audio), "stt_end", each, data):
        yield tr


async def timed_llm(st: Stamper, turn_id: int, llm: LLMPort, request: LLMRequest, *,
                    step: int = 0, retry: int = 0) -> AsyncIterator[LLMDelta]:
    """Stream ``llm`` for ``request``, stamping ``llm_request`` (``data``: model, provider, the
    number of messages, max_tokens, temperature, the number of tools offered, and the reply's
    ``step`` — 0 for its first request, k after k tool rounds — and ``retry``, the attempt after
    a failed stream, 0 for the first), ``llm_first_token``
    (the first text or tool call), ``tool_decided`` when a scoring backend's
    :class:`~rejoinder.ports.ToolDecision` arrives (``data``: chosen, margin, threshold, source,
    scores) and ``llm_end`` (``data``: outcome,
    ``deltas`` — text deltas streamed, one token each for llama.cpp and OpenAI-style streams —
    ``tool_calls``, and ``server``: the :class:`~rejoinder.ports.ServerTiming` the server reported,
    as a dict, when it did). A ``ServerTiming`` is recorded, not re-yielded."""
    st.stamp("llm_request", turn_id, model=llm.model_name, provider=getattr(llm, "provider", "unknown"),
             messages=len(request.messages), max_tokens=request.max_tokens,
             temperature=request.temperature, tools=len(request.tools), step=step, retry=retry)
    data = {"deltas": 0, "tool_calls": 0}

    def each(delta: LLMDelta) -> None:
        if isinstance(delta, ToolDecision):
            st.stamp("tool_decided", turn_id, **delta.as_dict())
            return
        if isinstance(delta, ServerTiming):
            data["server"] = delta.as_dict()
            return
        if delta and not (data["deltas"] or data["tool_calls"]):
            st.stamp("llm_first_token", turn_id)
        if isinstance(delta, str):
            data["deltas"] += 1 if delta else 0
        else:
            data["tool_calls"] += 1

    async for delta in _until_closed(st, turn_id, llm.stream(request), "llm_end", each, data):
        if not isinstance(delta, ServerTiming):
            yield delta


async def timed_tts(st: Stamper, turn_id: int, chunk: int, tts: TTSPort, text: str) -> AsyncIterator[TTSAudio]:
    """Stream ``tts`` for one text chunk, stamping ``tts_request``, ``tts_first_audio`` and
    ``tts_end`` (``data``: chunk, outcome, ``audio_ms`` synthesized)."""
    st.stamp("tts_request", turn_id, chunk=chunk, voice=tts.voice_name)
    data: dict[str, Any] = {"chunk": chunk, "audio_ms": 0.0}
    samples = [0]

    def each(piece: TTSAudio) -> None:
        if len(piece.pcm) and not samples[0]:
            st.stamp("tts_first_audio", turn_id, chunk=chunk)
        samples[0] += len(piece.pcm)
        data["audio_ms"] = round(1000.0 * samples[0] / tts.sample_rate, 1)

    async for piece in _until_closed(st, turn_id, tts.stream(text), "tts_end", each, data):
        yield piece


class _Watchdog:
    """One timer per watched stream (not one per item): while :meth:`arm`-ed, a deadline on the
    call clock; when it passes, the consuming task is cancelled (and the cancellation turned into
    :class:`WatchdogTimeout` by :func:`watch`). Re-arming only moves the deadline: the timer task
    wakes at the old one, sees it moved, and sleeps on, so a 10 ms-per-token stream under a
    2.5 s stall limit wakes it about once per 2.5 s."""

    __slots__ = ("clock", "task", "deadline", "fired", "_park", "_timer", "_sleep_until")

    def __init__(self, clock: Clock, task: asyncio.Task) -> None:
        self.clock = clock
        self.task = task
        self.deadline: float | None = None
        self.fired = False
        self._park: asyncio.Future | None = None
        self._timer: asyncio.Task | None = None
        self._sleep_until: float | None = None

    def arm(self, limit_ms: float) -> None:
        self.deadline = d = self.clock.now_ms() + limit_ms
        if self._timer is not None and self._sleep_until is not None and d < self._sleep_until:
            self._timer.cancel()  # sleeping past the new, earlier deadline (first → gap limit)
            self._timer = None
        if self._timer is None:
            self._sleep_until = None
            self._timer = asyncio.get_running_loop().create_task(self._run())
        elif self._park is not None and not self._park.done():
            self._park.set_result(None)

    def disarm(self) -> None:
        self.deadline = None

    async def _run(self) -> None:
        clock = self.clock
        while True:
            d = self.deadline
            if d is None:  # the consumer is busy with the last item: wait for the next arm
                self._sleep_until = None
                self._park = asyncio.get_running_loop().create_future()
                await self._park
                continue
            if clock.now_ms() >= d:
                self.fired = True
                self.task.cancel()
                return
            self._sleep_until = d
            await clock.sleep_until(d)

    def close(self) -> None:
        if self._timer is not None and not self._timer.done():
            self._timer.cancel()


async def watch(stream: AsyncIterator, clock: Clock, first_ms: float,
                gap_ms: float | Callable[[], float], what: str,
                preliminary: Callable[[Any], bool] | None = None):
    """Re-yield ``stream``; raise :class:`WatchdogTimeout` when its first item takes longer than
    ``first_ms`` or a later one longer than ``gap_ms`` (ms on the call clock, so scripted
    timelines with a virtual clock exercise the watchdogs too; a callable is read before each
    item, so the consumer can relax the limit for a stream it knows to be buffered). An item for
    which ``preliminary(item)`` holds (an LLM's tool decision) is progress but not the first
    item: the first-item limit starts again after it. The stream is read in the consumer's own
    task, with one timer task per stream: no task per item (per LLM token)."""
    task = asyncio.current_task()
    assert task is not None
    dog = _Watchdog(clock, task)
    first = True
    try:
        while True:
            limit = first_ms if first else (gap_ms() if callable(gap_ms) else gap_ms)
            dog.arm(limit)
            try:
                item = await anext(stream)
            except StopAsyncIteration:
                return
            except asyncio.CancelledError:
                if dog.fired and task.uncancel() == 0:  # ours, not a barge-in's
                    raise WatchdogTimeout(f"{what}: nothing for {limit:.0f} ms") from None
                raise
            finally:
                dog.disarm()
            first = preliminary is not None and preliminary(item) and first
            yield item
    finally:
        dog.close()
        await stream.aclose()  # type: ignore[attr-defined]
