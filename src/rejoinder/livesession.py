"""The public entry point for embedding a call in your own transport: :class:`LiveSession`.

Your transport pushes the caller's audio (int16 mono at 16 kHz, chunks of any length) with
:meth:`LiveSession.push` and plays what :meth:`LiveSession.audio` yields (20 ms int16 frames of
agent audio at 16 kHz, paced by the call clock); call events (:mod:`rejoinder.events`:
transcripts, turn decisions, what the caller heard, boundaries) reach the observers given to
:meth:`LiveSession.on_event`. The session keeps its own clock: turn timers and playout run on
it whether or not audio arrives, so nothing is driven frame by frame by hand, and no internal
class (``Stamper``, ``Session``) needs importing.

Example (the README has a complete one, run by tests/test_livesession.py)::

    async with LiveSession(stack, agent) as call:
        call.on_event(print)
        feeding = asyncio.create_task(call.push_all(mic))   # mic: async iterator of int16
        async for frame in call.audio():                     # until the call ends
            speaker(frame.pcm)

Time is ms on the call clock (t = 0 when the session opens).
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Any, AsyncIterable, AsyncIterator, Callable

import numpy as np

from .agent import Agent
from .clock import Clock, RealClock
from .events import Event, EventBus
from .pacing import STOP, shared_pacer, uses_shared_pacer
from .session import LINE_RATE, Session, Stack
from .stages import Stamper
from .tools import CallContext
from .turns import TurnPolicy

FRAME = 320          # 20 ms at 16 kHz
FRAME_MS = 20.0
GAP_MS = 100.0       # a hole in the caller's audio longer than this is filled with silence
RESYNC_MS = 200.0    # a pacing loop this late skips ahead instead of bursting
_INT16 = np.dtype(np.int16)
_ONE_FRAME = (FRAME,)


@dataclass(frozen=True, slots=True)
class AgentFrame:
    """20 ms of agent audio (``pcm``: int16, 16 kHz, 320 samples; a copy, yours to keep) of
    reply ``turn_id``, due at the caller at ``t_ms`` (call clock)."""

    turn_id: int
    pcm: np.ndarray
    t_ms: float


class LiveSession:
    """One live call of ``agent`` on the model ports ``stack`` (see the module docstring).

    Args:
        stack: the ports (``Runtime.new_stack()`` gives one with shared models).
        agent: the user's :class:`~rejoinder.agent.Agent`.
        call_id: default a random id. ctx: the call's context for tools (default: the call id).
        policy: turn-taking settings. clock: default a real clock started now.
        bus: an event bus to emit on (default a new one).
        downstream_lag_ms: audio your transport still holds after a frame is handed over (its
            jitter buffer plus output latency): not counted as heard when a reply is cut.
        greet: say the agent's greeting when the session opens.
        caller_side: this playout *is* the caller's ear (a simulated caller in the same process),
            so its playback stamps are observed, not estimated.
        session_kw: ``recovery``, ``filler``, ``preemptive``, ``max_seconds`` for the session.

    Raises:
        ValueError: the stack has no LLM port.
    """

    def __init__(self, stack: Stack, agent: Agent, *, call_id: str | None = None,
                 ctx: CallContext | None = None, policy: TurnPolicy | None = None,
                 clock: Clock | None = None, bus: EventBus | None = None,
                 downstream_lag_ms: float = 0.0, greet: bool = True, caller_side: bool = False,
                 **session_kw: Any) -> None:
        self.call_id = call_id or (ctx.call_id if ctx else uuid.uuid4().hex[:12])
        self.clock = clock or RealClock()
        self.bus = bus or EventBus()
        self.st = Stamper(self.call_id, self.clock, self.bus)
        self.session = Session(self.st, stack, agent, ctx or CallContext(self.call_id),
                               policy=policy, caller_side_playout=caller_side,
                               downstream_lag_ms=downstream_lag_ms, **session_kw)
        self._greet = greet
        self._buf = np.zeros(FRAME, dtype=np.int16)
        self._fill = 0
        self._fed = 0
        self._origin: float | None = None
        self._frames: asyncio.Queue[AgentFrame | None] = asyncio.Queue()
        self._pacer: asyncio.Task | None = None
        self.ended: str | None = None
        self.on_caller_frame: Callable[[np.ndarray, float], None] | None = None  # e.g. a recorder
        self.on_agent_frame: Callable[[np.ndarray, float], None] | None = None

    # --- lifecycle ----------------------------------------------------------------------------
    async def __aenter__(self) -> "LiveSession":
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def start(self) -> None:
        """Open the call: greet (if asked) and start the playout clock. Call on the event loop."""
        if self._pacer is None:
            if self._greet:
                self.session.greet()
            self._pacer = asyncio.get_running_loop().create_task(self._pace())

    async def close(self) -> None:
        """End the call: stop the clock, cancel and await everything the call still runs."""
        if self.ended is None:
            self.ended = "closed"
        if self._pacer is not None:
            self._pacer.cancel()
            await asyncio.gather(self._pacer, return_exceptions=True)
        await self.session.close()
        self._frames.put_nowait(None)

    def end(self, why: str = "ended") -> None:
        """End the call from an observer or a callback (no await): :meth:`audio` stops; leave
        the ``async with`` block (or await :meth:`close`) to tear down."""
        if self.ended is None:
            self.ended = why
        self._frames.put_nowait(None)

    @property
    def hangup(self) -> str | None:
        """Why the agent ended the call (its goodbye has played), or None: close the line then."""
        return self.session.hangup

    @property
    def held(self) -> bool:
        """True while the caller talks over the agent (its audio is held: clear your buffer)."""
        return self.session.playout.held

    def on_event(self, observer: Callable[[Event], None]) -> None:
        """Call ``observer`` with every event of the call (synchronously; keep it quick)."""
        self.bus.subscribe(observer)

    # --- caller audio in ----------------------------------------------------------------------
    def push(self, pcm: np.ndarray, t_ms: float | None = None) -> None:
        """Caller audio (int16 mono, 16 kHz, any length) whose first sample was captured at
        ``t_ms`` (call clock; None: unknown, taken as following the previous chunk, and the
        first chunk as ending now). It reaches the session as 20 ms frames on a continuous
        sample clock; a hole longer than ``GAP_MS`` between stamped chunks is filled with
        silence.

        Raises:
            ValueError: ``pcm`` is not one-dimensional int16.
        """
        if (self._fill == 0 and t_ms is not None and self._origin is not None
                and type(pcm) is np.ndarray and pcm.dtype is _INT16 and pcm.shape == _ONE_FRAME
                and t_ms - (t := self._origin + 1000.0 * self._fed / LINE_RATE) <= GAP_MS):
            # the common case: one whole frame, no gap to fill, nothing to re-block
            if self.on_caller_frame is not None:
                self.on_caller_frame(pcm, t)
            self.session.on_frame(pcm, t)
            self._fed += FRAME
            return
        pcm = np.asarray(pcm)
        if pcm.ndim != 1 or pcm.dtype != np.int16:
            raise ValueError(f"caller audio must be mono int16 at {LINE_RATE} Hz, got "
                             f"{pcm.dtype} with shape {pcm.shape}; convert with "
                             "(x * 32767).astype(np.int16)")
        if self._origin is None:
            self._origin = (t_ms if t_ms is not None else
                            self.clock.now_ms() - 1000.0 * len(pcm) / LINE_RATE)
        if t_ms is not None and self._fill == 0:  # unstamped audio is taken as continuous
            gap = t_ms - self.caller_ms()
            if gap > GAP_MS:
                self._push(np.zeros(int(gap * LINE_RATE / 1000) // FRAME * FRAME, dtype=np.int16))
        self._push(pcm)

    async def push_all(self, chunks: AsyncIterable[np.ndarray]) -> None:
        """:meth:`push` every chunk of ``chunks`` as it comes (stamped on arrival: it ends now)."""
        async for pcm in chunks:
            self.push(pcm, self.clock.now_ms() - 1000.0 * len(pcm) / LINE_RATE)

    def caller_ms(self) -> float:
        """Call-clock time of the next caller sample."""
        return (self._origin or 0.0) + 1000.0 * (self._fed + self._fill) / LINE_RATE

    def _push(self, pcm: np.ndarray) -> None:
        pos = 0
        while pos < len(pcm):
            take = min(FRAME - self._fill, len(pcm) - pos)
            self._buf[self._fill:self._fill + take] = pcm[pos:pos + take]
            self._fill += take
            pos += take
            if self._fill == FRAME:
                t = (self._origin or 0.0) + 1000.0 * self._fed / LINE_RATE
                if self.on_caller_frame is not None:
                    self.on_caller_frame(self._buf, t)
                self.session.on_frame(self._buf, t)
                self._fed += FRAME
                self._fill = 0

    # --- agent audio out ----------------------------------------------------------------------
    async def audio(self) -> AsyncIterator[AgentFrame]:
        """The agent's audio as it is due, 20 ms frames (silence between replies is not sent),
        until the call ends (the agent hung up, or :meth:`close`)."""
        while self.ended is None or not self._frames.empty():
            frame = await self._frames.get()
            if frame is None:
                return
            yield frame

    def tick(self, t_ms: float) -> tuple[np.ndarray, int | None]:
        """One playout step, for a transport that paces the call itself (the harness's
        simulated caller, the server): the 20 ms frame the caller hears from ``t_ms`` (int16;
        a buffer reused at the next tick) and the turn whose reply it carries (None: silence).
        Sessions paced by :meth:`audio` never call this."""
        session = self.session
        r = session.playout.reply
        if r is None and session.ender.pending is None and self.on_agent_frame is None:
            # no reply and no call end pending (most frames): what tick_playout would do
            session.playout.last_peak = 0
            return session.playout.silence, None
        before = r.played if r is not None else 0
        frame = self.session.tick_playout(t_ms)
        if self.on_agent_frame is not None:
            self.on_agent_frame(frame, t_ms)
        return frame, (r.turn_id if r is not None and r.played > before else None)

    async def _pace(self) -> None:
        """The playout loop: on a real clock a lane of the process's one pacing timer
        (:mod:`rejoinder.pacing`); a virtual clock keeps this call's own loop."""
        playout = self.session.playout

        def step(t: float) -> object:
            if self.session.hangup is not None and playout.reply is None:
                self.ended = f"hangup: {self.session.hangup}"
                return STOP
            frame, turn_id = self.tick(t)
            if turn_id is not None:
                self._frames.put_nowait(AgentFrame(turn_id, frame.copy(), t))
            return None

        if uses_shared_pacer(self.clock):
            try:
                await shared_pacer().run(step, self.clock, resync_ms=RESYNC_MS,
                                         name=f"{self.call_id}:live")
            finally:
                self._frames.put_nowait(None)
            return
        t = self.clock.now_ms()
        try:
            while True:
                await self.clock.pace(t)
                if self.clock.now_ms() - t > RESYNC_MS:
                    t = self.clock.now_ms()
                if step(t) is STOP:
                    return
                t += FRAME_MS
        finally:
            self._frames.put_nowait(None)
