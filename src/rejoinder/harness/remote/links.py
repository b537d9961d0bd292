"""The harness's side of the two socket protocols: Twilio Media Streams and rejoinder's ``/ws``.

A link connects, opens the call (``connected`` + ``start`` / ``hello`` → ``ready``), sends the
caller's 20 ms frames as the caller loop hands them over, and turns everything the target sends
into the caller's jitter buffer (audio, ``clear``, marks, ``pause``/``resume``) or into what the
target reported about the call (rejoinder: transcripts, tool calls, turn summaries, errors).

Everything the target sends is checked; a target that sends garbage (not JSON, binary where text
is due, a bad base64 payload, a malformed frame), audio at the wrong sample rate or in the wrong
encoding, or that hangs up before the caller is done ends the call with :class:`CallFailed`,
whose message names the problem. Sending goes through one writer task with a bounded queue, so a
target that stops reading cannot stall the caller's clock.

Protocol references: ``server/PROTOCOL.md`` (both), Twilio's Media Streams messages
(https://www.twilio.com/docs/voice/media-streams/websocket-messages).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import secrets
import time
from typing import Any

import numpy as np
import soxr

from ...audio_io import TelephoneDecimator
from ...clock import RealClock
from ...errors import RejoinderError
from ...server.g711 import ulaw_decode, ulaw_encode
from ...server.protocol import DOWN_HEADER, UP_HEADER, CallEnded, load_json_object
from .jitter import JitterBuffer

LINE_RATE = 16000
TWILIO_RATE = 8000
OUTBOX_MAX = 500          # 10 s of frames: a target that reads nothing fails the call after that
OVERSPEED = 3.0           # sustained × real time above which μ-law 8 kHz cannot be what was sent
OVERSPEED_WINDOW_MS = 2000.0
LOUD_MEAN = 10000.0       # mean |x| of decoded audio above this for 0.5 s: not μ-law (linear PCM?)


class TargetError(RejoinderError):
    """The target cannot be reached or refused the call; the message says what to do."""


class CallFailed(Exception):
    """The call went wrong on the target's side; ``str(exc)`` is the reason recorded."""


async def connect(url: str, timeout_s: float, headers: dict[str, str] | None = None):
    """Open a WebSocket to ``url`` (no compression, 1 MiB messages).

    Raises:
        TargetError: refused, unreachable, no handshake within ``timeout_s``, or not a WebSocket.
    """
    from websockets.asyncio.client import connect as ws_connect
    from websockets.exceptions import InvalidHandshake, InvalidStatus, InvalidURI

    try:
        return await asyncio.wait_for(ws_connect(url, open_timeout=None, max_size=1 << 20, compression=None,
                                                 ping_interval=None, close_timeout=1,
                                                 additional_headers=headers), timeout_s)
    except ConnectionRefusedError:
        raise TargetError(f"cannot connect to {url}: connection refused; is the target running and "
                          "listening on that port?") from None
    except (TimeoutError, asyncio.TimeoutError):
        raise TargetError(f"{url} accepted no WebSocket handshake within {timeout_s:.0f} s: the target "
                          "never answered (is it a WebSocket endpoint, and not overloaded?)") from None
    except InvalidStatus as exc:
        raise TargetError(f"{url} answered HTTP {exc.response.status_code} instead of a WebSocket "
                          "upgrade; check the path (rejoinder serve: /ws or /twilio)") from None
    except InvalidURI as exc:
        raise TargetError(f"{url}: not a WebSocket URL ({exc}); use ws://HOST:PORT/PATH") from None
    except (InvalidHandshake, EOFError) as exc:
        raise TargetError(f"{url} does not speak WebSocket ({exc}); is this the agent's socket URL?") from None
    except OSError as exc:
        raise TargetError(f"cannot connect to {url}: {exc.strerror or exc}") from None


class Link:
    """Base of a protocol link: socket, writer queue, close handling."""

    protocol = ""

    def __init__(self, url: str, jb: JitterBuffer, clock: RealClock, *, token: str | None,
                 caller_phone: str | None, connect_timeout_s: float = 5.0) -> None:
        self.url = url
        self.jb = jb
        self.clock = clock
        self.token = token
        self.caller_phone = caller_phone
        self.connect_timeout_s = connect_timeout_s
        self.ws: Any = None
        self.ref: str | None = None            # the id under which the target reports this call
        self.messages = 0                      # messages received
        self.hanging_up = False
        self.origin_ms = 0.0                   # call-clock time of the first caller sample sent
        self.frames_sent = 0
        self.wall_origin_s: float | None = None
        self.reported: dict[str, Any] = {"clears": 0, "marks": 0}
        self._out: asyncio.Queue = asyncio.Queue(maxsize=OUTBOX_MAX)
        self._ready = asyncio.Event()
        self._drained = asyncio.Event()

    async def open(self) -> None:
        self.wall_origin_s = time.time() - self.clock.now_ms() / 1000.0   # Unix time of clock zero
        self.ws = await connect(self.url, self.connect_timeout_s)

    async def wait_ready(self, timeout_s: float) -> None:
        try:
            await asyncio.wait_for(self._ready.wait(), timeout_s)
        except (TimeoutError, asyncio.TimeoutError):
            raise CallFailed(f"the target never answered: not ready within {timeout_s:.0f} s of opening "
                             "the call") from None

    def _queue(self, item: str | bytes) -> None:
        try:
            self._out.put_nowait(item)
        except asyncio.QueueFull:
            raise CallFailed("the target stopped reading its socket (10 s of caller audio unsent)") from None

    async def writer(self) -> None:
        from websockets.exceptions import ConnectionClosed
        while True:
            item = await self._out.get()
            if item is None:
                self._drained.set()
                return
            try:
                await self.ws.send(item)
            except ConnectionClosed:
                if self.hanging_up:
                    return
                raise CallFailed(self._closed_reason()) from None

    def check(self) -> None:
        """Raise :class:`CallFailed` at once when the target has sent a close frame (its reader
        only sees it once the closing handshake completes, which a target that stopped reading
        can hold up for seconds)."""
        rcvd = getattr(getattr(self.ws, "protocol", None), "close_rcvd", None)
        if rcvd is not None and not self.hanging_up:
            raise CallFailed(self._closed_reason(rcvd.code, rcvd.reason))

    def _closed_reason(self, code: int | None = None, reason: str | None = None) -> str:
        code = code if code is not None else getattr(self.ws, "close_code", None)
        reason = (reason if reason is not None else getattr(self.ws, "close_reason", "")) or ""
        said = self.reported.get("errors")
        tail = f"; it said: {said[-1]}" if said else ""
        return (f"the target hung up mid-call (close code {code}"
                + (f": {reason}" if reason else "") + ")" + tail)

    async def reader(self) -> None:
        from websockets.exceptions import ConnectionClosed
        try:
            async for msg in self.ws:
                self.messages += 1
                now = self.clock.now_ms()
                try:
                    self._on_message(msg, now)
                except CallEnded as exc:  # the shared frame parser's complaint
                    raise CallFailed(f"garbage from the target: {exc.reason}: {_preview(msg)}") from None
        except ConnectionClosed:
            pass
        if not self.hanging_up:
            raise CallFailed(self._closed_reason())

    def _on_message(self, msg: str | bytes, now: float) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def send_audio(self, pcm: np.ndarray, t_ms: float) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def on_ear(self, events: list[tuple[str, int | None, float, dict[str, Any]]]) -> None:
        """What the caller's playout observed (start, end, cut, stall, mark): tell the target."""

    async def hang_up(self, last: str | None = None) -> None:
        """End the call from the caller's side (normal end): send ``last``, let the writer drain,
        close with 1000."""
        self.hanging_up = True
        for item in ([last] if last is not None else []) + [None]:
            try:
                self._out.put_nowait(item)
            except asyncio.QueueFull:
                break
        try:
            await asyncio.wait_for(self._drained.wait(), 2)
        except (TimeoutError, asyncio.TimeoutError):
            pass
        if self.ws is not None:
            try:
                await asyncio.wait_for(self.ws.close(1000, "caller hung up"), 3)
            except Exception:  # noqa: BLE001 — the call is over either way
                pass


def _preview(msg: str | bytes) -> str:
    text = msg if isinstance(msg, str) else f"<{len(msg)} bytes>"
    return repr(text[:60])


class TwilioLink(Link):
    """Twilio Media Streams (bidirectional): we are Twilio's media server, the target is the bot."""

    protocol = "twilio"

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.sid = "MZ" + secrets.token_hex(16)
        self.call_sid = "CA" + secrets.token_hex(16)
        self.ref = self.sid
        # soxr's higher stream qualities hold back 60–100 ms of audio fed in 20 ms frames (measured),
        # which the caller would count as the target's delay: the caller's audio goes through a
        # 0.94 ms FIR decimator, the target's through soxr "QQ" (0.1–0.3 ms; imaging above 4 kHz
        # only, which the caller's ear and Whisper ignore).
        self._down = TelephoneDecimator()
        self._up = soxr.ResampleStream(TWILIO_RATE, LINE_RATE, 1, dtype="int16", quality="QQ")
        self._seq = 0
        self._speed_t0: float | None = None
        self._speed_last = 0.0
        self._speed_n = 0
        self._loud = [0.0, 0]

    async def open(self) -> None:
        await super().open()
        params = {k: v for k, v in (("token", self.token), ("caller_phone", self.caller_phone)) if v}
        self._queue(json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"}))
        self._queue(self._msg("start", start={
            "streamSid": self.sid, "accountSid": "AC" + "0" * 32, "callSid": self.call_sid,
            "tracks": ["inbound"], "customParameters": params,
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": TWILIO_RATE, "channels": 1}}))
        self._ready.set()

    def _msg(self, event: str, **body: Any) -> str:
        self._seq += 1
        return json.dumps({"event": event, "sequenceNumber": str(self._seq), "streamSid": self.sid, **body})

    def send_audio(self, pcm: np.ndarray, t_ms: float) -> None:
        if self.frames_sent == 0:
            self.origin_ms = t_ms
        self.frames_sent += 1
        ulaw = ulaw_encode(self._down.process(pcm))
        self._queue(self._msg("media", media={"track": "inbound", "chunk": str(self.frames_sent),
                                              "timestamp": str(int(round(t_ms - self.origin_ms))),
                                              "payload": base64.b64encode(ulaw).decode()}))

    def _on_message(self, msg: str | bytes, now: float) -> None:
        if not isinstance(msg, str):
            raise CallFailed(f"garbage from the target: a binary message ({len(msg)} bytes); Media "
                             "Streams messages are JSON text")
        data = load_json_object(msg, "event", "a Media Streams message")
        event = data["event"]
        if event == "media":
            media = data.get("media")
            try:
                raw = base64.b64decode((media or {}).get("payload") or "", validate=True)
            except (binascii.Error, ValueError, TypeError, AttributeError):
                raise CallFailed(f"garbage from the target: a media payload that is not base64: "
                                 f"{_preview(msg)}") from None
            if raw:
                self._audio(ulaw_decode(raw), now)
        elif event == "mark":
            name = (data.get("mark") or {}).get("name")
            if isinstance(name, str):
                self.reported["marks"] += 1
                self.jb.mark(name, now)
        elif event == "clear":
            self.reported["clears"] += 1
            self.jb.clear(now)

    def _audio(self, pcm8: np.ndarray, now: float) -> None:
        # linear PCM read as μ-law decodes to near full-scale noise
        self._loud[0] += float(np.abs(pcm8.astype(np.int32)).sum())
        self._loud[1] += len(pcm8)
        if self._loud[1] >= TWILIO_RATE // 2:
            mean = self._loud[0] / self._loud[1]
            self._loud = [0.0, 0]
            if mean > LOUD_MEAN:
                raise CallFailed(f"the target's audio does not decode as μ-law (mean level {mean:.0f} of "
                                 "32768 for 0.5 s: linear PCM or another encoding?); Media Streams audio is "
                                 "μ-law 8000 Hz mono")
        if self._speed_t0 is None or now - self._speed_last > 300.0:
            self._speed_t0, self._speed_n = now, 0
        self._speed_last = now
        self._speed_n += len(pcm8)
        span = now - self._speed_t0
        if span >= OVERSPEED_WINDOW_MS and 1000.0 * self._speed_n / TWILIO_RATE > OVERSPEED * span:
            rate = 1000.0 * self._speed_n / span
            raise CallFailed(f"the target sends audio at {rate / TWILIO_RATE:.1f}× real time for {span / 1000:.1f} s "
                             f"(≈{rate:.0f} samples/s): wrong sample rate? Media Streams audio is μ-law "
                             "8000 Hz mono")
        pcm = self._up.resample_chunk(pcm8)
        if len(pcm):
            self.jb.push(pcm, now)

    def on_ear(self, events) -> None:
        for kind, _key, _t, data in events:
            if kind == "mark":  # Twilio echoes a mark when playback reaches it
                self._queue(self._msg("mark", mark={"name": data["name"]}))

    async def hang_up(self, last: str | None = None) -> None:
        await super().hang_up(self._msg("stop", stop={"accountSid": "AC" + "0" * 32, "callSid": self.call_sid}))


_PLAYED = {"start": "start", "end": "end", "cut": "cut", "stall": "stall"}


class RejoinderLink(Link):
    """rejoinder's ``/ws`` protocol, spoken like the browser client: stamped 16 kHz frames, a
    jitter buffer, and ``played`` reports of what the caller heard."""

    protocol = "rejoinder"

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.reported.update(turns={}, tools=[], transcripts=[], agent=[], errors=[], notices=[])

    async def open(self) -> None:
        await super().open()
        hello: dict[str, Any] = {"type": "hello", "sample_rate": LINE_RATE, "client": "rejoinder-harness"}
        if self.token:
            hello["token"] = self.token
        if self.caller_phone:
            hello["caller_phone"] = self.caller_phone
        self._queue(json.dumps(hello))

    def send_audio(self, pcm: np.ndarray, t_ms: float) -> None:
        if self.frames_sent == 0:
            self.origin_ms = t_ms
        self.frames_sent += 1
        self._queue(UP_HEADER.pack(t_ms) + pcm.astype("<i2", copy=False).tobytes())

    def _on_message(self, msg: str | bytes, now: float) -> None:
        rep = self.reported
        if isinstance(msg, bytes):
            if len(msg) < DOWN_HEADER.size + 2 or (len(msg) - DOWN_HEADER.size) % 2:
                raise CallFailed(f"garbage from the target: an audio frame of {len(msg)} bytes (8-byte header, "
                                 "then int16 samples)")
            turn, _seq = DOWN_HEADER.unpack_from(msg)
            pcm = np.frombuffer(msg, dtype="<i2", offset=DOWN_HEADER.size)
            if len(pcm) != 320:
                raise CallFailed(f"the target sent an audio frame of {len(pcm)} samples; /ws frames are 20 ms "
                                 f"at 16000 Hz (320 samples), so it is sending ≈{50 * len(pcm)} Hz: wrong sample rate")
            self.jb.push(pcm, now, key=turn)
            return
        data = load_json_object(msg, "type", "a /ws control message")
        kind = data["type"]
        if kind == "ping":
            self._queue(json.dumps({"type": "pong", "id": data.get("id"), "t": now}))
        elif kind == "ready":
            rate = data.get("line_rate", LINE_RATE)
            if rate != LINE_RATE:
                raise CallFailed(f"the target streams agent audio at {rate} Hz; the /ws protocol is 16000 Hz: "
                                 "wrong sample rate")
            self.ref = str(data.get("call_id") or "") or None
            self._ready.set()
        elif kind == "pause":
            self.jb.hold(now)
        elif kind == "resume":
            self.jb.resume(now)
        elif kind == "clear":
            rep["clears"] += 1
            self.jb.clear(now)
        elif kind == "reply_end" and isinstance(data.get("turn_id"), int):
            self.jb.end_reply(data["turn_id"])
        elif kind == "tool":
            rep["tools"].append({"turn_id": data.get("turn_id"), "name": data.get("name"), "args": data.get("args")})
        elif kind == "turn" and isinstance(data.get("turn_id"), int):
            rep["turns"][data["turn_id"]] = data
        elif kind == "transcript" and data.get("final"):
            rep["transcripts"].append((now, data.get("turn_id"), data.get("text", "")))
        elif kind == "agent":
            rep["agent"].append((now, data.get("turn_id"), data.get("text", "")))
        elif kind == "error":
            rep["errors"].append(f"{data.get('code')}: {data.get('message')}")
        elif kind == "notice":
            rep["notices"].append(f"{data.get('stage')}: {data.get('message')}")

    def on_ear(self, events) -> None:
        for kind, key, t, data in events:
            if kind not in _PLAYED or key is None:
                continue
            msg: dict[str, Any] = {"type": "played", "turn_id": key, "event": _PLAYED[kind], "t": t}
            if kind == "stall":
                msg["duration_ms"] = data["duration_ms"]
            if "played_ms" in data:
                msg["played_ms"] = data["played_ms"]
            self._queue(json.dumps(msg))

    async def hang_up(self, last: str | None = None) -> None:
        await super().hang_up(json.dumps({"type": "bye"}))


LINKS = {"twilio": TwilioLink, "rejoinder": RejoinderLink}
