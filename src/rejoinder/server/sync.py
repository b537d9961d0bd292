"""Client ↔ server clock offset from a ping exchange (NTP-style, best round trip wins).

The server sends ``ping`` at server time ``t0`` and receives ``pong`` carrying the client's clock
``tc`` at ``t1``. Assuming the answer was made half-way through the round trip, the offset is
``tc − (t0 + t1) / 2`` with an error of at most ``(t1 − t0) / 2``. Among the recent samples the one
with the smallest round trip is kept (queueing only ever adds delay), so a client stamp converts to
the call clock as ``t_call = t_client − offset`` with a known error bound.
"""

from __future__ import annotations

from collections import deque


class ClockSync:
    def __init__(self, window: int = 16) -> None:
        self._pending: dict[int, float] = {}
        self._samples: deque[tuple[float, float]] = deque(maxlen=window)  # (rtt, offset)
        self._next = 0
        self.count = 0

    def ping(self, now_ms: float) -> int:
        """Register a ping sent at ``now_ms``; returns its id."""
        self._next += 1
        self._pending[self._next] = now_ms
        if len(self._pending) > 64:  # unanswered pings must not pile up
            self._pending.pop(next(iter(self._pending)))
        return self._next

    def pong(self, ping_id: int, client_ms: float, now_ms: float) -> bool:
        """Record an answer; False for an unknown or repeated id."""
        t0 = self._pending.pop(ping_id, None)
        if t0 is None:
            return False
        rtt = now_ms - t0
        self._samples.append((rtt, client_ms - (t0 + now_ms) / 2.0))
        self.count += 1
        return True

    @property
    def ready(self) -> bool:
        return bool(self._samples)

    def best(self) -> tuple[float, float] | None:
        """(round trip ms, offset ms) of the best recent sample."""
        return min(self._samples) if self._samples else None

    def to_call(self, client_ms: float) -> tuple[float, float] | None:
        """(call-clock ms, error bound ms) for a client time, or None before the first pong."""
        b = self.best()
        if b is None:
            return None
        return client_ms - b[1], b[0] / 2.0
