"""The embedded agent: models loaded once per process, one session per call.

Models that are expensive and thread-safe to share (end-of-turn, STT, LLM, TTS) are built once;
the VAD (recurrent state) is built per call. Each call gets a fresh copy of the demo database so
calls never see each other's changes.
"""

from __future__ import annotations

import asyncio
import tempfile
import uuid
from pathlib import Path
from typing import Any

from .adapters.registry import BUILDERS, build_stack, validate
from .caller import RenderedTurn, render_turns
from .callrun import CallResult, run_call
from .adapters.faults import FaultyLLM, FaultySTT, FaultyTTS, parse_faults
from .clock import Clock, RealClock
from .config import AgentConfig
from .errors import AudioInputError, MissingExtra
from .events import EventBus
from .scenario import CallerTurn, Scenario, Segment, load_scenario
from .session import Stack


class Agent:
    """A configured agent. ``await warmup()`` once, then ``await call(...)`` per call."""

    def __init__(self, cfg: AgentConfig | None = None) -> None:
        self.cfg = cfg or AgentConfig()
        self._stack = None
        self._calls = 0
        if self.cfg.faults:
            parse_faults(self.cfg.faults)  # a malformed spec fails before any model loads
        self._dbdir = Path(tempfile.mkdtemp(prefix="rejoinder-db-"))

    async def warmup(self) -> None:
        """Load every model (off the event loop) and prefill the LLM's system prompt."""
        if self._stack is None:
            stack_cfg = self.cfg.stack
            if stack_cfg.whisper.initial_prompt is None:  # the application's vocabulary
                from .app.assistant import STT_PROMPT
                stack_cfg = stack_cfg.model_copy(deep=True)
                stack_cfg.whisper.initial_prompt = STT_PROMPT
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
            from .app.assistant import SYSTEM_PROMPT
            warm = getattr(self._stack.llm, "warmup", None)
            if warm is not None:
                await asyncio.to_thread(warm, SYSTEM_PROMPT)

    @property
    def models(self):
        return self._stack

    def new_stack(self, clock: Clock | None = None) -> Stack:
        """Ports for one call: shared models, a fresh VAD."""
        if self._stack is None:
            raise RuntimeError("call Agent.warmup() first")
        s = self._stack
        clock = clock or RealClock()
        stack = Stack(vad=type(s.vad)(), turn=s.turn, stt=s.stt, llm=s.llm, tts=s.tts,
                      backup_tts=self._backup_tts)
        if self.cfg.faults:  # wrap the ports once; the timing wrappers sit outside these
            faults = parse_faults(self.cfg.faults)
            self._calls += 1
            seed = self.cfg.fault_seed * 100003 + self._calls
            if stack.llm is not None:
                stack.llm = FaultyLLM(stack.llm, faults, clock, seed)
            stack.tts = FaultyTTS(stack.tts, faults, clock, seed + 1)
            stack.stt = FaultySTT(stack.stt, faults, clock, seed + 2)
        return stack

    def new_app(self, caller_phone: str | None, call_id: str) -> Any:
        """A support assistant over a fresh demo database for one call."""
        from .app.assistant import SupportAssistant
        from .app.db import fresh_demo_db
        conn = fresh_demo_db(self._dbdir / f"{call_id}.sqlite")
        return SupportAssistant(conn, caller_phone=caller_phone, llm=self._stack.llm)

    async def call(self, turns: list[RenderedTurn], *, out_dir: Path | None = None,
                   caller_phone: str | None = None, clock: Clock | None = None,
                   call_id: str | None = None, bus: EventBus | None = None,
                   tail_ms: float = 2500.0, max_ms: float = 900000.0,
                   turn_policy: dict | None = None) -> CallResult:
        """Run one simulated call; see :func:`rejoinder.callrun.run_call`. ``turn_policy``:
        turn-taking settings for this call over the configured ones (a scenario's
        ``turn_policy``, e.g. idle handling)."""
        await self.warmup()
        call_id = call_id or uuid.uuid4().hex[:12]
        app = self.new_app(caller_phone, call_id)
        clock = clock or RealClock()
        stack = self.new_stack(clock)
        result = await run_call(turns, stack, app, out_dir=out_dir, clock=clock,
                                policy=self.cfg.turns.merged(turn_policy or {}), recovery=self.cfg.recovery,
                                call_id=call_id, bus=bus, tail_ms=tail_ms, max_ms=max_ms)
        result.app = app
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
