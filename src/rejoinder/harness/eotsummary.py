"""Per-level figures of end of turn, speculation and silence, from the calls' ``extra`` blocks
(``endpointing``, ``speculation``, ``silence``: :mod:`rejoinder.callmetrics`,
:mod:`rejoinder.speculation`), for ``bench`` summaries and ``--json``.

* ``endpointing``: delay p50/p95 (``eot_decided − user_speech_end``, the caller's own audio),
  false cut-offs (utterances the runtime decided over while the caller went on within 1 s) and
  their rate over the caller's utterances, those inside numbers read out, and the decisions the
  transcript took back before the caller went on (``retracted``, not cut-offs).
* ``speculation``: speculative drafts, hit rate (kept or extended / speculative), ms saved by
  the kept ones (p50/p95), LLM calls per caller turn (every request: speculative drafts and tool
  steps too) and the wasted ones, replies started per caller turn (speculative drafts and
  committed replies, without a tool round's next step or a retry: what speculation itself costs
  in LLM calls), tokens and tool runs wasted, unconfirmed words spoken.
* ``silence``: the longest silence the caller heard per turn, p50/p95/max over all turns and
  over tool turns.
"""

from __future__ import annotations

from typing import Any

from .stats import percentiles


def _blocks(calls: list[dict[str, Any]], key: str) -> list[Any]:
    return [c["extra"][key] for c in calls if c.get("extra") and c["extra"].get(key) is not None]


def endpointing_summary(calls: list[dict[str, Any]]) -> dict[str, Any]:
    eps = _blocks(calls, "endpointing")
    utt = sum(e["utterances"] for e in eps)
    cut = sum(e["cut_off"] for e in eps)
    return {"delay_ms": {**percentiles(x for e in eps for x in e["delays_ms"]),
                         "n": sum(len(e["delays_ms"]) for e in eps)},
            "utterances": utt, "false_cutoffs": cut,
            "false_cutoff_rate": round(cut / utt, 4) if utt else None,
            "false_cutoffs_in_numbers": sum(e["cut_off_in_numbers"] for e in eps),
            "retracted": sum(e.get("retracted", 0) for e in eps)}


def speculation_summary(calls: list[dict[str, Any]]) -> dict[str, Any]:
    sp = _blocks(calls, "speculation")
    n = sum(s["speculative"] for s in sp)
    hits = sum(s["kept"] + s["extended"] for s in sp)
    turns = sum(s["turns"] for s in sp)
    return {"speculative": n, "kept": sum(s["kept"] for s in sp),
            "extended": sum(s["extended"] for s in sp), "discarded": sum(s["discarded"] for s in sp),
            "hit_rate": round(hits / n, 3) if n else None,
            "saved_ms": percentiles(x for s in sp for x in s["saved_ms"]),
            "turns": turns,
            "llm_calls_per_turn": round(sum(s["llm_requests"] for s in sp) / turns, 3) if turns else None,
            # replies started per turn: speculative drafts and committed replies (a tool round's
            # next step and a retry continue the same reply): speculation's own LLM cost
            "llm_replies_per_turn": (round(sum(s.get("llm_replies", 0) for s in sp) / turns, 3)
                                     if turns else None),
            "wasted_llm_calls_per_turn": (round(sum(s["wasted_llm_requests"] for s in sp) / turns, 3)
                                          if turns else None),
            "wasted_tokens": sum(s["wasted_tokens"] for s in sp),
            "wasted_tool_runs": sum(s["wasted_tool_runs"] for s in sp),
            "unconfirmed_words": sum(s["unconfirmed_words"] for s in sp)}


def silence_summary(calls: list[dict[str, Any]]) -> dict[str, Any]:
    rows = [t for block in _blocks(calls, "silence") for t in block]
    tools = [t["longest_silence_ms"] for t in rows if t["tools"]]
    every = [t["longest_silence_ms"] for t in rows]
    return {"longest_silence_ms": {**percentiles(every), "max": max(every, default=None),
                                   "n": len(every)},
            "tool_turns_longest_silence_ms": {**percentiles(tools), "max": max(tools, default=None),
                                              "n": len(tools)}}


def eot_summary(calls: list[dict[str, Any]]) -> dict[str, Any]:
    """The three blocks above for one level's calls."""
    return {"endpointing": endpointing_summary(calls), "speculation": speculation_summary(calls),
            "silence": silence_summary(calls)}


def eot_table(summary: dict[str, Any]):
    """A rich Table of the three blocks per level (None when no level has them)."""
    from rich import box
    from rich.table import Table

    def f(x: Any) -> str:
        return "–" if x is None else (f"{x:.0f}" if isinstance(x, float) and abs(x) >= 10 else str(x))

    t = Table(title="end of turn, speculation, silence (caller's own audio; ms)", box=box.SIMPLE_HEAD)
    for h in ("N", "endpt p50", "p95", "false cut-offs", "rate", "in numbers", "spec hit",
              "saved p50", "LLM calls/turn", "replies/turn", "unconfirmed words", "silence p95",
              "tool turns p95"):
        t.add_column(h, justify="right")
    rows = 0
    for lv in summary["levels"]:
        ep, sp, si = lv.get("endpointing"), lv.get("speculation"), lv.get("silence")
        if not ep or not sp or not si:
            continue
        rows += 1
        t.add_row(str(lv["concurrency"]), f(ep["delay_ms"]["p50"]), f(ep["delay_ms"]["p95"]),
                  f"{ep['false_cutoffs']}/{ep['utterances']}", f(ep["false_cutoff_rate"]),
                  str(ep["false_cutoffs_in_numbers"]), f(sp["hit_rate"]), f(sp["saved_ms"]["p50"]),
                  f(sp["llm_calls_per_turn"]), f(sp.get("llm_replies_per_turn")),
                  str(sp["unconfirmed_words"]),
                  f(si["longest_silence_ms"]["p95"]), f(si["tool_turns_longest_silence_ms"]["p95"]))
    return t if rows else None
