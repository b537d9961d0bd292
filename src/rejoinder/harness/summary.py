"""Per-level summaries of a stored run, and the latency-vs-concurrency curve.

Everything is computed from the store's rows (one source of truth for ``bench``, ``runs show``,
``report`` and ``compare``). Segment values are *contributions to V2V*: a segment that did not
occur in a turn (no tool call, say) contributed 0 ms, so for every turn the segments still add up
to its V2V; ``n`` says in how many answered turns the segment occurred.

``capacity`` is the highest concurrency level whose V2V p95 stays within ``1.5×`` the p95 of the
lowest level (normally 1 call), with no more failed calls than that level; levels above it are
where callers start to wait noticeably longer.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from ..dictation import dictated_digits
from ..timeline import SEGMENTS, sum_reported
from .eotsummary import eot_summary
from .stats import percentiles
from .store import RunStore
from .success import scenario_success, suite_success

CAPACITY_FACTOR = 1.5


def segment_values(turns: list[dict[str, Any]], name: str) -> list[float]:
    """Contribution of segment ``name`` to V2V in each answered turn (0 when absent)."""
    return [float(t["segments"].get(name, 0.0)) for t in turns if t["v2v_ms"] is not None]


def time_to_answer(turn: dict[str, Any]) -> float | None:
    """A stored turn's time to answer (ms): ``answer_start − user_speech_end``, or None."""
    b = turn.get("boundaries") or {}
    if "answer_start" in b and "user_speech_end" in b:
        return round(b["answer_start"] - b["user_speech_end"], 3)
    return None


def level_summary(concurrency: int, turns: list[dict[str, Any]], calls: list[dict[str, Any]],
                  stats: dict[str, Any] | None, k: int = 1) -> dict[str, Any]:
    """One level's figures; ``task_success`` per scenario carries pass@1 and pass^``k``
    (:mod:`rejoinder.harness.success`), ``pass`` the suite's, with the counts they rest on."""
    answered = [t for t in turns if t["v2v_ms"] is not None]
    statuses: dict[str, int] = defaultdict(int)
    for t in turns:
        statuses[t["status"]] += 1
    statuses["answered"] = len(answered)
    ears = [c["extra"].get("ear_check_max_ms") for c in calls if c.get("extra")]
    per_scn = scenario_success(calls, k)
    out = {
        "concurrency": concurrency,
        "calls": len(calls),
        "turns": dict(statuses),
        "v2v_ms": percentiles(t["v2v_ms"] for t in answered),
        "time_to_answer_ms": percentiles(x for t in answered if (x := time_to_answer(t)) is not None),
        "segments": {s: {**percentiles(segment_values(answered, s)),
                         "n": sum(1 for t in answered if s in t["segments"])} for s in SEGMENTS},
        "stalls": {"count": sum(t["stalls_n"] for t in turns),
                   "total_ms": round(sum(t["stalls_ms"] for t in turns), 1),
                   "turns_with_stalls": sum(1 for t in turns if t["stalls_n"])},
        "task_success": per_scn,
        "pass": suite_success(per_scn, k),
        "small_talk": small_talk_summary(calls),
        "task_success_rate": round(sum(c["success"] for c in calls) / len(calls), 3) if calls else None,
        "failure_causes": failure_causes(calls),
        "failed_calls": sum(1 for c in calls if c.get("error")),
        "ear_check_max_ms": max((e for e in ears if e is not None), default=None),
        **control_summary(calls),
        "turn_taking": turn_taking_summary(turns, calls),
        "llm_server": llm_server_summary(calls),
        **eot_summary(calls),
    }
    if stats:
        out["resources"] = {key: stats.get(key) for key in ("wall_s", "cpu_s", "cpu_pct", "cores",
                                                       "machine_busy_pct", "rss_start_mb", "rss_peak_mb",
                                                       "caller_cpu_s", "caller_cpu_share", "loop_lag_ms",
                                                       "llm_steps", "llm_shed_pct", "llm_yield_pct")}
    return out


def small_talk_summary(calls: list[dict[str, Any]]) -> dict[str, Any]:
    """Spurious tool calls on small talk: caller turns that expect no tool (``no_tools``) and
    how many were answered with a call anyway."""
    seen = [c["extra"]["small_talk"] for c in calls if (c.get("extra") or {}).get("small_talk")]
    turns, bad = sum(x["turns"] for x in seen), sum(x["with_tool"] for x in seen)
    return {"turns": turns, "with_tool": bad, "rate": round(bad / turns, 3) if turns else None}


def failure_causes(calls: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per scenario, how many failed checks had each cause (wrong tool, wrong argument,
    recognition error, timeout, …; :func:`rejoinder.harness.expect.evaluate`)."""
    out: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for c in calls:
        for cause in (c.get("extra") or {}).get("causes", []):
            out[c["scenario"]][cause] += 1
    return {k: dict(v) for k, v in sorted(out.items())}


def control_summary(calls: list[dict[str, Any]]) -> dict[str, Any]:
    """Barge-in and recovery figures over calls: over-talk (caller starts speaking → agent audio
    stops at the caller) and recovery gap (audio stops → resumed audio at the caller) percentiles,
    and the counters that must stay 0 (overlapping agent audio, unheard words in the context,
    words heard twice because a recovery said them again: ``repeated_words``, None in a run
    stored before it was counted)."""
    ctl = [c["extra"]["control"] for c in calls if c.get("extra") and c["extra"].get("control")]

    def total(key: str) -> int | None:  # None: no call could observe it (a remote agent's internals)
        seen = [c[key] for c in ctl if c.get(key) is not None]
        return sum(seen) if seen or not ctl else None

    return {
        "overtalk_ms": percentiles(x for c in ctl for x in c["overtalk_ms"]),
        "overtalk_n": sum(len(c["overtalk_ms"]) for c in ctl),
        "recovery_gap_ms": percentiles(x for c in ctl for x in c["recovery_gap_ms"]),
        "overlapping_audio": total("overlapping_audio"),
        "unheard_context_words": total("unheard_context_words"),
        "repeated_words": total("repeated_words"),
        "faults_injected": total("faults_injected"),
        "recoveries": total("recoveries"),
        "silences_over_1s_in_reply": total("silences_over_1s"),
    }


def llm_server_summary(calls: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What the LLM server reported about its own work over the calls
    (:class:`rejoinder.ports.ServerTiming` fields summed; ``requests``: how many requests
    reported), with its prompt and generation speeds in tokens/s; None when no server reported
    (an in-process LLM, or a server that reports nothing)."""
    tot = sum_reported((c.get("extra") or {}).get("llm_server") for c in calls)
    if not tot:
        return None
    for kind in ("prompt", "generated"):
        if tot.get(f"{kind}_ms") and f"{kind}_tokens" in tot:
            tot[f"{kind}_tokens_per_s"] = round(1000.0 * tot[f"{kind}_tokens"] / tot[f"{kind}_ms"], 1)
    return tot


def turn_taking_summary(turns: list[dict[str, Any]], calls: list[dict[str, Any]]) -> dict[str, Any]:
    """Caller-realism figures over calls: replies that talked on after a caller sound (by
    verdict), turns rejected as noise, idle prompts, agent hang-ups, and the endpointing delay
    after dictation — ``eot_decided − user_speech_end`` in answered turns whose transcript ends
    in a number of ≥ 3 digits (a number read out, held or not)."""
    tt = [c["extra"]["turn_taking"] for c in calls if c.get("extra") and c["extra"].get("turn_taking")]
    resumed: dict[str, int] = defaultdict(int)
    for c in tt:
        for why, n in c["resumed"].items():
            resumed[why] += n
    dictated = [float(t["segments"].get("endpointing", 0.0)) for t in turns
                if t["v2v_ms"] is not None and dictated_digits(t.get("transcript") or "") >= 3]
    return {"resumed": dict(resumed),
            "rejected_noise": sum(c["rejected_noise"] for c in tt),
            "idle_prompts": sum(c["idle_prompts"] for c in tt),
            "hangups": sum(1 for c in tt if c["hangup"]),
            "transfers": sum(1 for c in tt if c.get("transfer")),
            "dictation_endpointing_ms": {**percentiles(dictated), "n": len(dictated)}}


def capacity(levels: list[dict[str, Any]], factor: float = CAPACITY_FACTOR) -> dict[str, Any]:
    """The highest level whose p95 ≤ ``factor`` × the lowest level's p95 (and no extra failures)."""
    ok = [lv for lv in levels if lv["v2v_ms"]["p95"] is not None]
    if not ok:
        return {"concurrency": None, "factor": factor, "base_p95_ms": None}
    base = min(ok, key=lambda lv: lv["concurrency"])
    limit = factor * base["v2v_ms"]["p95"]
    best = None
    for lv in sorted(ok, key=lambda lv: lv["concurrency"]):
        if lv["v2v_ms"]["p95"] <= limit and lv["failed_calls"] <= base["failed_calls"]:
            best = lv["concurrency"]
        else:
            break
    return {"concurrency": best, "factor": factor, "base_p95_ms": base["v2v_ms"]["p95"],
            "limit_ms": round(limit, 1)}


def run_summary(store: RunStore, run_ref: str) -> dict[str, Any]:
    """The JSON summary of a run: per level, the curve across levels, and the capacity."""
    run = store.run(run_ref)
    run_id = run["id"]
    turns, calls = store.turns(run_id), store.calls(run_id)
    levels_present = sorted({c["concurrency"] for c in calls} | set(run["levels"]))
    k = int((run.get("conditions") or {}).get("repeat") or 1)  # pass^k for --repeat k
    levels = [level_summary(n, [t for t in turns if t["concurrency"] == n],
                            [c for c in calls if c["concurrency"] == n], run["levels"].get(n), k)
              for n in levels_present]
    shares = [lv["resources"]["caller_cpu_share"] for lv in levels
              if lv.get("resources") and lv["resources"].get("caller_cpu_share") is not None]
    return {
        "run_id": run_id,
        "suite": run.get("suite"),
        "status": run["status"],
        "levels": levels,
        "curve": [{"concurrency": lv["concurrency"], **lv["v2v_ms"]} for lv in levels],
        "capacity": capacity(levels),
        "caller_cpu_share_max": max(shares) if shares else None,
    }
