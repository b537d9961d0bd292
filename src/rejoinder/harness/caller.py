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
no ground truth; neither does a turn of ``kind: noise`` (babble, a cough): it is not an utterance.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from ..audio_io import load_audio, resample, to_int16
from ..scenario import ASTERISK_DIR, Scenario

RATE = 16000
FRAME = 320  # 20 ms


@dataclass
class RenderedTurn:
    pcm: np.ndarray          # int16 at 16 kHz
    voiced: tuple[int, int]  # first, last voiced sample (inclusive, exclusive)
    spec: object             # the CallerTurn
    _peaks: list[int] | None = None
    _runs: dict = field(default_factory=dict)  # voiced runs by level (computed once)

    def frame_peaks(self) -> list[int]:
        """Peak |sample| of each 20 ms frame (computed once, so the frame loop does not)."""
        if self._peaks is None:
            n = -(-len(self.pcm) // FRAME) * FRAME
            padded = np.zeros(n, dtype=np.int32)
            padded[:len(self.pcm)] = self.pcm
            self._peaks = np.abs(padded).reshape(-1, FRAME).max(axis=1).tolist() if n else []
        return self._peaks

    def runs(self, level: int) -> list[tuple[float, float]]:
        """:func:`voiced_runs` of the turn at ``level`` (computed once per level)."""
        got = self._runs.get(level)
        if got is None:
            got = self._runs[level] = voiced_runs(self.pcm, level)
        return got


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


def voiced_runs(pcm: np.ndarray, level: int = 328, block: int = 160,
                min_gap_ms: float = 60.0) -> list[tuple[float, float]]:
    """Voiced runs of int16 ``pcm`` as (start_ms, end_ms) from its first sample, at ``block``
    resolution (10 ms): blocks whose peak ≥ ``level``, joined across gaps < ``min_gap_ms``."""
    n = len(pcm) // block * block
    if n == 0:
        return []
    peaks = np.abs(pcm[:n].reshape(-1, block).astype(np.int32)).max(axis=1)
    idx = np.flatnonzero(peaks >= level)
    ms = 1000.0 * block / RATE
    runs: list[list[float]] = []
    for i in idx:
        a = i * ms
        if runs and a - runs[-1][1] < min_gap_ms:
            runs[-1][1] = a + ms
        else:
            runs.append([a, a + ms])
    return [(a, b) for a, b in runs]


async def render_turns(sc: Scenario, caller_tts=None) -> list[RenderedTurn]:
    """Render every turn's segments to one int16 16 kHz array each.

    ``caller_tts`` is a TTS port for ``say`` segments (default: espeak-ng with the scenario's
    ``caller_voice`` at ``caller_rate`` — slower and unlike the agent's voice).
    Raises AudioInputError for unusable files, ScenarioError for missing prompts.
    """
    from pathlib import Path
    out: list[RenderedTurn] = []
    base = Path(sc.path).parent if sc.path else Path(".")
    voice: list = [caller_tts]

    async def say(text: str) -> np.ndarray:
        if voice[0] is None:
            from ..adapters.espeak_tts import EspeakTTS
            voice[0] = EspeakTTS(voice=sc.caller_voice, rate=sc.caller_rate)
        pcs = [p.pcm async for p in voice[0].stream(text)]
        return resample(np.concatenate(pcs).astype(np.float32) / 32768.0, voice[0].sample_rate, RATE)

    for turn in sc.turns:
        parts = [await _render(seg, base, say) for seg in turn.audio]
        pcm = to_int16(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int16)
        out.append(RenderedTurn(pcm, voiced_span(pcm), turn))
    return out


async def _render(seg, base, say) -> np.ndarray:
    """One segment as float32 at 16 kHz: its source, cut to ``start_ms``/``duration_ms``, scaled
    to ``level_dbfs`` (RMS). A ``mix`` sums its segments, each looped to ``duration_ms``."""
    from pathlib import Path
    if seg.silence_ms is not None:
        return np.zeros(int(RATE * seg.silence_ms / 1000), dtype=np.float32)
    if seg.mix is not None:
        voices = [await _render(m, base, say) for m in seg.mix]
        n = int(RATE * seg.duration_ms / 1000) if seg.duration_ms else max(len(v) for v in voices)
        x = np.zeros(n, dtype=np.float32)
        for v in voices:
            if len(v):
                x += np.resize(v, n) if seg.duration_ms else np.pad(v, (0, n - len(v)))
    else:
        if seg.say is not None:
            x = await say(seg.say)
        else:
            p = Path(seg.file) if seg.file else ASTERISK_DIR / f"{seg.asterisk}.wav"
            if seg.file and not p.is_absolute() and (base / p).exists():
                p = base / p
            raw, sr = load_audio(p)
            x = resample(raw, sr, RATE)
        a = int(RATE * (seg.start_ms or 0.0) / 1000)
        b = a + int(RATE * seg.duration_ms / 1000) if seg.duration_ms else len(x)
        x = x[a:b]
    if seg.level_dbfs is not None and len(x):
        rms = float(np.sqrt(np.mean(np.square(x, dtype=np.float64))))
        if rms > 0:
            x = x * np.float32(10 ** (seg.level_dbfs / 20) / rms)
    return x.astype(np.float32, copy=False)


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
        # voiced agent audio as heard, [start, end] ms (20 ms resolution at the end)
        self.heard_runs: list[list[float]] = []
        # the caller's own voiced runs: (turn index, start_ms, end_ms), gaps ≥ 60 ms split them
        self.speech_runs: list[tuple[int, float, float]] = []
        self.cues: list[dict] = []  # {"turn", "cue", "at_ms", "missed"}
        self._heard_prev = False
        self._quiet_until = -math.inf  # no cue can fall due before this (ms; see _cue)
        self.cpu_s = 0.0
        self.done = False
        self.last_peak = 0  # peak |sample| of the last frame said (int16 units)
        self._peaks: list[int] = []
        self._silence = np.zeros(FRAME, dtype=np.int16)
        self._pad = np.zeros(FRAME, dtype=np.int16)

    def _cue(self, now: float) -> str | None:
        """The cue that starts the next turn now (``"at"``, ``"start"``, ``"barge_in"``,
        ``"after_agent"``) or ``"timeout"`` when the agent never spoke; None to keep waiting
        (then :attr:`_quiet_until` is when the awaited cue falls due, unless the caller hears
        the agent first: :meth:`hear` clears it)."""
        turn = self.turns[self.next_turn]
        spec = turn.spec
        if spec.at_ms is not None:
            return "at" if now >= spec.at_ms else self._wait(spec.at_ms)
        if self.next_turn == 0 and spec.after_agent_ms is None and spec.barge_in_ms is None:
            if not self.greeting:
                return "start" if now >= self.start_ms else self._wait(self.start_ms)
            if self._agent_last_heard is None:
                due = self.start_ms + 3000.0
                return "start" if now >= due else self._wait(due)
        if spec.barge_in_ms is not None:
            if self._agent_first_heard is not None:
                return ("barge_in" if now - self._agent_first_heard >= spec.barge_in_ms
                        else self._wait(self._agent_first_heard + spec.barge_in_ms))
        else:
            wait = spec.after_agent_ms if spec.after_agent_ms is not None else 600.0
            if self._agent_last_heard is not None:
                wait = max(wait, 300.0)
                return ("after_agent" if now - self._agent_last_heard >= wait
                        else self._wait(self._agent_last_heard + wait))
        if now - self._last_turn_end >= self.no_reply_timeout_ms:  # the agent never answered
            return "timeout"
        return self._wait(self._last_turn_end + self.no_reply_timeout_ms)

    def _wait(self, due_ms: float) -> None:
        """No cue before ``due_ms``: frames until just before it skip :meth:`_cue` (the cue
        itself is still decided there, by its own comparison)."""
        self._quiet_until = due_ms - 1e-3
        return None

    def next_frame(self, now: float) -> np.ndarray:
        """The caller's 20 ms frame (int16, 16 kHz) starting at ``now`` ms."""
        t0 = time.perf_counter()
        cur = self._cur
        if cur is None:
            if now < self._quiet_until:  # waiting for a cue that is not due yet (most frames)
                self.last_peak = 0
                self.cpu_s += time.perf_counter() - t0
                return self._silence
            cue = self._cue(now) if self.next_turn < len(self.turns) else None
            if cue is None:
                if self.next_turn >= len(self.turns):
                    self.done = self._finished(now)
                self.last_peak = 0
                self.cpu_s += time.perf_counter() - t0
                return self._silence
            cur = self._start(cue, now)
        pos = self._pos
        pcm = cur.pcm[pos:pos + FRAME]
        self.last_peak = self._peaks[pos // FRAME]
        self._pos = pos = pos + FRAME
        if pos >= len(cur.pcm):
            self._cur = None
            self._last_turn_end = now + 1000.0 * len(pcm) / RATE
            self._agent_first_heard = None
            self._agent_last_heard = None
            self._quiet_until = -math.inf
            if len(pcm) < FRAME:  # the turn's last, partial frame
                pad = self._pad
                pad[:len(pcm)] = pcm
                pad[len(pcm):] = 0
                pcm = pad
        self.cpu_s += time.perf_counter() - t0
        return pcm

    def _start(self, cue: str, now: float) -> RenderedTurn:
        """Begin the next turn on ``cue`` at ``now``."""
        cur = self._cur = self.turns[self.next_turn]
        self._peaks = cur.frame_peaks()
        self._pos = 0
        self._cur_start = now
        a, b = cur.voiced
        if b > a and cur.spec.kind != "noise":  # dead air and noise are no utterance
            self.truth.append((self.next_turn, now + 1000.0 * a / RATE, now + 1000.0 * b / RATE))
            self.speech_runs += [(self.next_turn, now + x, now + y) for x, y in cur.runs(self.level)]
        self.cues.append({"turn": self.next_turn, "cue": cue, "at_ms": now, "missed": cue == "timeout"})
        self.next_turn += 1
        return cur

    def _finished(self, now: float) -> bool:
        """After the last turn: quiet for ``tail_ms`` once the agent has answered (or at once
        when the last turn was dead air), else give the agent ``no_reply_timeout_ms`` more."""
        last_silent = self.turns[-1].voiced[1] <= self.turns[-1].voiced[0]
        answered = (self._agent_last_heard or 0.0) >= self._last_turn_end
        quiet_since = max(self._agent_last_heard or 0.0, self._last_turn_end)
        if (answered or last_silent) and now - quiet_since >= self.tail_ms:
            return True
        return now - self._last_turn_end >= self.tail_ms + self.no_reply_timeout_ms

    def hear(self, frame: np.ndarray, now: float, peak: int | None = None) -> None:
        """The agent audio (int16, 16 kHz) the caller heard in the frame starting at ``now``;
        ``peak`` is its peak |sample| when the sender already knows it (the line's playout)."""
        if peak is not None and peak < self.level:  # known quiet (most frames): nothing to do
            self._heard_prev = False
            return
        t0 = time.perf_counter()
        if peak is None:
            peak = int(np.abs(frame.astype(np.int32)).max(initial=0))
        if peak >= self.level:
            if not self._heard_prev:
                first = int(np.argmax(np.abs(frame.astype(np.int32)) >= self.level))
                self.heard_onsets.append(now + 1000.0 * first / RATE)
                self.heard_runs.append([now + 1000.0 * first / RATE, now + 20.0])
                self._heard_prev = True
            else:
                self.heard_runs[-1][1] = now + 20.0
            if self._agent_first_heard is None:
                self._agent_first_heard = now
            self._agent_last_heard = now + 20.0
            self._quiet_until = -math.inf  # the awaited cue moves
            self.heard_ms += 20.0
        else:
            self._heard_prev = False
        self.cpu_s += time.perf_counter() - t0
