"""The browser transport at ``/ws`` (protocol: ``server/PROTOCOL.md``, models: :mod:`.protocol`).

Order of a call: ``hello`` (token, sample rate) → the server pings until the clock offset is known
→ ``ready`` → the client streams stamped audio frames and reports what it played (``played``);
the server streams agent frames and control events. Client stamps (capture and playback times on
the browser's ``performance.now()`` clock) are converted to the call clock with the ping offset,
so the timeline's V2V is what the person at the browser heard.
"""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any, Iterable

import numpy as np
import soxr
from starlette.websockets import WebSocket

from ..events import AgentSpeech, Boundary, ErrorEvent, Event, SpeakableText, ToolCallEvent, TranscriptEvent
from ..session import LINE_RATE
from .guard import MessageGuard
from .live import LiveCall, Out
from .protocol import (DOWN_HEADER, SAMPLE_RATES, Bye, CallEnded, Close, Hello, Played, Pong, Stats,
                       parse_audio, parse_control)
from .sync import ClockSync

_PLAYED = {"start": "playback_start", "end": "playback_end", "cut": "interrupted_at", "stall": "stall"}
_SUMMARY_ON = frozenset({"playback_start", "playback_end", "interrupted_at"})
HELLO_TIMEOUT_S = 5.0
SYNC_PINGS = 5
PING_EVERY_S = 2.0


async def read_hello(ws: WebSocket, guard: MessageGuard, token: str) -> Hello:
    """Wait for ``hello`` and check it.

    Raises:
        CallEnded: timeout, a wrong first message, a missing/wrong token, an unsupported rate.
    """
    try:
        msg = await asyncio.wait_for(ws.receive(), HELLO_TIMEOUT_S)
    except asyncio.TimeoutError:
        raise CallEnded(Close.TIMEOUT, f"no hello within {HELLO_TIMEOUT_S:.0f} s",
                        error_code="timeout") from None
    if msg["type"] == "websocket.disconnect":
        raise CallEnded(Close.NORMAL, "client left before hello")
    text = msg.get("text")
    if text is None:
        guard.check(len(msg.get("bytes") or b""), True)
        raise CallEnded(Close.PROTOCOL, "the first message must be a JSON hello", error_code="bad_message")
    guard.check(len(text.encode("utf-8", "replace")), False)
    hello = parse_control(text)
    if not isinstance(hello, Hello):
        raise CallEnded(Close.PROTOCOL, "the first message must be hello", error_code="bad_message")
    from .guard import check_token
    check_token(token, ws.query_params.get("token") or hello.token)
    if hello.sample_rate not in SAMPLE_RATES:
        raise CallEnded(Close.PROTOCOL, f"unsupported sample_rate {hello.sample_rate}; use one of "
                        f"{', '.join(map(str, SAMPLE_RATES))}", error_code="bad_sample_rate")
    return hello


class BrowserLink:
    """Receive loop, pinger and downlink of one browser call."""

    def __init__(self, ws: WebSocket, call: LiveCall, hello: Hello, guard: MessageGuard) -> None:
        self.ws = ws
        self.call = call
        self.hello = hello
        self.guard = guard
        self.sync = ClockSync()
        self.ready = False
        self._seq: dict[int, int] = {}
        self._resampler = (None if hello.sample_rate == LINE_RATE else
                           soxr.ResampleStream(hello.sample_rate, LINE_RATE, 1, dtype="int16"))
        call.meta["client"] = {"name": hello.client, "sample_rate": hello.sample_rate,
                               "stats": dict(hello.stats)}
        call.downlink = self

    # --- socket in ------------------------------------------------------------------------------
    async def receive(self) -> None:
        while True:
            msg = await self.ws.receive()
            if msg["type"] == "websocket.disconnect":
                raise CallEnded(Close.NORMAL, "client hung up")
            data = msg.get("bytes")
            if data is not None:
                self.guard.check(len(data), True)
                self._audio(data)
                continue
            text = msg.get("text") or ""
            self.guard.check(len(text.encode("utf-8", "replace")), False)
            self._control(parse_control(text))

    def _audio(self, data: bytes) -> None:
        t_client, raw = parse_audio(data)
        pcm = np.frombuffer(raw, dtype="<i2")
        if self._resampler is not None:
            pcm = self._resampler.resample_chunk(pcm)
            if not len(pcm):
                return
        t_call = None
        conv = None if math.isnan(t_client) else self.sync.to_call(t_client)
        if conv is not None:
            now = self.call.clock.now_ms()
            t_call = min(conv[0], now - 1000.0 * len(pcm) / LINE_RATE)  # never in the future
        self.call.feed(pcm, t_call)

    def _control(self, m) -> None:
        now = self.call.clock.now_ms()
        if isinstance(m, Pong):
            self.sync.pong(m.id, m.t, now)
        elif isinstance(m, Played):
            self._played(m)
        elif isinstance(m, Stats):
            self.call.meta["client"]["stats"].update(m.stats)
        elif isinstance(m, Bye):
            raise CallEnded(Close.NORMAL, "bye")
        else:
            raise CallEnded(Close.PROTOCOL, "hello sent twice", error_code="bad_message")

    def _played(self, m: Played) -> None:
        conv = self.sync.to_call(m.t)
        if conv is None:
            self.call.send([_error("bad_stamp", "played before the clock was synchronised")])
            return
        data: dict[str, Any] = {"source": "client", "clock_err_ms": round(conv[1], 3),
                                "estimated": m.estimated}
        if m.event == "stall":
            data["duration_ms"] = m.duration_ms or 0.0
        if m.played_ms is not None:
            data["played_ms"] = m.played_ms
        why = self.call.client_stamp(_PLAYED[m.event], m.turn_id, conv[0], **data)
        if why is not None:
            self.call.send([_error("bad_stamp", why)])

    # --- clock sync -----------------------------------------------------------------------------
    def _ping(self) -> str:
        return json.dumps({"type": "ping", "id": self.sync.ping(self.call.clock.now_ms())})

    async def pinger(self) -> None:
        for _ in range(SYNC_PINGS):
            self.call.send([self._ping])
            await asyncio.sleep(0.03)
        for _ in range(100):
            if self.sync.count >= 3:
                break
            await asyncio.sleep(0.02)
        if not self.sync.ready:
            raise CallEnded(Close.PROTOCOL, "no pong: the client must answer ping", error_code="no_pong")
        rtt, _ = self.sync.best()
        self.call.meta["clock_sync"] = {"rtt_ms": round(rtt, 3)}
        self.call.send([json.dumps({"type": "ready", "call_id": self.call.call_id,
                                    "line_rate": LINE_RATE, "frame_ms": 20,
                                    "clock_err_ms": round(rtt / 2, 3)})])
        self.ready = True
        while True:
            await asyncio.sleep(PING_EVERY_S)
            self.call.send([self._ping])
            best = self.sync.best()
            if best:
                self.call.meta["clock_sync"] = {"rtt_ms": round(best[0], 3), "pongs": self.sync.count}

    # --- socket out (Downlink) ------------------------------------------------------------------
    async def send_raw(self, item: str | bytes) -> None:
        if isinstance(item, bytes):
            await self.ws.send_bytes(item)
        else:
            await self.ws.send_text(item)

    def audio(self, turn_id: int, frame: np.ndarray, t_ms: float) -> Iterable[Out]:
        seq = self._seq.get(turn_id, 0)
        self._seq[turn_id] = seq + 1
        return (DOWN_HEADER.pack(turn_id, seq) + frame.tobytes(),)

    def held(self, held: bool) -> Iterable[Out]:
        return (json.dumps({"type": "pause" if held else "resume"}),)

    async def transfer(self, tr: dict[str, Any]) -> dict[str, Any]:
        """The agent transfers the call (its last reply has played): tell the page, which hands
        the caller to a person its own way; the server then closes the socket (1000)."""
        self.call.send([_j(type="transfer", turn_id=tr["turn_id"], target=tr["target"],
                           reason=tr["reason"])])
        return {"action": "event"}

    def event(self, ev: Event) -> Iterable[Out]:
        out: list[Out] = []
        if isinstance(ev, TranscriptEvent):
            out.append(_j(type="transcript", role="caller", turn_id=ev.turn_id, text=ev.text,
                          final=ev.final and not ev.speculative))
        elif isinstance(ev, SpeakableText):
            out.append(_j(type="agent_text", turn_id=ev.turn_id, text=ev.text))
        elif isinstance(ev, ToolCallEvent):
            out.append(_j(type="tool", turn_id=ev.turn_id, name=ev.name, args=ev.args))
        elif isinstance(ev, AgentSpeech) and not ev.call_ended:  # (call_ended: the socket closes)
            if ev.interrupted:
                out.append(_j(type="clear", turn_id=ev.turn_id))
            else:
                out.append(_j(type="reply_end", turn_id=ev.turn_id))
            out.append(_j(type="agent", turn_id=ev.turn_id, text=ev.heard_text,
                          interrupted=ev.interrupted))
            out.append(self._summary(ev.turn_id))
        elif isinstance(ev, Boundary) and ev.name in _SUMMARY_ON and not ev.estimated:
            out.append(self._summary(ev.turn_id))
        elif isinstance(ev, ErrorEvent):
            out.append(_j(type="notice", turn_id=ev.turn_id, stage=ev.stage, message=ev.message,
                          recovered=ev.recovered))
        return out

    def _summary(self, turn_id: int) -> Out:
        return lambda: _j(type="turn", **(self.call.turn_summary(turn_id) or {"turn_id": turn_id}))


def _j(**fields: Any) -> str:
    return json.dumps(fields, default=str)


def _error(code: str, message: str) -> str:
    return _j(type="error", code=code, message=message)
