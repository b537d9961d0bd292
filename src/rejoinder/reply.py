"""One agent reply: plan → tools → first clause → LLM continuation → TTS → playout.

A reply runs in its own task group; cancelling its task is barge-in. Text flows through a small
queue to the TTS consumer so the first clause is synthesized and played while the LLM is still
generating the rest. Every piece of audio is sent with the reply's ``turn_id``; the playout drops
audio of a stale turn, so output of a cancelled reply can never reach the caller.

After the reply ends (or is cut) :meth:`Reply.heard` computes exactly which words the caller heard,
from the TTS word timings when the engine gives them, otherwise by the heard fraction of the audio
(flagged ``estimated``); only those words go into the LLM context.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Protocol

import numpy as np
import soxr

from .events import AgentSpeech, ErrorEvent, LlmToken, SpeakableText, ToolCallEvent
from .line import Playout
from .ports import LLMPort, LLMRequest, TTSPort
from .stages import Stamper, timed_llm, timed_tts
from .text import SpeakableChunker, normalize_for_speech


class Application(Protocol):
    """What the runtime needs from an application (see :mod:`rejoinder.app.assistant`)."""

    def respond(self, text: str) -> Any: ...


@dataclass
class _Spoken:
    text: str           # as written
    start: int          # first sample on the line
    samples: int = 0
    words: list[tuple[str, float, float]] = field(default_factory=list)  # spoken words, ms in chunk
    spoken: str = ""


@dataclass
class ReplyParts:
    """What the application decided for a turn: tool calls already executed by the runtime are
    reported through ``tools``; ``first_clause`` is spoken at once; ``llm_request`` continues."""

    first_clause: str
    llm_request: LLMRequest | None


class Reply:
    """Runs one reply for ``turn_id`` on ``playout`` at the line rate (int16 mono)."""

    def __init__(self, st: Stamper, turn_id: int, playout: Playout, tts: TTSPort,
                 llm: LLMPort | None) -> None:
        self.st = st
        self.turn_id = turn_id
        self.playout = playout
        self.tts = tts
        self.llm = llm
        self.spoken: list[_Spoken] = []
        self.done = asyncio.Event()
        self.full_text = ""
        self._resampler = (None if tts.sample_rate == playout.rate else
                           soxr.ResampleStream(tts.sample_rate, playout.rate, 1, dtype="int16"))

    async def speak(self, first_clause: str, request: LLMRequest | None) -> None:
        """Speak ``first_clause`` then the LLM's continuation; returns when the audio is queued."""
        queue: asyncio.Queue[str | None] = asyncio.Queue()
        self.playout.begin(self.turn_id)
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._produce(first_clause, request, queue))
            tg.create_task(self._synthesize(queue))
        self.playout.end_reply(self.turn_id)

    async def _produce(self, first_clause: str, request: LLMRequest | None,
                       queue: asyncio.Queue[str | None]) -> None:
        try:
            if first_clause:
                queue.put_nowait(first_clause)
            if request is not None and self.llm is not None:
                chunker = SpeakableChunker()
                try:
                    async for delta in timed_llm(self.st, self.turn_id, self.llm, request):
                        self.st.emit(LlmToken(delta, self.st.now(), self.st.call_id, self.turn_id))
                        for chunk in chunker.push(delta):
                            queue.put_nowait(chunk)
                except Exception as exc:  # LLM failed mid-reply: keep what was said, close politely
                    self.st.emit(ErrorEvent("llm", repr(exc), True, self.st.now(), self.st.call_id,
                                            self.turn_id))
                for chunk in chunker.flush():
                    queue.put_nowait(chunk)
        finally:
            queue.put_nowait(None)

    async def _synthesize(self, queue: asyncio.Queue[str | None]) -> None:
        index = 0
        while (text := await queue.get()) is not None:
            spoken = normalize_for_speech(text)
            if not spoken.strip():
                self.full_text += text
                continue
            self.st.emit(SpeakableText(text, spoken, index, self.st.now(), self.st.call_id, self.turn_id))
            if index == 0:
                self.st.stamp("first_speakable_text", self.turn_id)
            rec = _Spoken(text, self.playout.reply.queued if self.playout.reply else 0, spoken=spoken)
            self.spoken.append(rec)
            self.full_text += text
            offset_ms = 0.0
            async for piece in timed_tts(self.st, self.turn_id, index, self.tts, spoken):
                for w, a, b in piece.words:
                    rec.words.append((w, a + offset_ms, b + offset_ms))
                offset_ms += 1000.0 * len(piece.pcm) / self.tts.sample_rate
                pcm = piece.pcm if self._resampler is None else self._resampler.resample_chunk(piece.pcm)
                rec.samples += len(pcm)
                if not self.playout.send(self.turn_id, pcm, self.st.now()):
                    return  # stale: the reply was cut
            index += 1
        if self._resampler is not None:
            tail = self._resampler.resample_chunk(np.zeros(0, dtype=np.int16), last=True)
            if len(tail) and self.spoken:
                self.spoken[-1].samples += len(tail)
                self.playout.send(self.turn_id, tail, self.st.now())

    def heard(self, played: int) -> tuple[str, bool]:
        """(text the caller heard, estimated?) given ``played`` samples of this reply."""
        heard: list[str] = []
        estimated = False
        for rec in self.spoken:
            if played >= rec.start + rec.samples:
                heard.append(rec.text)
                continue
            into = played - rec.start
            if into <= 0:
                break
            written = rec.text.split()
            spoken_words = rec.spoken.split()
            if rec.words:
                ms = 1000.0 * into / self.playout.rate
                n_spoken = sum(1 for _, _, end in rec.words if end <= ms)
                frac = n_spoken / max(1, len(rec.words))
                exact = len(written) == len(spoken_words) == len(rec.words)
            else:
                frac = into / max(1, rec.samples)
                exact = False
            n = int(len(written) * frac + 1e-9)
            estimated = estimated or not exact
            if n:
                heard.append(" ".join(written[:n]))
            break
        return " ".join(h.strip() for h in heard).strip(), estimated
