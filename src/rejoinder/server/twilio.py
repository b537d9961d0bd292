"""Telephony at ``/twilio``: the Twilio Media Streams protocol (bidirectional ``<Connect><Stream>``).

Inbound: ``connected``, ``start`` (stream id, media format, custom parameters), ``media`` (base64
μ-law 8 kHz, 20 ms, with a ``timestamp`` in ms since the stream started), ``mark`` (echo of our
marks as playback reaches them), ``dtmf``, ``stop``. Outbound: ``media``, ``mark``, ``clear``.

Point a number at it with TwiML (Twilio does not pass query strings on stream URLs, so the token
travels as a custom parameter)::

    <Response><Connect><Stream url="wss://HOST/twilio">
      <Parameter name="token" value="TOKEN"/>
    </Stream></Connect></Response>

Playback: a mark ``s<turn>`` is sent just before the frame holding the reply's first voiced sample
and ``e<turn>`` after its last frame; their echoes stamp ``playback_start`` / ``playback_end`` when
Twilio's media server reached them (``source: twilio_mark`` — the phone network's own delay after
Twilio is not observable). On barge-in the server sends ``clear`` then a mark ``c<turn>``, whose
immediate echo stamps ``interrupted_at``; marks flushed by the clear are not taken as played.
The ``e<turn>`` echo is also the confirmation an agent's hang-up or transfer waits for.

Transfer to a person (:func:`rejoinder.calltools.transfer_to_human`): a configurable action,
:meth:`TwilioLink.transfer` (a webhook that receives the ``<Dial>`` TwiML to run).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import html
import json
from typing import Any, Iterable

import numpy as np
import soxr
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.websockets import WebSocket

from ..audio_io import TelephoneDecimator
from ..events import AgentSpeech, Event
from ..session import LINE_RATE
from .g711 import ulaw_decode, ulaw_encode
from .guard import MessageGuard, check_token
from .live import LiveCall, Out
from .protocol import CallEnded, Close, load_json_object

RATE = 8000
VOICED = 328
START_TIMEOUT_S = 5.0


class MediaFormat(BaseModel):
    encoding: str
    sampleRate: int
    channels: int = 1


class Start(BaseModel):
    model_config = ConfigDict(extra="allow")
    streamSid: str = Field(max_length=64)
    callSid: str | None = Field(None, max_length=64)
    mediaFormat: MediaFormat
    customParameters: dict[str, str] = Field(default_factory=dict, max_length=32)


def _load(text: str) -> dict[str, Any]:
    return load_json_object(text, "event", "a Media Streams message")


async def _next(ws: WebSocket, guard: MessageGuard) -> dict[str, Any]:
    msg = await ws.receive()
    if msg["type"] == "websocket.disconnect":
        raise CallEnded(Close.NORMAL, "stream closed")
    if msg.get("text") is None:
        guard.check(len(msg.get("bytes") or b""), True)
        raise CallEnded(Close.PROTOCOL, "Media Streams messages are JSON text", error_code="bad_message")
    guard.check(len(msg["text"].encode("utf-8", "replace")), False)
    return _load(msg["text"])


async def read_start(ws: WebSocket, guard: MessageGuard, token: str) -> Start:
    """Wait for ``start`` (after an optional ``connected``) and check token and media format.

    Raises:
        CallEnded: timeout, wrong order, missing/wrong token, a format other than μ-law 8 kHz mono.
    """
    async def first_start() -> dict[str, Any]:
        while True:
            msg = await _next(ws, guard)
            if msg["event"] == "start":
                return msg
            if msg["event"] != "connected":
                raise CallEnded(Close.PROTOCOL, f"'{msg['event']}' before 'start'", error_code="bad_message")

    try:
        msg = await asyncio.wait_for(first_start(), START_TIMEOUT_S)
    except asyncio.TimeoutError:
        raise CallEnded(Close.TIMEOUT, "no start in time", error_code="timeout") from None
    try:
        start = Start.model_validate(msg.get("start"))
    except ValidationError as exc:
        err = exc.errors()[0]
        raise CallEnded(Close.PROTOCOL, f"bad start: {'.'.join(map(str, err['loc']))}: {err['msg']}",
                        error_code="bad_message") from None
    check_token(token, ws.query_params.get("token") or start.customParameters.get("token"))
    f = start.mediaFormat
    if f.encoding != "audio/x-mulaw" or f.sampleRate != RATE or f.channels != 1:
        raise CallEnded(Close.PROTOCOL, f"unsupported media format {f.encoding} {f.sampleRate} Hz x"
                        f"{f.channels}; expected audio/x-mulaw 8000 Hz mono", error_code="bad_sample_rate")
    return start


class TwilioLink:
    """Receive loop and downlink of one Media Streams call."""

    def __init__(self, ws: WebSocket, call: LiveCall, start: Start, guard: MessageGuard, *,
                 transfer_webhook: str | None = None, transfer_target: str | None = None) -> None:
        """``transfer_webhook``: the URL that receives a transfer request (see :meth:`transfer`);
        ``transfer_target``: the ``<Dial>`` destination when the agent's tool names none."""
        self.transfer_webhook = transfer_webhook
        self.transfer_target = transfer_target
        self.call_sid = start.callSid
        self.ws = ws
        self.call = call
        self.sid = start.streamSid
        self.guard = guard
        # low-latency conversions: soxr's default streaming quality holds back ≈80 ms per direction
        # when fed 20 ms frames (measured with the harness: ≈200 ms of V2V over /twilio)
        self._up = soxr.ResampleStream(RATE, LINE_RATE, 1, dtype="int16", quality="QQ")
        self._down = TelephoneDecimator()
        self._anchor: float | None = None   # call-clock time of Twilio timestamp 0
        self._voiced: set[int] = set()      # turns whose first voiced frame was sent
        self._sent: set[int] = set()        # turns with any audio sent
        self._start_offset: dict[int, float] = {}
        self._cleared: set[int] = set()
        self.marks_seen: list[str] = []
        call.meta["client"] = {"name": "twilio", "call_sid": start.callSid, "stream_sid": self.sid}
        call.downlink = self

    async def receive(self) -> None:
        while True:
            msg = await _next(self.ws, self.guard)
            ev = msg["event"]
            if ev == "media":
                self._media(msg.get("media"))
            elif ev == "mark":
                name = (msg.get("mark") or {}).get("name")
                if isinstance(name, str):
                    self._mark(name)
            elif ev == "stop":
                raise CallEnded(Close.NORMAL, "stream stopped")
            elif ev == "start":
                raise CallEnded(Close.PROTOCOL, "start sent twice", error_code="bad_message")
            # connected / dtmf / others: nothing to do

    def _media(self, media: Any) -> None:
        if not isinstance(media, dict) or media.get("track", "inbound") != "inbound":
            return
        try:
            raw = base64.b64decode(media.get("payload", ""), validate=True)
            ts = float(media.get("timestamp", 0))
        except (binascii.Error, ValueError, TypeError):
            raise CallEnded(Close.BAD_DATA, "media payload is not base64 μ-law", error_code="bad_frame") from None
        if not raw:
            return
        now = self.call.clock.now_ms()
        arrival = now - 1000.0 * len(raw) / RATE - ts  # lower envelope of (arrival − timestamp)
        self._anchor = arrival if self._anchor is None else min(self._anchor, arrival)
        self.call.meta["stream_origin_ms"] = self._anchor  # best estimate so far (call reports)
        pcm = self._up.resample_chunk(ulaw_decode(raw))
        if len(pcm):
            self.call.feed(pcm, self._anchor + ts)

    def _mark(self, name: str) -> None:
        self.marks_seen.append(name)
        kind, turn = name[:1], name[1:]
        if not turn.isdigit():
            return
        turn_id, now = int(turn), self.call.clock.now_ms()
        data = {"source": "twilio_mark", "observed_at": "twilio_media_server"}
        if kind == "s" and turn_id not in self._cleared:
            self.call.client_stamp("playback_start", turn_id, now + self._start_offset.get(turn_id, 0.0), **data)
        elif kind == "e" and turn_id not in self._cleared:
            self.call.client_stamp("playback_end", turn_id, now, **data)
        elif kind == "c":
            self.call.client_stamp("interrupted_at", turn_id, now, **data)

    async def transfer(self, tr: dict[str, Any]) -> dict[str, Any]:
        """The agent transfers the call (its last reply's ``e<turn>`` mark came back): POST
        ``{call_sid, stream_sid, call_id, target, reason, twiml}`` as JSON to the configured
        webhook, where ``twiml`` is ``<Response><Dial>TARGET</Dial></Response>`` — the handler
        updates the live call with it (Twilio's Calls API ``twiml`` parameter) — then the
        stream closes. Without a webhook nothing is sent: Twilio runs the TwiML verbs after
        ``<Connect>`` when the stream closes. Returns what happened (recorded with the call)."""
        target = tr.get("target") or self.transfer_target
        twiml = (f"<Response><Dial>{html.escape(target)}</Dial></Response>" if target else None)
        if not self.transfer_webhook:
            return {"action": "stream_closed", "target": target, "twiml": twiml}
        import httpx

        body = {"call_sid": self.call_sid, "stream_sid": self.sid, "call_id": self.call.call_id,
                "target": target, "reason": tr.get("reason"), "twiml": twiml}
        try:
            async with httpx.AsyncClient(timeout=httpx.Timeout(5.0)) as client:
                resp = await client.post(self.transfer_webhook, json=body)
            return {"action": "webhook", "url": self.transfer_webhook, "status": resp.status_code,
                    "target": target, "twiml": twiml}
        except httpx.HTTPError as exc:
            return {"action": "webhook", "url": self.transfer_webhook, "error": repr(exc),
                    "target": target, "twiml": twiml}

    # --- Downlink -------------------------------------------------------------------------------
    async def send_raw(self, item: str | bytes) -> None:
        await self.ws.send_text(item if isinstance(item, str) else item.decode())

    def _msg(self, event: str, **body: Any) -> str:
        return json.dumps({"event": event, "streamSid": self.sid, **body})

    def audio(self, turn_id: int, frame: np.ndarray, t_ms: float) -> Iterable[Out]:
        out: list[Out] = []
        self._sent.add(turn_id)
        if turn_id not in self._voiced:
            loud = np.flatnonzero(np.abs(frame.astype(np.int32)) >= VOICED)
            if len(loud):
                self._voiced.add(turn_id)
                self._start_offset[turn_id] = 1000.0 * loud[0] / LINE_RATE
                out.append(self._msg("mark", mark={"name": f"s{turn_id}"}))
        pcm = self._down.process(frame)
        if len(pcm):
            payload = base64.b64encode(ulaw_encode(pcm)).decode()
            out.append(self._msg("media", media={"payload": payload}))
        return out

    def held(self, held: bool) -> Iterable[Out]:
        return ()  # nothing queued at Twilio beyond network jitter: stopping the feed is enough

    def event(self, ev: Event) -> Iterable[Out]:
        if not isinstance(ev, AgentSpeech) or ev.call_ended:  # (the stream is closing)
            return ()
        if ev.interrupted:
            if ev.turn_id not in self._sent:
                return ()
            self._cleared.add(ev.turn_id)
            return (self._msg("clear"), self._msg("mark", mark={"name": f"c{ev.turn_id}"}))
        return (self._msg("mark", mark={"name": f"e{ev.turn_id}"}),)
