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
from dataclasses import dataclass
from typing import Any

import numpy as np

from .agent import Agent
from .audio_io import resample
from .clock import wait_within
from .completeness import read_transcript, text_complete  # noqa: F401 — text_complete re-exported
from .conversation import Conversation, Step, undo_runs
from .dictation import dictated_digits, number_open
from .events import AgentSpeech, ErrorEvent, Recovery, TranscriptEvent, TurnDecision
from .line import Playout, ReplyAudio
from .ports import STTPort, TurnPort, VADPort, LLMPort, TTSPort, Transcript
from .reply import FillerPolicy, RecoveryPolicy, Reply
from .respond import Draft, Say
from .speculation import same_request, speculation_event
from .sounds import Heard, level_dbfs, noise_verdict, overlap_verdict, words
from .stages import Stamper, timed_stt
from .tools import CallContext
from .turns import (State, CancelReply, CheckBackchannel, Commit, EndCall, Hold, OpenTurn, Reject,
                    Reprompt, Resume, Speculate, TurnPolicy, TurnTaker)
from .vad import VadTracker

LINE_RATE = 16000
PREROLL_MS = 300.0
TAIL_MS = 120.0
DIDNT_CATCH = "Sorry, I didn't catch that. Could you say it again?"
RETRACTIONS = ("digit_hold", "incomplete")  # CancelReply reasons that take a commit back


def number_incomplete(text: str) -> bool:
    """True when ``text`` ends in a number still being read out, with the default number
    formats and no context (:func:`rejoinder.dictation.number_open`)."""
    return number_open(text)


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
        p = self.policy
        self.tracker = VadTracker(stack.vad, threshold=p.vad_threshold, neg_threshold=p.vad_neg_threshold,
                                  min_speech_ms=p.min_speech_ms, pause_ms=p.early_pause_ms,
                                  reset_after_ms=p.vad_reset_ms)
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
        self._lag_ms = downstream_lag_ms
        # turn → (pause end, its transcript, a number was still being read out)
        self._heard: dict[int, tuple[float, Heard, bool]] = {}
        self._agent_said = ""  # the agent's last words: context for a number being read out
        self._pauses: dict[int, list[int]] = {}  # turn → digits read at each long pause in it
        self._tasks: set[asyncio.Task] = set()
        self.errors: list[BaseException] = []
        self.closed = False
        self._hangup_after: tuple[int, str] | None = None  # (goodbye turn, why)
        self.hangup: str | None = None  # set when the agent has ended the call (why); the
        # transport must then close the line (callrun stops, the server closes the socket)

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
                self._note_group(sig.at_ms)
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
            if isinstance(a, Speculate):  # kept until the new transcript says if it still fits
                self._park_draft(a.turn_id)
            elif isinstance(a, CancelReply):  # the tentative transcript is stale
                self._discard_draft(a.turn_id, a.reason)
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
                if a.reason in RETRACTIONS:
                    self._retracted(a.turn_id, a.reason)
            elif isinstance(a, Hold):
                self.playout.hold(self.st.now())  # stop talking over the caller at once
            elif isinstance(a, Resume):
                self.playout.resume()
                self.st.emit(TurnDecision(False, 0.0, a.reason, self.st.now(), self.st.call_id,
                                          a.turn_id))
            elif isinstance(a, CheckBackchannel):
                self._spawn(self._check_backchannel(a), a.turn_id, "stt")
            elif isinstance(a, Reject):
                heard = self._heard.get(a.turn_id)
                self.st.emit(TurnDecision(False, 0.0, "rejected_noise", self.st.now(), self.st.call_id,
                                          a.turn_id, {"why": a.reason, **(heard[1].as_dict() if heard else {})}))
            elif isinstance(a, Reprompt):
                self._say_later(a.turn_id, self.policy.idle.reprompt_text, "idle_prompt")
            elif isinstance(a, EndCall):
                self._say_later(a.turn_id, self.policy.idle.goodbye_text, "idle_prompt", hangup=a.reason)

    def _retracted(self, turn_id: int, why: str) -> None:
        """The transcript took a commit back (a number still read out, a dangling ending):
        marked on the timeline (:mod:`rejoinder.callmetrics` tells it from a false cut-off)."""
        self.st.emit(TurnDecision(False, 0.0, "retracted", self.st.now(), self.st.call_id, turn_id,
                                  {"why": why}))

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
        onset = self._onset.get(turn_id, 0.0)
        tr = Transcript("", True)
        async for tr in timed_stt(self.st, turn_id, self.stack.stt,
                                  self._turn_audio(onset - PREROLL_MS, end_ms + TAIL_MS)):
            if not tr.final:
                self._interim[turn_id] = tr.text.strip()
            self.st.emit(TranscriptEvent(tr.text, tr.final, self.st.now(), self.st.call_id,
                                         turn_id, speculative=True))
        text = tr.text.strip()
        if self._spec.get(turn_id, (None,))[0] == end_ms:  # still the latest pause
            heard = Heard(text, end_ms - onset, tr.no_speech_prob, tr.avg_logprob,
                          level_dbfs(self._segment(onset, end_ms)))
            held = self._number_open(text, turn_id)
            prev = self._heard.get(turn_id)
            if not held and prev is not None and prev[2] and len(words(text)) < len(words(prev[1].text)):
                held = True  # more speech, fewer words: the STT dropped the digits; keep holding
            self._heard[turn_id] = (end_ms, heard, held)
            noise = noise_verdict(heard, self.policy.sounds)
            r = read_transcript(text, number_open=held,
                                number_complete=not held and dictated_digits(text) >= 3)
            self._settle_parked(turn_id, text, fits=not held and noise is None)
            self._perform(self.taker.transcript_result(
                turn_id, r.complete, held, self.st.now(), question=r.question, noise=noise,
                number_complete=r.number_complete, dangling=r.dangling))
            if (self.taker.turn_id == turn_id and self.taker.state is State.USER_PAUSED
                    and self.preemptive and text and not held and noise is None  # not on noise
                    and not r.dangling and turn_id not in self._drafts):
                self._start_draft(turn_id, text, tentative=True)
        return text

    async def _turn_audio(self, start_ms: float, end_ms: float):
        """The caller's audio in [start_ms, end_ms] (call clock) as one chunk at the STT's rate."""
        audio = self._segment(start_ms, end_ms)
        if self.stack.stt.sample_rate != LINE_RATE:
            audio = resample(audio, LINE_RATE, self.stack.stt.sample_rate)
        yield audio

    def _number_open(self, text: str, turn_id: int) -> bool:
        """``text`` ends in a number still being read out (the agent's last words as context,
        the caller's long pauses in the turn as its digit groups)."""
        return number_open(text, self._agent_said, self.policy.numbers,
                           tuple(self._pauses.get(turn_id, ())))

    def _note_group(self, onset_ms: float) -> None:
        """Speech resumes in a paused turn: after a long pause inside a number, the digits read
        so far close a group (a phone number read 3-3-4 however the STT writes the digits)."""
        t = self.taker
        end_ms, heard, _ = self._heard.get(t.turn_id, (None, None, False))
        if (t.state in (State.USER_PAUSED, State.THINKING) and end_ms == t.last_voiced_ms
                and onset_ms - t.last_voiced_ms >= self.policy.numbers.group_pause_ms):
            n = dictated_digits(heard.text)
            if n:
                self._pauses.setdefault(t.turn_id, []).append(n)

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

    def _discard_draft(self, turn_id: int, reason: str = "discarded") -> None:
        """Stop the turn's draft; if it was still tentative, compensate its reversible tools
        (and record the speculation as discarded: :mod:`rejoinder.speculation`)."""
        draft = self._drafts.pop(turn_id, None)
        if draft is None:
            return
        draft.task.cancel()
        if not draft.tentative:
            return
        self.st.emit(speculation_event(draft, "discarded", reason, self.st.now()))

        async def undo() -> None:
            await asyncio.gather(draft.task, return_exceptions=True)
            runs = await draft.settled_runs()
            await undo_runs(self.conv, turn_id, [r for r in runs if r.tentative])
        task = self._spawn(undo(), turn_id, "tools")
        self._undoing.add(task)
        task.add_done_callback(self._undoing.discard)

    def _park_draft(self, turn_id: int) -> None:
        """A new pause of the turn: a tentative draft keeps running until that pause's
        transcript says whether it still answers the caller (:meth:`_settle_parked`)."""
        draft = self._drafts.get(turn_id)
        if draft is not None and draft.tentative:
            draft.parked = True
        else:
            self._discard_draft(turn_id, "new_pause")

    def _settle_parked(self, turn_id: int, text: str, *, fits: bool) -> None:
        draft = self._drafts.get(turn_id)
        if draft is None or not draft.parked:
            return
        if fits and same_request(draft.user_text, text):
            draft.parked = False  # the caller only added courtesy words (or nothing)
        else:
            self._discard_draft(turn_id, "transcript_changed")

    async def _check_backchannel(self, a: CheckBackchannel) -> None:
        """Short caller sound over the agent ended: resume or barge in, judged on its duration,
        the STT's confidence and its words (:func:`rejoinder.sounds.overlap_verdict`)."""
        tr = Transcript("", True)
        try:
            async for tr in self.stack.stt.stream(self._turn_audio(a.start_ms - 100.0, a.end_ms + TAIL_MS)):
                pass
        except Exception as exc:  # cannot tell: treat the short sound as noise and go on talking
            self.st.emit(Recovery("stt", "resume", repr(exc), "", self.st.now(), self.st.call_id,
                                  a.turn_id))
            tr = Transcript("", True)
        heard = Heard(tr.text, a.end_ms - a.start_ms, tr.no_speech_prob, tr.avg_logprob)
        verdict = overlap_verdict(heard, self.policy.backchannels, self.policy.sounds)
        self.st.emit(TranscriptEvent(tr.text, True, self.st.now(), self.st.call_id, a.turn_id,
                                     speculative=True))
        self._perform(self.taker.backchannel_result(a.turn_id, verdict != "barge_in", self.st.now(),
                                                    reason=verdict))

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
        if self._number_open(text, turn_id):
            acts = self.taker.hold_for_digits(turn_id, self.st.now())
            if acts:
                self._replies.pop(turn_id, None)
                self._retracted(turn_id, "digit_hold")
                self._perform([a for a in acts if not isinstance(a, CancelReply)])
                return
        if not text:
            self._perform(self.taker.agent_done(turn_id, self.st.now()))
            return
        draft = self._drafts.get(turn_id)
        kept = same_request(draft.user_text, text) if draft is not None and draft.tentative else None
        if kept:  # adopt the preemptive draft: its text is spoken from now on
            draft.parked = False
            self.st.emit(speculation_event(draft, kept, "final_transcript", self.st.now()))
            draft.confirm()
        elif draft is not None and not draft.tentative and draft.user_text == text:
            pass  # already confirmed (a retried reply of the same words)
        else:
            if draft is not None:
                self._discard_draft(turn_id, "transcript_changed")
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

    def _say_later(self, turn_id: int, text: str, source: str, *, hangup: str | None = None) -> None:
        """The agent takes the floor on its own as turn ``turn_id`` (an idle reprompt or goodbye):
        marked on the timeline by a :class:`TurnDecision` with reason ``source``, then said with
        :meth:`_say`. With ``hangup``, the call ends once the words have played (:attr:`hangup`),
        unless the caller speaks over them."""
        self.st.emit(TurnDecision(False, 0.0, source, self.st.now(), self.st.call_id, turn_id,
                                  {"text": text, "hangup": hangup}))
        if hangup is not None:
            self._hangup_after = (turn_id, hangup)
        self._replies[turn_id] = (None, self._spawn(self._say(turn_id, text, source), turn_id, "reply"))

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
        self._agent_said = heard if interrupted else (reply.full_text if reply else heard)
        if not interrupted:
            self._replies.pop(audio.turn_id, None)
            # the caller hears the end a transport's lag later: the idle timer starts then
            self._perform(self.taker.agent_done(audio.turn_id, self.st.now() + self._lag_ms))
            if self._hangup_after is not None and self._hangup_after[0] == audio.turn_id:
                self.hangup = self._hangup_after[1]

    async def close(self) -> None:
        """Cancel everything still running for this call and wait for it."""
        self.closed = True
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
