"""One call's events → a plan of spans (pure: no OpenTelemetry here, so it is testable on its own).

Shape of a call's trace (times on the call clock, ms)::

    call                                    [0, end of call]
    └── turn                                [user_speech_start, last moment of the turn]
        ├── end_of_turn                     [user_speech_end, eot_decided]
        ├── stt                             [stt_request, stt_end]           one per request
        ├── reply                           [eot_decided, playback_end | interrupted_at]
        ├── execute_tool {name}             [tool_start, tool_end]           one per tool call
        ├── chat {model}                    [llm_request, llm_end]           one per LLM request
        ├── tts                             [tts_request, tts_end]           one per TTS chunk
        └── playout                         [first_audio_out, playback_end | interrupted_at]

Stage spans are siblings under their turn (they overlap: speculative STT runs while the end of
turn is decided; the LLM streams while TTS speaks). ``reply`` is the agent's reply task, which
owns the waits between the model stages; so the stage spans of a turn together cover its whole
critical path (``rejoinder.timeline``): ``end_of_turn`` is exactly the endpointing segment,
``playout`` holds the playout and leading-silence segments, and the model stages in between show
which of them the reply was waiting on.

Every :class:`~rejoinder.events.Boundary` is an event on its turn's span (turn 0: the call's),
at its own moment; a cut reply adds one ``barge_in`` event. Turn spans carry V2V, time to answer
and each critical-path segment as attributes. Caller content (transcripts, heard text, tool
arguments, any text in boundary data) is left out unless ``content`` is True; audio never is.
Attribute names follow OpenTelemetry's GenAI semantic conventions for the LLM and tool spans
(``gen_ai.*``) and use ``rejoinder.*`` elsewhere.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable

from ..events import AgentSpeech, Boundary, ErrorEvent, Event, Recovery
from ..timeline import SEGMENTS, TurnRecord

# boundary data values that are never caller content (other strings need ``content``)
_SAFE_STRINGS = frozenset({"model", "provider", "voice", "reason", "source", "outcome", "name"})
Attr = dict[str, Any]


@dataclass
class SpanPlan:
    """A span to emit: ``parent`` is the index of its parent in the plan (None for the root)."""

    name: str
    start_ms: float
    end_ms: float
    parent: int | None
    attributes: Attr = field(default_factory=dict)
    events: list[tuple[str, float, Attr]] = field(default_factory=list)
    error: str | None = None


def boundary_attributes(b: Boundary, content: bool) -> Attr:
    """Scalar ``data`` of a boundary as event attributes, plus ``rejoinder.estimated``."""
    out: Attr = {"rejoinder.estimated": b.estimated}
    for k, v in b.data.items():
        if isinstance(v, bool) or isinstance(v, (int, float)):
            out[f"rejoinder.{k}"] = v
        elif isinstance(v, str) and (content or k in _SAFE_STRINGS):
            out[f"rejoinder.{k}"] = v
        elif content and v is not None:
            out[f"rejoinder.{k}"] = str(v)
    return out


class _Pairs:
    """Matches request/end boundaries first-in first-out, per key."""

    def __init__(self) -> None:
        self.open: dict[Any, deque[Boundary]] = {}
        self.done: list[tuple[Boundary, Boundary | None]] = []

    def start(self, key: Any, b: Boundary) -> None:
        self.open.setdefault(key, deque()).append(b)

    def end(self, key: Any, b: Boundary) -> None:
        q = self.open.get(key)
        if q:
            self.done.append((q.popleft(), b))

    def all(self) -> list[tuple[Boundary, Boundary | None]]:
        out = list(self.done) + [(b, None) for q in self.open.values() for b in q]
        return sorted(out, key=lambda p: p[0].t_ms)


def plan_call(events: Iterable[Event], records: Iterable[TurnRecord], *, end_ms: float,
              call_attributes: Attr | None = None, content: bool = False) -> list[SpanPlan]:
    """The spans of one finished call, parents before children.

    ``events`` are the call's events in emission order; ``records`` its turn records (with the
    caller's truth already stamped, see :func:`rejoinder.harness.callrun.attach_truth`); ``end_ms`` the
    call clock when it ended.
    """
    per_turn: dict[int, list[Event]] = {}
    call_events: list[tuple[str, float, Attr]] = []
    for ev in events:
        if ev.turn_id > 0:
            per_turn.setdefault(ev.turn_id, []).append(ev)
        elif isinstance(ev, Boundary):
            call_events.append((ev.name, ev.t_ms, boundary_attributes(ev, content)))
    root = SpanPlan("call", 0.0, end_ms, None, dict(call_attributes or {}), call_events)
    plan = [root]
    recs = {r.turn_id: r for r in records}
    for turn_id in sorted(set(per_turn) | set(recs)):
        rec = recs.get(turn_id) or TurnRecord(turn_id)
        _plan_turn(plan, rec, per_turn.get(turn_id, []), end_ms, content)
    root.start_ms = min([root.start_ms] + [p.start_ms for p in plan[1:]])
    root.end_ms = max([root.end_ms] + [p.end_ms for p in plan[1:]])
    return plan


def _plan_turn(plan: list[SpanPlan], rec: TurnRecord, events: list[Event], call_end: float,
               content: bool) -> None:
    s = rec.stamps
    turn = SpanPlan("turn", 0.0, 0.0, 0, _turn_attributes(rec, content))
    plan.append(turn)
    index = len(plan) - 1
    stages: list[SpanPlan] = []
    stt, llm, tts, tools = _Pairs(), _Pairs(), _Pairs(), _Pairs()
    first_tokens: list[float] = []
    barge: float | None = None
    for ev in events:
        if isinstance(ev, Boundary):
            turn.events.append((ev.name, ev.t_ms, boundary_attributes(ev, content)))
            name = ev.name
            if name == "stt_request":
                stt.start(0, ev)
            elif name == "stt_end":
                stt.end(0, ev)
            elif name == "llm_request":
                llm.start(0, ev)
            elif name == "llm_end":
                llm.end(0, ev)
            elif name == "llm_first_token":
                first_tokens.append(ev.t_ms)
            elif name == "tts_request":
                tts.start(ev.data.get("chunk", 0), ev)
            elif name in ("tts_end",):
                tts.end(ev.data.get("chunk", 0), ev)
            elif name == "tool_start":
                tools.start(ev.data.get("name"), ev)
            elif name == "tool_end":
                tools.end(ev.data.get("name"), ev)
        elif isinstance(ev, AgentSpeech) and ev.interrupted and not ev.call_ended:
            barge = ev.t_ms
        elif isinstance(ev, Recovery):
            turn.events.append(("recovery", ev.t_ms, {"rejoinder.stage": ev.stage,
                                                      "rejoinder.action": ev.action}))
        elif isinstance(ev, ErrorEvent):
            attrs: Attr = {"rejoinder.stage": ev.stage, "rejoinder.recovered": ev.recovered}
            if content:
                attrs["exception.message"] = ev.message
            turn.events.append(("error", ev.t_ms, attrs))
    heard_end = s.get("interrupted_at", s.get("playback_end"))
    if "user_speech_end" in s and "eot_decided" in s:
        eot = s["eot_decided"]
        stages.append(SpanPlan("end_of_turn", min(s["user_speech_end"], eot), eot, index,
                               {"rejoinder.estimated": "user_speech_end" in rec.estimated}))
    for req, end in stt.all():
        stages.append(_stage("stt", req, end, call_end, index, {
            "rejoinder.outcome": end.data.get("outcome") if end else "unfinished",
            "rejoinder.stt.final": bool(end and end.data.get("final"))}))
    for req, end in tools.all():
        name = str(req.data.get("name"))
        attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                 "rejoinder.tool.reversible": bool(req.data.get("reversible")),
                 "rejoinder.tool.tentative": bool(req.data.get("tentative"))}
        if content:
            attrs["gen_ai.tool.call.arguments"] = str(req.data.get("args"))
        span = _stage(f"execute_tool {name}", req, end, call_end, index, attrs)
        if end is not None and end.data.get("error"):
            span.error = str(end.data["error"]) if content else "the tool failed"
        stages.append(span)
    for req, end in llm.all():
        stages.append(_llm_span(req, end, first_tokens, call_end, index))
    for req, end in tts.all():
        chunk = int(req.data.get("chunk", 0))
        first = next((t for n, t, a in turn.events if n == "tts_first_audio"
                      and a.get("rejoinder.chunk") == chunk), None)
        attrs = {"rejoinder.tts.chunk": chunk, "rejoinder.tts.voice": str(req.data.get("voice")),
                 "rejoinder.outcome": end.data.get("outcome") if end else "unfinished"}
        if first is not None:
            attrs["rejoinder.tts.ttfb_ms"] = round(first - req.t_ms, 3)
        if end is not None and "audio_ms" in end.data:
            attrs["rejoinder.tts.audio_ms"] = end.data["audio_ms"]
        stages.append(_stage("tts", req, end, call_end, index, attrs))
    if "first_audio_out" in s:
        end = heard_end if heard_end is not None else call_end
        stages.append(SpanPlan("playout", s["first_audio_out"], max(end, s["first_audio_out"]), index,
                               {"rejoinder.interrupted": "interrupted_at" in s,
                                "rejoinder.stalls": len(rec.stalls),
                                "rejoinder.stall_ms": round(sum(d for _, d in rec.stalls), 3)}))
    if "eot_decided" in s:
        work_end = max([p.end_ms for p in stages] + [heard_end or s["eot_decided"]])
        stages.append(SpanPlan("reply", s["eot_decided"], work_end, index,
                               {"rejoinder.turn.status": rec.status}))
    if barge is not None:
        cut = s.get("interrupted_at", barge)
        turn.events.append(("barge_in", cut, {"rejoinder.heard_words": len(rec.heard_text.split())}))
    times = [p.start_ms for p in stages] + [p.end_ms for p in stages] + [t for _, t, _ in turn.events]
    times += list(s.values())
    turn.start_ms = min(times + [s.get("user_speech_start", call_end)])
    turn.end_ms = max(times + [turn.start_ms])
    if rec.status == "failed":
        turn.error = "; ".join(rec.errors) if content else "the turn failed"
    stages.sort(key=lambda p: p.start_ms)
    plan.extend(stages)


def _stage(name: str, req: Boundary, end: Boundary | None, call_end: float, parent: int,
           attrs: Attr) -> SpanPlan:
    stop = end.t_ms if end is not None else call_end
    span = SpanPlan(name, req.t_ms, max(stop, req.t_ms), parent, attrs)
    if end is not None and end.data.get("outcome") == "error":
        span.error = f"{name} failed"
    return span


def _llm_span(req: Boundary, end: Boundary | None, first_tokens: list[float], call_end: float,
              parent: int) -> SpanPlan:
    model = str(req.data.get("model", "unknown"))
    attrs: Attr = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": str(req.data.get("provider", "unknown")),
                   "gen_ai.request.model": model,
                   "rejoinder.outcome": end.data.get("outcome") if end else "unfinished"}
    for key, attr in (("max_tokens", "gen_ai.request.max_tokens"),
                      ("temperature", "gen_ai.request.temperature")):
        if key in req.data:
            attrs[attr] = req.data[key]
    if end is not None:
        attrs["gen_ai.usage.output_tokens"] = int(end.data.get("deltas", 0))
        attrs["rejoinder.llm.tool_calls"] = int(end.data.get("tool_calls", 0))
        for k, v in (end.data.get("server") or {}).items():  # what the server reported itself
            attrs[f"rejoinder.llm.server.{k}"] = v
    span = _stage(f"chat {model}", req, end, call_end, parent, attrs)
    first = next((t for t in first_tokens if span.start_ms <= t <= span.end_ms), None)
    if first is not None:
        span.attributes["rejoinder.llm.ttft_ms"] = round(first - req.t_ms, 3)
        span.events.append(("llm_first_token", first, {}))
    return span


def _turn_attributes(rec: TurnRecord, content: bool) -> Attr:
    attrs: Attr = {"rejoinder.turn.id": rec.turn_id, "rejoinder.turn.status": rec.status,
                   "rejoinder.estimated": sorted(rec.estimated)}
    v2v, answer = rec.v2v_ms(), rec.time_to_answer_ms()
    if v2v is not None:
        attrs["rejoinder.v2v_ms"] = v2v
    if answer is not None:
        attrs["rejoinder.time_to_answer_ms"] = answer
    segs = rec.segments() or {}
    for name in SEGMENTS:
        if name in segs:
            attrs[f"rejoinder.segment.{name}_ms"] = segs[name]
    if segs:
        attrs["rejoinder.largest_segment"] = max(segs, key=segs.__getitem__)
    if content:
        attrs["rejoinder.transcript"] = rec.transcript
        attrs["rejoinder.heard_text"] = rec.heard_text
    return attrs
