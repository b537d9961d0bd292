"""The metric instruments (OpenTelemetry API) and the event-loop lag sampler.

Every label value is bounded: ``transport`` (harness | browser | twilio), ``status`` (a turn's
status), ``segment`` (:data:`rejoinder.timeline.SEGMENTS`), ``stage`` and ``action`` (the closed
sets of :class:`~rejoinder.events.Recovery` / :class:`~rejoinder.events.ErrorEvent`). No call
id and no text is ever a label.

=====================================  =============  ==========================================
instrument (Prometheus name)           kind           what
=====================================  =============  ==========================================
``rejoinder.turn.v2v``                 histogram, ms  voice-to-voice latency per answered turn
``rejoinder.turn.time_to_answer``      histogram, ms  until the LLM's answer is heard
``rejoinder.turn.segment``             histogram, ms  each critical-path segment (``segment``)
``rejoinder.turns``                    counter        turns by ``status``
``rejoinder.calls``                    counter        finished calls (``outcome`` ok | error)
``rejoinder.calls.active``             up-down        calls in progress
``rejoinder.barge_ins``                counter        replies cut by the caller
``rejoinder.stalls``                   counter        playback stalls (buffer ran dry)
``rejoinder.recoveries``               counter        recoveries by ``stage`` and ``action``
``rejoinder.errors``                   counter        stage errors by ``stage``, ``recovered``
``rejoinder.models.loaded``            gauge          models loaded, by ``stage`` (serve)
``rejoinder.event_loop.lag``           gauge, ms      worst event-loop lag since the last read
=====================================  =============  ==========================================

The Prometheus exporter appends the unit and ``_total``: e.g. ``rejoinder_turn_v2v_milliseconds``
and ``rejoinder_barge_ins_total``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Iterable

from ..timeline import SEGMENTS, TurnRecord


class Instruments:
    """The instruments of one meter; methods take bounded labels only."""

    def __init__(self, meter: Any) -> None:
        self.meter = meter
        self.v2v = meter.create_histogram("rejoinder.turn.v2v", unit="ms",
                                          description="voice-to-voice latency: playback_start − user_speech_end")
        self.answer = meter.create_histogram("rejoinder.turn.time_to_answer", unit="ms",
                                             description="answer_start − user_speech_end: until the "
                                             "LLM's answer is heard")
        self.segment = meter.create_histogram("rejoinder.turn.segment", unit="ms",
                                              description="critical-path segments of V2V (label segment)")
        self.turns = meter.create_counter("rejoinder.turns", description="caller turns by status")
        self.calls = meter.create_counter("rejoinder.calls", description="finished calls by outcome")
        self.active = meter.create_up_down_counter("rejoinder.calls.active", description="calls in progress")
        self.barge_ins = meter.create_counter("rejoinder.barge_ins", description="replies cut by the caller")
        self.stalls = meter.create_counter("rejoinder.stalls", description="playback stalls at the caller")
        self.recoveries = meter.create_counter("rejoinder.recoveries",
                                               description="recoveries by stage and action")
        self.errors = meter.create_counter("rejoinder.errors", description="stage errors")
        self._gauges: list[Any] = []
        self._servers: list[tuple[Callable[[], dict[str, int]], LoopLag]] = []

    def record_turns(self, records: Iterable[TurnRecord], transport: str) -> None:
        """Histograms and counters of a finished call's turns."""
        for r in records:
            labels = {"transport": transport, "status": r.status}
            self.turns.add(1, labels)
            v2v = r.v2v_ms()
            if v2v is not None:
                self.v2v.record(v2v, labels)
            answer = r.time_to_answer_ms()
            if answer is not None:
                self.answer.record(answer, {"transport": transport})
            for name, ms in (r.segments() or {}).items():
                if name in SEGMENTS:
                    self.segment.record(ms, {"transport": transport, "segment": name})
            if r.stalls:
                self.stalls.add(len(r.stalls), {"transport": transport})

    def add_server(self, models: Callable[[], dict[str, int]], lag: "LoopLag") -> None:
        """Report a server's models (``{stage: 1 if loaded}``) and event-loop lag in the gauges
        (created on first use; several servers in one process add up)."""
        if not self._gauges:
            from opentelemetry.metrics import Observation

            def observe_models(_options: Any) -> list[Any]:
                total: dict[str, int] = {}
                for fn, _ in list(self._servers):
                    for stage, n in fn().items():
                        total[stage] = total.get(stage, 0) + n
                return [Observation(n, {"stage": stage}) for stage, n in sorted(total.items())]

            def observe_lag(_options: Any) -> list[Any]:
                lags = [lag.take() for _, lag in list(self._servers)]
                return [Observation(max(lags), {})] if lags else []

            self._gauges = [
                self.meter.create_observable_gauge("rejoinder.models.loaded", [observe_models],
                                                   description="models loaded, by stage"),
                self.meter.create_observable_gauge("rejoinder.event_loop.lag", [observe_lag], unit="ms",
                                                   description="worst event-loop lag since the last read"),
            ]
        self._servers.append((models, lag))

    def remove_server(self, lag: "LoopLag") -> None:
        self._servers = [s for s in self._servers if s[1] is not lag]


class LoopLag:
    """How late a ``interval_s`` timer fires on the running event loop (ms): the worst lag since
    the last :meth:`take` (the gauge's read), so a short stall between scrapes is not missed."""

    def __init__(self, interval_s: float = 0.1) -> None:
        self.interval = interval_s
        self.worst = 0.0
        self.last = 0.0
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="rejoinder-loop-lag")

    async def _run(self) -> None:
        while True:
            t = time.perf_counter()
            await asyncio.sleep(self.interval)
            self.last = max(0.0, 1000.0 * (time.perf_counter() - t - self.interval))
            self.worst = max(self.worst, self.last)

    def take(self) -> float:
        worst, self.worst = max(self.worst, self.last), 0.0
        return round(worst, 3)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
