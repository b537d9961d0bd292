"""A Twilio-style Media Streams client through a whole call, with a barge-in that must make the
server send ``clear``; marks tell the server what was played."""

from __future__ import annotations

import asyncio
import base64
import json
import time

import numpy as np
import soxr
import websockets

from rejoinder.server.g711 import ulaw_decode, ulaw_encode

from helpers import TOKEN, FakeProvider, health, read_timeline, silence, start_server, tone


class FakeTwilio:
    """Streams 8 kHz μ-law in real time; plays what it receives in real time and echoes each mark
    when playback reaches it (all pending marks at once on ``clear``), like Twilio does."""

    def __init__(self, url: str, audio16k: np.ndarray, token: str | None = TOKEN,
                 media_format: dict | None = None) -> None:
        self.url = url
        self.audio = soxr.resample(audio16k.astype(np.float32) / 32768, 16000, 8000)
        self.audio = np.clip(self.audio * 32768, -32768, 32767).astype(np.int16)
        self.token = token
        self.format = media_format or {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}
        self.sid = "MZ" + "0" * 32
        self.events: list[dict] = []
        self.received_ms = 0.0
        self.play_until = 0.0                         # when the audio received so far ends playing
        self.pending: list[tuple[float, str]] = []    # (echo time, mark name)
        self.close_code: int | None = None

    async def run(self) -> None:
        async with websockets.connect(self.url) as ws:
            await ws.send(json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"}))
            params = {"token": self.token} if self.token else {}
            await ws.send(json.dumps({"event": "start", "sequenceNumber": "1", "streamSid": self.sid,
                                      "start": {"streamSid": self.sid, "callSid": "CA1", "tracks": ["inbound"],
                                                "mediaFormat": self.format, "customParameters": params}}))
            reader = asyncio.create_task(self._read(ws))
            try:
                t0 = time.perf_counter()
                for k in range(len(self.audio) // 160):
                    await asyncio.sleep(max(0.0, t0 + 0.02 * (k + 1) - time.perf_counter()))
                    await self._echo_due(ws)
                    chunk = self.audio[k * 160:(k + 1) * 160]
                    await ws.send(json.dumps({"event": "media", "streamSid": self.sid, "media": {
                        "track": "inbound", "chunk": str(k + 1), "timestamp": str(20 * k),
                        "payload": base64.b64encode(ulaw_encode(chunk)).decode()}}))
                await ws.send(json.dumps({"event": "stop", "streamSid": self.sid, "stop": {"callSid": "CA1"}}))
                await asyncio.wait_for(reader, 5)
            except websockets.ConnectionClosed:
                pass
            finally:
                reader.cancel()
                self.close_code = ws.close_code

    async def _echo_due(self, ws) -> None:
        now = time.perf_counter()
        while self.pending and self.pending[0][0] <= now:
            _, name = self.pending.pop(0)
            await ws.send(json.dumps({"event": "mark", "streamSid": self.sid, "mark": {"name": name}}))

    async def _read(self, ws) -> None:
        async for raw in ws:
            msg = json.loads(raw)
            self.events.append(msg)
            now = time.perf_counter()
            assert msg["streamSid"] == self.sid
            if msg["event"] == "media":
                pcm = ulaw_decode(base64.b64decode(msg["media"]["payload"]))
                self.play_until = max(self.play_until, now) + len(pcm) / 8000
                self.received_ms += 1000 * len(pcm) / 8000
            elif msg["event"] == "mark":
                self.pending.append((max(self.play_until, now), msg["mark"]["name"]))
            elif msg["event"] == "clear":
                self.play_until = now
                self.pending = [(now, name) for _, name in self.pending]

    def of(self, event: str) -> list[dict]:
        return [e for e in self.events if e["event"] == event]


async def test_twilio_call_with_barge_in_gets_clear(tmp_path):
    words = [f" word{i}" for i in range(40)] + ["."]
    provider = FakeProvider(texts=["Check order 4217.", "Stop.", "Thanks."], tokens=words)
    srv = start_server(provider, tmp_path)
    try:
        audio = np.concatenate([silence(300), tone(800), silence(1700), tone(700), silence(4000)])
        client = FakeTwilio(f"ws://{srv.base}/twilio", audio)
        await client.run()
        assert health(srv)["calls"] == 0
    finally:
        srv.__exit__()
    kinds = [e["event"] for e in client.events]
    assert "media" in kinds and "clear" in kinds
    assert client.received_ms > 300
    marks = [e["mark"]["name"] for e in client.of("mark")]
    assert "s1" in marks and "c1" in marks and marks.index("s1") < marks.index("c1")
    lines, meta = read_timeline(tmp_path)
    first, second = meta["turns"][0], meta["turns"][1]
    assert first["status"] == "interrupted"
    assert "playback_start" not in first["estimated"] and "interrupted_at" not in first["estimated"]
    assert first["v2v_ms"] is not None and second["v2v_ms"] is not None
    sources = {(x["name"], x["data"].get("source")) for x in lines
               if x.get("type") == "Boundary" and not x["estimated"] and x["name"].startswith(("play", "inter"))}
    assert ("playback_start", "twilio_mark") in sources and ("interrupted_at", "twilio_mark") in sources
    # the second reply was played to the end: its end mark came back
    assert "playback_end" not in second["estimated"] or "e2" in marks
    assert meta["client"]["stream_sid"] == client.sid


async def test_twilio_refuses_wrong_format_and_token(tmp_path):
    srv = start_server(FakeProvider(), None)
    try:
        wrong = FakeTwilio(f"ws://{srv.base}/twilio", silence(200),
                           media_format={"encoding": "audio/x-l16", "sampleRate": 16000, "channels": 1})
        await wrong.run()
        assert wrong.close_code == 4400
        nobody = FakeTwilio(f"ws://{srv.base}/twilio", silence(200), token="not-the-token")
        await nobody.run()
        assert nobody.close_code == 4401
        assert health(srv)["calls"] == 0
    finally:
        srv.__exit__()


def test_ulaw_codec_matches_g711():
    codes = np.arange(256, dtype=np.uint8).tobytes()
    pcm = ulaw_decode(codes)
    assert pcm[0xFF] == 0 and pcm[0x00] == -32124 and pcm[0x80] == 32124
    again = np.frombuffer(ulaw_encode(pcm), dtype=np.uint8)
    assert (again == np.arange(256)).sum() == 255  # 0x7F (negative zero) encodes as 0xFF
    x = (np.sin(np.arange(8000) / 7) * 20000).astype(np.int16)
    err = np.abs(ulaw_decode(ulaw_encode(x)).astype(np.int32) - x)
    assert err.max() <= 512 and err.mean() < 150


async def test_twilio_stream_is_closed_when_the_agent_hangs_up(tmp_path):
    from rejoinder.turns import IdlePolicy, TurnPolicy
    provider = FakeProvider()
    provider.policy = TurnPolicy(idle=IdlePolicy(reprompt_ms=800, hangup_ms=800))
    srv = start_server(provider, tmp_path)
    t0 = time.perf_counter()
    try:
        tw = FakeTwilio(f"ws://{srv.base}/twilio", np.concatenate([silence(300), tone(800), silence(15000)]))
        await tw.run()
    finally:
        srv.__exit__()
    assert tw.close_code == 1000 and time.perf_counter() - t0 < 12
    _, meta = read_timeline(tmp_path)
    assert meta["ended"]["reason"] == "the agent hung up (no_input)"
