"""A loopback echo target: it answers after a known, fixed delay — the harness's own error bar.

It speaks both socket protocols (a path ending in ``/ws``: rejoinder's; any other path: Twilio
Media Streams). It finds the end of each caller utterance in the audio it receives (the last
sample ≥ 328, once ``hang_ms`` of quiet follows), and sends a reply whose first voiced sample
is due exactly ``delay_ms`` after that last caller sample, paced in real time in 20 ms frames. A
caller that speaks over the reply gets ``clear`` and silence.

The target's clock is tied to the caller's stream the way a telephony server does it: the lower
envelope of (arrival time − stream time of the frame's end), so a frame that was held up in
transit does not move the reply. Measured against it, a perfect harness reports
``V2V = delay_ms + jitter buffer depth`` for every turn; the difference is the harness's error
(``bench/remote_echo.py``, ``tests/harness/test_remote_echo.py``).

Run it: ``python -m rejoinder.harness.remote.echo --port 8799 --delay-ms 700``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator
from urllib.parse import urlsplit

import numpy as np
import soxr

from ...server.g711 import ulaw_decode, ulaw_encode
from ...server.protocol import DOWN_HEADER, UP_HEADER

VOICED = 328


def tone_reply(ms: float = 800.0, hz: float = 440.0) -> np.ndarray:
    """A cosine tone (int16, 16 kHz) whose first sample is already voiced."""
    t = np.arange(int(16 * ms)) / 16000
    return (0.3 * 32767 * np.cos(2 * np.pi * hz * t)).astype(np.int16)


def load_reply(path: str | Path) -> np.ndarray:
    """A recording (any rate) as int16 16 kHz, trimmed to start at its first voiced sample."""
    from ...audio_io import load_audio, resample, to_int16
    from ..caller import voiced_span
    x, sr = load_audio(Path(path))
    pcm = to_int16(resample(x, sr, 16000))
    a, b = voiced_span(pcm)
    return pcm[a:b]


def _now() -> float:
    return time.perf_counter() * 1000.0


class EchoCall:
    """One call to the echo target."""

    def __init__(self, conn: Any, protocol: str, reply16k: np.ndarray, delay_ms: float, hang_ms: float) -> None:
        self.conn = conn
        self.protocol = protocol
        self.delay_ms = delay_ms
        self.hang_ms = hang_ms
        self.rate = 8000 if protocol == "twilio" else 16000
        frame = self.rate // 50
        if protocol == "twilio":
            reply = soxr.resample(reply16k.astype(np.float32) / 32768.0, 16000, 8000, quality="VHQ")
            reply = np.clip(np.round(reply * 32768.0), -32768, 32767).astype(np.int16)
        else:
            reply = reply16k
        loud = np.flatnonzero(np.abs(reply.astype(np.int32)) >= VOICED)
        self.lead_ms = 1000.0 * loud[0] / self.rate if len(loud) else 0.0
        n = -(-len(reply) // frame) * frame
        self.frames = np.concatenate([reply, np.zeros(n - len(reply), np.int16)]).reshape(-1, frame)
        self.anchor: float | None = None       # our clock at the caller's stream time 0
        self.last_voiced: float | None = None  # caller stream time (ms) after the last voiced sample
        self.heard_to = 0.0                    # caller stream time received so far
        self.speaking = False
        self.interrupt = False
        self.due: asyncio.Queue[float] = asyncio.Queue()
        self.sid = "MZecho"
        self.turn = 0
        self.replies: list[dict[str, float]] = []

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._speaker())
            try:
                async for msg in self.conn:
                    self._on(msg, _now())
            finally:
                self.due.put_nowait(-1.0)

    def _on(self, msg: str | bytes, now: float) -> None:
        if isinstance(msg, bytes):
            t_client, = UP_HEADER.unpack_from(msg)
            pcm = np.frombuffer(msg, dtype="<i2", offset=UP_HEADER.size)
            self._audio(pcm, t_client, now)
            return
        data = json.loads(msg)
        kind = data.get("event") or data.get("type")
        if kind == "start":
            self.sid = data.get("streamSid") or (data.get("start") or {}).get("streamSid") or self.sid
        elif kind == "media":
            media = data["media"]
            self._audio(ulaw_decode(base64.b64decode(media["payload"])), float(media.get("timestamp", 0)), now)
        elif kind == "hello":
            self._send(json.dumps({"type": "ping", "id": 1}))
        elif kind == "pong":
            self._send(json.dumps({"type": "ready", "call_id": f"echo-{id(self):x}", "line_rate": 16000,
                                   "frame_ms": 20, "clock_err_ms": 0.0}))

    def _audio(self, pcm: np.ndarray, t_ms: float, now: float) -> None:
        """Caller audio whose first sample is at stream time ``t_ms`` (ms), arrived ``now``."""
        dur = 1000.0 * len(pcm) / self.rate
        anchor = now - t_ms - dur
        self.anchor = anchor if self.anchor is None else min(self.anchor, anchor)
        loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) >= VOICED)
        if len(loud):
            if self.speaking:
                self.interrupt = True
            self.last_voiced = t_ms + 1000.0 * (loud[-1] + 1) / self.rate
        self.heard_to = t_ms + dur
        if self.last_voiced is not None and self.heard_to - self.last_voiced >= self.hang_ms:
            self.due.put_nowait(self.last_voiced)
            self.last_voiced = None

    def _send(self, item: str | bytes) -> None:
        asyncio.get_running_loop().create_task(self.conn.send(item))

    async def _speaker(self) -> None:
        while True:
            end = await self.due.get()
            if end < 0:
                return
            assert self.anchor is not None
            first = self.anchor + end + self.delay_ms - self.lead_ms   # the first frame's start
            self.turn += 1
            self.speaking, self.interrupt = True, False
            self.replies.append({"caller_end_ms": self.anchor + end, "due_ms": first + self.lead_ms})
            for i, frame in enumerate(self.frames):
                await asyncio.sleep(max(0.0, (first + 20.0 * i - _now()) / 1000.0))
                if self.interrupt:
                    self._send(self._clear())
                    break
                await self.conn.send(self._frame(frame, i))
            else:
                if self.protocol == "rejoinder":
                    await self.conn.send(json.dumps({"type": "reply_end", "turn_id": self.turn}))
            self.speaking = False

    def _frame(self, frame: np.ndarray, seq: int) -> str | bytes:
        if self.protocol == "rejoinder":
            return DOWN_HEADER.pack(self.turn, seq) + frame.astype("<i2").tobytes()
        return json.dumps({"event": "media", "streamSid": self.sid,
                           "media": {"payload": base64.b64encode(ulaw_encode(frame)).decode()}})

    def _clear(self) -> str:
        if self.protocol == "rejoinder":
            return json.dumps({"type": "clear", "turn_id": self.turn})
        return json.dumps({"event": "clear", "streamSid": self.sid})


@asynccontextmanager
async def serve_echo(host: str = "127.0.0.1", port: int = 0, *, delay_ms: float = 700.0, hang_ms: float = 400.0,
                     reply: np.ndarray | None = None) -> AsyncIterator[Any]:
    """Serve the echo target; yields the server (``server.port`` is the bound port, and
    ``server.calls`` the calls so far)."""
    from websockets.asyncio.server import serve

    reply = tone_reply() if reply is None else reply
    calls: list[EchoCall] = []

    async def handler(conn: Any) -> None:
        path = urlsplit(conn.request.path).path.rstrip("/")
        call = EchoCall(conn, "rejoinder" if path.endswith("/ws") else "twilio", reply, delay_ms, hang_ms)
        calls.append(call)
        try:
            await call.run()
        except Exception:  # noqa: BLE001 — a caller that went away mid-frame
            pass

    async with serve(handler, host, port, compression=None, max_size=1 << 20, ping_interval=None) as server:
        server.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        server.calls = calls  # type: ignore[attr-defined]
        yield server


def main(port: int = 8799, host: str = "127.0.0.1", delay_ms: float = 700.0, hang_ms: float = 400.0,
         reply: str | None = None) -> None:
    """Serve the echo target until interrupted."""
    pcm = load_reply(reply) if reply else None

    async def run() -> None:
        async with serve_echo(host, port, delay_ms=delay_ms, hang_ms=hang_ms, reply=pcm) as srv:
            print(f"echo target: ws://{host}:{srv.port}/twilio (Media Streams), ws://{host}:{srv.port}/ws "
                  f"(rejoinder); replies {delay_ms:.0f} ms after the caller's last voiced sample", flush=True)
            await asyncio.Future()

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":  # pragma: no cover
    import typer
    typer.run(main)
