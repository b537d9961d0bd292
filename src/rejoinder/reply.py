"""One agent reply: first clause → LLM continuation → TTS → playout, with mid-stream recovery.

A reply runs in its own task group; cancelling its task is barge-in. Text flows through a small
queue to the TTS consumer so the first clause is synthesized and played while the LLM is still
generating the rest. Every piece of audio is sent with the reply's ``turn_id``; the playout drops
audio of a stale turn, so output of a cancelled reply never reaches the caller.

Recovery (each one is a :class:`~rejoinder.events.Recovery` event on the timeline):

* TTS fails or stalls mid-chunk → the audio already queued is trimmed back to the end of the last
  whole word, and the rest of the chunk resumes from the next word on a retry, then on the backup
  TTS. Word ends come from the TTS word timings, else from the speaking rate (flagged estimated).
  Watchdog: no first audio within ``tts_first_audio_ms``.
* The reply's first TTS audio is trimmed of the engine's leading silence (``_leading_silence``).
* LLM fails or stalls after partial output → one retry that continues the same text (``prefix`` =
  everything generated so far); if that fails and nothing was said, a short recovery line.
  Watchdogs: ``llm_first_token_ms`` before the first token, ``llm_stall_ms`` between tokens.

:meth:`Reply.heard` computes exactly which words the caller heard; only those go into the context.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import AsyncIterator, Callable

import numpy as np
import soxr
from pydantic import BaseModel, ConfigDict

from .clock import Clock, wait_within
from .events import ErrorEvent, LlmToken, Recovery, SpeakableText
from .line import Playout
from .ports import LLMPort, LLMRequest, PortError, TTSPort
from .stages import Stamper, timed_llm, timed_tts
from .text import SpeakableChunker, SpeechNormalizer

RECOVERY_LINE = "Sorry, I lost my train of thought. Could you say that again?"


class RecoveryPolicy(BaseModel):
    """Watchdog limits (ms) and retries for a reply."""

    model_config = ConfigDict(extra="forbid")
    tts_first_audio_ms: float = 600.0
    tts_stall_ms: float = 500.0
    llm_first_token_ms: float = 2500.0
    llm_stall_ms: float = 700.0
    tts_retries: int = 1
    llm_retries: int = 1
    tail_margin_ms: float = 300.0  # an optional continuation must be ready this long before the
    # queued audio runs out, so the deterministic tail can still be synthesized without a gap


class WatchdogTimeout(PortError):
    """A stage produced nothing within its watchdog limit."""


@dataclass
class _Spoken:
    """One TTS request's audio on the line (the words are what was sent to TTS)."""

    words: list[str]
    start: int                      # first sample on the line (reply-relative)
    text: str | None = None         # the chunk as written, while this record covers all of it
    samples: int = 0
    timings: list[tuple[str, float, float]] = field(default_factory=list)  # ms within this piece


async def _watch(stream: AsyncIterator, clock: Clock, first_ms: float, gap_ms: float, what: str):
    """Re-yield ``stream``; raise WatchdogTimeout when an item takes longer than the limit on the
    call clock (so scripted timelines with a virtual clock exercise the watchdogs too)."""
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
        await stream.aclose()


LEAD_LEVEL = 328       # int16 peak ≈ -40 dBFS: the playout's "voiced" level
LEAD_MARGIN_MS = 15.0  # kept before the first voiced sample so the onset is not clipped


def _leading_silence(pcm: np.ndarray, rate: int) -> int:
    """Samples of leading silence in int16 ``pcm`` to drop (keeping ``LEAD_MARGIN_MS``).
    Piper starts every sentence with ≈ 40–60 ms of silence, which the caller would wait through
    before the first voiced sample (``playback_start``); between sentences pauses are kept."""
    loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) >= LEAD_LEVEL)
    if not len(loud):
        return 0
    return max(0, int(loud[0]) - int(rate * LEAD_MARGIN_MS / 1000))


class Reply:
    """Runs one reply for ``turn_id`` on ``playout`` at the line rate (int16 mono)."""

    def __init__(self, st: Stamper, turn_id: int, playout: Playout, tts: TTSPort,
                 llm: LLMPort | None, *, backup_tts: TTSPort | None = None,
                 recovery: RecoveryPolicy | None = None) -> None:
        self.st = st
        self.turn_id = turn_id
        self.playout = playout
        self.tts = tts
        self.backup_tts = backup_tts
        self.llm = llm
        self.policy = recovery or RecoveryPolicy()
        self.spoken: list[_Spoken] = []
        self.full_text = ""
        self.estimated = False
        self._index = 0
        self._samples_per_char: float | None = None
        self._guard: Callable[[str], bool] | None = None
        self._first_audio = asyncio.Event()  # set once the first chunk is on the line (or failed)

    # --- text -------------------------------------------------------------------------------
    async def speak(self, first_clause: str, request: LLMRequest | None, tail: str = "",
                    guard: Callable[[str], bool] | None = None) -> None:
        """Speak ``first_clause`` then the LLM's continuation of ``request`` — or ``tail`` when
        there is no request or the LLM gave nothing. With a ``guard``, the continuation is held
        back until complete and spoken only if ``guard(text)`` accepts it (else ``tail``); the
        first clause is playing meanwhile, so this costs no latency. Returns when all audio is
        queued."""
        queue: asyncio.Queue[str | None] = asyncio.Queue()
        self.playout.begin(self.turn_id)
        self._guard = guard
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._produce(first_clause, request, queue, tail))
            tg.create_task(self._synthesize(queue))
        self.playout.end_reply(self.turn_id)

    def _recovered(self, stage: str, action: str, reason: str, resume_from: str) -> None:
        self.st.emit(Recovery(stage, action, reason, resume_from, self.st.now(), self.st.call_id,
                              self.turn_id))

    async def _produce(self, first_clause: str, request: LLMRequest | None,
                       queue: asyncio.Queue[str | None], tail: str = "") -> None:
        try:
            if first_clause:  # split at its first safe clause boundary: a shorter first chunk
                head = SpeakableChunker()  # is synthesized sooner (Piper works per sentence)
                for chunk in head.push(first_clause) + head.flush():
                    queue.put_nowait(chunk)
            if request is None or self.llm is None:
                if tail:
                    queue.put_nowait((" " if first_clause else "") + tail)
                return
            if first_clause:
                # the first clause's synthesis is on the critical path: let it have the CPU
                # before the LLM starts (the continuation is needed only after it has played)
                await self._first_audio.wait()
            guard = self._guard
            held: list[str] = []
            chunker = SpeakableChunker()
            cont = asyncio.ensure_future(self._continue(request, first_clause, chunker, held, queue))
            budget = self._continuation_budget() if (guard and tail and first_clause) else None
            try:
                generated = await (cont if budget is None else wait_within(self.st.clock, cont, budget))
            except TimeoutError:
                # the continuation is optional (the tail states the same facts): it must be ready
                # before the first clause has played out, or the caller would hear a silence
                cont.cancel()
                await asyncio.gather(cont, return_exceptions=True)
                self._recovered("llm", "skipped", f"continuation not ready within {budget:.0f} ms "
                                "(before the first clause ends)", "")
                held.clear()
                generated = ""
                guard = None
            else:
                held.extend(chunker.flush()) if guard else [queue.put_nowait(c) for c in chunker.flush()]
            if guard is not None:
                if guard("".join(held)):
                    for chunk in held:
                        queue.put_nowait(chunk)
                else:
                    self._recovered("llm", "ungrounded", "continuation not grounded in the facts",
                                    "".join(held).strip()[:80])
                    generated = ""
            if not generated.strip() and tail:
                queue.put_nowait((" " if first_clause else "") + tail)
        finally:
            queue.put_nowait(None)

    def _continuation_budget(self) -> float:
        """ms until the audio already queued for this reply runs out, less the time the tail's
        synthesis needs (``tail_margin_ms``)."""
        r = self.playout.reply
        left = 1000.0 * (r.queued - r.played) / self.playout.rate if r is not None else 0.0
        return max(0.0, left - self.policy.tail_margin_ms)

    async def _continue(self, request: LLMRequest, first_clause: str, chunker: SpeakableChunker,
                        held: list[str], queue: asyncio.Queue[str | None]) -> str:
        """Stream the LLM continuation (retrying once after a failure, from the text so far) into
        ``held`` (guarded) or straight to ``queue``; return the generated text."""
        guard = self._guard
        generated = ""
        for attempt in range(self.policy.llm_retries + 1):
            req = request if attempt == 0 else LLMRequest(
                request.messages, max(8, request.max_tokens - len(generated) // 4),
                request.temperature, request.json_schema, request.prefix + generated, request.stop)
            try:
                stream = timed_llm(self.st, self.turn_id, self.llm, req)
                async for delta in _watch(stream, self.st.clock, self.policy.llm_first_token_ms,
                                          self.policy.llm_stall_ms, "llm"):
                    generated += delta
                    self.st.emit(LlmToken(delta, self.st.now(), self.st.call_id, self.turn_id))
                    for chunk in chunker.push(delta):
                        (held.append if guard else queue.put_nowait)(chunk)
                break
            except Exception as exc:
                for chunk in chunker.flush():  # say what we have while we recover
                    (held.append if guard else queue.put_nowait)(chunk)
                if attempt < self.policy.llm_retries:
                    self._recovered("llm", "retry", repr(exc), generated[-40:])
                    continue
                if not first_clause and not generated.strip():
                    self._recovered("llm", "recovery_line", repr(exc), "")
                    queue.put_nowait(RECOVERY_LINE)
                else:
                    self._recovered("llm", "give_up", repr(exc), "")
        return generated

    # --- audio ------------------------------------------------------------------------------
    async def _synthesize(self, queue: asyncio.Queue[str | None]) -> None:
        norm = SpeechNormalizer()  # each chunk is read with the reply's earlier text as context
        while (text := await queue.get()) is not None:
            self.full_text += text
            spoken = norm.feed(text)
            if not spoken.strip():
                self._first_audio.set()
                continue
            self.st.emit(SpeakableText(text, spoken, self._index, self.st.now(), self.st.call_id,
                                       self.turn_id))
            if self._index == 0:
                self.st.stamp("first_speakable_text", self.turn_id)
            ok = await self._speak_chunk(spoken.split(), text.strip())
            self._first_audio.set()
            if not ok:
                return  # stale: the reply was cut

    async def _speak_chunk(self, words: list[str], written: str) -> bool:
        engines = [self.tts] * (1 + self.policy.tts_retries)
        if self.backup_tts is not None:
            engines.append(self.backup_tts)
        for attempt, tts in enumerate(engines):
            rec = _Spoken(words, self.playout.reply.queued if self.playout.reply else 0,
                          text=written if attempt == 0 else None)
            self.spoken.append(rec)
            try:
                return await self._tts_once(tts, rec)
            except Exception as exc:
                kept = self._trim_to_whole_words(rec, tts.sample_rate)
                words = words[kept:]
                if not words:
                    return True
                action = "retry" if attempt + 1 < len(engines) - (self.backup_tts is not None) else "backup"
                if attempt + 1 >= len(engines):
                    self._recovered("tts", "give_up", repr(exc), " ".join(words))
                    self.st.emit(ErrorEvent("tts", repr(exc), False, self.st.now(), self.st.call_id,
                                            self.turn_id))
                    return True
                self._recovered("tts", action, repr(exc), " ".join(words))
        return True

    async def _tts_once(self, tts: TTSPort, rec: _Spoken) -> bool:
        index = self._index
        self._index += 1
        resampler = (None if tts.sample_rate == self.playout.rate else
                     soxr.ResampleStream(tts.sample_rate, self.playout.rate, 1, dtype="int16"))
        offset_ms = 0.0
        trim = index == 0  # the reply's very first audio: drop the engine's leading silence
        stream = timed_tts(self.st, self.turn_id, index, tts, " ".join(rec.words))
        async for piece in _watch(stream, self.st.clock, self.policy.tts_first_audio_ms,
                                 self.policy.tts_stall_ms, "tts"):
            raw = piece.pcm
            if trim:
                trim = False
                cut = _leading_silence(raw, tts.sample_rate)
                raw = raw[cut:]
                offset_ms -= 1000.0 * cut / tts.sample_rate
            for w, a, b in piece.words:
                rec.timings.append((w, max(0.0, a + offset_ms), max(0.0, b + offset_ms)))
            offset_ms += 1000.0 * len(piece.pcm) / tts.sample_rate
            pcm = raw if resampler is None else resampler.resample_chunk(raw)
            if not self._send(rec, pcm):
                return False
        if resampler is not None:
            tail = resampler.resample_chunk(np.zeros(0, dtype=np.int16), last=True)
            if not self._send(rec, tail):
                return False
        if rec.samples:
            chars = sum(len(w) + 1 for w in rec.words)
            self._samples_per_char = rec.samples / max(1, chars)
        return True

    def _send(self, rec: _Spoken, pcm: np.ndarray) -> bool:
        if len(pcm) == 0:
            return True
        if not self.playout.send(self.turn_id, pcm, self.st.now()):
            return False
        self._first_audio.set()
        rec.samples += len(pcm)
        return True

    def _word_ends(self, rec: _Spoken) -> list[int]:
        """Sample offset (line rate, within ``rec``) where each word ends."""
        rate = self.playout.rate
        if rec.timings and len(rec.timings) == len(rec.words):
            return [int(end * rate / 1000) for _, _, end in rec.timings]
        self.estimated = True
        spc = self._samples_per_char or rate / 14.0  # ≈14 characters per second of speech
        ends, pos = [], 0
        for w in rec.words:
            pos += len(w) + 1
            ends.append(int(pos * spc))
        return ends

    def _trim_to_whole_words(self, rec: _Spoken, tts_rate: int) -> int:
        """After a failure: keep only whole words of ``rec`` on the line; return how many."""
        ends = self._word_ends(rec)
        kept = sum(1 for e in ends if e <= rec.samples)
        keep_samples = ends[kept - 1] if kept else 0
        keep_samples = min(keep_samples, rec.samples)
        if self.playout.reply is not None and self.playout.reply.turn_id == self.turn_id:
            self.playout.truncate(self.turn_id, rec.start + keep_samples)
        rec.samples = max(0, min(rec.samples, keep_samples))
        rec.text = None
        rec.words = rec.words[:kept]
        rec.timings = rec.timings[:kept]
        return kept

    def heard(self, played: int) -> tuple[str, bool]:
        """(words the caller heard, estimated?) given ``played`` samples of this reply."""
        heard: list[str] = []
        estimated = self.estimated
        for rec in self.spoken:
            if not rec.words or rec.samples == 0:
                continue
            if played >= rec.start + rec.samples:
                heard.extend(rec.text.split() if rec.text else rec.words)
                continue
            into = played - rec.start
            if into <= 0:
                break
            ends = self._word_ends(rec)
            estimated = estimated or not (rec.timings and len(rec.timings) == len(rec.words))
            heard.extend(w for w, e in zip(rec.words, ends) if e <= into)
            break
        return " ".join(heard), estimated
