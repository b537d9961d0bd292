"""Simulated callers: play a scenario in real time and listen to the agent like a person would.

The caller renders each turn's audio up front (16 kHz int16 mono), then, once per 20 ms frame,
decides what to say from what it has *heard* (voiced detection on the agent audio it receives, not
from the agent's internal state). Its own audio is the ground truth for ``user_speech_start`` and
``user_speech_end`` (the measurement contract): the first and last sample of each turn above ``voiced_level``.
Its CPU time per frame is accumulated in :attr:`SimulatedCaller.cpu_s` so harness reports can show
that the caller does not distort the agent.

What the caller heard is kept too: :attr:`SimulatedCaller.heard_onsets` (the first voiced agent
sample after quiet, sample-accurate) lets the harness check the line's ``playback_start`` stamps
against the caller's ears, and :attr:`SimulatedCaller.cues` records when each turn's cue fired and
whether it fired as scripted (a barge-in whose reply never came is played after a timeout and
flagged ``missed``). A turn made only of silence is dead air: it has no voiced span and produces
no ground truth.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .audio_io import load_audio, resample, to_int16
from .scenario import ASTERISK_DIR, Scenario

RATE = 16000
FRAME = 320  # 20 ms


@dataclass
class RenderedTurn:
    pcm: np.ndarray          # int16 at 16 kHz
    voiced: tuple[int, int]  # first, last voiced sample (inclusive, exclusive)
    spec: object             # the CallerTurn


def voiced_span(pcm: np.ndarray, level: int = 328, block: int = 160) -> tuple[int, int]:
    """(first, last) voiced sample of int16 ``pcm``: blocks of ``block`` samples whose peak ≥ level."""
    n = len(pcm) // block * block
    if n == 0:
        return (0, 0)
    peaks = np.abs(pcm[:n].reshape(-1, block).astype(np.int32)).max(axis=1)
    idx = np.flatnonzero(peaks >= level)
    if not len(idx):
        return (0, 0)
    first = int(idx[0]) * block
    seg = np.abs(pcm[first:first + block].astype(np.int32))
    first += int(np.argmax(seg >= level))
    last_block = int(idx[-1]) * block
    seg = np.abs(pcm[last_block:last_block + block].astype(np.int32))
    last = last_block + int(np.flatnonzero(seg >= level)[-1]) + 1
    return (first, last)


async def render_turns(sc: Scenario, caller_tts=None) -> list[RenderedTurn]:
    """Render every turn's segments to one int16 16 kHz array each.

    ``caller_tts`` is a TTS port for ``say`` segments (default: espeak-ng with the scenario's
    ``caller_voice`` at ``caller_rate`` — slower and unlike the agent's voice).
    Raises AudioInputError for unusable files, ScenarioError for missing prompts.
    """
    from pathlib import Path
    out: list[RenderedTurn] = []
    base = Path(sc.path).parent if sc.path else Path(".")
    for turn in sc.turns:
        parts: list[np.ndarray] = []
        for seg in turn.audio:
            if seg.silence_ms is not None:
                parts.append(np.zeros(int(RATE * seg.silence_ms / 1000), dtype=np.int16))
            elif seg.say is not None:
                if caller_tts is None:
                    from .adapters.espeak_tts import EspeakTTS
                    caller_tts = EspeakTTS(voice=sc.caller_voice, rate=sc.caller_rate)
                pcs = [p.pcm async for p in caller_tts.stream(seg.say)]
                x = np.concatenate(pcs).astype(np.float32) / 32768.0
                parts.append(to_int16(resample(x, caller_tts.sample_rate, RATE)))
            else:
                p = Path(seg.file) if seg.file else ASTERISK_DIR / f"{seg.asterisk}.wav"
                if seg.file and not p.is_absolute() and (base / p).exists():
                    p = base / p
                x, sr = load_audio(p)
                parts.append(to_int16(resample(x, sr, RATE)))
        pcm = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int16)
        out.append(RenderedTurn(pcm, voiced_span(pcm), turn))
    return out


class SimulatedCaller:
    """Plays rendered turns on its script's cues; listens to the agent frame by frame."""

    def __init__(self, turns: list[RenderedTurn], *, tail_ms: float = 2500.0, start_ms: float = 500.0,
                 voiced_level: int = 328, no_reply_timeout_ms: float = 10000.0,
                 greeting: bool = False) -> None:
        """``greeting``: the agent opens the call; a first turn with no cue of its own waits
        until the greeting has been heard (like ``after_agent_ms``), as a caller would — or
        starts at ``start_ms`` + 3 s if none is heard."""
        self.greeting = greeting
        self.turns = turns
        self.tail_ms = tail_ms
        self.start_ms = start_ms
        self.level = voiced_level
        self.no_reply_timeout_ms = no_reply_timeout_ms
        self.next_turn = 0
        self._cur: RenderedTurn | None = None
        self._pos = 0
        self._cur_start = 0.0
        self._last_turn_end = 0.0
        self._agent_first_heard: float | None = None  # first voiced agent sample since our last turn
        self._agent_last_heard: float | None = None
        self.truth: list[tuple[int, float, float]] = []  # (caller turn index, start_ms, end_ms)
        self.heard_ms = 0.0
        self.heard_onsets: list[float] = []
        self.cues: list[dict] = []  # {"turn", "cue", "at_ms", "missed"}
        self._heard_prev = False
        self.cpu_s = 0.0
        self.done = False
        self._silence = np.zeros(FRAME, dtype=np.int16)

    def _cue(self, now: float) -> str | None:
        """The cue that starts the next turn now (``"at"``, ``"start"``, ``"barge_in"``,
        ``"after_agent"``) or ``"timeout"`` when the agent never spoke; None to keep waiting."""
        turn = self.turns[self.next_turn]
        spec = turn.spec
        if spec.at_ms is not None:
            return "at" if now >= spec.at_ms else None
        if self.next_turn == 0 and spec.after_agent_ms is None and spec.barge_in_ms is None:
            if not self.greeting:
                return "start" if now >= self.start_ms else None
            if self._agent_last_heard is None:
                return "start" if now >= self.start_ms + 3000.0 else None
        if spec.barge_in_ms is not None:
            if self._agent_first_heard is not None:
                return "barge_in" if now - self._agent_first_heard >= spec.barge_in_ms else None
        else:
            wait = spec.after_agent_ms if spec.after_agent_ms is not None else 600.0
            if self._agent_last_heard is not None:
                return "after_agent" if now - self._agent_last_heard >= max(wait, 300.0) else None
        if now - self._last_turn_end >= self.no_reply_timeout_ms:  # the agent never answered
            return "timeout"
        return None

    def next_frame(self, now: float) -> np.ndarray:
        """The caller's 20 ms frame (int16, 16 kHz) starting at ``now`` ms."""
        t0 = time.perf_counter()
        try:
            cue = self._cue(now) if self._cur is None and self.next_turn < len(self.turns) else None
            if cue is not None:
                self._cur = self.turns[self.next_turn]
                self._pos = 0
                self._cur_start = now
                a, b = self._cur.voiced
                if b > a:  # dead air has no voiced span and no truth
                    self.truth.append((self.next_turn, now + 1000.0 * a / RATE, now + 1000.0 * b / RATE))
                self.cues.append({"turn": self.next_turn, "cue": cue, "at_ms": now,
                                  "missed": cue == "timeout"})
                self.next_turn += 1
            if self._cur is None:
                if self.next_turn >= len(self.turns):
                    self.done = self._finished(now)
                return self._silence
            pcm = self._cur.pcm[self._pos:self._pos + FRAME]
            self._pos += FRAME
            if self._pos >= len(self._cur.pcm):
                self._cur = None
                self._last_turn_end = now + 1000.0 * len(pcm) / RATE
                self._agent_first_heard = None
                self._agent_last_heard = None
            if len(pcm) < FRAME:
                pcm = np.concatenate([pcm, np.zeros(FRAME - len(pcm), dtype=np.int16)])
            return pcm
        finally:
            self.cpu_s += time.perf_counter() - t0

    def _finished(self, now: float) -> bool:
        """After the last turn: quiet for ``tail_ms`` once the agent has answered (or at once
        when the last turn was dead air), else give the agent ``no_reply_timeout_ms`` more."""
        last_silent = self.turns[-1].voiced[1] <= self.turns[-1].voiced[0]
        answered = (self._agent_last_heard or 0.0) >= self._last_turn_end
        quiet_since = max(self._agent_last_heard or 0.0, self._last_turn_end)
        if (answered or last_silent) and now - quiet_since >= self.tail_ms:
            return True
        return now - self._last_turn_end >= self.tail_ms + self.no_reply_timeout_ms

    def hear(self, frame: np.ndarray, now: float) -> None:
        """The agent audio (int16, 16 kHz) the caller heard in the frame starting at ``now``."""
        t0 = time.perf_counter()
        mag = np.abs(frame)
        if int(mag.max(initial=0)) >= self.level:
            if not self._heard_prev:
                first = int(np.argmax(mag >= self.level))
                self.heard_onsets.append(now + 1000.0 * first / RATE)
                self._heard_prev = True
            if self._agent_first_heard is None:
                self._agent_first_heard = now
            self._agent_last_heard = now + 20.0
            self.heard_ms += 20.0
        else:
            self._heard_prev = False
        self.cpu_s += time.perf_counter() - t0
