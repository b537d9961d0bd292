"""One call to a remote agent: the simulated caller is the clock.

Every 20 ms, on one monotonic call clock, the loop

1. sends the caller's frame for the window that just ended — a frame leaves when its last sample
   has been "spoken", as from a real phone; ``user_speech_end`` is the caller's own last voiced
   sample (ground truth, never the target's estimate);
2. plays the caller the same window out of the jitter buffer (:mod:`.jitter`), sample-accurate,
   so ``playback_start`` is the first voiced sample the caller heard;
3. tells the target what its playout observed (Twilio mark echoes; ``/ws`` ``played`` reports).

The caller decides what to say next from what it heard (cues: reply after the agent stops,
barge in N ms into its reply, backchannels), exactly as against an in-process agent. The call's
records (``call.wav``: caller left, agent right as heard; ``timeline.jsonl``; ``transcript.txt``)
are written as in ``rejoinder call``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..caller import RenderedTurn, SimulatedCaller
from ..callrun import CallResult, Overtalk
from ...clock import RealClock
from ...pacing import STOP, shared_pacer
from ...recording import WavWriter
from .jitter import JitterBuffer
from .links import CallFailed, Link, TargetError
from .replies import Heard, build_records, group_replies

FRAME_MS = 20.0
log = logging.getLogger("rejoinder.harness.remote")


@dataclass
class RemoteCallResult(CallResult):
    """A finished remote call: what :class:`rejoinder.harness.callrun.CallResult` holds, plus which caller
    turn each agent turn answers (from what was heard), what the target reports (``"tools"``,
    ``"db"``: its final state, in ``final_state``), and what it said about the call (``target``)."""

    owners: dict[int, int | None] = field(default_factory=dict)
    observable: set[str] = field(default_factory=set)
    target: dict[str, Any] = field(default_factory=dict)
    heard: Heard | None = None

    def control_metrics(self) -> dict[str, Any]:
        """Over-talk as the caller heard it; the counters that need the agent's internals are
        ``None`` (not observable from outside)."""
        return {"overtalk_ms": [round(x, 1) for x in self.overtalk_ms],
                "recovery_gap_ms": [round(sum(d for _, d in r.stalls), 1) for r in self.turns if r.recoveries],
                "overlapping_audio": None, "unheard_context_words": None, "repeated_words": None,
                "recoveries": sum(1 for r in self.turns if r.recoveries), "faults_injected": 0,
                "silences_over_1s": sum(1 for r in self.turns for _, d in r.stalls if d > 1000)}


def caller_text(turn: RenderedTurn) -> str:
    """What the scripted caller says in a turn, for the transcript (prompt names in brackets)."""
    words = []
    for seg in turn.spec.audio:
        if seg.say:
            words.append(seg.say)
        elif seg.asterisk:
            words.append(f"[{seg.asterisk}]")
        elif seg.file:
            words.append(f"[{Path(seg.file).name}]")
    return " ".join(words)


@dataclass
class Played:
    """What the caller loop produced: the caller (truth on the call clock), the ear, the link."""

    caller: SimulatedCaller
    jb: JitterBuffer
    link: Link
    t0: float
    duration_ms: float
    overtalk: list[float]
    error: str | None


async def play(link: Link, turns: list[RenderedTurn], *, tail_ms: float = 2500.0, max_ms: float = 900000.0,
               out_dir: Path | None = None, ready_timeout_s: float = 10.0) -> Played:
    """Open the call on ``link`` and play ``turns`` in real time until the caller is done.

    Never raises for the target's failures: the reason is in :attr:`Played.error` and everything
    observed until then is kept.

    Raises:
        TargetError: the connection could not be opened at all.
    """
    clock, jb = link.clock, link.jb
    # a target may open the call with a greeting: the first turn waits until it has been heard
    # (or starts 3.5 s in when none comes), as a caller would
    caller = SimulatedCaller(turns, tail_ms=tail_ms, greeting=True)
    over = Overtalk()
    rec = WavWriter(out_dir / "call.wav", 16000, channels=2) if out_dir else None
    error: str | None = None
    t0 = t = 0.0
    await link.open()
    try:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(link.reader(), name="remote:reader")
            tg.create_task(link.writer(), name="remote:writer")
            await link.wait_ready(ready_timeout_s)
            started = False

            def step(due: float) -> object:
                """The window [t, t+20) has been spoken at ``due`` = t + 20 ms."""
                nonlocal t0, t, started
                t = due - FRAME_MS
                if not started:
                    t0, started = t, True
                if caller.done or t - t0 >= max_ms:
                    return STOP
                link.check()
                frame = caller.next_frame(t - t0)
                link.send_audio(frame, t)
                heard = jb.play(t)
                link.on_ear(jb.drain_events())
                caller.hear(heard, t - t0)
                over.observe(frame, heard, t - t0, caller.last_peak)
                if rec:
                    rec.write(frame, heard)
                return None

            if isinstance(clock, RealClock):  # a lane of the process's one pacing timer
                await shared_pacer().run(step, clock, name="remote:caller")
            else:
                due = math.ceil(clock.now_ms() / FRAME_MS) * FRAME_MS + FRAME_MS
                while True:
                    await clock.pace(due)
                    if step(due) is STOP:
                        break
                    due += FRAME_MS
            await link.hang_up()
    except* CallFailed as eg:
        error = str(eg.exceptions[0])
    except* TargetError as eg:
        error = str(eg.exceptions[0])
    except* Exception as eg:  # a bug on our side: keep what was measured, say so plainly
        log.error("remote call failed in the harness", exc_info=eg.exceptions[0])
        error = f"harness error: {eg.exceptions[0]!r}"
    finally:
        if rec:
            rec.close()
        if link.ws is not None and error is not None:
            try:
                await asyncio.wait_for(link.ws.close(1000, "caller hung up"), 2)
            except Exception:  # noqa: BLE001
                pass
    _shift(caller, t0)
    if error is None and jb.received_samples == 0 and caller.truth:
        error = (f"the target never answered: no audio in {t - t0:.0f} ms of call "
                 f"({link.messages} message(s) received)")
    return Played(caller, jb, link, t0, t - t0, over.episodes, error)


def _shift(caller: SimulatedCaller, t0: float) -> None:
    """The caller ran on its own timeline from 0; move its records onto the call clock."""
    caller.truth = [(i, s + t0, e + t0) for i, s, e in caller.truth]
    caller.heard_onsets = [x + t0 for x in caller.heard_onsets]
    caller.speech_runs = [(i, s + t0, e + t0) for i, s, e in caller.speech_runs]
    caller.heard_runs = [[s + t0, e + t0] for s, e in caller.heard_runs]
    for c in caller.cues:
        c["at_ms"] += t0


def heard_records(p: Played, turns: list[RenderedTurn]) -> Heard:
    """The caller's ear → replies → per-turn records (:mod:`.replies`)."""
    requests = {i for i, t in enumerate(turns) if t.spec.kind == "request"}
    replies = group_replies(p.jb.bursts, clears=p.jb.clears, truth=p.caller.truth, requests=requests,
                            keyed=p.link.protocol == "rejoinder")
    return build_records(replies, p.caller.truth, requests, keyed=p.link.protocol == "rejoinder")


def transcript_lines(heard: Heard, caller: SimulatedCaller, turns: list[RenderedTurn]) -> list[tuple[str, str]]:
    """Caller lines (the script) and agent lines (what was heard, transcribed) in time order."""
    lines: list[tuple[float, str, str]] = [(s, "caller", caller_text(turns[i])) for i, s, _ in caller.truth]
    for rec in heard.records:
        if rec.status == "no_reply":
            continue
        at = rec.stamps.get("playback_start", rec.stamps.get("playout_start", 0.0))
        lines.append((at, "agent", rec.heard_text + (" [cut]" if rec.status == "interrupted" else "")))
    return [(who, text) for _, who, text in sorted(lines, key=lambda x: x[0])]


def write_records(out_dir: Path | None, result: RemoteCallResult) -> None:
    """``timeline.jsonl`` (one ``turn`` line per turn, then the call) and ``transcript.txt``."""
    if out_dir is None:
        return
    with open(out_dir / "timeline.jsonl", "w", encoding="utf-8") as fh:
        for r in result.turns:
            fh.write(json.dumps({"type": "turn", **r.summary()}, default=str) + "\n")
        fh.write(json.dumps({"type": "call", "call_id": result.call_id, "error": result.error,
                             "duration_ms": result.duration_ms, "target": result.target}, default=str) + "\n")
    (out_dir / "transcript.txt").write_text("".join(f"{w}: {x}\n" for w, x in result.transcript),
                                            encoding="utf-8")
