"""The per-call observer: keeps the few events spans need, counts what metrics need, and turns
it all into spans and histograms when the call ends.

On the event path it only appends to a list and bumps counters (no I/O, no locks of its own);
span creation happens once per call in :meth:`CallTelemetry.finish`, and export happens on the
SDK's batch thread.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Iterable

from ..events import AgentSpeech, Boundary, ErrorEvent, Event, Recovery
from ..timeline import TurnRecord
from .spans import SpanPlan, plan_call

if TYPE_CHECKING:  # pragma: no cover
    from .hub import Telemetry

_KEPT = (Boundary, AgentSpeech, ErrorEvent, Recovery)
log = logging.getLogger("rejoinder.telemetry")


class CallTelemetry:
    """Observer of one call (subscribe it to the call's bus). ``transport`` is a bounded label."""

    def __init__(self, hub: "Telemetry", call_id: str, clock: Any, transport: str) -> None:
        self.hub = hub
        self.call_id = call_id
        self.clock = clock
        self.transport = transport
        # the call clock's t = 0 as Unix epoch ns, fixed once per call
        self.epoch_ns = time.time_ns() - int(clock.now_ms() * 1e6)
        self.events: list[Event] | None = [] if hub.tracer is not None else None
        self.finished = False
        self._m = hub.instruments
        if self._m is not None:
            self._m.active.add(1, {"transport": transport})

    def __call__(self, ev: Event) -> None:
        if self.events is not None and isinstance(ev, _KEPT):
            self.events.append(ev)
        m = self._m
        if m is None:
            return
        if isinstance(ev, AgentSpeech):
            if ev.interrupted and not ev.call_ended:
                m.barge_ins.add(1, {"transport": self.transport})
        elif isinstance(ev, Recovery):
            m.recoveries.add(1, {"transport": self.transport, "stage": ev.stage, "action": ev.action})
        elif isinstance(ev, ErrorEvent):
            m.errors.add(1, {"transport": self.transport, "stage": ev.stage,
                             "recovered": str(ev.recovered).lower()})

    def finish(self, records: Iterable[TurnRecord], *, error: str | None = None) -> None:
        """The call ended: record its turns and emit its spans. Idempotent; never raises (a
        telemetry failure is logged and the call's own records are untouched)."""
        if self.finished:
            return
        self.finished = True
        try:
            self._finish(list(records), error)
        except Exception:  # noqa: BLE001 — telemetry must never break a call's teardown
            log.exception("telemetry of call %s could not be recorded", self.call_id)

    def _finish(self, records: list[TurnRecord], error: str | None) -> None:
        end_ms = self.clock.now_ms()
        m = self._m
        if m is not None:
            m.active.add(-1, {"transport": self.transport})
            m.calls.add(1, {"transport": self.transport, "outcome": "error" if error else "ok"})
            m.record_turns(records, self.transport)
        if self.hub.tracer is not None and self.events is not None:
            attrs = {"rejoinder.call.id": self.call_id, "rejoinder.transport": self.transport,
                     "rejoinder.turns": len(records)}
            plan = plan_call(self.events, records, end_ms=end_ms, call_attributes=attrs,
                             content=self.hub.content)
            if error:
                plan[0].error = error if self.hub.content else "the call failed"
            self.emit(plan)
            self.events = None

    def _ns(self, t_ms: float) -> int:
        return self.epoch_ns + int(round(t_ms * 1e6))

    def emit(self, plan: list[SpanPlan]) -> None:
        """Start every planned span at its own time, then end them children first."""
        from opentelemetry import trace
        from opentelemetry.context import Context
        from opentelemetry.trace import Status, StatusCode

        tracer = self.hub.tracer
        spans: list[Any] = []
        for p in plan:
            ctx = trace.set_span_in_context(spans[p.parent]) if p.parent is not None else Context()
            span = tracer.start_span(p.name, context=ctx, start_time=self._ns(p.start_ms),
                                     attributes=p.attributes)
            for name, t, attrs in sorted(p.events, key=lambda e: e[1]):
                span.add_event(name, attrs, timestamp=self._ns(t))
            if p.error:
                span.set_status(Status(StatusCode.ERROR, p.error))
            spans.append(span)
        for p, span in reversed(list(zip(plan, spans))):
            span.end(end_time=self._ns(p.end_ms))
