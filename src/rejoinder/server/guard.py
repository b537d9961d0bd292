"""Socket safety: token check, message size and rate limits, the concurrent-call cap.

Every socket must present the server token; each message is checked against a size limit and two
token buckets (messages per second, bytes per second); the number of calls in progress is capped,
and a call beyond the cap is refused with close code 1013 (try again later) and a JSON ``error``.
"""

from __future__ import annotations

import hmac
import os
import secrets
import time
from pathlib import Path

from .protocol import CallEnded, Close

TOKEN_ENV = "REJOINDER_TOKEN"


def check_token(expected: str, given: str | None) -> None:
    """Constant-time token comparison.

    Raises:
        CallEnded: ``UNAUTHORIZED`` when ``given`` is missing or wrong.
    """
    if not given:
        raise CallEnded(Close.UNAUTHORIZED, "missing token", error_code="unauthorized")
    if not hmac.compare_digest(expected.encode(), given.encode()):
        raise CallEnded(Close.UNAUTHORIZED, "wrong token", error_code="unauthorized")


def resolve_token(flag: str | None, path: Path) -> tuple[str, str]:
    """The server token and where it came from: the flag, ``$REJOINDER_TOKEN``, the token file at
    ``path``, or a new random token written there (mode 0600) — ``"generated"``."""
    if flag:
        return flag, "--token"
    env = os.environ.get(TOKEN_ENV)
    if env:
        return env, f"${TOKEN_ENV}"
    try:
        saved = path.read_text(encoding="utf-8").strip()
        if saved:
            return saved, str(path)
    except OSError:
        pass
    token = secrets.token_urlsafe(24)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(token + "\n")
    return token, "generated"


class TokenBucket:
    """``rate`` units per second, at most ``burst`` at once."""

    __slots__ = ("rate", "burst", "level", "last")

    def __init__(self, rate: float, burst: float) -> None:
        self.rate = rate
        self.burst = burst
        self.level = burst
        self.last = time.monotonic()

    def take(self, amount: float = 1.0) -> bool:
        now = time.monotonic()
        self.level = min(self.burst, self.level + (now - self.last) * self.rate)
        self.last = now
        if self.level < amount:
            return False
        self.level -= amount
        return True


class MessageGuard:
    """Per-socket limits on message size and rate."""

    def __init__(self, *, max_text: int, max_binary: int, msgs_per_s: float, bytes_per_s: float) -> None:
        self.max_text = max_text
        self.max_binary = max_binary
        self._msgs = TokenBucket(msgs_per_s, msgs_per_s * 2)
        self._bytes = TokenBucket(bytes_per_s, bytes_per_s * 2)

    def check(self, size: int, binary: bool) -> None:
        """Raises:
            CallEnded: ``TOO_BIG`` over the size limit, ``POLICY`` over a rate limit."""
        limit = self.max_binary if binary else self.max_text
        if size > limit:
            kind = "binary" if binary else "text"
            raise CallEnded(Close.TOO_BIG, f"{kind} message of {size} bytes; the limit is {limit}",
                            error_code="too_big")
        if not self._msgs.take() or not self._bytes.take(size):
            raise CallEnded(Close.POLICY, "rate limit exceeded (messages or bytes per second)",
                            error_code="rate_limited")


class CallSlots:
    """The concurrent-call cap (single event loop: no lock needed)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.active = 0

    def acquire(self) -> None:
        """Raises:
            CallEnded: ``BUSY`` when ``limit`` calls are already in progress."""
        if self.active >= self.limit:
            raise CallEnded(Close.BUSY, f"server busy: {self.limit} calls in progress; try again later",
                            error_code="busy")
        self.active += 1

    def release(self) -> None:
        self.active = max(0, self.active - 1)
