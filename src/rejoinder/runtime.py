"""The runtime: models loaded once per process, one session per call, for one user agent.

Models that are expensive and thread-safe to share (end-of-turn, STT, LLM, TTS) are built once;
the VAD (recurrent state) is built per call. Each call gets its own
:class:`~rejoinder.tools.CallContext`; the agent's ``on_call_start`` / ``on_call_end`` hooks set up
and release its state (the reference support agent opens a fresh copy of its demo database).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Sequence
from pathlib import Path

from . import gctune
from .adapters.registry import BUILDERS, build_stack, validate
from .agent import Agent, call_hook, load_agent
from .harness.caller import RenderedTurn, render_turns
from .harness.callrun import CallResult, run_call
from .adapters.faults import FaultyLLM, FaultySTT, FaultyTTS, parse_faults
from .clock import Clock, RealClock
from .config import AgentConfig
from .errors import AudioInputError, MissingExtra
from .events import EventBus
from .scenario import CallerTurn, Scenario, Segment, load_scenario
from .phrases import render_phrases
from .session import LINE_RATE, Stack
from .tools import CallContext


async def warm_ports(stack: Stack, phrases: Sequence[str] = ()) -> None:
    """Open the ports' sockets now (``connect()`` where an adapter has one: the Cartesia STT/TTS
    WebSockets), so the first turn does not pay for the handshakes; run an in-process STT's
    ``warmup()`` where it has one (its first decode is slow: :meth:`WhisperSTT.warmup
    <rejoinder.adapters.whisper_stt.WhisperSTT.warmup>`), off the event loop; and render the spoken TTS
    recovery line (:data:`rejoinder.reply.RECOVERY_SPOKEN`) into ``stack.recovery_audio``
    (int16 at ``LINE_RATE``): said when a reply cannot be synthesized and no backup TTS is left.
    ``phrases`` (the filler policy's phrases and hold phrases) are rendered by the same TTS into
    ``stack.phrases`` (:mod:`rejoinder.phrases`), so a filler plays without a TTS request.

    Raises:
        PortError: a socket could not be opened or the TTS failed (the caller decides whether
            to go on without).
    """
    import numpy as np
    import soxr

    from .reply import RECOVERY_SPOKEN, _leading_silence

    for port in (stack.stt, stack.tts, stack.backup_tts, stack.llm):
        connect = getattr(port, "connect", None)
        if port is not None and connect is not None:
            await connect()
    warm_stt = getattr(stack.stt, "warmup", None)
    if warm_stt is not None:  # an in-process recogniser's first decode (WhisperSTT.warmup)
        await asyncio.to_thread(warm_stt)
    if stack.recovery_audio is None:
        pieces = [p.pcm async for p in stack.tts.stream(RECOVERY_SPOKEN)]
        pcm = np.concatenate(pieces).astype(np.int16) if pieces else np.zeros(0, np.int16)
        if stack.tts.sample_rate != LINE_RATE and len(pcm):
            pcm = soxr.resample(pcm, stack.tts.sample_rate, LINE_RATE).astype(np.int16)
        stack.recovery_audio = pcm[_leading_silence(pcm, LINE_RATE):] if len(pcm) else None
    if phrases and stack.phrases is None:
        stack.phrases = await render_phrases(stack.tts, phrases)


class Runtime:
    """Runs ``agent`` (default: the reference support assistant) with the models and policies of
    ``cfg``. ``await warmup()`` once, then ``await call(...)`` per call.

    Raises:
        ConfigError: a malformed fault spec or an agent spec that cannot be loaded.
    """

    def __init__(self, cfg: AgentConfig | None = None, agent: Agent | str | None = None) -> None:
        self.cfg = cfg or AgentConfig()
        self.agent = load_agent(agent if agent is not None else self.cfg.agent)
        self._stack = None
        self._calls = 0
        if self.cfg.faults:
            parse_faults(self.cfg.faults)  # a malformed spec fails before any model loads

    async def warmup(self) -> None:
        """Load every model (off the event loop) and prefill the agent's system prompt."""
        if self._stack is None:
            stack_cfg = self.cfg.stack
            if stack_cfg.whisper.initial_prompt is None and self.agent.stt_prompt():
                stack_cfg = stack_cfg.model_copy(deep=True)
                stack_cfg.whisper.initial_prompt = self.agent.stt_prompt()
            self._stack = await asyncio.to_thread(build_stack, stack_cfg)
            self._backup_tts = None
            if self.cfg.backup_tts and self.cfg.backup_tts != self.cfg.stack.tts:
                backup_cfg = self.cfg.stack.model_copy(update={"tts": self.cfg.backup_tts})
                validate(backup_cfg)
                try:
                    self._backup_tts = await asyncio.to_thread(BUILDERS["tts"][self.cfg.backup_tts],
                                                               backup_cfg)
                except MissingExtra:  # a backup is a nicety: run without one (retries still apply)
                    self._backup_tts = None
            ports = Stack(vad=self._stack.vad, turn=self._stack.turn, stt=self._stack.stt,
                          llm=None, tts=self._stack.tts, backup_tts=self._backup_tts)
            try:
                filler = self.cfg.filler
                await warm_ports(ports, (*filler.phrases, *filler.hold_phrases))
                self._recovery_audio = ports.recovery_audio
                self._phrases = ports.phrases
            except Exception as exc:  # noqa: BLE001 — connected on first use instead
                import logging
                logging.getLogger("rejoinder").warning("warm-up of the model sockets failed: %r", exc)
            warm = getattr(self._stack.llm, "warmup", None)
            if warm is not None:  # the system turn as every request renders it: tools included
                tools = tuple(t.schema for t in self.agent.tools.values())
                await asyncio.to_thread(warm, self.agent.instructions, tools)
            warm_gate = getattr(self._stack.llm, "warm_gate", None)
            if warm_gate is not None:  # the tool gate's few-shot prompt (its own KV state)
                tools = tuple(t.schema for t in self.agent.tools.values())
                await asyncio.to_thread(warm_gate, tools, tuple(self.agent.llm.talk_examples),
                                        self.agent.llm.scope)
            gctune.tune()  # what warm-up loaded is never scanned again (no 26–91 ms GC pauses)

    @property
    def models(self):
        return self._stack

    def new_stack(self, clock: Clock | None = None) -> Stack:
        """Ports for one call: shared models, a fresh VAD."""
        if self._stack is None:
            raise RuntimeError("call Runtime.warmup() first")
        s = self._stack
        clock = clock or RealClock()
        stack = Stack(vad=type(s.vad)(), turn=s.turn, stt=s.stt, llm=s.llm, tts=s.tts,
                      backup_tts=self._backup_tts,
                      recovery_audio=getattr(self, "_recovery_audio", None),
                      phrases=getattr(self, "_phrases", None))
        if self.cfg.faults:  # wrap the ports once; the timing wrappers sit outside these
            faults = parse_faults(self.cfg.faults)
            self._calls += 1
            seed = self.cfg.fault_seed * 100003 + self._calls
            if stack.llm is not None:
                stack.llm = FaultyLLM(stack.llm, faults, clock, seed)
            stack.tts = FaultyTTS(stack.tts, faults, clock, seed + 1)
            stack.stt = FaultySTT(stack.stt, faults, clock, seed + 2)
        return stack

    async def open_call(self, call_id: str, caller_id: str | None) -> CallContext:
        """A call's context, after the agent's ``on_call_start`` hook."""
        ctx = CallContext(call_id, caller_id)
        await call_hook(self.agent.on_call_start, ctx)
        return ctx

    async def close_call(self, ctx: CallContext) -> object:
        """The agent's ``report_state`` for the call (None without one), then ``on_call_end``."""
        try:
            return await call_hook(self.agent.report_state, ctx)
        finally:
            await call_hook(self.agent.on_call_end, ctx)
            # the conversation's saved KV state (cache_key = call id) is of no further use
            forget = getattr(getattr(self.models, "llm", None), "forget", None)
            if forget is not None:
                forget(ctx.call_id)

    async def call(self, turns: list[RenderedTurn], *, out_dir: Path | None = None,
                   caller_phone: str | None = None, clock: Clock | None = None,
                   call_id: str | None = None, bus: EventBus | None = None,
                   tail_ms: float = 2500.0, max_ms: float = 900000.0,
                   turn_policy: dict | None = None) -> CallResult:
        """Run one simulated call; see :func:`rejoinder.harness.callrun.run_call`. The result carries the
        agent's final state (``final_state``) for the harness's checks. ``turn_policy``:
        turn-taking settings for this call over the configured ones (a scenario's
        ``turn_policy``, e.g. idle handling)."""
        await self.warmup()
        call_id = call_id or uuid.uuid4().hex[:12]
        ctx = await self.open_call(call_id, caller_phone)
        clock = clock or RealClock()
        stack = self.new_stack(clock)
        try:
            result = await run_call(turns, stack, self.agent, ctx=ctx, out_dir=out_dir, clock=clock,
                                    policy=self.cfg.turns.merged(turn_policy or {}),
                                    recovery=self.cfg.recovery,
                                    filler=self.cfg.filler, preemptive=self.cfg.preemptive,
                                    call_id=call_id, bus=bus,
                                    tail_ms=tail_ms, max_ms=max_ms, greeting=True)
        finally:
            final_state = await self.close_call(ctx)
        result.final_state = final_state
        result.faults_injected = sum(len(p.injector.fired) for p in (stack.llm, stack.tts, stack.stt)
                                     if hasattr(p, "injector"))
        return result


async def load_caller(source: Path) -> tuple[list[RenderedTurn], str | None, Scenario]:
    """Rendered caller turns from a scenario YAML or a plain audio file (played from 0.5 s).

    Raises:
        ScenarioError: malformed scenario.  AudioInputError: unusable audio.
    """
    source = Path(source)
    if not source.exists():
        raise AudioInputError(f"{source}: no such file; give a WAV/FLAC recording or a scenario .yaml")
    if source.suffix.lower() in (".yaml", ".yml"):
        sc = load_scenario(source)
    else:
        sc = Scenario(name=source.stem, turns=[CallerTurn(audio=[Segment(file=str(source.resolve()))])])
    turns = await render_turns(sc)
    return turns, sc.caller_phone, sc
