"""Shared by the Cartesia adapters: the API key, WebSocket connection and error messages.

The key comes from the argument, else ``$CARTESIA_API_KEY``; the base URL from the argument, else
``$CARTESIA_BASE_URL``, else ``wss://api.cartesia.ai``. The API version is pinned
(``Cartesia-Version``), since message shapes change between versions (PROTOCOLS.md, gotcha 1).
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

from ..errors import ConfigError
from ..ports import PortError, TTSAudio

DEFAULT_BASE_URL = "wss://api.cartesia.ai"
API_VERSION = "2025-04-16"
KEY_ENV = "CARTESIA_API_KEY"
URL_ENV = "CARTESIA_BASE_URL"


def resolve(base_url: str | None, api_key: str | None) -> tuple[str, str]:
    """(base URL without trailing slash, API key).

    Raises:
        ConfigError: no key given and ``$CARTESIA_API_KEY`` unset, or a URL that is not ws/wss.
    """
    base = (base_url or os.environ.get(URL_ENV) or DEFAULT_BASE_URL).rstrip("/")
    if not base.startswith(("ws://", "wss://")):
        raise ConfigError(f"Cartesia base URL must start with ws:// or wss://, got {base!r}")
    key = api_key or os.environ.get(KEY_ENV)
    if not key:
        raise ConfigError(f"the Cartesia adapters need an API key: set {KEY_ENV} "
                          "(or stack.cartesia.api_key)")
    return base, key


async def connect(url: str, key: str, *, timeout_s: float, max_size: int = 1 << 24) -> Any:
    """Open a WebSocket with Cartesia's headers.

    Raises:
        PortError: refused or timed-out connection, an HTTP error on the upgrade; a 401/403 names
            ``CARTESIA_API_KEY``.
    """
    from websockets.asyncio.client import connect as ws_connect
    from websockets.exceptions import InvalidStatus, WebSocketException

    headers = {"X-API-Key": key, "Cartesia-Version": API_VERSION}
    try:
        return await asyncio.wait_for(
            ws_connect(url, additional_headers=headers, max_size=max_size, open_timeout=None,
                       ping_interval=20, ping_timeout=20, compression=None), timeout_s)
    except InvalidStatus as exc:
        status = exc.response.status_code
        body = (exc.response.body or b"").decode("utf-8", "replace").strip()[:200]
        if status in (401, 403):
            raise PortError(f"{url}: authentication failed (HTTP {status}): check the key in "
                            f"{KEY_ENV}. {body}") from None
        raise PortError(f"{url}: the server refused the WebSocket upgrade with HTTP {status}: {body}") from None
    except (OSError, TimeoutError, WebSocketException) as exc:
        what = "timed out" if isinstance(exc, TimeoutError) else f"{type(exc).__name__}: {exc}"
        raise PortError(f"{url}: cannot connect ({what})") from None


def error_text(msg: dict[str, Any]) -> str:
    """The human text of a Cartesia ``error`` message, old shape (``error`` string) or new
    (``title`` / ``message`` / ``error_code`` / ``status_code``)."""
    if msg.get("message") or msg.get("title"):
        code = msg.get("error_code") or msg.get("code") or ""
        return (f"{msg.get('status_code', '')} {code} {msg.get('title', '')}: "
                f"{msg.get('message', '')}").strip()
    return str(msg.get("error") or msg)[:300]


def decode_chunk(msg: dict[str, Any], where: str) -> "np.ndarray":
    """The int16 PCM of a Sonic ``chunk`` message (``pcm_s16le``, base64 in ``data``).

    Raises:
        PortError: missing or invalid base64, or an odd byte count.
    """
    import base64
    import binascii

    import numpy as np

    try:
        raw = base64.b64decode(msg["data"], validate=True)
    except (KeyError, TypeError, binascii.Error) as exc:
        raise PortError(f"{where}: chunk without valid base64 'data': {exc}") from None
    if len(raw) % 2:
        raise PortError(f"{where}: chunk of {len(raw)} bytes is not whole int16 samples")
    return np.frombuffer(raw, dtype="<i2").astype(np.int16)


class WordTimeline:
    """Attaches Sonic's ``timestamps`` (seconds from the context's start) to the audio pieces
    yielded: timings go with the first piece yielded after they arrive, in ms from that piece's
    first sample (so a word may start before it or end after it). Sonic sends a sentence's
    timings no later than its audio, so a stream cut mid-sentence still knows where each of the
    sentence's words ends — the reply trims to the last whole word heard without estimating."""

    def __init__(self, sample_rate: int) -> None:
        self.rate = sample_rate
        self.emitted = 0  # samples yielded so far
        self.pending: list[tuple[str, float, float]] = []

    def add(self, msg: dict[str, Any]) -> None:
        """Take a ``timestamps`` message. Raises PortError when malformed."""
        ts = msg.get("word_timestamps") or {}
        try:
            self.pending += [(str(w), 1000.0 * float(a), 1000.0 * float(b))
                             for w, a, b in zip(ts["words"], ts["start"], ts["end"])]
        except (KeyError, TypeError, ValueError) as exc:
            raise PortError(f"malformed Sonic timestamps message: {exc}") from None

    def piece(self, pcm: "np.ndarray") -> "TTSAudio":
        from ..ports import TTSAudio

        base = 1000.0 * self.emitted / self.rate
        words, self.pending = self.pending, []
        self.emitted += len(pcm)
        return TTSAudio(pcm, tuple((w, a - base, b - base) for w, a, b in words))

    def rest(self) -> "TTSAudio | None":
        """An empty piece carrying timings that arrived after the last audio (None if none)."""
        import numpy as np

        return self.piece(np.zeros(0, np.int16)) if self.pending else None
