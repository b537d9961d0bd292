"""Benchmark: how well the agent's recogniser hears the harness's synthetic caller voice.

Every ``say:`` line of the chosen suites is spoken as the harness speaks it (espeak-ng with the
scenario's ``caller_voice`` and ``caller_rate``, resampled to 16 kHz) and transcribed by the
embedded recogniser (Whisper base, int8, the support agent's vocabulary prompt) at each
``--beams`` size. Reported per beam size: word error rate (jiwer; lower case, punctuation
dropped, numbers under 100 written as words with num2words) over all lines and per suite, and
the median decode time per line. With ``--show`` the lines it got wrong are printed.

Why: a failed scenario is often a misheard caller (weekday names, "could you" heard as "God
you"), and that is a property of the harness's voice as much as of the agent. Whisper base
measures 4.4 % WER on real speech (``../shared/MODELS.md``); this prints the figure for the
voice every scenario uses.

    .venv/bin/python bench/caller_voice_wer.py [--suites reference,heldout] [--beams 1,5]
        [--show] [--json]

Read only aggregate figures of a suite kept for blind measurement (``--show`` prints its lines).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import time

import jiwer
import numpy as np
from num2words import num2words

from rejoinder.adapters.espeak_tts import EspeakTTS
from rejoinder.adapters.whisper_stt import WhisperSTT
from rejoinder.app.support import agent
from rejoinder.audio_io import resample
from rejoinder.harness.suite import load_suite


def lines(suites: list[str]) -> list[tuple[str, str, int, str]]:
    """(suite, caller voice, words per minute, text) of every ``say:`` segment."""
    out = []
    for suite in suites:
        for sc in load_suite(suite)[1]:
            for turn in sc.turns:
                out += [(suite, sc.caller_voice, sc.caller_rate, seg.say)
                        for seg in turn.audio if seg.say]
    return out


async def speak(voice: str, rate: int, text: str) -> np.ndarray:
    """``text`` in the caller voice: float32 at 16 kHz."""
    tts = EspeakTTS(voice=voice, rate=rate)
    pcm = np.concatenate([p.pcm async for p in tts.stream(text)])
    return resample(pcm.astype(np.float32) / 32768.0, tts.sample_rate, 16000)


def words(text: str) -> str:
    """Lower case, no punctuation, numbers under 100 as words ("3" → "three")."""
    out: list[str] = []
    for w in re.sub(r"[^a-z0-9' ]", " ", text.lower()).split():
        out += num2words(int(w)).replace("-", " ").split() if w.isdigit() and len(w) < 3 else [w]
    return " ".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suites", default="reference,heldout,unseen,fresh,blind,sealed,vault")
    ap.add_argument("--beams", default="1,5", help="beam sizes to compare (1: greedy, the default)")
    ap.add_argument("--show", action="store_true", help="print the lines transcribed wrong")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    suites = a.suites.split(",")
    items = lines(suites)
    audio = [asyncio.run(speak(v, r, t)) for _, v, r, t in items]
    refs = [words(t) for *_, t in items]
    report = {"lines": len(items), "suites": suites, "beams": {}}
    for beam in (int(b) for b in a.beams.split(",")):
        stt = WhisperSTT(initial_prompt=agent.stt_prompt(), beam_size=beam)
        stt.warmup()
        hyps, times = [], []
        for x in audio:
            t0 = time.perf_counter()
            hyps.append(stt.transcribe_sync(x))
            times.append(1000.0 * (time.perf_counter() - t0))
        hw = [words(h) for h in hyps]
        per = {s: round(100 * jiwer.wer([refs[i] for i, it in enumerate(items) if it[0] == s],
                                        [hw[i] for i, it in enumerate(items) if it[0] == s]), 1)
               for s in suites}
        row = {"wer_pct": round(100 * jiwer.wer(refs, hw), 1), "per_suite_wer_pct": per,
               "decode_ms_p50": round(statistics.median(times), 1)}
        report["beams"][beam] = row
        if not a.json:
            print(f"beam {beam}: WER {row['wer_pct']} % over {len(items)} lines, decode p50 "
                  f"{row['decode_ms_p50']} ms; per suite {per}")
        if a.show:
            for (s, *_, t), h, r, w in zip(items, hyps, refs, hw):
                if r != w:
                    print(f"   [{s}] {t!r} -> {h!r}")
    if a.json:
        print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
