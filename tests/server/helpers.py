"""Test helpers: a real uvicorn server on 127.0.0.1 in a thread, a fake call provider, and a
Python client that speaks the browser protocol like the JS client does."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import uvicorn
import websockets

from rejoinder.clock import RealClock
from rejoinder.server.app import ServerConfig, create_app
from rejoinder.session import Stack
from rejoinder.turns import TurnPolicy

from fakes import AmplitudeVAD, ScriptedLLM, ScriptedSTT, ScriptedTurn, ToneTTS, scripted_agent
from rejoinder.tools import CallContext

TOKEN = "test-token-123456"


class FakeProvider:
    """Fake models on a real clock (each call gets its own)."""

    def __init__(self, texts=("Check order 4217.",), tokens=None, stt_ms=150.0) -> None:
        self.policy = TurnPolicy()
        self.texts = list(texts)
        self.tokens = tokens or ["Order", " 4217", " has", " shipped", " and", " it", " arrives", " Friday."]
        self.stt_ms = stt_ms
        self.agent = scripted_agent()
        self.opened: list[CallContext] = []
        self.closed: list[CallContext] = []

    async def warmup(self) -> None:
        pass

    def new_stack(self) -> Stack:
        clock = RealClock()
        return Stack(vad=AmplitudeVAD(), turn=ScriptedTurn(clock, prob=0.9),
                     stt=ScriptedSTT(clock, self.texts, delay_ms=self.stt_ms),
                     llm=ScriptedLLM(clock, self.tokens, ttft_ms=100.0),
                     tts=ToneTTS(clock, ttfb_ms=60.0))

    def session_options(self) -> dict:
        return {}

    async def open_call(self, call_id, caller_id) -> CallContext:
        ctx = CallContext(call_id, caller_id)
        self.opened.append(ctx)
        return ctx

    async def close_call(self, ctx) -> None:
        self.closed.append(ctx)


class ServerThread:
    """uvicorn serving ``app`` on a free 127.0.0.1 port in a background thread."""

    def __init__(self, app, ws_max_size: int = 1 << 20) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        cfg = uvicorn.Config(app, log_level="warning", ws_max_size=ws_max_size, lifespan="on")
        self.server = uvicorn.Server(cfg)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]},
                                       daemon=True)

    @property
    def base(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> "ServerThread":
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(15)
        self.sock.close()


def start_server(provider, tmp: Path | None = None, **limits) -> ServerThread:
    cfg = ServerConfig(token=TOKEN, store_dir=tmp, **limits)
    return ServerThread(create_app(cfg, provider)).__enter__()


def health(srv: ServerThread) -> dict:
    import httpx
    return httpx.get(f"http://{srv.base}/health", timeout=5).json()


def tone(ms: float, rate: int = 16000, amp: float = 0.3, hz: float = 220.0) -> np.ndarray:
    t = np.arange(int(rate * ms / 1000)) / rate
    return (amp * 32767 * np.sin(2 * np.pi * hz * t)).astype(np.int16)


def silence(ms: float, rate: int = 16000) -> np.ndarray:
    return np.zeros(int(rate * ms / 1000), dtype=np.int16)


def now_ms() -> float:
    return time.perf_counter() * 1000.0


@dataclass
class BrowserLikeClient:
    """Speaks /ws like static/client.js: hello, pong, stamped 20 ms frames in real time, and a
    60 ms jitter buffer whose playback moments are reported with ``played``."""

    url: str
    token: str | None = TOKEN
    sample_rate: int = 16000
    prebuffer_ms: float = 60.0
    messages: list[dict] = field(default_factory=list)
    frames: dict[int, int] = field(default_factory=dict)  # turn → frames received
    close_code: int | None = None
    close_reason: str = ""
    ready: asyncio.Event = field(default_factory=asyncio.Event)

    async def call(self, audio: np.ndarray, tail_ms: float = 2000.0, hello: dict | None = None) -> None:
        async with websockets.connect(self.url, max_size=1 << 22) as ws:
            self.ws = ws
            msg = {"type": "hello", "sample_rate": self.sample_rate, "client": "pytest"}
            if self.token is not None:
                msg["token"] = self.token
            msg.update(hello or {})
            await ws.send(json.dumps(msg))
            reader = asyncio.create_task(self._read(ws))
            try:
                await asyncio.wait_for(self.ready.wait(), 5)
                await self._stream(ws, audio, tail_ms)
                await ws.send(json.dumps({"type": "bye"}))
                await asyncio.wait_for(reader, 5)
            finally:
                reader.cancel()
                self.close_code = ws.close_code
                self.close_reason = ws.close_reason or ""

    async def _stream(self, ws, audio: np.ndarray, tail_ms: float) -> None:
        n = self.sample_rate // 50
        total = np.concatenate([audio, silence(tail_ms, self.sample_rate)])
        t0 = now_ms()
        for k in range(0, len(total) // n):
            due = t0 + 20.0 * (k + 1)
            await asyncio.sleep(max(0.0, (due - now_ms()) / 1000))
            self._play_until(now_ms())
            chunk = total[k * n:(k + 1) * n]
            await ws.send(struct.pack("<d", t0 + 20.0 * k) + chunk.astype("<i2").tobytes())

    # --- playback emulation: frames queue per turn, played from prebuffer in real time --------
    def _play_until(self, t: float) -> None:
        pb = getattr(self, "_pb", None)
        if pb is None:
            return
        while pb["queue"] and (pb["clock"] is not None) and pb["clock"] <= t:
            frame = pb["queue"].pop(0)
            if not pb["started"] and np.abs(frame.astype(np.int32)).max() >= 328:
                pb["started"] = True
                self._report(pb["turn"], "start", pb["clock"])
            pb["clock"] += 20.0
        if not pb["queue"] and pb["ended"] and pb["clock"] is not None and pb["clock"] <= t:
            self._report(pb["turn"], "end", pb["clock"])
            self._pb = None

    def _report(self, turn: int, event: str, t: float) -> None:
        asyncio.get_running_loop().create_task(self.ws.send(json.dumps(
            {"type": "played", "turn_id": turn, "event": event, "t": t})))

    async def _read(self, ws) -> None:
        async for m in ws:
            if isinstance(m, bytes):
                turn, seq = struct.unpack_from("<II", m)
                self.frames[turn] = self.frames.get(turn, 0) + 1
                pb = getattr(self, "_pb", None)
                if pb is None or pb["turn"] != turn:
                    if pb is not None and pb["turn"] > turn:
                        continue
                    self._pb = pb = {"turn": turn, "queue": [], "clock": None, "started": False,
                                     "ended": False, "arrived": now_ms()}
                pb["queue"].append(np.frombuffer(m, dtype="<i2", offset=8))
                if pb["clock"] is None and len(pb["queue"]) * 20.0 >= self.prebuffer_ms:
                    pb["clock"] = now_ms()
                continue
            msg = json.loads(m)
            self.messages.append(msg)
            if msg["type"] == "ping":
                await ws.send(json.dumps({"type": "pong", "id": msg["id"], "t": now_ms()}))
            elif msg["type"] == "ready":
                self.ready.set()
            elif msg["type"] == "reply_end":
                pb = getattr(self, "_pb", None)
                if pb is not None and pb["turn"] == msg["turn_id"]:
                    pb["ended"] = True
                    if pb["clock"] is None:
                        pb["clock"] = now_ms()
            elif msg["type"] == "clear":
                pb = getattr(self, "_pb", None)
                if pb is not None and pb["turn"] == msg["turn_id"]:
                    if pb["started"]:
                        self._report(pb["turn"], "cut", now_ms())
                    self._pb = None

    def of_type(self, kind: str) -> list[dict]:
        return [m for m in self.messages if m.get("type") == kind]


def read_timeline(folder: Path) -> tuple[list[dict], dict]:
    [call_dir] = [p for p in folder.iterdir() if p.is_dir()]
    lines = [json.loads(x) for x in (call_dir / "timeline.jsonl").read_text().splitlines()]
    meta = json.loads((call_dir / "call.json").read_text())
    return lines, meta


ASTERISK = Path("/usr/share/asterisk/sounds/en")
# (start ms, prompts) — real speech (Asterisk prompts, voice Allison Smith, CC-BY-SA-3.0)
# the caller speaks after the agent's greeting (≈ 4 s), then leaves room for each answer
CALLER_SCRIPT = [(6000, ["hello"]), (13000, ["digits/4", "digits/2", "digits/1", "digits/7"]),
                 (23000, ["auth-thankyou"])]
CALLER_END_MS = 30000


def speech_wav(path: Path, script=CALLER_SCRIPT, end_ms: float = CALLER_END_MS,
               gap_ms: float = 180.0) -> list[tuple[float, float]]:
    """Write a 16 kHz 16-bit mono WAV with the scripted prompts at their start times; returns
    each utterance's (first, last) voiced sample in ms from the file start (truth)."""
    import soundfile as sf
    from rejoinder.audio_io import load_audio, resample, to_int16
    from rejoinder.harness.caller import voiced_span

    out = np.zeros(int(16 * end_ms), dtype=np.int16)
    truth = []
    for start, prompts in script:
        parts = []
        for i, name in enumerate(prompts):
            x, sr = load_audio(ASTERISK / f"{name}.wav")
            parts.append(to_int16(resample(x, sr, 16000)))
            if i < len(prompts) - 1:
                parts.append(silence(gap_ms))
        pcm = np.concatenate(parts)
        a = int(16 * start)
        out[a:a + len(pcm)] = pcm
        v0, v1 = voiced_span(pcm)
        truth.append((start + v0 / 16, start + v1 / 16))
    sf.write(str(path), out, 16000, subtype="PCM_16")
    return truth
