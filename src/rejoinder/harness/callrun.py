"""Run one call end to end: a simulated caller ↔ a session, in real time on one clock.

Outputs (written as the call goes, so a failure mid-call keeps everything so far):

* ``call.wav`` — stereo 16 kHz int16: caller left, agent right, as the caller hears it;
* ``timeline.jsonl`` — every event, then one ``turn`` summary line per turn;
* ``transcript.txt`` — caller and agent lines.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import telemetry
from .caller import RATE, SimulatedCaller
from ..clock import Clock, RealClock
from ..events import AgentSpeech, Boundary, EventBus, Recovery
from ..pacing import STOP, shared_pacer, uses_shared_pacer
from ..recording import WavWriter
from ..agent import Agent
from ..reply import FillerPolicy, RecoveryPolicy
from ..callmetrics import endpointing_metrics, longest_silences
from ..livesession import LiveSession
from ..session import Stack
from ..speculation import SpeculationAudit, speculation_metrics
from ..tools import CallContext
from ..stages import Stamper
from ..timeline import CallTranscript, Timeline, TurnRecord
from ..turns import TurnPolicy

FRAME_MS = 20.0  # one caller frame


@dataclass
class CallResult:
    call_id: str
    turns: list[TurnRecord]
    out_dir: Path | None
    caller_cpu_s: float
    duration_ms: float
    transcript: list[tuple[str, str]] = field(default_factory=list)
    error: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    overtalk_ms: list[float] = field(default_factory=list)
    overlapping_audio: int = 0
    unheard_context_words: int = 0
    recoveries: int = 0
    caller: Any = None  # the SimulatedCaller: ground truth, cues, what it heard
    faults_injected: int = 0
    final_state: Any = None  # the agent's report_state at the end of the call
    context: list[Any] = field(default_factory=list)  # the LLM's chat history at the end
    heard_log: list[tuple[int, str]] = field(default_factory=list)  # (turn, assistant text kept)
    hangup: str | None = None  # why the agent ended the call itself (None: the caller did)
    transfer: dict[str, Any] | None = None  # {turn_id, target, reason, confirmed}: transferred
    clock_origin_s: float | None = None  # the call clock's t = 0 on perf_counter (s), if real
    unconfirmed_words: int = 0  # LLM words handed to TTS before their turn was decided over
    repeated_words: int = 0  # spoken words heard twice because a recovery said them again

    def endpointing_metrics(self) -> dict[str, Any] | None:
        """Endpointing delays and false cut-offs against the caller's own audio
        (:func:`rejoinder.callmetrics.endpointing_metrics`); None without a simulated caller."""
        runs = getattr(self.caller, "speech_runs", None)
        if runs is None:
            return None
        return endpointing_metrics(self.turns, runs, self.caller.truth)

    def silence_metrics(self) -> list[dict[str, Any]] | None:
        """The longest silence the caller heard in each answered turn (ms;
        :func:`rejoinder.callmetrics.longest_silences`)."""
        runs = getattr(self.caller, "heard_runs", None)
        if runs is None:
            return None
        return longest_silences(self.turns, runs, self.duration_ms)

    def speculation_metrics(self) -> dict[str, Any]:
        """What speculative drafts bought and cost in this call
        (:func:`rejoinder.speculation.speculation_metrics`)."""
        return speculation_metrics(self.turns, self.unconfirmed_words)

    def control_metrics(self) -> dict[str, Any]:
        """Conversation-control figures of this call (issue: barge-in, recovery)."""
        return {"overtalk_ms": [round(x, 1) for x in self.overtalk_ms],
                "recovery_gap_ms": [round(x, 1) for x in self.recovery_gaps_ms()],
                "overlapping_audio": self.overlapping_audio,
                "unheard_context_words": self.unheard_context_words,
                "repeated_words": self.repeated_words,
                "recoveries": self.recoveries, "faults_injected": self.faults_injected,
                "silences_over_1s": sum(1 for r in self.turns for _, d in r.stalls if d > 1000)}

    def turn_taking_metrics(self) -> dict[str, Any]:
        """Caller-realism figures of this call: replies that talked on after a caller sound, by
        verdict (backchannel / non_speech / unclear), turns rejected as noise, idle prompts said,
        and whether the agent hung up."""
        resumed: dict[str, int] = {}
        for r in self.turns:
            for why in r.resumed:
                resumed[why] = resumed.get(why, 0) + 1
        return {"resumed": resumed,
                "rejected_noise": sum(1 for r in self.turns if r.rejected is not None),
                "idle_prompts": sum(1 for r in self.turns if r.initiated == "idle_prompt"),
                "hangup": self.hangup, **({"transfer": self.transfer} if self.transfer else {})}

    def recovery_gaps_ms(self) -> list[float]:
        """Per recovered turn: silence at the caller inside the reply (sum of its stalls, ms)."""
        return [sum(d for _, d in r.stalls) for r in self.turns if r.recoveries]


def close_records(tl: Timeline, st: Stamper, truth: list[tuple[int, float, float]], observed: Any,
                  rec: Any, error: BaseException | None) -> None:
    """The end of a simulated call's records, whatever ran it: the caller's own audio as the
    truth of its speech (:func:`attach_truth`), telemetry finished, the recording closed, one
    ``turn`` summary line per turn in the timeline's JSONL, the timeline closed."""
    attach_truth(tl, st, truth)
    if observed is not None:
        observed.finish(tl.records(), error=error)
    if rec:
        rec.close()
    for r in tl.records():
        tl.write_event({"type": "turn", **r.summary()})
    tl.close()


def attach_truth(tl: Timeline, st: Stamper, truth: list[tuple[int, float, float]]) -> None:
    """Replace VAD estimates of user_speech_start/end with the caller's own audio (ground truth).

    Each caller utterance belongs to the first agent turn whose (last) ``eot_decided`` comes after
    the utterance ended; a turn's truth is the span of its utterances.
    """
    turns = [r for r in tl.records() if "eot_decided" in r.stamps]
    spans: dict[int, list[float]] = {}
    for _, start, end in truth:
        owner = next((r for r in turns if r.stamps["eot_decided"] >= end), None)
        if owner is None:
            continue
        span = spans.setdefault(owner.turn_id, [start, end])
        span[0], span[1] = min(span[0], start), max(span[1], end)
    for turn_id, (start, end) in spans.items():
        st.stamp("user_speech_start", turn_id, start, source="caller_audio")
        st.stamp("user_speech_end", turn_id, end, source="caller_audio")


async def run_call(turns, stack: Stack, agent: Agent, *, ctx: CallContext | None = None,
                   out_dir: Path | None = None, clock: Clock | None = None,
                   policy: TurnPolicy | None = None, tail_ms: float = 2500.0,
                   max_ms: float = 900000.0, call_id: str | None = None,
                   bus: EventBus | None = None, recovery: RecoveryPolicy | None = None,
                   filler: FillerPolicy | None = None, preemptive: bool = True,
                   greeting: bool = True) -> CallResult:
    """Play rendered caller ``turns`` into a new session of ``agent`` in real time; return the
    measured turns. With ``greeting`` the agent's greeting (if any) opens the call and the
    caller's first turn waits for it, as a caller would. The call ends when the caller is done,
    at ``max_ms``, or when the agent hangs up (:attr:`Session.hangup`, e.g. after the idle
    goodbye; :attr:`CallResult.hangup`)."""
    clock = clock or RealClock()
    call_id = call_id or (ctx.call_id if ctx else uuid.uuid4().hex[:12])
    bus = bus or EventBus()
    tl = Timeline(out_dir / "timeline.jsonl" if out_dir else None)
    bus.subscribe(tl)
    observed = telemetry.observe_call(bus, call_id, clock, transport="harness")  # None when off
    transcript = CallTranscript()
    bus.subscribe(transcript)
    tools: list[dict[str, Any]] = []

    heard_words: list[int] = []
    recoveries = [0]
    repeated = [0]  # words heard twice (AgentSpeech.repeated_words, summed)

    audit = SpeculationAudit()

    def on_event(ev) -> None:
        audit(ev)
        if isinstance(ev, AgentSpeech):
            heard_words.append(len(ev.heard_text.split()))
            repeated[0] += ev.repeated_words
        elif isinstance(ev, Recovery):
            recoveries[0] += 1
        elif isinstance(ev, Boundary) and ev.name == "tool_start":
            tools.append({"name": ev.data.get("name"), "args": ev.data.get("args"), "turn_id": ev.turn_id})

    bus.subscribe(on_event)
    # the public live-session API, paced here in lockstep with the simulated caller
    live = LiveSession(stack, agent, call_id=call_id, ctx=ctx, policy=policy, clock=clock, bus=bus,
                       greet=False, caller_side=True, recovery=recovery, filler=filler,
                       preemptive=preemptive, max_seconds=max(900.0, max_ms / 1000.0 + 60.0))
    session, st = live.session, live.st
    greets = greeting and agent.greeting is not None
    caller = SimulatedCaller(turns, tail_ms=tail_ms, greeting=greets)
    rec = WavWriter(out_dir / "call.wav", RATE, channels=2) if out_dir else None  # L caller, R agent
    error = None
    if greets:
        session.greet()
    over = Overtalk()
    first: list[float] = []  # call-clock time of the first frame
    last = [0.0]
    ender, playout = session.ender, session.playout
    next_frame, push, tick, hear, observe = caller.next_frame, live.push, live.tick, caller.hear, over.observe
    level = min(over.level, caller.level)  # under it on both sides: a quiet frame
    was_loud = [False]

    def step(t: float) -> object:
        """One 20 ms frame at call-clock ``t`` (runs 50 times a second per call: kept lean)."""
        if not first:
            first.append(t)
            if rec and t > 0:  # the shared pacer's first grid point: the recording starts at 0
                lead = np.zeros(int(round(t * RATE / 1000.0)), dtype=np.int16)
                for i in range(0, len(lead), 320):
                    rec.write(lead[i:i + 320], lead[i:i + 320])
        if caller.done or t - first[0] >= max_ms or ender.hangup is not None:
            return STOP
        frame = next_frame(t)
        push(frame, t)
        heard, _ = tick(t)
        peak = playout.last_peak
        said = caller.last_peak
        loud = peak >= level or said >= level
        if loud or was_loud[0]:  # skipped while both sides stay quiet: neither would change
            hear(heard, t, peak)
            observe(frame, heard, t, said, peak)
        was_loud[0] = loud
        if rec:
            rec.write(frame, heard)
        last[0] = t + FRAME_MS
        return None

    try:
        if uses_shared_pacer(clock):  # one timer for every call of the process
            await shared_pacer().run(step, clock, name=call_id)
        else:  # a virtual clock moves with this call's own frames
            t = 0.0
            while True:
                await clock.pace(t)
                if step(t) is STOP:
                    break
                t += FRAME_MS
    except Exception as exc:  # keep what was recorded; report the failure
        error = repr(exc)
    finally:
        await session.close()
        close_records(tl, st, caller.truth, observed, rec, error)
    if out_dir:
        (out_dir / "transcript.txt").write_text(transcript.text(), encoding="utf-8")
    context_words = [len(text.split()) for _, text in session.conv.heard_log]
    unheard = sum(max(0, c - h) for c, h in zip(context_words, heard_words))
    return CallResult(call_id, tl.records(), out_dir, caller.cpu_s, last[0] - (first[0] if first else 0.0), transcript.lines, error, tools,
                      over.episodes, session.playout.overlaps, unheard, recoveries[0], caller,
                      context=list(session.conv.history), heard_log=list(session.conv.heard_log),
                      hangup=session.hangup, transfer=session.transfer,
                      clock_origin_s=(clock.origin_ns / 1e9 if isinstance(clock, RealClock) else None),
                      unconfirmed_words=audit.unconfirmed_words, repeated_words=repeated[0])


class Overtalk:
    """Caller-side over-talk: from the caller's first voiced sample spoken over audible agent
    audio to the first frame in which the agent is silent at the caller's ear (20 ms resolution)."""

    def __init__(self, level: int = 328) -> None:
        self.level = level
        self.episodes: list[float] = []
        self._caller_quiet_since = 0.0
        self._caller_voiced = False
        self._since: float | None = None

    def observe(self, caller: np.ndarray, agent: np.ndarray, t: float,
                caller_peak: int | None = None, agent_peak: int | None = None) -> None:
        """One frame of both sides (int16); the peaks (|sample|) when the senders know them."""
        if agent_peak is None:
            agent_peak = int(np.abs(agent.astype(np.int32)).max(initial=0))
        if caller_peak is None:
            caller_peak = int(np.abs(caller.astype(np.int32)).max(initial=0))
        agent_on = agent_peak >= self.level
        caller_on = caller_peak >= self.level
        if self._since is not None and not agent_on:
            self.episodes.append(t - self._since)
            self._since = None
        if caller_on and not self._caller_voiced and agent_on and t - self._caller_quiet_since >= 200:
            loud = np.flatnonzero(np.abs(caller.astype(np.int32)) >= self.level)
            self._since = t + 1000.0 * loud[0] / RATE
        if caller_on != self._caller_voiced:
            self._caller_voiced = caller_on
            if not caller_on:
                self._caller_quiet_since = t
