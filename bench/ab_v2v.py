"""A/B benchmark: V2V of the bundled real-speech call for two source trees, interleaved.

Each round runs ``--chunk`` calls of one tree, then of the other (a fresh process each, niced,
``PYTHONPATH`` pointing at that tree), so both arms see the same machine load. Prints per arm
V2V and time to answer p50/p95, the segment medians, endpointing + transcription, and (for trees that have them)
the end-of-turn, speculation and silence blocks (``rejoinder.harness.eotsummary``).

    .venv/bin/python bench/ab_v2v.py --a /path/to/old/src --b src [--rounds 5] [--chunk 2]
                                     [--hogs N] [--timeout S]

(e.g. ``git archive <commit> src | tar -x -C /tmp/base`` gives ``--a /tmp/base/src``.)

``--hogs N`` runs N busy-loop processes (``while True: pass``, at the child's nice) beside every
child, as a shared machine has them (a CI runner's other jobs, a compile on a laptop). A child
that runs past ``--timeout`` seconds is killed; ``processes`` per arm then gives each child's wall
time (model loading and warm-up included) and how many ran out of time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

CHILD = r'''
import asyncio, json, sys
from rejoinder.cli import BUNDLED_CALL
from rejoinder.config import load_config
from rejoinder.runtime import Runtime, load_caller
async def main(n, out):
    rt = Runtime(load_config(None)); await rt.warmup()
    turns, phone, sc = await load_caller(BUNDLED_CALL)
    with open(out, "a") as fh:
        for _ in range(n):
            res = await rt.call(turns, caller_phone=phone, tail_ms=sc.tail_ms)
            for r in res.turns:
                tta = r.time_to_answer_ms() if hasattr(r, "time_to_answer_ms") else None
                fh.write(json.dumps({"kind": "turn", "v2v": r.v2v_ms(), "tta": tta,
                                     "segments": r.segments()}) + "\n")
            call = {"kind": "call"}
            for key, fn in (("endpointing", "endpointing_metrics"), ("speculation", "speculation_metrics"),
                            ("silence", "silence_metrics")):
                if hasattr(res, fn):
                    call[key] = getattr(res, fn)()
            fh.write(json.dumps(call) + "\n")
asyncio.run(main(int(sys.argv[1]), sys.argv[2]))
'''


def summary(path: str) -> dict:
    # the summary is this checkout's, whatever rejoinder the venv has installed
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
    from rejoinder.harness.eotsummary import eot_summary
    from rejoinder.harness.stats import percentiles
    if not os.path.exists(path):  # every child of the arm ran out of time
        return {"turns": 0}
    rows = [json.loads(x) for x in open(path)]
    turns = [r for r in rows if r["kind"] == "turn" and r["v2v"] is not None]
    segs: dict[str, list[float]] = {}
    for t in turns:
        for k, v in (t["segments"] or {}).items():
            segs.setdefault(k, []).append(v)
    pad = lambda xs: xs + [0.0] * (len(turns) - len(xs))  # noqa: E731
    calls = [r for r in rows if r["kind"] == "call"]
    answered = [t["tta"] for t in turns if t.get("tta") is not None]
    out = {"turns": len(turns), "v2v_ms": percentiles((t["v2v"] for t in turns), (50, 95)),
           # the answer's first audio (after any filler): what a filler does not shorten
           "time_to_answer_ms": percentiles(answered, (50, 95)) if answered else None,
           "segment_median_ms": {k: round(statistics.median(pad(v)), 1) for k, v in segs.items()},
           "endpointing_plus_transcription_median_ms": round(statistics.median(
               [t["segments"].get("endpointing", 0) + t["segments"].get("transcription", 0)
                for t in turns]), 1) if turns else None}
    if calls and "endpointing" in calls[0]:
        out.update(eot_summary([{"extra": c} for c in calls]))
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", required=True, help="source tree A (the folder holding rejoinder/)")
    ap.add_argument("--b", required=True, help="source tree B")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--chunk", type=int, default=2)
    ap.add_argument("--hogs", type=int, default=0, help="busy-loop processes beside each child")
    ap.add_argument("--timeout", type=float, default=None, help="seconds a child may run")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ab_v2v-")
    walls: dict[str, list[float]] = {"a": [], "b": []}
    late = {"a": 0, "b": 0}
    for _ in range(a.rounds):
        for arm, src in (("a", a.a), ("b", a.b)):
            env = {**os.environ, "PYTHONPATH": os.path.abspath(src), "PYTHONDONTWRITEBYTECODE": "1"}
            hogs = [subprocess.Popen(["nice", "-n", "10", sys.executable, "-c", "while True: pass"])
                    for _ in range(a.hogs)]
            t0 = time.perf_counter()
            try:
                subprocess.run(["nice", "-n", "10", sys.executable, "-c", CHILD, str(a.chunk),
                                os.path.join(tmp, f"{arm}.jsonl")], env=env, check=True, cwd=tmp,
                               timeout=a.timeout)
            except subprocess.TimeoutExpired:
                late[arm] += 1
            finally:
                walls[arm].append(round(time.perf_counter() - t0, 1))
                for h in hogs:
                    h.kill()
                    h.wait()
    print(json.dumps({arm: {**summary(os.path.join(tmp, f"{arm}.jsonl")),
                            "processes": {"wall_s": walls[arm], "timed_out": late[arm]}}
                      for arm in ("a", "b")}, indent=2))
