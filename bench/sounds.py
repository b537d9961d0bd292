"""Benchmark: what Whisper base makes of real caller sounds, and the verdicts drawn from it.

Prints, per sound, the transcript, ``no_speech_prob``, ``avg_logprob``, the sound's level and the
verdicts of :mod:`rejoinder.sounds` — as a short sound over the agent's reply
(``overlap_verdict``: resume or barge in) and as a whole caller turn (``noise_verdict``: rejected
or answered). The sounds are real recordings: Asterisk prompts (voice by Allison Smith,
CC-BY-SA-3.0) at their own level and 40 dB below full scale, the reference suite's recorded
"mm" hum and 0.3 s speech fragment, and six-voice babble (three LibriVox sentences, public
domain, and three Asterisk prompts) at 35, 40 and 45 dB below full scale, cut into 0.6 / 1.2 /
2.4 s stretches. These are the figures the thresholds in ``SoundPolicy`` were set from.

    .venv/bin/python bench/sounds.py [--json]

The last lines count, for babble, how many stretches would have been answered (should be 0),
and for real answers how many would have been rejected (should be 0).
"""

from __future__ import annotations

import argparse
import asyncio
import json

import numpy as np

from rejoinder.adapters.whisper_stt import WhisperSTT
from rejoinder.app.support import agent
from rejoinder.audio_io import load_audio, resample
from rejoinder.harness.caller import render_turns
from rejoinder.harness.suite import SUITES_DIR
from rejoinder.scenario import ASTERISK_DIR, load_scenario
from rejoinder.sounds import Heard, SoundPolicy, level_dbfs, noise_verdict, overlap_verdict
from rejoinder.turns import TurnPolicy

REFERENCE = SUITES_DIR / "reference"
ANSWERS = ("auth-thankyou", "hello", "vm-no", "digits/4", "digits/oh", "letters/u", "vm-goodbye")


def prompt(name: str) -> np.ndarray:
    x, sr = load_audio(ASTERISK_DIR / f"{name}.wav")
    return resample(x, sr, 16000)


def at_level(x: np.ndarray, dbfs: float) -> np.ndarray:
    return (x * (10 ** (dbfs / 20) / np.sqrt(np.mean(x.astype(np.float64) ** 2)))).astype(np.float32)


def scenario_turn(name: str, turn: int) -> np.ndarray:
    pcm = asyncio.run(render_turns(load_scenario(REFERENCE / name)))[turn].pcm
    return pcm.astype(np.float32) / 32768.0


def babble(seconds: float = 8.0) -> np.ndarray:
    """Six equal-level voices overlaid, as in background_babble.yaml (RMS normalised to 1)."""
    audio = REFERENCE / "audio"
    voices = [load_audio(audio / f"librivox-sense-and-sensibility-0{k}.flac")[0] for k in (870, 890, 920)]
    voices += [prompt(p) for p in ("vm-instructions", "queue-periodic-announce", "conf-usermenu")]
    n = int(seconds * 16000)
    mix = np.zeros(n, np.float32)
    for v, offset_s in zip(voices, (0.0, 1.5, 3.0, 0.7, 2.2, 4.0)):
        v = v / np.sqrt(np.mean(v.astype(np.float64) ** 2))
        mix += np.resize(v[int(offset_s * 16000):], n).astype(np.float32)
    return mix / np.float32(np.sqrt(np.mean(mix.astype(np.float64) ** 2)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    stt = WhisperSTT(initial_prompt=agent.stt_prompt())  # as the reference agent runs it
    policy, backchannels = SoundPolicy(), TurnPolicy().backchannels
    rows: list[dict] = []

    def run(kind: str, name: str, x: np.ndarray, voiced_ms: float) -> None:
        padded = np.concatenate([np.zeros(4800, np.float32), x, np.zeros(1920, np.float32)])
        tr = stt.decode_sync(padded)
        h = Heard(tr.text, voiced_ms, tr.no_speech_prob, tr.avg_logprob, level_dbfs(x))
        row = {"kind": kind, "sound": name, **h.as_dict(),
               "over_reply": overlap_verdict(h, backchannels, policy),
               "as_turn": noise_verdict(h, policy) or "answered"}
        rows.append(row)
        if not args.json:
            print(f"{kind:8} {name:28} {row['level_dbfs']:6.1f} dBFS  {tr.text[:44]!r:46} "
                  f"nsp {_f(tr.no_speech_prob)}  lp {_f(tr.avg_logprob)}  over reply: "
                  f"{row['over_reply']:10}  as a turn: {row['as_turn']}", flush=True)

    for name in ANSWERS:
        x = prompt(name)
        run("answer", name, x, 1000.0 * len(x) / 16000)
        run("answer", f"{name} @-40", at_level(x, -40.0), 1000.0 * len(x) / 16000)
    run("mm", "backchannel_mm_real", scenario_turn("backchannel_mm_real.yaml", 1), 470)
    run("fragment", "noise_during_reply_real", scenario_turn("noise_during_reply_real.yaml", 1), 300)
    mix = babble()
    for level in (-35.0, -40.0, -45.0):
        b = at_level(mix, level)
        for seconds in (0.6, 1.2, 2.4):
            n = int(seconds * 16000)
            for start in range(0, len(b) - n + 1, n):
                run("babble", f"{level:.0f} dBFS {seconds} s @{start / 16000:.1f} s", b[start:start + n],
                    1000.0 * seconds)
    babble_answered = sum(1 for r in rows if r["kind"] == "babble" and r["as_turn"] == "answered")
    answers_rejected = sum(1 for r in rows if r["kind"] == "answer" and r["as_turn"] != "answered")
    summary = {"babble_stretches": sum(1 for r in rows if r["kind"] == "babble"),
               "babble_answered": babble_answered, "answers": sum(1 for r in rows if r["kind"] == "answer"),
               "answers_rejected": answers_rejected}
    if args.json:
        print(json.dumps({"rows": rows, "summary": summary}, indent=2))
    else:
        print(f"babble stretches answered: {babble_answered} of {summary['babble_stretches']}; "
              f"real answers rejected: {answers_rejected} of {summary['answers']}")


def _f(x: float | None) -> str:
    return "  —  " if x is None else f"{x:5.2f}"


if __name__ == "__main__":
    main()
