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

Each live caller turn has one owner, a :class:`~rejoinder.turnrun.TurnRun` (its transcription,
draft, reply and the text judged for it; its lifecycle methods and invariants are written there),
kept in one :class:`~rejoinder.turnrun.TurnRuns`; the session spawns the turn's tasks, stamps the
timeline and calls those methods. A transcript is judged by :mod:`rejoinder.turntext` (a number
still read out, noise, how it reads). Transports use the public :class:`rejoinder.LiveSession`,
which feeds this class and paces its playout.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import numpy as np

from .agent import Agent
from .audio_io import resample
from .audioring import AudioRing
from .conversation import Conversation, Step
from .dictation import asks_for_number
from .ending import CallEnder
from .events import AgentSpeech, ErrorEvent, Recovery, TranscriptEvent, TurnDecision
from .flow import Transfer
from .line import Playout, ReplyAudio
from .phrases import RenderedPhrases
from .ports import ChatMessage, STTPort, TurnPort, VADPort, LLMPort, TTSPort, Transcript
from .reply import FillerPolicy, RecoveryPolicy, Reply, Say
from .respond import Draft
from .sounds import Heard, level_dbfs, overlap_verdict
from .speculation import speculation_event
from .stages import Stamper, timed_stt
from .sttwait import final_transcript, short_sound
from .tools import CallContext
from .turnrun import TurnRuns
from .turns import (State, CancelReply, CheckBackchannel, Commit, EndCall, Hold, OpenTurn, Reject,
                    Reprompt, Resume, Speculate, TurnPolicy, TurnTaker)
from .turntext import digit_group, judge_pause, lost_ending, number_still_open
from .vad import VadTracker

LINE_RATE = 16000
PREROLL_MS = 300.0
TAIL_MS = 120.0
AUDIO_GAP_MS = 500.0   # no caller frame for this long: the line is treated as silent
GAP_HOLDBACK_MS = 200.0  # silence is filled in only up to this long before now (late frames)
AUDIO_RING_S = 32.0  # caller audio kept in memory (s): a turn longer than this keeps its end
DIDNT_CATCH = "Sorry, I didn't catch that. Could you say it again?"
RETRACTIONS = ("digit_hold", "incomplete")  # CancelReply reasons that take a commit back


@dataclass
class Stack:
    """The model ports a session uses."""

    vad: VADPort
    turn: TurnPort
    stt: STTPort
    llm: LLMPort | None
    tts: TTSPort
    backup_tts: TTSPort | None = None
    recovery_audio: np.ndarray | None = None  # int16 at LINE_RATE: said when TTS cannot speak
    phrases: RenderedPhrases | None = None  # the filler's phrases, rendered at warm-up


class Session:
    """One call. Feed frames with :meth:`on_frame` and take the agent's audio with
    :meth:`tick_playout` every 20 ms (or use :class:`rejoinder.LiveSession`, which does both);
    :meth:`close` at the end."""

    def __init__(self, st: Stamper, stack: Stack, agent: Agent, ctx: CallContext | None = None, *,
                 policy: TurnPolicy | None = None, max_seconds: float = 900.0,
                 caller_side_playout: bool = True, recovery: RecoveryPolicy | None = None,
                 filler: FillerPolicy | None = None, preemptive: bool = True,
                 downstream_lag_ms: float = 0.0, end_confirm_ms: float = 2000.0) -> None:
        """``ctx`` is the call's context for tools and hooks (default: just the call id).
        ``preemptive``: start the LLM on a pause's transcript before the turn is decided over.
        ``downstream_lag_ms``: audio a live transport still holds after this playout (client
        jitter buffer + output latency). On a cut, that much of the "played" audio never reached
        the caller, so it is not counted as heard (and the heard text is flagged estimated).
        ``end_confirm_ms``: when the agent ends the call, how long after the last reply left this
        playout to wait for the transport's confirmation that it played (:meth:`playout_confirmed`)
        before ending anyway (:mod:`rejoinder.ending`)."""
        if stack.llm is None:
            raise ValueError("an LLM-driven session needs an LLM port (Stack.llm)")
        self.st = st
        self._clock_now = st.clock.now_ms  # the call clock (ms), read on every caller frame
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
        self.tracker.on_signals = self._on_vad_later
        self.tracker.on_voiced = self._on_voiced
        self.playout = Playout(LINE_RATE, self._caller_stamp, caller_side=caller_side_playout)
        self.playout.on_reply_done = self._on_reply_done
        self._max_samples = int(LINE_RATE * max_seconds)
        self.audio = AudioRing(LINE_RATE, AUDIO_RING_S)  # the caller's recent audio (bounded)
        self.turns = TurnRuns()  # the live turns' owners (rejoinder.turnrun)
        # accounting for dropped work (compensations, tools still running): later drafts wait
        self._settling: set[asyncio.Task] = set()
        self.preemptive = preemptive
        self._lag_samples = int(downstream_lag_ms * LINE_RATE / 1000)
        self._lag_ms = downstream_lag_ms
        self._agent_said = ""  # the agent's last words: context for a number being read out
        self._tasks: set[asyncio.Task] = set()
        self._next_frame_ms: float | None = None  # call-clock start of the next caller frame
        self._last_frame_at = 0.0                  # when (call clock) a frame last arrived
        self._ticker: asyncio.Task | None = None
        self.late_frames = 0  # frames that came after their span was filled in as silence
        self._follow_up_due = False  # a background tool's result came: the agent speaks next
        self.errors: list[BaseException] = []
        self.closed = False
        # the agent ending the call (hang-up, transfer) once its last reply played at the caller
        self.ender = CallEnder(st, caller_side=caller_side_playout, confirm_timeout_ms=end_confirm_ms)
        self.conv.on_end = lambda turn_id, end: self.ender.request(
            turn_id, "transfer" if isinstance(end, Transfer) else "hangup", end.reason,
            getattr(end, "target", None))

    @property
    def hangup(self) -> str | None:
        """Why the agent has ended the call (None: it has not); the transport must then close
        the line (:mod:`rejoinder.harness.callrun` stops, the server closes the socket)."""
        return self.ender.hangup

    @property
    def transfer(self) -> dict[str, Any] | None:
        """``{turn_id, target, reason, confirmed}`` once the agent transferred the call."""
        return self.ender.transfer

    def playout_confirmed(self, turn_id: int, t_ms: float) -> None:
        """The transport confirms that turn ``turn_id``'s reply finished playing at the caller
        at ``t_ms`` (a Twilio mark echo, the browser's playout end)."""
        self.ender.confirmed(turn_id, t_ms)

    # --- transport side ----------------------------------------------------------------------
    def on_frame(self, pcm: np.ndarray, t_ms: float) -> None:
        """One caller frame (int16 mono, 16 kHz) that started at ``t_ms``.

        The session's clock does not depend on frames arriving: timers (end of turn, idle) run
        on the call clock, and when no frame comes for ``AUDIO_GAP_MS`` the line is treated as
        silent (a frame that then arrives for a span already filled in is counted in
        :attr:`late_frames` and taken as following the filled-in silence: late speech is heard
        late, never lost)."""
        if self._ticker is None:
            if self.closed:  # a transport still sending after the call ended: nothing to hear
                return
            self._ticker = self._spawn(self._watch_line(), 0, "session")
        now = self._last_frame_at = self._clock_now()
        nxt = self._next_frame_ms
        if nxt is not None and t_ms < nxt - 1.0:
            self.late_frames += 1
            t_ms = nxt
        self._feed(pcm, t_ms, now)

    def _feed(self, pcm: np.ndarray, t_ms: float, now: float | None = None) -> None:
        """Caller audio (int16, a real frame or filled-in silence) into the bounded ring and the
        VAD; raises RuntimeError past ``max_seconds``. ``now``: the call clock, when known."""
        n = len(pcm)
        if self.audio.n + n > self._max_samples:
            raise RuntimeError("call longer than max_seconds")
        self._next_frame_ms = t_ms + 1000.0 * n / LINE_RATE
        self.audio.write(pcm, t_ms)
        signals = self.tracker.push_ring(self.audio, n)  # none when the VAD batches across calls
        if signals:
            self._on_vad(signals)
            now = None  # time has passed
        actions = self.taker.tick(self._clock_now() if now is None else now)
        if actions:
            self._perform(actions)

    def _on_vad(self, signals: list) -> None:
        """VAD signals (onset / voiced / pause) of the windows just judged."""
        now = self.st.now()
        for sig in signals:
            if sig.kind == "onset":
                self._note_group(sig.at_ms)
                self._perform(self.taker.speech_onset(sig.at_ms, now))
            elif sig.kind == "voiced":
                self._perform(self.taker.speech_continues(now))
            else:
                self._perform(self.taker.speech_pause(sig.at_ms, now))

    def _on_vad_later(self, signals: list) -> None:
        """Signals of a batching VAD (judged after the frame loop's tick)."""
        self._on_vad(signals)
        self._perform(self.taker.tick(self.st.now()))

    def _on_voiced(self, end_ms: float) -> None:
        """A batching VAD's window that goes on with speech already begun (a lone ``voiced``
        signal ending at ``end_ms``: what :meth:`_on_vad_later` does with it, without the list)."""
        now = self.st.now()
        taker = self.taker
        actions = taker.speech_continues(now)
        if actions:
            self._perform(actions)
            now = self.st.now()
        actions = taker.tick(now)
        if actions:
            self._perform(actions)

    async def _watch_line(self) -> None:
        """The call clock's own ticks: the turn timers fire at their deadlines, and a line with
        no caller frames for ``AUDIO_GAP_MS`` is filled with silence (so end of turn is decided
        even when the transport stops sending)."""
        clock = self.st.clock
        frame = np.zeros(int(LINE_RATE * 0.02), dtype=np.int16)
        while not self.closed:
            deadline = self.taker.next_deadline()
            wake = self._last_frame_at + AUDIO_GAP_MS
            if deadline is not None:
                wake = min(wake, deadline)
            await clock.sleep_until(max(wake, self.st.now() + 20.0))
            now = self.st.now()
            if now - self._last_frame_at >= AUDIO_GAP_MS and self._next_frame_ms is not None:
                while self._next_frame_ms + 20.0 <= now - GAP_HOLDBACK_MS:
                    self._feed(frame, self._next_frame_ms)
            self._perform(self.taker.tick(now))
            self._try_follow_up()

    def tick_playout(self, t_ms: float) -> np.ndarray:
        """The 20 ms of agent audio the caller hears from ``t_ms`` (int16, 16 kHz)."""
        self.ender.tick(t_ms)
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
                return  # awaited and recovered by rejoinder.sttwait
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
                self.turns.prune(a.turn_id)
                self.turns.open(a.turn_id).onset_ms = a.onset_ms
                self.st.stamp("user_speech_start", a.turn_id, a.onset_ms, estimated=True)
            elif isinstance(a, Speculate):
                self.st.stamp("user_speech_end", a.turn_id, a.end_ms, estimated=True)
                stt = self._spawn(self._transcribe(a.turn_id, a.end_ms), a.turn_id, "stt")
                self.turns.open(a.turn_id).speculate(a.end_ms, stt)
                self._spawn(self._endpoint(a.turn_id, a.end_ms), a.turn_id, "turn")
            elif isinstance(a, Commit):
                self.st.stamp("eot_decided", a.turn_id, reason=a.reason, probability=a.probability)
                self.st.emit(TurnDecision(True, a.probability, a.reason, self.st.now(),
                                          self.st.call_id, a.turn_id))
                reply = self._spawn(self._reply(a.turn_id), a.turn_id, "reply")
                self.turns.open(a.turn_id).commit(reply)
            elif isinstance(a, CancelReply):
                self._cancel_reply(a.turn_id, a.reason)
                if a.reason in RETRACTIONS:
                    self._retracted(a.turn_id, a.reason)
            elif isinstance(a, Hold):
                self.playout.hold(self.st.now())  # stop talking over the caller at once
            elif isinstance(a, Resume):
                self.playout.resume()
                self._decided(a.turn_id, a.reason)
            elif isinstance(a, CheckBackchannel):
                self._spawn(self._check_backchannel(a), a.turn_id, "stt")
            elif isinstance(a, Reject):
                judged = self.turns.open(a.turn_id).judged
                heard = judged.heard.as_dict() if judged else {}
                self._decided(a.turn_id, "rejected_noise", {"why": a.reason, **heard})
            elif isinstance(a, Reprompt):
                self._say_later(a.turn_id, self.policy.idle.reprompt_text, "idle_prompt")
            elif isinstance(a, EndCall):
                self._say_later(a.turn_id, self.policy.idle.goodbye_text, "idle_prompt", hangup=a.reason)

    def _decided(self, turn_id: int, reason: str, data: dict[str, Any] | None = None) -> None:
        """A :class:`TurnDecision` that commits nothing (see its ``reason``s), on the timeline."""
        self.st.emit(TurnDecision(False, 0.0, reason, self.st.now(), self.st.call_id, turn_id,
                                  data or {}))

    def _retracted(self, turn_id: int, why: str) -> None:
        """The transcript took a commit back (a number still read out, a dangling ending):
        marked on the timeline (:mod:`rejoinder.callmetrics` tells it from a false cut-off)."""
        self._decided(turn_id, "retracted", {"why": why})

    def _cancel_reply(self, turn_id: int, reason: str) -> None:
        run = self.turns.open(turn_id)
        run.cut(reason)
        self.ender.reply_done(turn_id, True, self.st.now())  # a dropped goodbye ends nothing
        if self.playout.reply is not None and self.playout.reply.turn_id == turn_id:
            self.playout.clear(self.st.now())  # reports through _on_reply_done
        if run.reopened and reason != "noise":  # the dropped reply's timings are not the turn's
            self._decided(turn_id, "reopen", {"why": reason})  # (its cut, a filler's, included)

    def _segment(self, start_ms: float, end_ms: float) -> np.ndarray:
        return self.audio.segment(start_ms, end_ms)

    async def _transcribe(self, turn_id: int, end_ms: float) -> str:
        run = self.turns.open(turn_id)
        onset = run.onset_ms
        tr = Transcript("", True)
        async for tr in timed_stt(self.st, turn_id, self.stack.stt,
                                  self._turn_audio(onset - PREROLL_MS, end_ms + TAIL_MS)):
            if not tr.final:
                run.note_interim(end_ms, tr.text.strip(), self.st.now())
            self.st.emit(TranscriptEvent(tr.text, tr.final, self.st.now(), self.st.call_id,
                                         turn_id, speculative=True))
        text = tr.text.strip()
        prev = run.judged
        if (prev is not None and prev.noise is None and prev.end_ms < end_ms
                and run.latest(end_ms) and lost_ending(prev.heard.text, text)):
            text = await self._mend(turn_id, prev.end_ms, prev.heard.text, end_ms, text)
        if run.latest(end_ms):
            heard = Heard(text, end_ms - onset, tr.no_speech_prob, tr.avg_logprob,
                          level_dbfs(self._segment(onset, end_ms)))
            v = run.judged = judge_pause(end_ms, heard, self.policy, previous=run.judged,
                                         agent_said=self._agent_said, pauses=tuple(run.pauses))
            if run.unpark(text, fits=v.fits):  # a parked draft answers another request
                self._discard_draft(turn_id, "transcript_changed")
            r = v.reading
            self._perform(self.taker.transcript_result(
                turn_id, r.complete, v.held, self.st.now(), question=r.question, noise=v.noise,
                number_complete=r.number_complete, dangling=r.dangling))
            if (self.taker.turn_id == turn_id and self.taker.state is State.USER_PAUSED
                    and self.preemptive and v.drafts and run.draft is None):
                self._start_draft(turn_id, text, tentative=True)
        return text

    async def _mend(self, turn_id: int, prev_end_ms: float, prev_text: str, end_ms: float,
                    text: str) -> str:
        """The transcript up to the pause at ``end_ms`` lost the words the one up to
        ``prev_end_ms`` ended with (:func:`rejoinder.turntext.lost_ending`): the speech since
        ``prev_end_ms`` (the last voiced sample then, so no word is heard twice) is transcribed
        on its own and follows ``prev_text``. A ``Recovery("stt", "mended")`` event records it;
        ``prev_text`` alone when the rest transcribes to nothing."""
        rest = Transcript("", True)
        async for rest in timed_stt(self.st, turn_id, self.stack.stt,
                                    self._turn_audio(prev_end_ms, end_ms + TAIL_MS)):
            pass
        mended = " ".join(x for x in (prev_text.strip(), rest.text.strip()) if x)
        self.st.emit(Recovery("stt", "mended", f"the transcript {text!r} lost the words that "
                              f"{prev_text!r} ended with", mended, self.st.now(), self.st.call_id,
                              turn_id))
        return mended

    async def _turn_audio(self, start_ms: float, end_ms: float):
        """The caller's audio in [start_ms, end_ms] (call clock) as one chunk at the STT's rate."""
        audio = self._segment(start_ms, end_ms)
        if self.stack.stt.sample_rate != LINE_RATE:
            audio = resample(audio, LINE_RATE, self.stack.stt.sample_rate)
        yield audio

    def _note_group(self, onset_ms: float) -> None:
        """Speech resumes: after a long pause inside a number, the digits read so far close a
        group (:func:`rejoinder.turntext.digit_group`)."""
        t = self.taker
        run = self.turns.get(t.turn_id)
        if run is not None and (n := digit_group(run.judged, onset_ms, state=t.state,
                                                 last_voiced_ms=t.last_voiced_ms, policy=self.policy)):
            run.pauses.append(n)

    # --- the LLM side: drafts --------------------------------------------------------------
    def _start_draft(self, turn_id: int, text: str, *, tentative: bool) -> Draft:
        """Start the agent loop for ``text`` (after any pending compensation has finished)."""
        self._discard_draft(turn_id)
        turn = self.turns.open(turn_id)
        settling = tuple(self._settling)
        draft = Draft(self.conv, turn_id, text, self.stack.llm, self.recovery, tentative=tentative,
                      prior=turn.done_runs)

        async def run() -> None:
            if settling:  # dropped work is accounted for (undone, or its results kept) first
                await asyncio.gather(*settling, return_exceptions=True)
                draft.prior = list(turn.done_runs)
            await draft.run()
        draft.on_background = self._background
        draft.task = self._spawn(run(), turn_id, "llm")
        turn.begin(draft)
        self._follow_up_due = False  # this reply's context has every result in so far
        return draft

    # --- background tools: the agent follows up on its own ----------------------------------
    def _background(self, task: asyncio.Task) -> None:
        """A background tool run started; when it ends its result goes into the context and the
        agent takes the floor to tell the caller (as soon as the line is free)."""
        async def wait() -> None:
            run = await task
            self.conv.add_late_result(run)
            self._follow_up_due = True
            self._try_follow_up()
        self._spawn(wait(), 0, "tools")

    def _try_follow_up(self) -> None:
        if not self._follow_up_due or self.closed:
            return
        turn_id = self.taker.agent_follows_up(self.st.now())
        if turn_id is None:
            return  # the caller or the agent has the floor: tried again when it is free
        self._follow_up_due = False
        self._decided(turn_id, "follow_up", {"why": "a background tool's result came in"})
        run = self.turns.open(turn_id)
        draft = Draft(self.conv, turn_id, "", self.stack.llm, self.recovery)
        draft.on_background = self._background
        draft.task = self._spawn(draft.run(), turn_id, "llm")
        run.begin(draft)
        run.commit(self._spawn(self._speak(turn_id, draft.items(), None, draft.steps, draft),
                               turn_id, "reply"))

    def _discard_draft(self, turn_id: int, reason: str = "discarded") -> None:
        """Stop the turn's draft. A tentative draft's reversible tools are compensated; a
        confirmed draft's tool runs really happened, so they are kept for the turn's next draft
        (:attr:`TurnRun.done_runs`): never redone, and told to the LLM once. A tentative draft's
        speculation is recorded as discarded for ``reason`` (:mod:`rejoinder.speculation`)."""
        turn = self.turns.get(turn_id)
        dropped = turn.discard(self.conv) if turn else None
        if dropped is None:
            return
        draft, account = dropped
        if draft.tentative:
            self.st.emit(speculation_event(draft, "discarded", reason, self.st.now()))
        self._settle(account, turn_id)

    def _settle(self, coro, turn_id: int) -> asyncio.Task:
        task = self._spawn(coro, turn_id, "tools")
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)
        return task

    def _park_draft(self, turn_id: int) -> None:
        """A new pause of the turn: a tentative draft keeps running until that pause's
        transcript says whether it still answers the caller (:meth:`TurnRun.park`)."""
        turn = self.turns.get(turn_id)
        if turn is None or not turn.park():
            self._discard_draft(turn_id, "new_pause")

    async def _check_backchannel(self, a: CheckBackchannel) -> None:
        """Short caller sound over the agent ended: resume or barge in, judged on its duration,
        the STT's confidence and its words (:func:`rejoinder.sounds.overlap_verdict`)."""
        audio = self._turn_audio(a.start_ms - 100.0, a.end_ms + TAIL_MS)
        tr = await short_sound(self.st, a.turn_id, timed_stt(self.st, a.turn_id, self.stack.stt, audio),
                               self.recovery.stt_check_ms)  # watchdog: the reply is held meanwhile
        heard = Heard(tr.text, a.end_ms - a.start_ms, tr.no_speech_prob, tr.avg_logprob)
        verdict = overlap_verdict(heard, self.policy.backchannels, self.policy.sounds)
        self.st.emit(TranscriptEvent(tr.text, True, self.st.now(), self.st.call_id, a.turn_id,
                                     speculative=True))
        self._perform(self.taker.backchannel_result(a.turn_id, verdict != "barge_in", self.st.now(),
                                                    reason=verdict))

    async def _endpoint(self, turn_id: int, end_ms: float) -> None:
        audio = self._segment(max(end_ms - 8000.0, self.turns.open(turn_id).onset_ms - PREROLL_MS),
                              end_ms + TAIL_MS)
        try:
            p = await self.stack.turn.completion_prob(audio)
        except Exception as exc:
            self.st.emit(ErrorEvent("turn", repr(exc), True, self.st.now(), self.st.call_id, turn_id))
            return  # the silence timeout still ends the turn
        self._perform(self.taker.eot_result(turn_id, p, self.st.now()))

    # --- the reply ---------------------------------------------------------------------------
    async def _reply(self, turn_id: int) -> None:
        text = await final_transcript(  # the pause's transcript, with watchdogs (rejoinder.sttwait)
            self.st, self.turns.open(turn_id), promote_ms=self.policy.promote_interim_ms,
            stall_ms=self.recovery.stt_interim_stall_ms,
            retry=lambda end_ms: self._spawn(self._transcribe(turn_id, end_ms), turn_id, "stt-retry"))
        if text is None:
            await self._say(turn_id, DIDNT_CATCH, "recovery")
            return
        self.st.stamp("transcript_final", turn_id, text=text)
        self.st.emit(TranscriptEvent(text, True, self.st.now(), self.st.call_id, turn_id))
        run = self.turns.open(turn_id)
        if number_still_open(text, self.policy, agent_said=self._agent_said, pauses=tuple(run.pauses)):
            acts = self.taker.hold_for_digits(turn_id, self.st.now())
            if acts:
                run.hold()
                self._retracted(turn_id, "digit_hold")
                self._perform([a for a in acts if not isinstance(a, CancelReply)])
                return
        if not text:
            self._perform(self.taker.agent_done(turn_id, self.st.now()))
            return
        draft = run.adopt(text, lambda d, kept: self.st.emit(
            speculation_event(d, kept, "final_transcript", self.st.now())))
        if draft is None:  # no draft answers these words: a new one
            self._discard_draft(turn_id, "transcript_changed")
            draft = self._start_draft(turn_id, text, tentative=False)
        await self._speak(turn_id, draft.items(), text, draft.steps, draft)

    async def _speak(self, turn_id: int, items, user_text: str | None, steps: list[Step],
                     draft: Draft | None = None) -> None:
        run = self.turns.open(turn_id)
        done = run.spec[0] if user_text is not None and run.spec else None  # the last word
        reply = Reply(self.st, turn_id, self.playout, self.stack.tts, backup_tts=self.stack.backup_tts,
                      recovery=self.recovery, filler=self.filler,
                      recovery_audio=self.stack.recovery_audio, phrases=self.stack.phrases,
                      on_filler=draft.filler_said if draft is not None else None,
                      caller_done_ms=done)
        run.speak(reply, user_text, steps, draft)
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
        self._decided(turn_id, source, {"text": text, "hangup": hangup})
        if hangup is not None:
            self.ender.request(turn_id, "hangup", hangup)
        self.turns.open(turn_id).commit(self._spawn(self._say(turn_id, text, source), turn_id, "reply"))

    def greet(self) -> None:
        """Say the agent's greeting, if it has one (call once, when the call opens). The caller
        can talk over it like over any reply."""
        g = self.agent.greeting
        text = g(self.ctx) if callable(g) else g
        if text and self.taker.agent_initiates():
            self.turns.open(0).commit(self._spawn(self._say(0, text, "greeting"), 0, "reply"))

    def _caller_stamp(self, boundary: str, turn_id: int, t_ms: float, /, *, estimated: bool = False,
                      **data: Any) -> None:
        self.st.stamp(boundary, turn_id, t_ms, estimated=estimated, **data)
        if boundary == "playback_start":
            turn = self.turns.get(turn_id)
            reply = turn.speaking[0] if turn is not None and turn.speaking else None
            filler = reply is not None and reply.first_source == "filler"
            self._perform(self.taker.agent_audible(turn_id, self.st.now(), filler=filler))
        elif boundary == "answer_start":
            self.taker.answer_audible(turn_id)

    def _report_unfinished(self) -> None:
        """The call ends while a reply plays: what the caller heard of it, marked call_ended
        (not a barge-in: nothing is stamped, the turn's status stays, the context is closed)."""
        audio = self.playout.reply
        turn = self.turns.get(audio.turn_id) if audio is not None else None
        reply = turn.speaking[0] if turn is not None and turn.speaking else None
        if audio is None or reply is None or not audio.played:
            return
        played = max(0, audio.played - self._lag_samples)
        heard, estimated = reply.heard(played)
        self.st.emit(AgentSpeech(heard, reply.full_text, True, estimated or self._lag_samples > 0,
                                 self.st.now(), self.st.call_id, audio.turn_id,
                                 reply.repeated_words(played), call_ended=True))

    def _on_reply_done(self, audio: ReplyAudio, interrupted: bool) -> None:
        """The playout finished (or cut) a reply: record what was heard, update the context."""
        turn = self.turns.open(audio.turn_id)
        reply, user_text, steps, draft = turn.finished(interrupted)
        played = max(0, audio.played - self._lag_samples) if interrupted else audio.played
        heard, estimated = reply.heard(played) if reply else ("", False)
        by_step = reply.heard_by_step(played) if reply else None
        estimated = estimated or (interrupted and self._lag_samples > 0)
        if interrupted and turn.reopened and (not heard or not audio.answered):
            # dropped before a word of its answer was heard (the caller went on; at most a
            # filler played): no reply of the turn, so no AgentSpeech; the turn's next reply
            # accounts for this one's work (done_runs)
            return
        self.st.emit(AgentSpeech(heard, reply.full_text if reply else "", interrupted, estimated,
                                 self.st.now(), self.st.call_id, audio.turn_id,
                                 reply.repeated_words(played) if reply else 0))
        if draft is not None and not draft.done_tools():
            # a tool outlives the cut reply: its call and result enter the context once it ends
            async def account() -> None:
                await draft.settled_runs()
                self.conv.add_heard(audio.turn_id, user_text, steps, heard, by_step=by_step,
                                    cut=interrupted)
            self._settle(account(), audio.turn_id)
        else:
            self.conv.add_heard(audio.turn_id, user_text, steps, heard, by_step=by_step,
                                cut=interrupted)
            self._prefill_next()
        self._agent_said = heard if interrupted else (reply.full_text if reply else heard)
        self.taker.expect_number = asks_for_number(self._agent_said, self.policy.numbers)
        if not interrupted:
            self.tracker.reset_model()  # a fresh VAD state for the caller's answer (vad.py)
            # the caller hears the end a transport's lag later: the idle timer starts then
            self._perform(self.taker.agent_done(audio.turn_id, self.st.now() + self._lag_ms))
            self._try_follow_up()
        self.ender.reply_done(audio.turn_id, interrupted, self.st.now())

    def _prefill_next(self) -> None:
        """The context now holds what the caller heard: an LLM that can (``prefill``, e.g.
        :meth:`rejoinder.adapters.llama_llm.LlamaLLM.prefill`) evaluates the next request's
        prompt up to the caller's words while the caller speaks. Its time is the caller's, not
        the reply's: the next turn's ``tool_choice`` and ``llm_ttft`` segments measure what is
        left (only the caller's words), and a request made meanwhile queues behind it."""
        prefill = getattr(self.stack.llm, "prefill", None) if self.stack.llm is not None else None
        if prefill is None or self.ender.pending is not None:
            return
        request = self.conv.request([ChatMessage("user", "")], final_step=False)
        asyncio.wrap_future(prefill(request)).add_done_callback(self._prefilled)

    def _prefilled(self, fut: asyncio.Future) -> None:
        exc = None if fut.cancelled() else fut.exception()
        if exc is not None:  # the turn's own request meets the same error and reports it
            self.st.emit(ErrorEvent("llm", f"prefill: {exc!r}", True, self.st.now(),
                                    self.st.call_id, 0))

    async def close(self) -> None:
        """Cancel everything still running for this call and wait for it. A reply still playing
        is reported as heard up to here (``AgentSpeech.call_ended``), not lost."""
        self.closed = True
        self._report_unfinished()
        self.tracker.close()
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._ticker = None  # a frame still coming is dropped (on_frame)
        self.audio.release()  # nothing reads the caller's audio any more: its buffer is reused
