"""Compare two stored runs boundary by boundary.

For V2V and every critical-path segment, at each concurrency level both runs have: the medians,
their difference (B − A) and a percentile-bootstrap 95 % interval of that difference.

A difference is called **real** when it is both

* statistically clear — the bootstrap interval at the family-wise level (Bonferroni over the
  segments compared at that level, so nine segments do not give nine chances of a fluke)
  excludes 0; and
* large enough to matter — ``|Δ| ≥ min_ms`` (default 10 ms, about half a 20 ms audio frame
  either way, the resolution of the measurement).

A real difference in ``playout`` with a TTS change is expected: leading silence in the TTS
audio is heard as waiting (the measurement contract), so a voice that starts with 40 ms of silence shows there.

The conditions that differ between the two runs (configuration, models, code, machine) are
listed first, so a difference can be traced to its cause.
"""

from __future__ import annotations

from typing import Any

from ..timeline import SEGMENTS
from .conditions import differences
from .stats import bootstrap_median_diff
from .store import RunStore
from .summary import segment_values, time_to_answer

BOUNDARIES = ("v2v", "time_to_answer") + SEGMENTS
MEANS = {  # what each critical-path segment waits on (see rejoinder.timeline)
    "v2v": "the whole wait: caller stops → agent audible",
    "time_to_answer": "caller stops → the LLM's answer audible (after any filler)",
    "endpointing": "deciding the caller's turn is over (VAD, end-of-turn model)",
    "transcription": "STT after the decision",
    "tool_choice": "the LLM deciding and writing a tool call",
    "tools": "tool calls on the path",
    "llm_ttft": "LLM time to first token",
    "first_text": "text until a speakable chunk",
    "tts_ttfb": "TTS time to first audio",
    "audio_out": "hand-off to the transport",
    "arrival": "until the reply's first audio reached the caller's socket (remote: the network; "
               "black-box target: everything before its audio arrived)",
    "playout": "transport and buffering until the reply's first sample plays",
    "lead_silence": "leading silence in the TTS audio (first sample → first voiced sample)",
}


def _values(turns: list[dict[str, Any]], name: str) -> list[float]:
    if name == "v2v":
        return [t["v2v_ms"] for t in turns if t["v2v_ms"] is not None]
    if name == "time_to_answer":
        return [x for t in turns if t["v2v_ms"] is not None and (x := time_to_answer(t)) is not None]
    return segment_values(turns, name)


def compare_turns(a: list[dict[str, Any]], b: list[dict[str, Any]], *, min_ms: float = 10.0,
                  level: float = 0.95, reps: int = 4000, seed: int = 0) -> list[dict[str, Any]]:
    """One row per boundary: medians, Δ, 95 % CI, family-wise CI and the verdict."""
    rows = []
    family = 1.0 - (1.0 - level) / len(SEGMENTS)
    for i, name in enumerate(BOUNDARIES):
        va, vb = _values(a, name), _values(b, name)
        d = bootstrap_median_diff(va, vb, level=level, reps=reps, seed=seed + i)
        fw = bootstrap_median_diff(va, vb, level=family, reps=reps, seed=seed + i)
        if d.diff is None or d.low is None:
            verdict = "n/a"
        elif fw.excludes_zero and abs(d.diff) >= min_ms:
            verdict = "real"
        elif d.excludes_zero:
            verdict = "small" if abs(d.diff) < min_ms else "uncertain"
        else:
            verdict = "no difference"
        rows.append({"boundary": name, "means": MEANS[name], "median_a": d.median_a, "median_b": d.median_b, "diff": d.diff,
                     "ci95": [d.low, d.high], "ci_family": [fw.low, fw.high], "n_a": d.n_a, "n_b": d.n_b,
                     "verdict": verdict})
    return rows


def _success(store: RunStore, run_id: str, level: int) -> dict[str, Any]:
    """Task success at one level: calls whose every expectation held, of all calls."""
    calls = [c for c in store.calls(run_id) if c["concurrency"] == level]
    ok = sum(1 for c in calls if c["success"])
    return {"ok": ok, "calls": len(calls), "rate": round(ok / len(calls), 4) if calls else None}


def compare_runs(store: RunStore, ref_a: str, ref_b: str, *, concurrency: int | None = None,
                 min_ms: float = 10.0, seed: int = 0) -> dict[str, Any]:
    """Compare runs A and B at every concurrency level both have (or only ``concurrency``)."""
    run_a, run_b = store.run(ref_a), store.run(ref_b)
    ta, tb = store.turns(run_a["id"]), store.turns(run_b["id"])
    levels = sorted({t["concurrency"] for t in ta} & {t["concurrency"] for t in tb})
    if concurrency is not None:
        levels = [n for n in levels if n == concurrency]
    out_levels = []
    for n in levels:
        rows = compare_turns([t for t in ta if t["concurrency"] == n], [t for t in tb if t["concurrency"] == n],
                             min_ms=min_ms, seed=seed)
        out_levels.append({"concurrency": n, "rows": rows,
                           "real": [r["boundary"] for r in rows if r["verdict"] == "real"],
                           "task_success": {"a": _success(store, run_a["id"], n), "b": _success(store, run_b["id"], n)}})
    diffs = differences(run_a["conditions"], run_b["conditions"])
    return {"a": run_a["id"], "b": run_b["id"], "min_ms": min_ms, "levels": out_levels,
            "conditions_differ": [{"key": k, "a": va, "b": vb} for k, va, vb in diffs]}
