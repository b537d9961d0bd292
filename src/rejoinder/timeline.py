"""Boundary events → per-turn records, critical path and voice-to-voice latency.

Critical path (the measurement contract): the checkpoints below, in causal order, from ``user_speech_end`` to
``playback_start``. Each checkpoint time is clamped into ``[previous checkpoint, playback_start]``
so that work hidden behind an earlier stage (e.g. a speculative transcript ready before the end of
turn was decided) contributes 0 ms, and the segments add up *exactly* to V2V. A checkpoint that did
not happen in a turn (no tool, or a first clause spoken before the LLM answered) is skipped.

==================  =======================================  ================================
segment             ends at                                  means
==================  =======================================  ================================
endpointing         ``eot_decided``                          waiting to decide the turn ended
transcription       ``transcript_final``                     STT lag after the decision
tool_choice         last ``tool_start`` (or, in a turn       the LLM deciding and writing a
                    without a tool on the path, the last     tool call (its request until the
                    ``tool_decided``) before first speech    call is complete), or the tool
                                                             gate deciding to talk (or to
                                                             call, when a filler is said then)
tools               last ``tool_end`` before first speech    tool calls on the path
llm_ttft            last ``llm_first_token`` before first    LLM time to first token of the
                    speech                                   step that spoke
first_text          ``first_speakable_text``                 text until a speakable chunk
tts_ttfb            first ``tts_first_audio``                TTS time to first audio
audio_out           ``first_audio_out``                      hand-off to the transport
arrival             ``first_audio_in``                       until the reply's first audio reached
                                                             the caller's socket (remote targets:
                                                             the network; a black-box target:
                                                             everything before its audio arrived)
playout             ``playout_start``                        transport and buffering until the
                                                             reply's first sample is played
lead_silence        ``playback_start``                       leading silence in the TTS audio
                                                             (first sample → first voiced sample)
==================  =======================================  ================================
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Iterable

from .events import (AgentSpeech, Boundary, CallEnd, ErrorEvent, Event, Recovery, Speculation,
                     StepEntered, ToolCallEvent, TranscriptEvent, TurnDecision, event_to_dict)

# boundaries whose latest stamp counts (a turn reopened or held for digits is decided again)
_LAST_WINS = frozenset({"user_speech_end", "eot_decided", "transcript_final", "playback_end"})
# stamps of a reply's stages: dropped when the turn reopens and a new reply starts over
_REPLY_SIDE = frozenset({"llm_request", "llm_first_token", "llm_end", "tool_start", "tool_end",
                         "first_speakable_text", "tts_request", "tts_first_audio", "tts_end",
                         "first_audio_out", "first_audio_in", "playout_start", "playback_start",
                         "answer_start", "interrupted_at"})  # (a reply that played only a filler
                                                            # reopens too: its start and cut)
SEGMENTS = ("endpointing", "transcription", "tool_choice", "tools", "llm_ttft", "first_text",
            "tts_ttfb", "audio_out", "arrival", "playout", "lead_silence")


@dataclass
class TurnRecord:
    """Everything measured about one caller turn (times in ms on the call clock)."""

    turn_id: int
    stamps: dict[str, float] = field(default_factory=dict)  # first occurrence of each boundary
    estimated: set[str] = field(default_factory=set)
    tools: list[dict[str, Any]] = field(default_factory=list)
    tts_chunks: list[dict[str, float]] = field(default_factory=list)
    stalls: list[tuple[float, float]] = field(default_factory=list)  # (start_ms, duration_ms)
    status: str = "completed"  # completed | interrupted | failed | recovered | no_reply |
    # rejected_noise (the caller's sound was only noise: no reply) | idle_prompt (the agent spoke
    # on its own after the caller's silence) | follow_up (on its own, with a background tool's
    # result)
    errors: list[str] = field(default_factory=list)
    transcript: str = ""
    heard_text: str = ""
    recoveries: list[dict[str, Any]] = field(default_factory=list)
    llm_first_tokens: list[float] = field(default_factory=list)  # every LLM request's first token
    # the tool gate's decisions (rejoinder.ports.ToolDecision.as_dict() + "t_ms")
    tool_decisions: list[dict[str, Any]] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)  # why the reply talked on after caller sounds
    rejected: dict[str, Any] | None = None  # why the turn was rejected as noise, what was heard
    initiated: str | None = None  # the agent spoke on its own (e.g. "idle_prompt"): no caller turn
    steps: list[dict[str, Any]] = field(default_factory=list)  # conversation steps entered
    call_end: dict[str, Any] | None = None  # the agent ended the call after this turn
    llm_requests: int = 0  # every LLM request of the turn (speculative drafts and tool steps too)
    llm_replies: int = 0   # replies started: first requests of drafts (no tool step, no retry)
    speculation: list[dict[str, Any]] = field(default_factory=list)  # rejoinder.speculation
    commits: list[float] = field(default_factory=list)  # every eot_decided (taken back or not)
    retractions: list[float] = field(default_factory=list)  # commits the transcript took back
    repeated_words: int = 0  # spoken words heard twice because a recovery said them again
    # what the LLM server reported about serving the turn's requests (rejoinder.ports.ServerTiming
    # fields, each summed over the requests that reported it; "requests": how many did): {} if none
    llm_server: dict[str, Any] = field(default_factory=dict)

    def add_server_timing(self, reported: dict[str, Any]) -> None:
        """Add one LLM request's server-reported timing (``ServerTiming.as_dict()``)."""
        if reported:
            self.llm_server = sum_reported([self.llm_server, {"requests": 1, **reported}])

    def segments(self) -> dict[str, float] | None:
        """Critical-path segments (ms) summing to :meth:`v2v_ms`, or None without playback."""
        s = self.stamps
        if "user_speech_end" not in s or "playback_start" not in s:
            return None
        end = s["playback_start"]
        speak = s.get("first_speakable_text", end)
        tools = [t for t in self.tools if not t.get("before_reopen")]
        tool_ends = [t["end_ms"] for t in tools if t.get("end_ms") is not None
                     and t["end_ms"] <= speak]
        tool_starts = [t["start_ms"] for t in tools if t["start_ms"] <= speak]
        if not tool_starts:  # the gate chose to talk: its decision is on the path
            tool_starts = [d["t_ms"] for d in self.tool_decisions if d["t_ms"] <= speak]
        firsts = [t for t in self.llm_first_tokens if t <= speak]
        points = [
            ("endpointing", s.get("eot_decided")),
            ("transcription", s.get("transcript_final")),
            ("tool_choice", max(tool_starts) if tool_starts else None),
            ("tools", max(tool_ends) if tool_ends else None),
            ("llm_ttft", max(firsts) if firsts else None),
            ("first_text", s.get("first_speakable_text")),
            ("tts_ttfb", s.get("tts_first_audio")),
            ("audio_out", s.get("first_audio_out")),
            ("arrival", s.get("first_audio_in")),
            ("playout", s.get("playout_start")),
            ("lead_silence", end),
        ]
        prev = s["user_speech_end"]
        out: dict[str, float] = {}
        for name, t in points:
            if t is None:
                continue
            t = min(max(t, prev), end)
            out[name] = round(t - prev, 3)
            prev = t
        return out

    def drop_reply_stamps(self) -> None:
        """The turn reopened (the caller went on before its reply was heard): forget the
        dropped reply's stage times, so the segments measure the reply that is heard. Its tool
        runs stay listed (they happened), marked ``before_reopen``."""
        for name in _REPLY_SIDE:
            self.stamps.pop(name, None)
            self.estimated.discard(name)
        self.llm_first_tokens.clear()
        self.tts_chunks.clear()
        for t in self.tools:
            t["before_reopen"] = True

    def v2v_ms(self) -> float | None:
        s = self.stamps
        if "user_speech_end" in s and "playback_start" in s:
            return round(s["playback_start"] - s["user_speech_end"], 3)
        return None

    def time_to_answer_ms(self) -> float | None:
        """``answer_start − user_speech_end`` (ms): until the first voiced audio that carries the
        LLM's answer reached the caller. Equals :meth:`v2v_ms` when the first words the caller
        heard were the LLM's; larger when the runtime spoke first on its own (a filler); None when
        no LLM-written audio was heard in this turn."""
        s = self.stamps
        if "user_speech_end" in s and "answer_start" in s:
            return round(s["answer_start"] - s["user_speech_end"], 3)
        return None

    def summary(self) -> dict[str, Any]:
        segs = self.segments()
        largest = max(segs, key=segs.__getitem__) if segs else None
        return {
            "turn_id": self.turn_id,
            "status": self.status,
            "v2v_ms": self.v2v_ms(),
            "time_to_answer_ms": self.time_to_answer_ms(),
            "segments": segs or {},
            "largest_segment": largest,
            "transcript": self.transcript,
            "heard_text": self.heard_text,
            "boundaries": {k: round(v, 3) for k, v in sorted(self.stamps.items(), key=lambda kv: kv[1])},
            "estimated": sorted(self.estimated),
            "tools": self.tools,
            "tts_chunks": self.tts_chunks,
            "stalls": [{"start_ms": a, "duration_ms": d} for a, d in self.stalls],
            "errors": self.errors,
            "recoveries": self.recoveries,
            "resumed": self.resumed,
            "rejected": self.rejected,
            "initiated": self.initiated,
            "steps": self.steps,
            "call_end": self.call_end,
            "llm_first_tokens": [round(t, 3) for t in self.llm_first_tokens],
            "tool_decisions": self.tool_decisions,
            "llm_requests": self.llm_requests,
            "llm_replies": self.llm_replies,
            "speculation": self.speculation,
            "commits": [round(t, 3) for t in self.commits],
            "retractions": [round(t, 3) for t in self.retractions],
            "repeated_words": self.repeated_words,
            "llm_server": self.llm_server,
        }


def sum_reported(parts: Iterable[dict[str, Any] | None]) -> dict[str, Any]:
    """Key-wise sums of server-reported figures (``TurnRecord.llm_server`` dicts; None and ``{}``
    add nothing): a call's or a run's total of what the LLM server reported."""
    out: dict[str, Any] = {}
    for part in parts:
        for k, v in (part or {}).items():
            out[k] = round(out.get(k, 0) + v, 3)
    return out


class Timeline:
    """Observer that builds :class:`TurnRecord` objects and (optionally) writes every event to a
    JSONL file as it happens, flushed per line so a crash keeps everything recorded so far."""

    def __init__(self, jsonl: Path | None = None) -> None:
        self.turns: dict[int, TurnRecord] = {}
        self._fh: IO[str] | None = open(jsonl, "w", encoding="utf-8") if jsonl else None
        self._truth: list[tuple[float, float]] = []

    def turn(self, turn_id: int) -> TurnRecord:
        rec = self.turns.get(turn_id)
        if rec is None:
            rec = self.turns[turn_id] = TurnRecord(turn_id)
        return rec

    def __call__(self, event: Event) -> None:
        if self._fh is not None:
            self._fh.write(json.dumps(event_to_dict(event), default=str) + "\n")
            self._fh.flush()
        if isinstance(event, Boundary):
            self._on_boundary(event)
        elif isinstance(event, ErrorEvent) and event.turn_id:
            rec = self.turn(event.turn_id)
            rec.errors.append(f"{event.stage}: {event.message}")
            rec.status = "recovered" if event.recovered else "failed"
        elif (isinstance(event, ToolCallEvent) and event.turn_id
              and event.result == {"compensated": True}):
            for t in reversed(self.turn(event.turn_id).tools):
                if (t["name"] == event.name and (t["tentative"] or t.get("before_reopen"))
                        and not t.get("compensated")):
                    t["compensated"] = True
                    break
        elif isinstance(event, Recovery) and event.turn_id:
            rec = self.turn(event.turn_id)
            rec.recoveries.append({"stage": event.stage, "action": event.action,
                                   "reason": event.reason, "t_ms": event.t_ms})
            if rec.status == "completed":
                rec.status = "recovered"
        elif isinstance(event, TurnDecision) and event.turn_id and not event.committed:
            rec = self.turn(event.turn_id)
            if event.reason == "rejected_noise":
                rec.status, rec.rejected = "rejected_noise", dict(event.data)
            elif event.reason == "retracted":  # the transcript took the commit back
                rec.retractions.append(event.t_ms)
            elif event.reason in ("idle_prompt", "follow_up"):  # the agent spoke on its own
                rec.status = rec.initiated = event.reason
            elif event.reason == "reopen":  # the reply so far was dropped: its times are not
                rec.drop_reply_stamps()      # the turn's (the next reply's are)
            else:  # a sound over the reply that it talked on after
                rec.resumed.append(event.reason)
        elif isinstance(event, StepEntered) and event.turn_id:  # (turn 0: the call opens in its first step)
            self.turn(event.turn_id).steps.append(
                {"agent": event.agent, "step": event.step, "from": event.previous,
                 "reason": event.reason, "tool": event.tool, "t_ms": round(event.t_ms, 3)})
        elif isinstance(event, CallEnd) and event.turn_id:
            self.turn(event.turn_id).call_end = {
                "kind": event.kind, "reason": event.reason, "target": event.target,
                "status": event.status, "t_ms": round(event.t_ms, 3)}
        elif isinstance(event, Speculation) and event.turn_id:
            self.turn(event.turn_id).speculation.append(
                {"outcome": event.outcome, "reason": event.reason, "saved_ms": event.saved_ms,
                 "llm_requests": event.llm_requests, "tokens": event.tokens,
                 "tool_runs": event.tool_runs, "started_ms": round(event.started_ms, 3),
                 "decided_ms": round(event.t_ms, 3)})
        elif isinstance(event, AgentSpeech) and event.turn_id:
            rec = self.turn(event.turn_id)
            if event.interrupted and "playback_start" not in rec.stamps:
                return  # a reply dropped before the caller heard its answer (the turn reopened)
            rec.heard_text = event.heard_text
            rec.repeated_words += event.repeated_words
            if event.interrupted and not event.call_ended:
                rec.status = "interrupted"

    def _on_boundary(self, b: Boundary) -> None:
        if b.turn_id <= 0:
            return
        rec = self.turn(b.turn_id)
        if b.name in ("tool_start", "tool_end"):
            if b.name == "tool_start":
                rec.tools.append({"name": b.data.get("name"), "args": b.data.get("args"),
                                  "reversible": b.data.get("reversible"),
                                  "tentative": bool(b.data.get("tentative")), "start_ms": b.t_ms,
                                  "end_ms": None})
            else:
                for t in reversed(rec.tools):
                    if t["name"] == b.data.get("name") and t["end_ms"] is None:
                        t["end_ms"] = b.t_ms
                        if b.data.get("error"):
                            t["error"] = b.data["error"]
                        if b.data.get("held"):
                            t["held"] = True  # not run: the caller was asked to confirm
                        break
        elif b.name in ("tts_request", "tts_first_audio", "tts_end"):
            idx = int(b.data.get("chunk", 0))
            while len(rec.tts_chunks) <= idx:
                rec.tts_chunks.append({})
            rec.tts_chunks[idx][b.name] = b.t_ms
        elif b.name == "stall":
            rec.stalls.append((b.t_ms, float(b.data.get("duration_ms", 0.0))))
            return
        elif b.name == "llm_first_token":
            rec.llm_first_tokens.append(b.t_ms)
        elif b.name == "tool_decided":
            rec.tool_decisions.append({**b.data, "t_ms": round(b.t_ms, 3)})
        elif b.name == "llm_request":
            rec.llm_requests += 1
            if not b.data.get("step") and not b.data.get("retry"):
                rec.llm_replies += 1
        elif b.name == "llm_end" and b.data.get("server"):
            rec.add_server_timing(b.data["server"])
        elif b.name == "eot_decided":
            rec.commits.append(b.t_ms)
        elif b.name == "transcript_final":
            rec.transcript = str(b.data.get("text", ""))
        if b.estimated and b.name in rec.stamps and b.name not in rec.estimated:
            return  # an observed moment is never replaced by an estimate
        if (b.name not in rec.stamps or b.name in _LAST_WINS
                or (b.name in rec.estimated and not b.estimated)):
            rec.stamps[b.name] = b.t_ms
        if b.estimated:
            rec.estimated.add(b.name)
        else:
            rec.estimated.discard(b.name)

    def write_event(self, record: dict[str, Any]) -> None:
        """Write an extra JSON line (e.g. the per-turn summary) to the JSONL file."""
        if self._fh is not None:
            self._fh.write(json.dumps(record, default=str) + "\n")
            self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def records(self) -> list[TurnRecord]:
        return [self.turns[k] for k in sorted(self.turns)]


class CallTranscript:
    """Observer: the call as a transcript — one caller line per turn with its latest final
    transcript (a turn held open while a number was read out, or reopened, stays one line), and
    the agent's words as the caller heard them (``[cut]`` when interrupted)."""

    def __init__(self) -> None:
        self._lines: list[list[Any]] = []  # [who, text, turn_id]

    def __call__(self, event: Event) -> None:
        if isinstance(event, TranscriptEvent) and event.final and not event.speculative:
            for line in reversed(self._lines):
                if line[0] == "agent":
                    break
                if line[2] == event.turn_id:
                    line[1] = event.text
                    return
            self._lines.append(["caller", event.text, event.turn_id])
        elif isinstance(event, AgentSpeech) and (event.heard_text or not event.interrupted):
            # (a reply cut before a word of it was heard — the caller went on — is no line)
            self._lines.append(["agent", event.heard_text + (" [call ended]" if event.call_ended else
                                                             " [cut]" if event.interrupted else ""),
                                event.turn_id])

    @property
    def lines(self) -> list[tuple[str, str]]:
        """(``"caller"`` | ``"agent"``, text) in call order."""
        return [(who, text) for who, text, _ in self._lines]

    def text(self) -> str:
        return transcript_text(self.lines)


def transcript_text(lines: list[tuple[str, str]]) -> str:
    """``who: text`` lines, as written to ``transcript.txt``."""
    return "".join(f"{who}: {text}\n" for who, text in lines)
