"""Benchmark: is a call's memory flat in call length? RSS after 30 minutes vs after 2 minutes.

One simulated call runs for ``--minutes`` of call time on a virtual clock (fast-forwarded: the
models are zero-cost, ``_zerocost.py``), through the real audio path: the simulated caller's 20 ms
frames, the session's caller-audio buffer, VAD tracking, turn-taking, the agent loop, TTS audio
and playout, the recorder writing ``call.wav``. The caller talks for ~0.9 s, waits for the
reply, and talks again, for the whole call. The process RSS is read when the call clock passes
2 minutes and at the end (goal: within 5 MB, issue 17). ``--arms main,branch`` runs today's main
(git worktree of ``--main-commit``, as ``capacity.py`` makes it) beside this checkout, each in a
fresh process.

    PYTHONPATH=src .venv/bin/python bench/memory.py [--minutes 30] [--arms main,branch] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _child(minutes: float) -> dict:
    import psutil

    import _zerocost as zc
    from rejoinder.harness.callrun import run_call
    from rejoinder.clock import VirtualClock

    proc = psutil.Process()
    marks: dict[str, float] = {}
    checkpoints = {"2min": 120_000.0, **{f"{m}min": 60_000.0 * m for m in range(5, int(minutes) + 1, 5)}}

    class Sampled(VirtualClock):
        async def pace(self, t_ms: float) -> None:
            await super().pace(t_ms)
            for name, at in checkpoints.items():
                if name not in marks and t_ms >= at:
                    gc.collect()
                    marks[name] = proc.memory_info().rss / 2**20

    turns = zc.caller_turns(int(minutes * 60 / 2.2) + 10)
    with tempfile.TemporaryDirectory() as tmp:
        res = asyncio.run(run_call(turns, zc.zero_cost_stack(zc.vad_factory("zero")()), zc.agent(),
                                   clock=Sampled(), out_dir=Path(tmp), greeting=False,
                                   max_ms=60_000.0 * minutes, tail_ms=500.0))
        wav_mb = (Path(tmp) / "call.wav").stat().st_size / 2**20
    last = list(marks)[-1] if marks else None
    return {"minutes": round(res.duration_ms / 60_000.0, 2), "turns": len(res.turns),
            "error": res.error, "rss_mb": {k: round(v, 1) for k, v in marks.items()},
            "last_mark": last,
            "growth_2_to_end_mb": round(marks[last] - marks["2min"], 1) if last and "2min" in marks else None,
            "call_wav_mb": round(wav_mb, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--arms", default="main,branch")
    ap.add_argument("--main-commit", default="d8a83b0")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.minutes < 3:
        sys.exit("--minutes must be >= 3 (RSS is compared with its value at 2 minutes)")
    if a.child:
        print(json.dumps(_child(a.minutes)))
        return
    from capacity import main_worktree
    out = {}
    for arm in a.arms.split(","):
        src = ROOT / "src" if arm == "branch" else main_worktree(a.main_commit) / "src"
        env = dict(os.environ, PYTHONPATH=f"{src}{os.pathsep}{HERE}")
        p = subprocess.run([sys.executable, str(HERE / "memory.py"), "--child", "--minutes", str(a.minutes)],
                           env=env, capture_output=True, text=True)
        out[arm] = (json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0
                    else {"failed": p.stderr.strip().splitlines()[-1:]})
        r = out[arm]
        print(f"{arm:>7}: {r.get('minutes')} min, {r.get('turns')} turns, RSS {r.get('rss_mb')} MB, "
              f"growth 2 min -> {r.get('last_mark')} {r.get('growth_2_to_end_mb')} MB (goal <= 5)"
              f"{', ended: ' + r['error'] if r.get('error') else ''}, call.wav "
              f"{r.get('call_wav_mb')} MB on disk{'  ' + str(r['failed']) if 'failed' in r else ''}",
              file=sys.stderr)
    if a.json:
        print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
