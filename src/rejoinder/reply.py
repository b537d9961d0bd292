"""The speech side of a reply: text → speakable chunks → TTS → playout, with mid-stream recovery.

A reply runs in its own task group; cancelling its task is barge-in. :meth:`Reply.speak` reads
:class:`~rejoinder.respond.Say` items (LLM text deltas as they are generated, or words the
runtime says on its own), cuts them into speakable chunks (:class:`~rejoinder.text.SpeakableChunker`)
and synthesizes chunk after chunk while the LLM is still writing. Every piece of audio is sent
with the reply's ``turn_id``; the playout drops audio of a stale turn, so output of a cancelled
reply never reaches the caller.

Words the LLM did not write are marked: each :class:`~rejoinder.events.SpeakableText` carries its
``source``, and the playout stamps ``answer_start`` at the first voiced sample of LLM-written audio
(time to answer; equal to ``playback_start`` unless the runtime spoke first). Fillers
(:class:`FillerPolicy`) are such words: off by default.

Recovery (each one a :class:`~rejoinder.events.Recovery` event on the timeline):

* TTS fails or stalls mid-chunk → the audio already queued is trimmed back to the end of the last
  whole word, and the rest of the chunk resumes from the next word on a retry, then on the backup
  TTS. Word ends come from the TTS word timings, else from the speaking rate (flagged estimated).
* No first audio within the watchdog (``tts_first_audio_ms`` plus ``tts_first_audio_per_char_ms``
  per character: a long chunk takes longer to synthesize) → the identical request is never sent
  to the same engine again: it goes to the backup TTS.
* The reply's first TTS audio is trimmed of the engine's leading silence (``_leading_silence``).

:meth:`Reply.heard` computes exactly which words the caller heard; only those go into the context.

Repeated words (:meth:`Reply.repeated_words`, summed per call as ``repeated_words`` by the fault
sweep): every recovery that continues the reply (a TTS retry or backup, an LLM retry marked by
``Say.resume``) is a *recovery point* in the spoken words the caller heard, in line order. At
each point, the longest run of words heard just before it that is heard again just after it
(:func:`repeated_across`) was said twice; a recovery that resumes from the word after the last
one heard repeats none.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from typing import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator, Sequence

import numpy as np
import soxr
from pydantic import BaseModel, ConfigDict, Field

from .clock import wait_within
from .events import ErrorEvent, Recovery, SpeakableText
from .line import Playout
from .phrases import RenderedPhrases, phrase_key
from .ports import TTSPort
from .stages import Stamper, WatchdogTimeout, timed_tts, watch
from .text import SpeakableChunker, SpeechNormalizer, normalize_for_speech



@dataclass(frozen=True, slots=True)
class Say:
    """Text for the speech side. ``source`` tells who wrote it: ``"llm"``, or words the runtime
    says on its own (``"greeting"``, ``"filler"``, ``"recovery"``, ``"idle"``). ``flush`` ends the
    current chunk (a tool round is coming: speak what is pending now); ``wait_ms`` is then the
    round's expected duration (the tools' declared or observed latency, :meth:`Tool.expected_ms`;
    ``reading_ms`` the LLM's expected wait to read the results up to words it can say, None
    when neither observed nor declared), written at ``at_ms`` (call clock, ms) — what the
    speech side's filler policy decides on. ``step``: the index of the LLM step that wrote it
    (:class:`rejoinder.conversation.Step`), so that what the caller heard goes back to the step
    that wrote it. ``tools``: with flush, a tool round whose results the LLM reads next (not a
    retry's flush, nor call control): it may be filled, and the text reading the results starts
    with a tighter first chunk (:data:`AFTER_TOOLS_FIRST_WORDS`)."""

    text: str
    source: str = "llm"
    flush: bool = False
    step: int = 0
    wait_ms: float = 0.0  # with flush: the tool round coming is expected to take this long
    at_ms: float = 0.0    # when the item was written (call clock)
    resume: bool = False  # what follows continues the reply after a recovery (an LLM retry)
    tools: bool = False   # with flush: a tool round that may be filled (results read next)
    reading_ms: float | None = None  # with tools: the LLM's expected reading wait (None: unknown)
    held: bool = False    # with tools: the round waits for the turn's confirmation (an
    #                       irreversible tool in a tentative draft), so it starts when spoken


class RecoveryPolicy(BaseModel):
    """Watchdog limits (ms) and retries for a reply, and whether the runtime may say a recovery
    line itself when the LLM could not say anything (a declared policy, marked on the timeline)."""

    model_config = ConfigDict(extra="forbid")
    tts_first_audio_ms: float = 600.0
    tts_first_audio_per_char_ms: float = 6.0
    tts_stall_ms: float = 500.0
    llm_first_token_ms: float = 2500.0
    llm_stall_ms: float = 700.0
    llm_in_process_first_token_ms: float = Field(
        8000.0, gt=0, description="first-token watchdog of an LLM that runs in this process (its "
        "port's in_process attribute, e.g. LlamaLLM) instead of llm_first_token_ms: its requests "
        "queue on this machine's CPU, so a late first token means the CPU is busy (other calls, "
        "other programs), not a dead server, and a retry would queue behind the same work. The "
        "harness's simulated caller waits 10 s for a reply")
    llm_in_process_stall_ms: float = Field(
        3000.0, gt=0, description="the stall watchdog between tokens of an in-process LLM "
        "(instead of llm_stall_ms): a token of SmolLM2-135M took up to 650 ms on a 2-core box "
        "shared with other CPU-heavy work")
    tts_retries: int = 1
    llm_retries: int = 1
    recovery_line: bool = True
    stt_check_ms: float = Field(2000.0, gt=0, description="watchdog on the transcript of short "
                                "caller speech over a reply (the reply is held meanwhile); "
                                "on timeout the sound counts as noise and the reply resumes")
    stt_interim_stall_ms: float = Field(1000.0, gt=0, description="an interim transcript with "
                                        "nothing after it for this long is taken as final")
    llm_clump_tokens: int = Field(3, ge=2, description="tokens arriving at one instant after a "
                                  "gap: the stream is buffered on its way (a proxy), not stalled")


class FillerPolicy(BaseModel):
    """Words the runtime may say on its own while the LLM's answer is not ready. A filler is
    not the answer, so the timeline marks it (``source="filler"``) and each turn reports both
    V2V and time to answer. Two declared policies:

    * ``tools`` (on): when the LLM calls tools whose round is expected to take at least
      ``tool_wait_ms`` more, say a filler before waiting. The round is the tools (each one's
      declared ``latency_ms``, else the median of its observed runs:
      :meth:`rejoinder.tools.Tool.expected_ms`) and then the LLM reading their results up to
      its first words the speech side can say (the median this process observed for that LLM:
      :func:`rejoinder.respond.expected_reading_ms`; before its first tool round in the
      process, the LLM adapter's declared ``reading_prior_ms``, else this policy's, so that the
      first lookup of a process is not dead air). Never for a call-control round
      (``Tool.filler`` False: ``end_call``, ``transfer_to_human``), a
      round known to be quick, nor one already over when the reply gets there (a preemptive
      draft ran it). A quick round is filled too when the caller, by the time the round's
      answer is expected, will have heard ``silence_budget_ms`` of silence since their last
      word and nothing of this reply was said before it: the caller's wait starts at their last
      word, not at the agent's end-of-turn decision, so a turn decided late (a silence timeout
      after the end-of-turn model said "not done") leaves less room for the round;
    * ``enabled`` (off): a filler whenever no speakable text has come ``after_ms`` after the
      reply started, whatever the cause.

    After a filler, while no audio of the answer is ready, ``hold_phrases`` are said one at a
    time, each as the audio before it is about to run out (``hold_lead_ms``), so a wait longer
    than expected does not leave the line quiet long enough for the caller to take the turn;
    marked ``source="filler"`` like the filler. When the answer is still not ready after the
    last of them, they start over from the first until ``hold_max_ms`` after the filler, as a
    person on a help line keeps saying they are still looking; after that the line goes quiet
    (an LLM or tool that slow is a fault the recovery policy handles)."""

    model_config = ConfigDict(extra="forbid")
    enabled: bool = False
    after_ms: float = Field(700.0, gt=0, description="say a filler when the LLM has produced no "
                            "speakable text this long after the reply started")
    tools: bool = Field(True, description="say a filler before a tool round expected to take "
                        "at least tool_wait_ms")
    tool_wait_ms: float = Field(600.0, gt=0, description="expected remaining tool wait (ms) "
                                "that calls for a filler")
    reading_prior_ms: float = Field(0.0, ge=0, description="the LLM's wait (ms) from a tool "
                                    "round's results to its first speakable words, assumed until "
                                    "this process has observed one, when the LLM adapter declares "
                                    "none (LlamaLLM declares 700)")
    silence_budget_ms: float = Field(1000.0, ge=0, description="silence (ms) from the "
                                     "caller's last word to the expected answer of a tool round "
                                     "that calls for a filler even when the round itself is "
                                     "quick; 0: off. About a second of dead air is where a "
                                     "caller starts to wonder whether the line is still there "
                                     "(issue 18's bound on a tool turn's longest silence)")
    phrases: tuple[str, ...] = ("One moment.",)
    hold_phrases: tuple[str, ...] = Field(
        ("Let me check.", "Just a second.", "Still checking.", "Thanks for waiting."),
        description="said one at a time after a filler while no audio of the answer is ready, "
        "each as the audio before it is about to run out (hold_lead_ms): the harness's "
        "simulated caller, like a person, takes the turn after 600 ms of silence, and talked "
        "over answers that came later")
    hold_max_ms: float = Field(8000.0, ge=0, description="after the last hold phrase, the "
                               "phrases start over from the first while less than this long "
                               "(ms) has passed since the filler was sent to TTS; 0: each "
                               "phrase once. Qwen2.5-Coder-1.5B on 2 cores took 2.7 s from a "
                               "lookup's result to its first word, longer than the filler and "
                               "two phrases, and the caller talked over the answer")
    hold_lead_ms: float = Field(300.0, ge=0, description="audio left to play (ms) at which the "
                                "next hold phrase is sent to TTS when no audio of the answer is "
                                "ready (Piper took 100-350 ms to a short phrase's first audio "
                                "on a busy 2-core box)")
    hold_lead_rendered_ms: float = Field(90.0, ge=0, description="the same for a hold phrase "
                                         "rendered at warm-up (rejoinder.phrases), whose audio "
                                         "is there at once: three hold polls, so that a late "
                                         "event loop leaves no gap; the answer gets the rest of "
                                         "the filler's audio to become ready instead of waiting "
                                         "behind a hold phrase")


@dataclass
class _Spoken:
    """One TTS request's audio on the line (the words are what was sent to TTS)."""

    words: list[str]
    start: int                      # first sample on the line (reply-relative)
    text: str | None = None         # the chunk as written, while this record covers all of it
    samples: int = 0
    timings: list[tuple[str, float, float]] = field(default_factory=list)  # ms within this piece
    chunk: int = 0                  # index of the written chunk (Reply.chunks) it speaks
    complete: bool = False          # all its audio was synthesized (its length is known)
    resumed: bool = False           # it continues the reply after a recovery (a recovery point)


def _bare(word: str) -> str:
    return re.sub(r"[^\w']+", "", word.lower())


def repeated_across(words: Sequence[str], points: Iterable[int]) -> int:
    """Words said twice at recovery points: for each point ``p`` (an index into ``words``, where
    the words after a recovery start), the largest ``k`` such that the ``k`` words before ``p``
    are the ``k`` words from ``p`` on, compared without case and punctuation; summed over the
    points. ``repeated_across("your order has your order has shipped".split(), [3]) == 3``.
    A coincidental repeat across a point ("no, no") counts too: the figure is an upper bound."""
    bare = [_bare(w) for w in words]
    total = 0
    for p in points:
        for k in range(min(p, len(bare) - p), 0, -1):
            if bare[p - k:p] == bare[p:p + k]:
                total += k
                break
    return total


def _written_heard(written: list[str], n_spoken: int, heard: int) -> int:
    """How many of the ``written`` words were wholly heard when ``heard`` of the chunk's
    ``n_spoken`` spoken words were: each written word is read out alone to count its spoken
    words ("4217" → four), scaled to the chunk's total, and a word counts once all its spoken
    words were heard."""
    sizes = [max(1, len(normalize_for_speech(w).split())) for w in written]
    scale = sum(sizes) / max(1, n_spoken)
    k, pos = 0, 0.0
    for size in sizes:
        pos += size
        if pos > heard * scale + 1e-9:
            break
        k += 1
    return k


RECOVERY_SPOKEN = "Sorry, I'm having trouble speaking. Could you say that again?"
LEAD_LEVEL = 328       # int16 peak ≈ -40 dBFS: the playout's "voiced" level
LEAD_MARGIN_MS = 15.0  # kept before the first voiced sample so the onset is not clipped
#: audio queued ahead of the caller (ms) below which a later chunk is cut at a clause boundary
#: instead of waiting for its sentence's end: more than a clause's synthesis (Piper ≈ 100–300 ms
#: on 2 cores, ../shared/MODELS.md), so the next audio is ready before the line goes quiet
RUN_DRY_MS = 600.0
#: the first-chunk budget (words, characters) of the text that reads a tool round's results
#: (:class:`~rejoinder.text.SpeakableChunker` ``first_max_words``/``first_max_chars``; a reply's
#: own first chunk has 10 and 60). The caller has already waited through the round (or heard a
#: filler and is waiting on): four words are about 1.3 s of speech, more than the rest of the
#: sentence's generation (≈ 20 tokens at 11–14 ms) and synthesis, and Piper's time to first
#: audio grows with the characters. The cut waits for the word that crosses the budget, so each
#: word less is one to two tokens sooner. Measured on the bundled call's order lookup
#: (2-core CPU, 2026-12-05): the first chunk "The wireless headphones of" was ready 126–152 ms
#: after the reply's first token with 6 words (it waited for "were shipped"), 45–56 ms after it
#: with 4.
AFTER_TOOLS_FIRST_WORDS = 4
AFTER_TOOLS_FIRST_CHARS = 40
#: how often (ms, call clock) a reply that said a filler checks whether a hold phrase is due
HOLD_POLL_MS = 30.0


def _leading_silence(pcm: np.ndarray, rate: int) -> int:
    """Samples of leading silence in int16 ``pcm`` to drop (keeping ``LEAD_MARGIN_MS``).
    Piper starts every sentence with ≈ 40–60 ms of silence, which the caller would wait through
    before the first voiced sample (``playback_start``); between sentences pauses are kept."""
    block = max(1, rate // 10)  # scanned 100 ms at a time: the first voice is near the start
    for a in range(0, len(pcm), block):
        loud = np.flatnonzero(np.abs(pcm[a:a + block].astype(np.int32)) >= LEAD_LEVEL)
        if len(loud):
            return max(0, a + int(loud[0]) - int(rate * LEAD_MARGIN_MS / 1000))
    return 0


async def _drop_read(fut: asyncio.Future) -> None:
    """End a wrapper's pending read of the stream it wraps: cancelled if still running, and its
    outcome always retrieved (a cut reply never leaves "exception was never retrieved")."""
    if not fut.done():
        fut.cancel()
    await asyncio.gather(fut, return_exceptions=True)


class Reply:
    """Speaks one reply for ``turn_id`` on ``playout`` at the line rate (int16 mono)."""

    def __init__(self, st: Stamper, turn_id: int, playout: Playout, tts: TTSPort, *,
                 backup_tts: TTSPort | None = None, recovery: RecoveryPolicy | None = None,
                 filler: FillerPolicy | None = None,
                 recovery_audio: np.ndarray | None = None,
                 phrases: RenderedPhrases | None = None,
                 on_filler: Callable[[int, str], None] | None = None,
                 caller_done_ms: float | None = None) -> None:
        """``recovery_audio``: int16 at the playout rate, rendered ahead of time (warm-up), said
        when nothing of the reply could be synthesized and there is no backup TTS left.
        ``phrases``: the filler policy's phrases rendered at warm-up by the same TTS voice
        (:mod:`rejoinder.phrases`): a filler or hold phrase found there is replayed, not
        synthesized again. ``on_filler(step, phrase)``: told when a filler or hold phrase goes to
        TTS, attributed to the LLM step ``step`` (the draft puts it in that step's call message,
        :meth:`rejoinder.respond.Draft.filler_said`). ``caller_done_ms``: the caller's last
        voiced sample of the turn this reply answers (call clock, ms), for the filler's
        ``silence_budget_ms``; None: that rule is off."""
        self.on_filler = on_filler
        self.caller_done_ms = caller_done_ms
        self._said = False  # a non-blank chunk of this reply went to TTS
        self.st = st
        self.recovery_audio = recovery_audio
        self.phrases = phrases
        self.chunks: list[tuple[list[str], int, int | None]] = []  # (written words, spoken words, step)
        self.turn_id = turn_id
        self.playout = playout
        self.tts = tts
        self.backup_tts = backup_tts
        self.policy = recovery or RecoveryPolicy()
        self.filler = filler or FillerPolicy()
        self.spoken: list[_Spoken] = []
        self.full_text = ""
        self.estimated = False
        self._index = 0
        #: who wrote the reply's first speakable words (``Say.source``: "llm", "filler", …)
        self.first_source: str | None = None
        self._samples_per_char: float | None = None
        self._answer_marked = False
        self._holding = False  # a filler was said and the answer has not come yet
        self._holds_said = 0  # hold phrases said in this reply
        self._filler_at: float | None = None  # call clock (ms) when the filler went to TTS

    async def speak(self, items: AsyncIterable["Say"]) -> None:
        """Speak ``items`` (text deltas with their source) as they arrive; returns when all audio
        is queued on the playout."""
        queue: asyncio.Queue[tuple[str, str] | None] = asyncio.Queue()
        self.playout.begin(self.turn_id)
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._produce(items, queue))
            tg.create_task(self._synthesize(queue))
        self.playout.end_reply(self.turn_id)

    def _recovered(self, stage: str, action: str, reason: str, resume_from: str) -> None:
        self.st.emit(Recovery(stage, action, reason, resume_from, self.st.now(), self.st.call_id,
                              self.turn_id))

    async def _produce(self, items: AsyncIterable["Say"],
                       queue: asyncio.Queue[tuple[str, str, int, bool] | None]) -> None:
        """Chunk the text as it arrives; a change of source or step (or a flush) ends the chunk."""
        chunker, source, step = SpeakableChunker(), "llm", 0
        resume = [False]  # the next chunk continues the reply after a recovery

        def fill(phrase: str, stp: int) -> None:  # a filler or hold phrase, told to the draft
            put(phrase + " ", "filler", stp)
            if self.on_filler is not None:
                self.on_filler(stp, phrase)

        def put(chunk: str, src: str, stp: int) -> None:
            queue.put_nowait((chunk, src, stp, resume[0]))
            resume[0] = False
            self._said = self._said or bool(chunk.strip())
            if src != "filler":
                self._holding = False  # the answer's words are on their way to TTS

        try:
            filled = False
            items = self._with_filler(items) if self.filler.enabled else items
            async for item in self._with_holds(items, queue):
                if item is None:  # the answer is late: a hold phrase, a chunk of its own
                    fill(self._next_hold(), step)
                    self._holds_said += 1
                    continue
                if item.source == "filler" and item.text.strip():
                    self._hold_from_now()  # (the catch-all filler of filler.enabled)
                if item.flush and not filled:
                    for chunk in chunker.flush():  # what the LLM wrote before the round
                        put(chunk, source, step)
                if item.flush and not filled and self._long_wait(item):
                    filled = True  # once per reply: the caller knows the agent is on it
                    fill(self.filler.phrases[0], step)  # the answer follows
                    source = "filler"
                    self._hold_from_now()
                if item.source != source or item.flush or (item.step != step and item.text.strip()):
                    for chunk in chunker.flush():
                        put(chunk, source, step)
                    source = item.source
                    if item.flush and item.tools:  # the results are read next: speak them soon
                        chunker = SpeakableChunker(first_max_words=AFTER_TOOLS_FIRST_WORDS,
                                                   first_max_chars=AFTER_TOOLS_FIRST_CHARS)
                resume[0] = resume[0] or item.resume
                if item.text.strip():
                    step = item.step
                for chunk in chunker.push(item.text) + (chunker.flush() if source != "llm" else []):
                    put(chunk, source, step)  # the runtime's own lines are complete
                if queue.empty() and self._running_dry() and (
                        clause := chunker.take_clause() or chunker.take_short()):
                    put(clause, source, step)  # a clause (else a head) now, not silence
            if queue.empty() and self._running_dry() and (head := chunker.take_short()):
                put(head, source, step)  # the rest's head first: its audio is ready sooner
            for chunk in chunker.flush():
                put(chunk, source, step)
        finally:
            queue.put_nowait(None)

    def _running_dry(self) -> bool:
        """This reply has started playing and has less than ``RUN_DRY_MS`` of audio queued ahead
        of the caller, with nothing waiting to be synthesised: the next chunk should go now."""
        audio = self.playout.reply
        if audio is None or audio.turn_id != self.turn_id or not audio.queued:
            return False
        return audio.pending * 1000.0 / self.playout.rate < RUN_DRY_MS

    def _ahead_ms(self) -> float | None:
        """Audio of this reply queued ahead of the caller (ms), once all that was sent to TTS is
        synthesized; None while a chunk is still being synthesized or nothing has played."""
        audio = self.playout.reply
        if (audio is None or audio.turn_id != self.turn_id or not audio.queued or not self.spoken
                or not self.spoken[-1].complete):
            return None
        return audio.pending * 1000.0 / self.playout.rate

    async def _with_holds(self, items: AsyncIterable["Say"],
                          queue: asyncio.Queue) -> AsyncIterator["Say | None"]:
        """``items``, and None where a hold phrase is due: a filler was said, no chunk of the
        answer has gone to TTS, nothing waits for TTS and the audio queued ahead has less than
        ``filler.hold_lead_ms`` left to play. Checked every ``HOLD_POLL_MS`` (call clock)."""
        it = aiter(items)
        while True:
            if not (self._holding and self._hold_allowed()):
                # no hold phrase can be due: read the stream directly (no task per item)
                try:
                    item = await anext(it)
                except StopAsyncIteration:
                    return
                yield item
                continue
            nxt = asyncio.ensure_future(anext(it))
            try:
                while True:
                    if not (self._holding and self._hold_allowed()):
                        item = await nxt
                        break
                    try:
                        item = await wait_within(self.st.clock, nxt, HOLD_POLL_MS)
                        break
                    except TimeoutError:
                        ahead = self._ahead_ms()
                        if queue.empty() and ahead is not None and ahead <= self._hold_lead_ms():
                            yield None
            except StopAsyncIteration:
                return
            finally:  # retrieved, also when the reply was cut while a hold was being said
                await _drop_read(nxt)
            yield item

    def _hold_from_now(self) -> None:
        """A filler went to TTS: hold phrases may follow it (``hold_max_ms`` counts from the
        first filler of the reply)."""
        self._holding = True
        if self._filler_at is None:
            self._filler_at = self.st.now()

    def _next_hold(self) -> str:
        """The next hold phrase: the list in order, then over again."""
        phrases = self.filler.hold_phrases
        return phrases[self._holds_said % len(phrases)]

    def _hold_allowed(self) -> bool:
        """Another hold phrase may be said: one not said yet, or the list may start over
        (less than ``hold_max_ms`` since the filler)."""
        n = len(self.filler.hold_phrases)
        if not n:
            return False
        if self._holds_said < n:
            return True
        since = self.st.now() - (self._filler_at if self._filler_at is not None else 0.0)
        return since < self.filler.hold_max_ms

    def _hold_lead_ms(self) -> float:
        """When the next hold phrase is due (audio left to play, ms): later for one rendered at
        warm-up, which needs no synthesis time."""
        nxt = self._next_hold()
        if self.phrases is not None and phrase_key(nxt) in self.phrases:
            return self.filler.hold_lead_rendered_ms
        return self.filler.hold_lead_ms

    def _long_wait(self, item: "Say") -> bool:
        """A tool round is coming that should keep the caller waiting ≥ ``tool_wait_ms`` more,
        or that leaves the caller ``silence_budget_ms`` of silence since their last word when
        nothing of this reply was said before it (:class:`FillerPolicy`)."""
        if not self.filler.tools or not item.tools:
            return False
        reading = self.filler.reading_prior_ms if item.reading_ms is None else item.reading_ms
        now = self.st.now()
        start = max(item.at_ms, now) if item.held else item.at_ms  # a held round starts now
        ready = start + item.wait_ms + reading  # the answer's first words, expected (call clock)
        if ready - now >= self.filler.tool_wait_ms:
            return True
        budget = self.filler.silence_budget_ms
        return (budget > 0 and not self._said and self.caller_done_ms is not None
                and ready > now and ready - self.caller_done_ms >= budget)

    async def _with_filler(self, items: AsyncIterable["Say"]):
        """``items``, with a filler phrase inserted when no text has come ``filler.after_ms``
        (call clock) after the reply started."""
        deadline = self.st.now() + self.filler.after_ms
        it = aiter(items)
        filled = False
        while True:
            nxt = asyncio.ensure_future(anext(it))
            try:
                try:
                    left = deadline - self.st.now()
                    item = await (nxt if filled else wait_within(self.st.clock, nxt, max(0.0, left)))
                except TimeoutError:
                    filled = True
                    yield Say(self.filler.phrases[0] + " ", "filler")
                    item = await nxt
            except StopAsyncIteration:
                return
            finally:
                await _drop_read(nxt)
            yield item
            if item.text.strip():
                break
        async for item in it:
            yield item

    # --- audio ------------------------------------------------------------------------------
    async def _synthesize(self, queue: asyncio.Queue[tuple[str, str, int, bool] | None]) -> None:
        norm = SpeechNormalizer()  # each chunk is read with the reply's earlier text as context
        resumed = False
        while (entry := await queue.get()) is not None:
            text, source, step, resume = entry
            resumed = resumed or resume
            self.full_text += text
            spoken = norm.feed(text)
            if not spoken.strip():
                continue
            self.st.emit(SpeakableText(text, spoken, self._index, self.st.now(), self.st.call_id,
                                       self.turn_id, source))
            if self._index == 0:
                self.first_source = source
                self.st.stamp("first_speakable_text", self.turn_id, source=source)
            if source == "llm" and not self._answer_marked and self.playout.reply is not None:
                self._answer_marked = True
                self.playout.mark_answer(self.turn_id, self.playout.reply.queued)
            self.chunks.append((text.split(), len(spoken.split()), step))
            key = " ".join(spoken.split())
            rendered = (self.phrases if source == "filler" and self.phrases is not None
                        and key in self.phrases else None)
            ok = await self._speak_chunk(spoken.split(), text.strip(), len(self.chunks) - 1, resumed,
                                         rendered)
            resumed = False
            if not ok:
                return  # stale: the reply was cut

    async def _speak_chunk(self, words: list[str], written: str, chunk: int = 0,
                           resumed: bool = False, first: TTSPort | None = None) -> bool:
        """Speak one chunk: ``first`` (a pre-rendered phrase) or the TTS, then its retries, then
        the backup TTS; False when the reply was cut (stale)."""
        engines = [self.tts] * (1 + self.policy.tts_retries)
        if first is not None:
            engines[0] = first
        if self.backup_tts is not None:
            engines.append(self.backup_tts)
        attempt = 0
        while attempt < len(engines):
            tts = engines[attempt]
            rec = _Spoken(words, self.playout.reply.queued if self.playout.reply else 0,
                          text=written if attempt == 0 else None, chunk=chunk,
                          resumed=resumed or attempt > 0)
            self.spoken.append(rec)
            try:
                return await self._tts_once(tts, rec)
            except Exception as exc:
                kept = self._trim_to_whole_words(rec, tts.sample_rate)
                words = words[kept:]
                if not words:
                    return True
                attempt += 1
                if isinstance(exc, WatchdogTimeout) and kept == 0:
                    # the identical request just timed out: never send it to the same engine again
                    while attempt < len(engines) and engines[attempt] is tts:
                        attempt += 1
                if attempt >= len(engines):
                    self._recovered("tts", "give_up", repr(exc), " ".join(words))
                    self.st.emit(ErrorEvent("tts", repr(exc), False, self.st.now(), self.st.call_id,
                                            self.turn_id))
                    self._spoken_recovery(repr(exc))
                    return True
                action = "backup" if engines[attempt] is self.backup_tts else "retry"
                self._recovered("tts", action, repr(exc), " ".join(words))
        return True

    async def _tts_once(self, tts: TTSPort, rec: _Spoken) -> bool:
        index = self._index
        self._index += 1
        resampler = (None if tts.sample_rate == self.playout.rate else
                     soxr.ResampleStream(tts.sample_rate, self.playout.rate, 1, dtype="int16"))
        offset_ms = 0.0
        trim = index == 0  # the reply's very first audio: drop the engine's leading silence
        text = " ".join(rec.words)
        first_ms = self.policy.tts_first_audio_ms + self.policy.tts_first_audio_per_char_ms * len(text)
        stream = timed_tts(self.st, self.turn_id, index, tts, text)
        async for piece in watch(stream, self.st.clock, first_ms, self.policy.tts_stall_ms, "tts"):
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
        rec.complete = True
        if rec.samples:
            chars = sum(len(w) + 1 for w in rec.words)
            self._samples_per_char = rec.samples / max(1, chars)
        return True

    def _spoken_recovery(self, reason: str) -> None:
        """Nothing of the reply could be synthesized: say the pre-rendered recovery line (if
        there is one), so the caller is not left in silence. Marked on the timeline."""
        r = self.playout.reply
        if self.recovery_audio is None or r is None or r.turn_id != self.turn_id or r.queued:
            return
        words = RECOVERY_SPOKEN.split()
        self.chunks.append((words, len(words), None))
        rec = _Spoken(words, 0, text=RECOVERY_SPOKEN, chunk=len(self.chunks) - 1, complete=True)
        self.spoken.append(rec)
        self._recovered("tts", "spoken_recovery", reason, "")
        self._send(rec, self.recovery_audio)

    def _send(self, rec: _Spoken, pcm: np.ndarray) -> bool:
        if len(pcm) == 0:
            return True
        if not self.playout.send(self.turn_id, pcm, self.st.now()):
            return False
        rec.samples += len(pcm)
        return True

    def _word_ends(self, rec: _Spoken) -> list[int]:
        """Sample offset (line rate, within ``rec``) where each word ends."""
        rate = self.playout.rate
        if rec.timings and len(rec.timings) == len(rec.words):
            return [int(end * rate / 1000) for _, _, end in rec.timings]
        self.estimated = True
        chars = sum(len(w) + 1 for w in rec.words)
        if rec.complete and rec.samples:  # the played fraction of the chunk's own audio
            spc = rec.samples / max(1, chars)
        else:
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

    def _heard_records(self, played: int) -> Iterator[tuple[_Spoken, int, bool]]:
        """Each TTS request's audio the caller heard, in line order, given ``played`` samples:
        ``(record, spoken words heard wholly, from estimated word ends?)``; it stops at the
        record being played."""
        for rec in self.spoken:
            if not rec.words or rec.samples == 0 or rec.chunk >= len(self.chunks):
                continue
            if played >= rec.start + rec.samples:
                yield rec, len(rec.words), False
                continue
            into = played - rec.start
            if into <= 0:
                return
            ends = self._word_ends(rec)
            timed = bool(rec.timings and len(rec.timings) == len(rec.words))
            yield rec, sum(1 for e in ends if e <= into), not timed
            return

    def _heard_counts(self, played: int) -> tuple[list[int], bool]:
        """Spoken words heard per written chunk, given ``played`` samples; and estimated?"""
        counts = [0] * len(self.chunks)
        estimated = self.estimated
        for rec, n, guessed in self._heard_records(played):
            counts[rec.chunk] += n
            estimated = estimated or guessed
        return counts, estimated

    def heard_spoken(self, played: int) -> tuple[list[str], list[int]]:
        """The spoken words the caller heard, in the order played, given ``played`` samples of
        this reply, and the recovery points among them (indices where the words after a TTS
        retry or backup, or after an LLM retry, start)."""
        words: list[str] = []
        points: list[int] = []
        for rec, n, _ in self._heard_records(played):
            if rec.resumed and words:
                points.append(len(words))
            words += rec.words[:n]
        return words, points

    def repeated_words(self, played: int) -> int:
        """Spoken words the caller heard twice because a recovery said them again, given
        ``played`` samples (:func:`repeated_across` over :meth:`heard_spoken`)."""
        return repeated_across(*self.heard_spoken(played))

    def heard_by_step(self, played: int) -> list[tuple[int | None, str]]:
        """What the caller heard, as written, per chunk: ``(LLM step index, words)`` in order
        (step None: words the runtime said on its own, e.g. the spoken TTS recovery). A chunk
        heard in part keeps its written words in proportion to its spoken words heard, rounded
        down (a number read out as four words is kept only once all four were heard)."""
        counts, _ = self._heard_counts(played)
        out: list[tuple[int | None, str]] = []
        for (written, n_spoken, step), h in zip(self.chunks, counts):
            if h <= 0:
                continue
            k = len(written) if h >= n_spoken else _written_heard(written, n_spoken, h)
            if k:
                out.append((step, " ".join(written[:k])))
        return out

    def heard(self, played: int) -> tuple[str, bool]:
        """(words the caller heard, as written; estimated?) given ``played`` samples of this
        reply. Word ends come from the TTS word timings, else from the played fraction of each
        chunk's audio (flagged estimated)."""
        _, estimated = self._heard_counts(played)
        return " ".join(t for _, t in self.heard_by_step(played)), estimated
