"""Ending a call from the agent's side: hang up or transfer once the last reply has *played at
the caller*, not when its last frame left the agent.

A live transport holds audio after the agent's playout has sent it: a browser's jitter buffer
and output device (≈100 ms), Twilio's media server and the phone network. Closing the line a
fixed time after the last frame loses the end of the goodbye whenever that holding is longer
(issue 17, failure kind 6). So the end waits for the transport's confirmation that the reply
played to its end — Twilio echoing the reply's ``e<turn>`` mark, the browser's ``played end``
report, or (in-process, where the playout *is* the caller's ear) the playout itself — and a
watchdog on the call clock ends the call anyway if no confirmation comes within
``confirm_timeout_ms`` after the reply finished at the agent. If the caller speaks over that
reply (barge-in), the end is cancelled and the call goes on.

Every step is a :class:`~rejoinder.events.CallEnd` event: ``requested``, then ``confirmed``,
``unconfirmed`` (watchdog) or ``cancelled``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .events import CallEnd
from .stages import Stamper


@dataclass
class _Pending:
    turn_id: int
    kind: str               # "hangup" | "transfer"
    reason: str
    target: str | None
    deadline: float | None = None  # call clock (ms), set when the reply finished at the agent
    played_at: float | None = None


class CallEnder:
    """Hang-up and transfer book-keeping of one call (see the module docstring).

    ``caller_side``: the session's playout is the caller's ear (in-process harness), so its end
    of a reply is the confirmation. ``confirm_timeout_ms``: the watchdog after the reply's last
    frame left the agent, on the call clock.
    """

    def __init__(self, st: Stamper, *, caller_side: bool, confirm_timeout_ms: float = 2000.0) -> None:
        self.st = st
        self.caller_side = caller_side
        self.confirm_timeout_ms = confirm_timeout_ms
        self.pending: _Pending | None = None
        self.hangup: str | None = None           # why the agent ended the call (set once)
        self.transfer: dict[str, Any] | None = None  # {turn_id, target, reason} once transferred

    def _emit(self, p: _Pending, status: str, **data: Any) -> None:
        self.st.emit(CallEnd(p.kind, p.reason, p.target, status, self.st.now(), self.st.call_id,
                             p.turn_id, data))

    def request(self, turn_id: int, kind: str, reason: str, target: str | None = None) -> None:
        """End the call (``kind`` ``hangup`` or ``transfer``) once turn ``turn_id``'s reply has
        played at the caller."""
        if self.hangup is not None:
            return
        self.pending = _Pending(turn_id, kind, reason, target)
        self._emit(self.pending, "requested")

    def reply_done(self, turn_id: int, interrupted: bool, now: float) -> None:
        """The agent's playout finished (or cut) turn ``turn_id``'s reply at ``now`` (ms)."""
        p = self.pending
        if p is None or p.turn_id != turn_id:
            return
        if interrupted:
            self.pending = None
            self._emit(p, "cancelled", why="the caller spoke over the last reply")
        elif self.caller_side:
            self._end(p, "confirmed", now)
        else:
            p.deadline = now + self.confirm_timeout_ms

    def confirmed(self, turn_id: int, t_ms: float) -> None:
        """The transport reports that turn ``turn_id``'s reply finished playing at the caller at
        ``t_ms`` (call clock)."""
        p = self.pending
        if p is not None and p.turn_id == turn_id:
            self._end(p, "confirmed", t_ms)

    def tick(self, now: float) -> None:
        """The watchdog, on the call clock (called every playout frame)."""
        p = self.pending
        if p is not None and p.deadline is not None and now >= p.deadline:
            self._end(p, "unconfirmed", None, waited_ms=self.confirm_timeout_ms)

    def _end(self, p: _Pending, status: str, played_at: float | None, **data: Any) -> None:
        self.pending = None
        if played_at is not None:
            data["played_at_ms"] = round(played_at, 3)
        self._emit(p, status, **data)
        if p.kind == "transfer":
            self.transfer = {"turn_id": p.turn_id, "target": p.target, "reason": p.reason,
                             "confirmed": status == "confirmed"}
        self.hangup = "transfer" if p.kind == "transfer" else p.reason
