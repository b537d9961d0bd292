"""The speech-to-speech arm: the same agent over one integrated service (Nova Sonic's protocol).

The service hears the caller, decides the end of turn, transcribes, runs its LLM, asks for tools
and speaks, all behind one bidirectional event stream (:mod:`rejoinder.adapters.nova_sonic`). The
agent is the same :class:`~rejoinder.agent.Agent`: its instructions are the SYSTEM prompt, its
tools the ``toolConfiguration``; tools run here, in the agent process, stamped by the same
:class:`~rejoinder.conversation.Conversation` code as in the cascade, and their results go back
as ``toolResult``. The caller hears the service's audio through the same
:class:`~rejoinder.line.Playout`, so ``playback_start`` / ``answer_start`` / stalls are measured at
the caller exactly as in the cascade.

Boundaries are stamped by this runtime when each event *arrives* (the adapter never times
itself), so the segments still add up to V2V:

=====================  ===========================================================================
boundary               stamped when
=====================  ===========================================================================
``eot_decided``        the USER transcript (``textOutput``, FINAL) arrives: the service decided the
``transcript_final``   turn ended and transcribed it; one moment, so ``endpointing`` holds both and
``llm_request``        ``transcription`` is 0 (the service does not expose them apart)
``tool_start/_end``    around the agent's tool run for a ``toolUse``
``llm_first_token``    the first ASSISTANT SPECULATIVE text (what it plans to say)
``first_speakable_text`` same moment
``tts_request``        same moment (chunk 0)
``tts_first_audio``    the first ``audioOutput`` of the turn
``first_audio_out``    its audio is queued on the line (the playout)
=====================  ===========================================================================

The agent's greeting is not played: the service speaks only in reply (the cascade's greeting is a
runtime policy), so the simulated caller does not wait for one. A barge-in is the service's
(``{ "interrupted" : true }`` / content end ``INTERRUPTED``): the line is cleared at once.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from . import telemetry
from .adapters.nova_sonic import NovaSonic, NovaSonicStream
from .adapters.nova_sonic_events import OutputEvent
from .agent import Agent, call_hook, load_agent
from .harness.callrun import CallResult, Overtalk, close_records
from .harness.caller import FRAME, RATE, RenderedTurn, SimulatedCaller
from .clock import Clock, RealClock
from .config import AgentConfig
from .conversation import Conversation, Step
from .events import AgentSpeech, Boundary, ErrorEvent, EventBus, TranscriptEvent
from .line import Playout, ReplyAudio
from .ports import PortError, ToolCall
from .recording import WavWriter
from .stages import Stamper
from .timeline import CallTranscript, Timeline
from .tools import CallContext, result_json


@dataclass
class _Turn:
    turn_id: int
    user: str = ""
    text: str = ""          # the assistant's speculative text, in order
    final: str = ""         # the assistant's FINAL text (what the service says it said)
    spoke: bool = False
    runs: list[Any] = field(default_factory=list)


class S2SSession:
    """One call over a speech-to-speech stream; the transport loop feeds :meth:`on_frame` and
    plays :meth:`tick_playout`, as with :class:`rejoinder.session.Session`."""

    def __init__(self, st: Stamper, stream: NovaSonicStream, agent: Agent, ctx: CallContext, *,
                 model: str) -> None:
        self.st, self.stream, self.agent, self.ctx, self.model = st, stream, agent, ctx, model
        self.conv = Conversation(agent, ctx, st)
        self.playout = Playout(RATE, self._caller_stamp)
        self.playout.on_reply_done = self._on_reply_done
        self.hangup: str | None = None
        self.error: str | None = None
        self._turn: _Turn | None = None
        self._next_id = 1
        self._turns: dict[int, _Turn] = {}
        self._tasks: set[asyncio.Task] = set()
        self._rx = asyncio.get_running_loop().create_task(self._receive())

    def _caller_stamp(self, boundary: str, turn_id: int, t_ms: float, /, *, estimated: bool = False,
                      **data: Any) -> None:
        self.st.stamp(boundary, turn_id, t_ms, estimated=estimated, **data)

    # -- the audio path --------------------------------------------------------------------------
    def greet(self) -> None:
        """The service speaks only in reply: no greeting (see module docstring)."""

    def on_frame(self, frame: np.ndarray, t_ms: float) -> None:
        """One 20 ms caller frame (int16 mono, 16 kHz) → one ``audioInput`` (queued)."""
        self.stream.send_audio(frame)

    def tick_playout(self, t_ms: float) -> np.ndarray:
        return self.playout.tick(t_ms)

    # -- the service's events ----------------------------------------------------------------------
    def _new_turn(self) -> _Turn:
        t = _Turn(self._next_id)
        self._next_id += 1
        self._turn = self._turns[t.turn_id] = t
        return t

    async def _receive(self) -> None:
        try:
            async for e in self.stream.events():
                self._on_event(e)
        except PortError as exc:
            self.error = str(exc)
            tid = self._turn.turn_id if self._turn else 0
            self.st.emit(ErrorEvent("s2s", str(exc), False, self.st.now(), self.st.call_id, tid))
        except asyncio.CancelledError:
            raise

    def _on_event(self, e: OutputEvent) -> None:
        now = self.st.now()
        if e.name == "textOutput" and e.role == "USER":
            t = self._new_turn()
            t.user = e.text.strip()
            self.st.stamp("eot_decided", t.turn_id, now, source="nova_sonic")
            self.st.stamp("transcript_final", t.turn_id, now, text=t.user)
            self.st.emit(TranscriptEvent(t.user, True, now, self.st.call_id, t.turn_id))
            self.st.stamp("llm_request", t.turn_id, now, model=self.model, provider="nova-sonic",
                          messages=0, max_tokens=self.agent.llm.max_tokens,
                          temperature=self.agent.llm.temperature, tools=len(self.agent.tools))
            return
        if e.name in ("completionStart", "usageEvent") or (e.name == "contentStart" and e.role != "ASSISTANT"):
            return
        t = self._turn or self._new_turn()  # the service spoke first (a typed turn): a turn of its own
        if e.name == "textOutput" and e.role == "ASSISTANT":
            if e.interrupted:
                self.playout.clear(now)
            elif e.stage == "SPECULATIVE":
                if not t.text:
                    self.st.stamp("llm_first_token", t.turn_id, now)
                    self.st.stamp("first_speakable_text", t.turn_id, now)
                    self.st.stamp("tts_request", t.turn_id, now, chunk=0, voice=self.model)
                t.text = f"{t.text} {e.text}".strip()
            else:
                t.final = e.text.strip()
        elif e.name == "toolUse":
            call = ToolCall(str(e.body.get("toolUseId")), str(e.body.get("toolName")), e.arguments)
            task = asyncio.get_running_loop().create_task(self._tool(t, call))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif e.name == "audioOutput" and e.pcm is not None and len(e.pcm):
            r = self.playout.reply
            if r is None or r.turn_id != t.turn_id or r.ended:
                if t.spoke:
                    return  # audio of a reply already cut (barge-in): never heard
                self.playout.begin(t.turn_id)
                self.playout.mark_answer(t.turn_id, 0)
                t.spoke = True
                self.st.stamp("tts_first_audio", t.turn_id, now, chunk=0)
            self.playout.send(t.turn_id, e.pcm, now)
        elif e.name == "contentEnd" and e.kind == "AUDIO" and e.role == "ASSISTANT":
            stop = e.body.get("stopReason")
            audio_ms = 0.0
            if self.playout.reply is not None and self.playout.reply.turn_id == t.turn_id:
                audio_ms = round(1000.0 * self.playout.reply.queued / RATE, 1)
            self.st.stamp("tts_end", t.turn_id, now, chunk=0, audio_ms=audio_ms,
                          outcome="cancelled" if stop == "INTERRUPTED" else "ok")
            if stop == "INTERRUPTED":
                self.playout.clear(now)
            else:
                self.playout.end_reply(t.turn_id)
        elif e.name == "completionEnd":
            self.st.stamp("llm_end", t.turn_id, now, outcome="ok", deltas=len(t.text.split()),
                          tool_calls=len(t.runs))

    async def _tool(self, t: _Turn, call: ToolCall) -> None:
        run = await self.conv.run_tool(t.turn_id, call)
        t.runs.append(run)
        body = {"error": run.error} if run.error is not None else run.result
        self.stream.send_tool_result(call.id, result_json(body))

    def _on_reply_done(self, audio: ReplyAudio, interrupted: bool) -> None:
        t = self._turns.get(audio.turn_id)
        if t is None:
            return
        full = t.final or t.text
        words = full.split()
        if interrupted and audio.queued:
            heard = " ".join(words[:int(len(words) * audio.played / audio.queued)])
        else:
            heard = full
        self.st.emit(AgentSpeech(heard, full, interrupted, interrupted, self.st.now(), self.st.call_id,
                                 audio.turn_id))
        self.conv.add_heard(audio.turn_id, t.user, [Step(full, list(t.runs))], heard)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        try:
            await self.stream.close()
        except PortError:
            pass
        self._rx.cancel()
        await asyncio.gather(self._rx, return_exceptions=True)


class S2SRuntime:
    """The agent (``cfg.agent``) over a speech-to-speech service: ``await warmup()`` once, then
    ``await call(turns, …)`` per call, like :class:`rejoinder.runtime.Runtime` (the harness's
    ``AgentLike``)."""

    def __init__(self, cfg: AgentConfig | None = None, service: NovaSonic | None = None,
                 agent: Agent | str | None = None) -> None:
        self.cfg = cfg or AgentConfig()
        self.agent = load_agent(agent if agent is not None else self.cfg.agent)
        self.service = service or NovaSonic()
        self.models = SimpleNamespace(stt=None, tts=None, llm=None, service=self.service)
        self.no_reply_timeout_ms = 10000.0  # the simulated caller's patience for a reply (ms)

    async def warmup(self) -> None:
        """Nothing loads here: the models are the service's."""

    async def call(self, turns: list[RenderedTurn], *, out_dir: Path | None = None,
                   caller_phone: str | None = None, clock: Clock | None = None,
                   call_id: str | None = None, bus: EventBus | None = None,
                   tail_ms: float = 2500.0, max_ms: float = 900000.0,
                   turn_policy: dict | None = None) -> CallResult:
        """Run one simulated call (as :func:`rejoinder.harness.callrun.run_call`, over the service).

        Raises:
            PortError: the session could not be opened.
        """
        call_id = call_id or uuid.uuid4().hex[:12]
        ctx = CallContext(call_id, caller_phone)
        await call_hook(self.agent.on_call_start, ctx)
        try:
            result = await self._run(turns, ctx, out_dir, clock or RealClock(), bus or EventBus(), tail_ms, max_ms)
        finally:
            final_state = await call_hook(self.agent.report_state, ctx)
            await call_hook(self.agent.on_call_end, ctx)
        result.final_state = final_state
        return result

    async def _run(self, turns, ctx: CallContext, out_dir: Path | None, clock: Clock, bus: EventBus,
                   tail_ms: float, max_ms: float) -> CallResult:
        call_id = ctx.call_id
        st = Stamper(call_id, clock, bus)
        tl = Timeline(out_dir / "timeline.jsonl" if out_dir else None)
        bus.subscribe(tl)
        observed = telemetry.observe_call(bus, call_id, clock, transport="harness")
        transcript = CallTranscript()
        bus.subscribe(transcript)
        tools: list[dict[str, Any]] = []
        bus.subscribe(lambda e: tools.append({"name": e.data.get("name"), "args": e.data.get("args"),
                                              "turn_id": e.turn_id})
                      if isinstance(e, Boundary) and e.name == "tool_start" else None)
        schemas = tuple(t.schema for t in self.agent.tools.values())
        stream = await self.service.open(self.agent.instructions, schemas, max_tokens=self.agent.llm.max_tokens,
                                         temperature=self.agent.llm.temperature)
        session = S2SSession(st, stream, self.agent, ctx, model=self.service.model_name)
        caller = SimulatedCaller(turns, tail_ms=tail_ms, greeting=False,
                                 no_reply_timeout_ms=self.no_reply_timeout_ms)
        rec = WavWriter(out_dir / "call.wav", RATE, channels=2) if out_dir else None
        error, t, over = None, 0.0, Overtalk()
        try:
            while not caller.done and t < max_ms and session.error is None:
                await clock.pace(t)
                frame = caller.next_frame(t)
                session.on_frame(frame, t)
                heard = session.tick_playout(t)
                caller.hear(heard, t)
                over.observe(frame, heard, t)
                if rec:
                    rec.write(frame, heard)
                t += 1000.0 * FRAME / RATE
        except Exception as exc:  # keep what was recorded; report the failure
            error = repr(exc)
        finally:
            await session.close()
            error = error or session.error
            close_records(tl, st, caller.truth, observed, rec, error)
        if out_dir:
            (out_dir / "transcript.txt").write_text(transcript.text(), encoding="utf-8")
        return CallResult(call_id, tl.records(), out_dir, caller.cpu_s, t, transcript.lines, error, tools,
                          over.episodes, session.playout.overlaps, 0, 0, caller,
                          context=list(session.conv.history), heard_log=list(session.conv.heard_log))
