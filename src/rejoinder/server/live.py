"""One live call over a socket: the session, the 20 ms playout loop, the outbox, and teardown.

A :class:`LiveCall` owns everything of one call — its clock (t = 0 at accept), event bus, timeline,
session and recordings — and runs three kinds of task in one task group: the transport's receive
loop (which feeds caller audio through :meth:`LiveCall.feed`), the playout pacing loop (one 20 ms
agent frame per tick, handed to the transport's :class:`Downlink`) and a single writer draining the
outbox to the socket. When any of them ends the call (:class:`~.protocol.CallEnded`: hang-up,
protocol error, limit), the group cancels the others, the session's own tasks are cancelled and
awaited, and the records are closed: nothing outlives the call.

Playback stamps made here are estimates (``caller_side_playout=False``): the transport reports what
the caller's side actually played through :meth:`LiveCall.client_stamp`, which replaces them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable, Iterable, Protocol, Union

import numpy as np

from .. import telemetry
from ..agent import Agent
from ..clock import RealClock
from ..events import CallEnd, Event, EventBus
from ..livesession import LiveSession
from ..session import Stack
from ..pacing import STOP, shared_pacer
from ..timeline import CallTranscript, Timeline
from ..tools import CallContext
from ..turns import TurnPolicy
from .protocol import CallEnded, Close
from .store import CallRecord

log = logging.getLogger("rejoinder.server")

from ..livesession import FRAME, FRAME_MS, GAP_MS, RESYNC_MS  # noqa: E402,F401

Out = Union[str, bytes, Callable[[], Union[str, bytes]]]  # a callable is rendered at send time


class Downlink(Protocol):
    """How a transport renders agent audio and call events into messages."""

    def audio(self, turn_id: int, frame: np.ndarray, t_ms: float) -> Iterable[Out]:
        """Messages for one 20 ms agent frame (int16, 16 kHz; the buffer is reused after)."""

    def event(self, ev: Event) -> Iterable[Out]:
        """Messages for a call event (transcripts, barge-in, turn summaries)."""

    def held(self, held: bool) -> Iterable[Out]:
        """Messages when the session holds (caller started talking) or resumes playout."""


class LiveCall:
    """One call. Set :attr:`downlink`, then ``await run(receive, send)``."""

    def __init__(self, *, call_id: str, transport: str, stack: Stack, agent: Agent,
                 ctx: CallContext, policy: TurnPolicy | None, record: CallRecord,
                 max_call_s: float, outbox_max: int = 1500, downstream_lag_ms: float = 100.0,
                 **session_kw: Any) -> None:
        """``downstream_lag_ms``: the client's jitter buffer (60 ms) plus typical output-device
        latency (≈40 ms reported by Chromium) — audio sent but not yet heard when a reply is cut.
        ``session_kw`` (recovery, filler, preemptive) go to the :class:`~rejoinder.session.Session`."""
        self.call_id = call_id
        self.transport = transport
        self.clock = RealClock()
        self.bus = EventBus()
        self.record = record
        self.timeline = Timeline(record.timeline_path)
        self.bus.subscribe(self.timeline)
        self.transcript = CallTranscript()
        self.bus.subscribe(self.transcript)
        # before the session exists: it emits events (the call's first step) as it is built
        self.downlink: Downlink | None = None
        self.bus.subscribe(self._on_event)
        self.telemetry = telemetry.observe_call(self.bus, call_id, self.clock, transport=transport)
        self.ctx = ctx
        # the public live-session API, paced here (this loop also drives the downlink)
        self.live = LiveSession(stack, agent, call_id=call_id, ctx=ctx, policy=policy,
                                clock=self.clock, bus=self.bus, downstream_lag_ms=downstream_lag_ms,
                                greet=False, max_seconds=max_call_s + 60.0, **session_kw)
        self.live.on_caller_frame = self._caller_frame
        self.session = self.live.session
        self.st = self.live.st
        self.max_call_ms = max_call_s * 1000.0
        self.outbox: asyncio.Queue[Out] = asyncio.Queue(maxsize=outbox_max)
        self.meta: dict[str, Any] = {"call_id": call_id, "transport": transport,
                                     "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        self.ended: CallEnded | None = None
        self._failure: CallEnded | None = None
        self._downstream_lag_ms = downstream_lag_ms

    # --- caller audio in -----------------------------------------------------------------------
    def feed(self, pcm: np.ndarray, t_ms: float | None) -> None:
        """Caller audio (int16, 16 kHz) whose first sample was captured at ``t_ms`` (call clock;
        None when unknown). Frames go to the session on a continuous sample clock anchored at
        the first capture time; a hole longer than ``GAP_MS`` is filled with silence.

        Raises:
            CallEnded: ``TIMEOUT`` when the caller's audio exceeds the call length limit.
        """
        if self.record.caller_origin_ms is None:
            self.record.caller_origin_ms = (t_ms if t_ms is not None else
                                            self.clock.now_ms() - 1000.0 * len(pcm) / 16000.0)
        self.live.push(pcm, t_ms)

    def caller_ms(self) -> float:
        """Call-clock time of the next caller sample."""
        return self.live.caller_ms()

    def _caller_frame(self, frame: np.ndarray, t_ms: float) -> None:
        if t_ms - (self.record.caller_origin_ms or 0.0) > self.max_call_ms:
            raise CallEnded(Close.TIMEOUT, "call length limit reached", error_code="too_long")
        self.record.caller(frame)

    # --- what the caller's side reports --------------------------------------------------------
    def client_stamp(self, name: str, turn_id: int, t_ms: float, **data: Any) -> str | None:
        """Stamp an observed caller-side boundary; returns why it was refused, or None."""
        now = self.clock.now_ms()
        if not 0 <= turn_id <= self.session.taker.turn_id:  # 0: the greeting (not measured)
            return f"unknown turn {turn_id}"
        if not -1000.0 <= t_ms <= now + 250.0:
            return f"time {t_ms:.0f} ms is outside the call (now {now:.0f} ms)"
        estimated = bool(data.pop("estimated", False))
        self.st.stamp(name, turn_id, t_ms, estimated=estimated, **data)
        if name == "playback_end":  # the caller's side played the reply out: an agent's
            self.session.playout_confirmed(turn_id, t_ms)  # hang-up may close the line now
        return None

    def turn_summary(self, turn_id: int) -> dict[str, Any] | None:
        rec = self.timeline.turns.get(turn_id)
        return None if rec is None else rec.summary()

    # --- out -------------------------------------------------------------------------------------
    def send(self, items: Iterable[Out]) -> None:
        """Queue messages for the socket. Never raises (it runs inside bus observers); a client
        that does not read ends the call at the next tick."""
        for item in items:
            try:
                self.outbox.put_nowait(item)
            except asyncio.QueueFull:
                self._failure = CallEnded(Close.POLICY, "client is not reading its messages",
                                          error_code="slow_client")
                return

    def fail(self, exc: CallEnded) -> None:
        """End the call at the next tick (for code that must not raise)."""
        self._failure = self._failure or exc

    @property
    def lines(self) -> list[tuple[str, str]]:
        """(caller | agent, text) as heard: one caller line per turn."""
        return self.transcript.lines

    def _on_event(self, ev: Event) -> None:
        if self.downlink is not None:
            self.send(self.downlink.event(ev))

    async def _pace(self) -> None:
        """The playout loop: one agent frame per 20 ms tick of the process's shared pacer
        (:mod:`rejoinder.pacing`); more than ``RESYNC_MS`` late, it skips ahead."""
        playout = self.session.playout
        held = [False]

        def step(t: float) -> object:
            if self._failure is not None:
                raise self._failure
            if self.session.hangup is not None:  # the agent ended the call, and the transport
                return STOP                       # confirmed its last reply played (or the watchdog)
            frame, turn_id = self.live.tick(t)
            self.record.agent(frame, t)
            if turn_id is not None and self.downlink is not None:
                self.send(self.downlink.audio(turn_id, frame, t))
            if playout.held != held[0] and self.downlink is not None:
                held[0] = playout.held
                self.send(self.downlink.held(held[0]))
            if t > self.max_call_ms:
                raise CallEnded(Close.TIMEOUT, "call length limit reached", error_code="too_long")
            return None

        await shared_pacer().run(step, self.clock, resync_ms=RESYNC_MS, name=f"{self.call_id}:pace")
        raise await self._agent_ended()  # the lane stops only when the agent ended the call

    async def _agent_ended(self) -> CallEnded:
        """The agent hung up or transferred the call: run the transport's transfer action
        (``Downlink.transfer``, if it has one), record it, and say how the socket closes."""
        tr = self.session.transfer
        self.meta["hangup"] = self.session.hangup
        if tr is None:
            return CallEnded(Close.NORMAL, f"the agent hung up ({self.session.hangup})")
        action = getattr(self.downlink, "transfer", None)
        try:
            outcome = await action(tr) if action is not None else {"action": "none"}
        except Exception as exc:  # noqa: BLE001 — recorded; the line still closes
            outcome = {"action": "failed", "error": repr(exc)}
        self.meta["transfer"] = {**tr, **outcome}
        self.st.emit(CallEnd("transfer", tr["reason"], tr["target"], "transferred", self.clock.now_ms(),
                             self.call_id, tr["turn_id"], dict(outcome)))
        for _ in range(50):  # let the writer send what is queued (a transfer message) first
            if self.outbox.empty():
                break
            await asyncio.sleep(0.01)
        return CallEnded(Close.NORMAL, "the agent transferred the call")

    async def _write(self, send: Callable[[str | bytes], Awaitable[None]]) -> None:
        while True:
            item = await self.outbox.get()
            if callable(item):
                item = item()
            try:
                await send(item)
            except Exception:  # the socket went away under us
                raise CallEnded(Close.NORMAL, "connection lost") from None

    async def run(self, receive: Callable[[], Awaitable[None]],
                  send: Callable[[str | bytes], Awaitable[None]],
                  *extra: Callable[[], Awaitable[None]]) -> CallEnded:
        """Run the call until it ends; returns why. Always tears down and closes the records.

        ``receive`` must raise :class:`CallEnded` when the socket closes.
        """
        try:
            self.session.greet()
            async with asyncio.TaskGroup() as tg:
                tg.create_task(receive(), name=f"{self.call_id}:receive")
                tg.create_task(self._pace(), name=f"{self.call_id}:pace")
                tg.create_task(self._write(send), name=f"{self.call_id}:write")
                for job in extra:
                    tg.create_task(job(), name=f"{self.call_id}:extra")
        except* CallEnded as eg:
            self.ended = eg.exceptions[0]
        except* Exception as eg:
            log.error("call %s failed", self.call_id, exc_info=eg.exceptions[0])
            self.ended = CallEnded(Close.SERVER_ERROR, "server error", error_code="server_error")
        finally:
            await self.session.close()
            self.meta["ended"] = {"code": self.ended.code if self.ended else None,
                                  "reason": self.ended.reason if self.ended else "cancelled"}
            self.meta["duration_ms"] = round(self.clock.now_ms(), 1)
            self.meta["observer_errors"] = self.bus.observer_errors
            if self.telemetry is not None:
                code = self.ended.code if self.ended else None
                self.telemetry.finish(self.timeline.records(),
                                      error=None if code in (1000, 1001) else f"closed with {code}")
            self.record.finish(self.timeline, self.meta)
        return self.ended
