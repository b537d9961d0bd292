"""A call session: wiring only.

Caller frames (int16 mono, 20 ms at ``LINE_RATE``) arrive through :meth:`Session.on_frame`, called
by the transport once per frame. The VAD runs inline (≈130 µs per 32 ms window — cheaper than a
thread hop); everything else (end-of-turn model, STT, LLM, TTS) runs once per pause or per reply,
off the event loop inside the adapters. Decisions come from the pure :class:`~rejoinder.turns.TurnTaker`.

Each reply is two halves: the LLM side (:class:`~rejoinder.respond.Draft`: the agent loop of LLM
steps and tool calls) and the speech side (:class:`~rejoinder.reply.Reply`: chunking, TTS,
playout). On a pause whose transcript is ready before the turn is decided over, the LLM side
starts *preemptively* (``preemptive``): nothing is spoken and no irreversible tool runs before
the commit; if the caller goes on or the final transcript differs, the draft is discarded and its
reversible tool runs are compensated. The agent (instructions, tools) is the user's
:class:`~rejoinder.agent.Agent`; the session imports no application code.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from .agent import Agent
from .audio_io import resample
from .clock import wait_within
from .conversation import Conversation, Step, undo_runs
from .events import AgentSpeech, ErrorEvent, Recovery, TranscriptEvent, TurnDecision
from .line import Playout, ReplyAudio
from .ports import STTPort, TurnPort, VADPort, LLMPort, TTSPort
from .reply import FillerPolicy, RecoveryPolicy, Reply
from .respond import Draft, Say
from .stages import Stamper
from .tools import CallContext
from .turns import (State, CancelReply, CheckBackchannel, Commit, Hold, OpenTurn, Resume, Speculate,
                    TurnPolicy, TurnTaker, is_backchannel)
from .vad import VadTracker

LINE_RATE = 16000
PREROLL_MS = 300.0
TAIL_MS = 120.0
DIDNT_CATCH = "Sorry, I didn't catch that. Could you say it again?"
_DIGIT_WORDS = {"zero", "oh", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"}


def number_incomplete(text: str) -> bool:
    """True when ``text`` ends in a run of 1–3 spoken digits (e.g. "my order is 4 2"), i.e. a
    number probably still being read out. Order and phone numbers here have ≥ 4 digits."""
    tokens = re.findall(r"[a-z]+|\d+", text.lower())
    run = 0
    for tok in reversed(tokens):
        if tok.isdigit():
            run += len(tok)
        elif tok in _DIGIT_WORDS:
            run += 1
        else:
            break
    return 0 < run < 4


_CLOSED_PHRASES = {"hello", "hi", "hey", "yes", "no", "yeah", "nope", "thanks", "thank you",
                   "okay", "ok", "bye", "goodbye", "that's all", "that's it", "sure", "correct"}


def text_complete(text: str) -> bool:
    """True when a transcript reads as a finished utterance: it ends with terminal punctuation
    (Whisper punctuates) but not an ellipsis or a dangling word like "and"/"the", or it is a
    closed phrase such as "hello" or "thank you"."""
    t = text.strip().lower()
    if not t:
        return False
    bare = t.rstrip(".!?, ")
    if bare in _CLOSED_PHRASES:
        return True
    if t.endswith(("...", "…")) or not t.endswith((".", "!", "?")):
        return False
    last = bare.split()[-1] if bare.split() else ""
    return last not in {"and", "or", "but", "the", "a", "an", "to", "is", "my", "of", "for", "uh", "um"}


@dataclass
class Stack:
    """The model ports a session uses."""

    vad: VADPort
    turn: TurnPort
    stt: STTPort
    llm: LLMPort | None
    tts: TTSPort
    backup_tts: TTSPort | None = None


class Session:
    """One call. Create it, start :meth:`run` as a task, feed frames with :meth:`on_frame`."""

    def __init__(self, st: Stamper, stack: Stack, agent: Agent, ctx: CallContext | None = None, *,
                 policy: TurnPolicy | None = None, max_seconds: float = 900.0,
                 caller_side_playout: bool = True, recovery: RecoveryPolicy | None = None,
                 filler: FillerPolicy | None = None, preemptive: bool = True,
                 downstream_lag_ms: float = 0.0) -> None:
        """``ctx`` is the call's context for tools and hooks (default: just the call id).
        ``preemptive``: start the LLM on a pause's transcript before the turn is decided over.
        ``downstream_lag_ms``: audio a live transport still holds after this playout (client
        jitter buffer + output latency). On a cut, that much of the "played" audio never reached
        the caller, so it is not counted as heard (and the heard text is flagged estimated)."""
        if stack.llm is None:
            raise ValueError("an LLM-driven session needs an LLM port (Stack.llm)")
        self.st = st
        self.stack = stack
        self.agent = agent
        self.ctx = ctx or CallContext(st.call_id)
        self.conv = Conversation(agent, self.ctx, st)
        self.policy = policy or TurnPolicy()
        self.recovery = recovery or RecoveryPolicy()
        self.filler = filler or FillerPolicy()
        self.taker = TurnTaker(self.policy)
        self.tracker = VadTracker(stack.vad, pause_ms=self.policy.pause_ms)
        self.playout = Playout(LINE_RATE, self._caller_stamp, caller_side=caller_side_playout)
        self.playout.on_reply_done = self._on_reply_done
        self._max_samples = int(LINE_RATE * max_seconds)
        self._audio = np.zeros(min(self._max_samples, LINE_RATE * 60), dtype=np.float32)
        self._n = 0
        self._origin_ms: float | None = None  # call-clock time of sample 0
        self._onset: dict[int, float] = {}
        self._interim: dict[int, str] = {}  # latest interim transcript per turn
        self._spec: dict[int, tuple[float, asyncio.Task]] = {}  # turn → (end_ms, stt task)
        self._replies: dict[int, tuple[Reply | None, asyncio.Task]] = {}
        # replies whose audio may be on the line: turn → (reply, caller's text, LLM steps)
        self._speaking: dict[int, tuple[Reply, str | None, list[Step]]] = {}
        self._drafts: dict[int, Draft] = {}  # the LLM side of each turn's reply (maybe tentative)
        self._undoing: set[asyncio.Task] = set()  # compensations of discarded drafts
        self.preemptive = preemptive
        self._lag_samples = int(downstream_lag_ms * LINE_RATE / 1000)
        self._tasks: set[asyncio.Task] = set()
        self.errors: list[BaseException] = []
        self.closed = False

    # --- transport side ----------------------------------------------------------------------
    def on_frame(self, pcm: np.ndarray, t_ms: float) -> None:
        """One caller frame (int16 mono, 16 kHz) that started at ``t_ms``."""
        if self._origin_ms is None:
            self._origin_ms = t_ms
        n = len(pcm)
        if self._n + n > len(self._audio):  # grow by doubling: a copy once a minute at most
            if self._n + n > self._max_samples:
                raise RuntimeError("call longer than max_seconds")
            grown = np.zeros(min(self._max_samples, 2 * len(self._audio)), dtype=np.float32)
            grown[:self._n] = self._audio[:self._n]
            self._audio = grown
        frame = self._audio[self._n:self._n + n]
        np.multiply(pcm, 1.0 / 32768.0, out=frame, casting="unsafe")
        self._n += n
        now = self.st.now()
        for sig in self.tracker.push(frame, t_ms):
            if sig.kind == "onset":
                self._perform(self.taker.speech_onset(sig.at_ms, now))
            elif sig.kind == "voiced":
                self._perform(self.taker.speech_continues(now))
            else:
                self._perform(self.taker.speech_pause(sig.at_ms, now))
        self._perform(self.taker.tick(now))

    def tick_playout(self, t_ms: float) -> np.ndarray:
        """The 20 ms of agent audio the caller hears from ``t_ms`` (int16, 16 kHz)."""
        return self.playout.tick(t_ms)

    # --- actions -----------------------------------------------------------------------------
    def _spawn(self, coro, turn_id: int = 0, stage: str = "session") -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(lambda t: self._task_done(t, turn_id, stage))
        return task

    def _task_done(self, task: asyncio.Task, turn_id: int, stage: str) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            if stage.startswith("stt"):
                return  # awaited and recovered by _final_transcript
            self.st.emit(ErrorEvent(stage, repr(exc), False, self.st.now(), self.st.call_id, turn_id))
            self.errors.append(exc)
            if stage == "reply":  # a failed reply must not leave the agent stuck in "thinking"
                self._perform(self.taker.agent_done(turn_id, self.st.now()))

    def _perform(self, actions: list) -> None:
        for a in actions:
            if isinstance(a, (Speculate, CancelReply)):  # the tentative transcript is stale
                self._discard_draft(a.turn_id)
            if isinstance(a, OpenTurn):
                self._onset[a.turn_id] = a.onset_ms
                self.st.stamp("user_speech_start", a.turn_id, a.onset_ms, estimated=True)
            elif isinstance(a, Speculate):
                self.st.stamp("user_speech_end", a.turn_id, a.end_ms, estimated=True)
                old = self._spec.get(a.turn_id)
                if old:
                    old[1].cancel()
                stt = self._spawn(self._transcribe(a.turn_id, a.end_ms), a.turn_id, "stt")
                self._spec[a.turn_id] = (a.end_ms, stt)
                self._spawn(self._endpoint(a.turn_id, a.end_ms), a.turn_id, "turn")
            elif isinstance(a, Commit):
                self.st.stamp("eot_decided", a.turn_id, reason=a.reason, probability=a.probability)
                self.st.emit(TurnDecision(True, a.probability, a.reason, self.st.now(),
                                          self.st.call_id, a.turn_id))
                self._replies[a.turn_id] = (None, self._spawn(self._reply(a.turn_id), a.turn_id, "reply"))
            elif isinstance(a, CancelReply):
                self._cancel_reply(a.turn_id, a.reason)
            elif isinstance(a, Hold):
                self.playout.hold(self.st.now())  # stop talking over the caller at once
            elif isinstance(a, Resume):
                self.playout.resume()
                self.st.emit(TurnDecision(False, 0.0, "backchannel", self.st.now(), self.st.call_id,
                                          a.turn_id))
            elif isinstance(a, CheckBackchannel):
                self._spawn(self._check_backchannel(a), a.turn_id, "stt")

    def _cancel_reply(self, turn_id: int, reason: str) -> None:
        entry = self._replies.pop(turn_id, None)
        if entry is not None:
            entry[1].cancel()
        if self.playout.reply is not None and self.playout.reply.turn_id == turn_id:
            self.playout.clear(self.st.now())  # reports through _on_reply_done

    def _segment(self, start_ms: float, end_ms: float) -> np.ndarray:
        origin = self._origin_ms or 0.0
        a = max(0, int((start_ms - origin) * LINE_RATE / 1000))
        b = min(self._n, int((end_ms - origin) * LINE_RATE / 1000))
        return self._audio[a:max(a, b)].copy()

    async def _transcribe(self, turn_id: int, end_ms: float) -> str:
        audio = self._segment(self._onset.get(turn_id, 0.0) - PREROLL_MS, end_ms + TAIL_MS)
        stt = self.stack.stt
        if stt.sample_rate != LINE_RATE:
            audio = resample(audio, LINE_RATE, stt.sample_rate)

        async def one():
            yield audio

        text = ""
        async for tr in stt.stream(one()):
            text = tr.text
            if not tr.final:
                self._interim[turn_id] = tr.text.strip()
            self.st.emit(TranscriptEvent(tr.text, tr.final, self.st.now(), self.st.call_id,
                                         turn_id, speculative=True))
        text = text.strip()
        if self._spec.get(turn_id, (None,))[0] == end_ms:  # still the latest pause
            self._perform(self.taker.transcript_result(turn_id, text_complete(text),
                                                       number_incomplete(text), self.st.now(),
                                                       question=text.endswith("?")))
            if (self.taker.turn_id == turn_id and self.taker.state is State.USER_PAUSED
                    and self.preemptive and text and not number_incomplete(text)):
                self._start_draft(turn_id, text, tentative=True)
        return text

    # --- the LLM side: drafts --------------------------------------------------------------
    def _start_draft(self, turn_id: int, text: str, *, tentative: bool) -> Draft:
        """Start the agent loop for ``text`` (after any pending compensation has finished)."""
        self._discard_draft(turn_id)
        draft = Draft(self.conv, turn_id, text, self.stack.llm, self.recovery, tentative=tentative)
        undoing = tuple(self._undoing)

        async def run() -> None:
            if undoing:  # a discarded draft's reversible tools are undone before new ones run
                await asyncio.gather(*undoing, return_exceptions=True)
            await draft.run()
        draft.task = self._spawn(run(), turn_id, "llm")
        self._drafts[turn_id] = draft
        return draft

    def _discard_draft(self, turn_id: int) -> None:
        """Stop the turn's draft; if it was still tentative, compensate its reversible tools."""
        draft = self._drafts.pop(turn_id, None)
        if draft is None:
            return
        draft.task.cancel()
        if not draft.tentative:
            return

        async def undo() -> None:
            await asyncio.gather(draft.task, return_exceptions=True)
            runs = await draft.settled_runs()
            await undo_runs(self.conv, turn_id, [r for r in runs if r.tentative])
        task = self._spawn(undo(), turn_id, "tools")
        self._undoing.add(task)
        task.add_done_callback(self._undoing.discard)

    async def _check_backchannel(self, a: CheckBackchannel) -> None:
        audio = self._segment(a.start_ms - 100.0, a.end_ms + TAIL_MS)
        if self.stack.stt.sample_rate != LINE_RATE:
            audio = resample(audio, LINE_RATE, self.stack.stt.sample_rate)

        async def one():
            yield audio

        text = ""
        try:
            async for tr in self.stack.stt.stream(one()):
                text = tr.text
        except Exception as exc:  # cannot tell: treat the short sound as noise and go on talking
            self.st.emit(Recovery("stt", "resume", repr(exc), "", self.st.now(), self.st.call_id,
                                  a.turn_id))
            text = ""
        bc = is_backchannel(text, self.policy)
        self.st.emit(TranscriptEvent(text, True, self.st.now(), self.st.call_id, a.turn_id,
                                     speculative=True))
        self._perform(self.taker.backchannel_result(a.turn_id, bc, self.st.now()))

    async def _endpoint(self, turn_id: int, end_ms: float) -> None:
        audio = self._segment(max(end_ms - 8000.0, self._onset.get(turn_id, 0.0) - PREROLL_MS),
                              end_ms + TAIL_MS)
        try:
            p = await self.stack.turn.completion_prob(audio)
        except Exception as exc:
            self.st.emit(ErrorEvent("turn", repr(exc), True, self.st.now(), self.st.call_id, turn_id))
            return  # the silence timeout still ends the turn
        self._perform(self.taker.eot_result(turn_id, p, self.st.now()))

    # --- the reply ---------------------------------------------------------------------------
    async def _final_transcript(self, turn_id: int) -> str | None:
        """The turn's transcript: the speculative one, else one retry; watchdog
        ``promote_interim_ms`` (STT without a final). None when STT could not deliver."""
        end_ms, stt_task = self._spec[turn_id]
        for attempt in range(2):
            try:
                return await wait_within(self.st.clock, stt_task, self.policy.promote_interim_ms)
            except Exception as exc:  # failed or timed out: say so on the timeline, retry once
                stt_task.cancel()
                reason = "no final transcript in time" if isinstance(exc, TimeoutError) else repr(exc)
                interim = self._interim.get(turn_id)
                if isinstance(exc, TimeoutError) and interim:  # a turn with only interim results
                    self.st.emit(Recovery("stt", "promoted", reason, interim, self.st.now(),
                                          self.st.call_id, turn_id))
                    return interim
                action = "retry" if attempt == 0 else "recovery_line"
                self.st.emit(Recovery("stt", action, reason, "", self.st.now(), self.st.call_id, turn_id))
                if attempt == 0:
                    stt_task = self._spawn(self._transcribe(turn_id, end_ms), turn_id, "stt-retry")
                    self._spec[turn_id] = (end_ms, stt_task)
        return None

    async def _reply(self, turn_id: int) -> None:
        text = await self._final_transcript(turn_id)
        if text is None:
            await self._say(turn_id, DIDNT_CATCH, "recovery")
            return
        self.st.stamp("transcript_final", turn_id, text=text)
        self.st.emit(TranscriptEvent(text, True, self.st.now(), self.st.call_id, turn_id))
        if number_incomplete(text):
            acts = self.taker.hold_for_digits(turn_id, self.st.now())
            if acts:
                self._replies.pop(turn_id, None)
                self._perform([a for a in acts if not isinstance(a, CancelReply)])
                return
        if not text:
            self._perform(self.taker.agent_done(turn_id, self.st.now()))
            return
        draft = self._drafts.get(turn_id)
        if draft is not None and draft.user_text == text:
            draft.confirm()  # adopt the preemptive draft: its text is spoken from now on
        else:
            draft = self._start_draft(turn_id, text, tentative=False)
        await self._speak(turn_id, draft.items(), text, draft.steps)

    async def _speak(self, turn_id: int, items, user_text: str | None, steps: list[Step]) -> None:
        reply = Reply(self.st, turn_id, self.playout, self.stack.tts, backup_tts=self.stack.backup_tts,
                      recovery=self.recovery, filler=self.filler)
        self._speaking[turn_id] = (reply, user_text, steps)
        try:
            await reply.speak(items)
        except* Exception as eg:
            for exc in eg.exceptions:
                self.st.emit(ErrorEvent("tts", repr(exc), False, self.st.now(), self.st.call_id, turn_id))
            self.playout.end_reply(turn_id)

    async def _say(self, turn_id: int, text: str, source: str) -> None:
        """Say ``text`` that the LLM did not write (``source``: greeting, recovery, idle…); it is
        marked on the timeline and enters the context as heard, like any reply."""
        async def items():
            yield Say(text, source)
        await self._speak(turn_id, items(), None, [Step(text)])

    def greet(self) -> None:
        """Say the agent's greeting, if it has one (call once, when the call opens). The caller
        can talk over it like over any reply."""
        g = self.agent.greeting
        text = g(self.ctx) if callable(g) else g
        if text and self.taker.agent_initiates():
            self._replies[0] = (None, self._spawn(self._say(0, text, "greeting"), 0, "reply"))

    def _caller_stamp(self, boundary: str, turn_id: int, t_ms: float, /, *, estimated: bool = False,
                      **data: Any) -> None:
        self.st.stamp(boundary, turn_id, t_ms, estimated=estimated, **data)
        if boundary == "playback_start":
            self._perform(self.taker.agent_audible(turn_id, self.st.now()))

    def _on_reply_done(self, audio: ReplyAudio, interrupted: bool) -> None:
        """The playout finished (or cut) a reply: record what was heard, update the context."""
        reply, user_text, steps = self._speaking.pop(audio.turn_id, (None, None, []))
        played = max(0, audio.played - self._lag_samples) if interrupted else audio.played
        heard, estimated = reply.heard(played) if reply else ("", False)
        estimated = estimated or (interrupted and self._lag_samples > 0)
        self.st.emit(AgentSpeech(heard, reply.full_text if reply else "", interrupted, estimated,
                                 self.st.now(), self.st.call_id, audio.turn_id))
        self.conv.add_heard(audio.turn_id, user_text, steps, heard)
        self._drafts.pop(audio.turn_id, None)
        if not interrupted:
            self._replies.pop(audio.turn_id, None)
            self._perform(self.taker.agent_done(audio.turn_id, self.st.now()))

    async def close(self) -> None:
        """Cancel everything still running for this call and wait for it."""
        self.closed = True
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
