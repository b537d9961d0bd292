"""Call reports: what the server tells an authenticated client about one call it served.

A harness calling this server over a socket sees only audio. So that it can also check what the
agent *did*, the server keeps a short report per call (the last :data:`KEEP` calls, in memory),
readable with the server token at ``GET /calls/{id}`` — by the ``call_id`` of ``/ws``'s ``ready``,
or by the ``streamSid`` of a Media Streams call. See ``PROTOCOL.md``, "Call reports".

A report: ``status`` (``running`` | ``ended``), ``transport``, ``ended`` (close code and reason),
``caller_origin_ms`` (the call-clock time of the first caller sample; a client maps the server's
boundaries onto its own clock with it), ``turns`` (the per-turn summaries, boundaries on the call
clock), ``tools`` (every tool call with its turn) and ``db`` (the agent's final state from its
``report_state`` hook — the support agent's database, ``{table: {row id: {column: value}}}`` — or
null).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

KEEP = 256


class CallReports:
    """A bounded, in-memory registry of call reports (single event loop: no lock)."""

    def __init__(self, keep: int = KEEP) -> None:
        self.keep = keep
        self._by_id: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def open(self, call_id: str, transport: str, alias: str | None = None) -> dict[str, Any]:
        """Register a call that has started (``status: running``)."""
        report: dict[str, Any] = {"call_id": call_id, "transport": transport, "status": "running"}
        if alias:
            report["stream_sid"] = alias
        for key in (call_id, alias):
            if key:
                self._by_id[key] = report
        while len(self._by_id) > self.keep * 2:
            self._by_id.popitem(last=False)
        return report

    @staticmethod
    def finish(report: dict[str, Any], call: Any, final_state: Any) -> None:
        """Fill in the report of a call that has ended. ``call`` is the :class:`~.live.LiveCall`;
        ``final_state`` what the agent's ``report_state`` hook returned (None without one)."""
        turns = call.record.summaries or [r.summary() for r in call.timeline.records()]
        report.update(
            status="ended",
            ended=call.meta.get("ended"),
            duration_ms=call.meta.get("duration_ms"),
            # Media Streams: the lower envelope of (arrival − timestamp) over the whole call, a better
            # estimate than the first frame's (which waits behind the call's set-up)
            caller_origin_ms=call.meta.get("stream_origin_ms", call.record.caller_origin_ms),
            turns=turns,
            tools=[{"turn_id": t["turn_id"], **tool} for t in turns for tool in t.get("tools", [])],
            db=final_state,
            hangup=call.meta.get("hangup"),      # why the agent ended the call (None: it did not)
            transfer=call.meta.get("transfer"),  # the transfer it made, and its action's outcome
        )

    def get(self, key: str) -> dict[str, Any] | None:
        return self._by_id.get(key)
