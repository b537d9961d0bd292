"""Cartesia Ink STT over its WebSocket (``/stt/websocket``): the real service or our server.

One utterance per socket: the audio goes out as binary ``pcm_s16le`` frames of ≈100 ms, then
``close`` (flush, then ``done``), so ``done`` marks the end of the utterance's finals without any
guess about message order. Sockets are opened ahead of need (a small pool), so no utterance waits
for a handshake; Cartesia closes idle sockets after 20 s, so a pooled socket older than
``max_idle_s`` is replaced. Barge-in or a watchdog closing the stream closes its socket: the
server stops. Wire details: shared PROTOCOLS.md §2.1.

Transcripts: ``text`` of ``is_final`` messages are deltas, joined into the final
:class:`~rejoinder.ports.Transcript` emitted at ``done``; interim messages become interim
transcripts (finals so far + the interim text).

Errors are :class:`~rejoinder.ports.PortError`: refused connection, auth failure (names
``CARTESIA_API_KEY``), an ``error`` message, a malformed frame, or the socket closing before
``done``.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, AsyncIterable, AsyncIterator
from urllib.parse import urlencode

import numpy as np

from ..ports import PortError, Transcript
from . import _cartesia


class CartesiaSTT:
    """Streaming STT over Cartesia's WebSocket protocol; float32 mono in at ``sample_rate`` Hz.

    Args:
        base_url: ``wss://api.cartesia.ai`` (default; ``$CARTESIA_BASE_URL``) or our server.
        api_key: default ``$CARTESIA_API_KEY``.
        model: ``ink-whisper`` (default) or ``ink-2``. language: ISO-639-1.
        sample_rate: rate of the audio given to :meth:`stream` and sent (Hz).
        chunk_ms: audio per binary frame. pool: sockets kept open ahead of need.
        max_idle_s: replace a pooled socket older than this (the service closes at 20 s).

    Raises:
        ConfigError: no API key (names ``CARTESIA_API_KEY``) or a bad URL.
    """

    def __init__(self, base_url: str | None = None, api_key: str | None = None, *,
                 model: str = "ink-whisper", language: str = "en", sample_rate: int = 16000,
                 chunk_ms: float = 100.0, pool: int = 1, max_idle_s: float = 15.0,
                 connect_timeout_s: float = 5.0) -> None:
        base, self._key = _cartesia.resolve(base_url, api_key)
        self.sample_rate = int(sample_rate)
        self.url = f"{base}/stt/websocket?" + urlencode(
            {"model": model, "language": language, "encoding": "pcm_s16le", "sample_rate": self.sample_rate})
        self.chunk = max(1, int(self.sample_rate * chunk_ms / 1000))
        self.pool_size = max(0, pool)
        self.max_idle_s = max_idle_s
        self.connect_timeout_s = connect_timeout_s
        self._idle: list[tuple[float, Any]] = []
        self._filling: set[asyncio.Task] = set()
        self._loop: asyncio.AbstractEventLoop | None = None

    async def _open(self) -> Any:
        return await _cartesia.connect(self.url, self._key, timeout_s=self.connect_timeout_s)

    def _refill(self) -> None:
        while len(self._idle) + len(self._filling) < self.pool_size:
            task = asyncio.get_running_loop().create_task(self._open())
            self._filling.add(task)
            task.add_done_callback(self._filled)

    def _filled(self, task: asyncio.Task) -> None:
        self._filling.discard(task)
        if not task.cancelled() and task.exception() is None:
            self._idle.append((time.monotonic(), task.result()))

    async def connect(self) -> None:
        """Open the pool's sockets now (else they open on first use)."""
        self._check_loop()
        while len(self._idle) < self.pool_size:
            self._idle.append((time.monotonic(), await self._open()))

    def _check_loop(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # sockets belong to the loop that opened them
            self._loop, self._idle, self._filling = loop, [], set()

    async def _checkout(self) -> Any:
        from websockets.protocol import State

        self._check_loop()
        ws = None
        while self._idle:
            born, cand = self._idle.pop(0)
            if cand.state is State.OPEN and time.monotonic() - born < self.max_idle_s:
                ws = cand
                break
            asyncio.get_running_loop().create_task(cand.close())
        if ws is None:
            ws = await self._open()
        self._refill()
        return ws

    async def stream(self, audio: AsyncIterable[np.ndarray]) -> AsyncIterator[Transcript]:
        """Send one utterance; yields interim transcripts and then one final at ``done``.

        Raises:
            PortError: see the module docstring.
        """
        from websockets.exceptions import ConnectionClosed

        ws = await self._checkout()
        sender = asyncio.get_running_loop().create_task(self._send(ws, audio))
        finals: list[str] = []
        words: list[tuple[str, float, float]] = []
        try:
            while True:
                try:
                    raw = await ws.recv()
                except ConnectionClosed as exc:
                    if sender.done() and sender.exception() is not None:
                        raise sender.exception() from None
                    raise PortError(f"the STT socket closed before 'done' ({exc})") from None
                msg = self._parse(raw)
                kind = msg.get("type")
                if kind == "transcript":
                    text = str(msg.get("text") or "")
                    if msg.get("is_final"):
                        finals.append(text.strip())
                        words.extend(self._words(msg))
                    elif text.strip():
                        yield Transcript(" ".join(finals + [text.strip()]).strip(), final=False)
                elif kind == "done":
                    yield Transcript(" ".join(t for t in finals if t), final=True, words=tuple(words))
                    return
                elif kind == "error":
                    raise PortError(f"Cartesia STT error: {_cartesia.error_text(msg)}")
        finally:
            sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)
            try:
                await ws.close()
            except Exception:  # noqa: BLE001
                pass

    async def _send(self, ws: Any, audio: AsyncIterable[np.ndarray]) -> None:
        try:
            async for x in audio:
                pcm = (np.clip(np.asarray(x, dtype=np.float32).reshape(-1), -1.0, 1.0) * 32767.0
                       ).astype("<i2")
                for i in range(0, len(pcm), self.chunk):
                    await ws.send(pcm[i:i + self.chunk].tobytes())
            await ws.send("close")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 — the reader reports the closed socket
            raise PortError(f"cannot send audio to the STT socket: {exc!r}") from None

    @staticmethod
    def _parse(raw: Any) -> dict[str, Any]:
        if isinstance(raw, bytes):
            raise PortError("the STT server sent a binary frame; expected JSON text")
        try:
            msg = json.loads(raw)
        except ValueError:
            raise PortError(f"the STT server sent a malformed frame: {raw[:80]!r}") from None
        if not isinstance(msg, dict):
            raise PortError(f"the STT server sent a non-object frame: {raw[:80]!r}")
        return msg

    @staticmethod
    def _words(msg: dict[str, Any]) -> list[tuple[str, float, float]]:
        try:
            return [(str(w["word"]), 1000.0 * float(w["start"]), 1000.0 * float(w["end"]))
                    for w in msg.get("words") or []]
        except (KeyError, TypeError, ValueError) as exc:
            raise PortError(f"malformed words in a Cartesia transcript: {exc}") from None

    async def aclose(self) -> None:
        """Close pooled sockets opened on this event loop."""
        for t in list(self._filling):
            t.cancel()
        if self._loop is asyncio.get_running_loop():
            await asyncio.gather(*self._filling, return_exceptions=True)
            for _, ws in self._idle:
                await ws.close()
        self._idle, self._filling = [], set()
