"""Benchmark: does the embedded LLM's TTFT grow with the length of the call?

A scripted 30-turn support call (the reference agent's instructions and four tools; every few
turns the history gets a tool call and its result, as the reply loop appends them) is replayed
at the LLM port. At each turn the whole conversation so far is sent with ``cache_key`` = the call
id, and the time to the first delta (TTFT) is taken; the model's reply (temperature 0) joins the
history. The system prompt is warmed once first, as the runtime does at start-up. Printed per
turn: TTFT (median over ``--repeats`` calls), prompt tokens and tokens prefilled; then the ratio
TTFT(turn 30) / TTFT(turn 1) (goal ≤ 1.1) and the process RSS.

``--history-turns N`` sends only the last N caller turns (the agent's ``llm.history_turns``): the
context then stops growing, and the adapter keeps the cache by shifting the kept turns into place.

``--interleave N`` runs N calls at once, turn by turn in round robin (A1 B1 C1 A2 …), as
concurrent calls share one LlamaLLM: each call's KV state is swapped out and back in, so its TTFT
must stay flat too. ``--no-cache-key`` sends no key (the control: calls evict each other).

    PYTHONPATH=src .venv/bin/python bench/ttft_growth.py [--turns 30] [--repeats 3]
        [--interleave 1] [--no-cache-key] [--history-turns N] [--flash-attn] [--json]

Wall-clock figures are noisy on a shared machine (run it on a quiet one); prefilled-token counts
are exact.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time

import psutil

from _support_agent import SYSTEM, tools
from rejoinder.ports import ChatMessage, LLMRequest, ToolCall

#: (caller utterance, scripted tool call (name, args) or None, the tool's result)
SCRIPT: list[tuple[str, tuple[str, dict] | None, dict | None]] = [
    ("Hi, I'm calling about an order.", None, None),
    ("The number is 4217.", ("lookup_order", {"order_id": "4217"}),
     {"order_id": "4217", "status": "shipped", "eta": "Friday"}),
    ("Great. Will it come in the morning?", None, None),
    ("Okay. What appointments do I have?", ("list_appointments", {}),
     {"appointments": [{"appointment_id": 12, "service": "haircut", "day": "Tuesday",
                        "time": "10:00"}]}),
    ("Can you move the haircut to Thursday at 3 pm?",
     ("reschedule_appointment", {"appointment_id": 12, "day": "Thursday", "time": "15:00"}),
     {"ok": True, "appointment_id": 12, "day": "Thursday", "time": "15:00"}),
    ("Thanks. Are you open on Saturday?", None, None),
    ("Until what time?", None, None),
    ("Do you also sell shampoo?", None, None),
    ("I have another order, 5120.", ("lookup_order", {"order_id": "5120"}),
     {"order_id": "5120", "status": "processing", "eta": "next Monday"}),
    ("Why is it still processing?", None, None),
    ("Okay, I can wait.", None, None),
    ("Can I pay at the salon?", None, None),
    ("Is there parking nearby?", None, None),
    ("What was my appointment time again?", ("list_appointments", {}),
     {"appointments": [{"appointment_id": 12, "service": "haircut", "day": "Thursday",
                        "time": "15:00"}]}),
    ("Perfect, Thursday works.", None, None),
    ("How long does a haircut take?", None, None),
    ("And how much does it cost?", None, None),
    ("Do you take cards?", None, None),
    ("Can you check order 3085 too?", ("lookup_order", {"order_id": "3085"}),
     {"error": "No order 3085 was found for this caller."}),
    ("Sorry, I meant 3058.", ("lookup_order", {"order_id": "3058"}),
     {"order_id": "3058", "status": "delivered", "delivered": "yesterday"}),
    ("Oh right, I got that one.", None, None),
    ("Can my daughter book a haircut too?", None, None),
    ("She is free on Friday afternoon.", None, None),
    ("Never mind, she will call herself.", None, None),
    ("Actually, cancel my Thursday haircut.", ("cancel_appointment", {"appointment_id": 12}),
     {"ok": True, "cancelled": 12}),
    ("Sorry, I changed my mind about that.", None, None),
    ("Can I book it again for next week?", None, None),
    ("I will call back tomorrow then.", None, None),
    ("Is this the right number to call?", None, None),
    ("Thanks, I'm calling to say goodbye.", None, None),
]


def transcript(turns: int) -> list[tuple[str, tuple[str, dict] | None, dict | None]]:
    """The first ``turns`` turns (the script repeats past 30)."""
    return [SCRIPT[i % len(SCRIPT)] for i in range(turns)]


class Call:
    """One scripted call: its history and per-turn measurements."""

    def __init__(self, key: str, turns: int) -> None:
        self.key = key
        self.script = transcript(turns)
        self.messages: list[ChatMessage] = [ChatMessage("system", SYSTEM)]
        self.rows: list[dict] = []

    def window(self, history_turns: int) -> list[ChatMessage]:
        """System + the history from the ``history_turns``-th last caller message on (all when
        0), as ``rejoinder.conversation.Conversation.request`` windows it."""
        system, history = self.messages[0], self.messages[1:]
        users = [i for i, m in enumerate(history) if m.role == "user"]
        if history_turns and len(users) > history_turns:
            history = history[users[-history_turns]:]
        return [system, *history]

    async def turn(self, llm, i: int, schemas, use_key: bool, history_turns: int = 0) -> None:
        say, call, result = self.script[i]
        self.messages.append(ChatMessage("user", say))
        if call:
            tc = ToolCall(f"{self.key}-call{i}", call[0], call[1])
            self.messages += [ChatMessage("assistant", "", tool_calls=(tc,)),
                              ChatMessage("tool", json.dumps(result), tool_call_id=tc.id)]
        req = LLMRequest(tuple(self.window(history_turns)), max_tokens=32, temperature=0.0, tools=schemas,
                         tool_choice="none", cache_key=self.key if use_key else None)
        t0 = time.perf_counter()
        ttft = None
        text = ""
        async for d in llm.stream(req):
            if ttft is None:
                ttft = (time.perf_counter() - t0) * 1000
            if isinstance(d, str):
                text += d
        stats = llm.last_stats
        self.rows.append({"turn": i + 1, "ttft_ms": ttft, "prompt_tokens": stats.prompt,
                          "prefilled_tokens": stats.prefilled, "shifted": stats.shifted,
                          "tool_turn": bool(call)})
        self.messages.append(ChatMessage("assistant", text))


async def run(turns: int, repeats: int, interleave: int, use_key: bool,
              flash_attn: bool, history_turns: int = 0) -> dict:
    from rejoinder.adapters.llama_llm import LlamaLLM

    llm = LlamaLLM(flash_attn=flash_attn)
    schemas = tools(True)
    await asyncio.to_thread(llm.warmup, SYSTEM, schemas)
    calls: list[Call] = []
    for r in range(repeats):
        batch = [Call(f"call-{r}-{c}", turns) for c in range(interleave)]
        for i in range(turns):
            for call in batch:
                await call.turn(llm, i, schemas, use_key, history_turns)
        for call in batch:
            llm.forget(call.key)
            first, last = call.rows[0]["ttft_ms"], call.rows[-1]["ttft_ms"]
            print(f"  {call.key}: turn 1 {first:.0f} ms, turn {turns} {last:.0f} ms, "
                  f"prompt {call.rows[-1]['prompt_tokens']} tokens", file=sys.stderr)
        calls += batch
    per_turn = []
    for i in range(turns):
        rows = [c.rows[i] for c in calls]
        per_turn.append({"turn": i + 1, "tool_turn": rows[0]["tool_turn"],
                         "ttft_ms_p50": round(statistics.median(r["ttft_ms"] for r in rows), 1),
                         "prompt_tokens": rows[0]["prompt_tokens"],
                         "prefilled_p50": statistics.median(r["prefilled_tokens"] for r in rows),
                         "shifted_p50": statistics.median(r["shifted"] for r in rows)})
    ratios = [c.rows[-1]["ttft_ms"] / c.rows[0]["ttft_ms"] for c in calls]
    return {"turns": turns, "repeats": repeats, "interleave": interleave, "cache_key": use_key,
            "flash_attn": flash_attn, "history_turns": history_turns, "per_turn": per_turn,
            "ratio_last_first_p50": round(statistics.median(ratios), 3),
            "ratio_of_medians": round(per_turn[-1]["ttft_ms_p50"] / per_turn[0]["ttft_ms_p50"], 3),
            "kv_saves": llm.cache.stats.saves, "kv_restores": llm.cache.stats.restores,
            "rss_mb": round(psutil.Process().memory_info().rss / 2**20, 1)}


def print_report(out: dict) -> None:
    print(f"TTFT per turn ({out['repeats']} repeats x {out['interleave']} interleaved call(s), "
          f"cache_key {'on' if out['cache_key'] else 'off'}, flash_attn "
          f"{'on' if out['flash_attn'] else 'off'}, history "
          f"{out['history_turns'] or 'all'} turns):")
    print(f"{'turn':>4} {'tool':>4} {'TTFT p50 ms':>12} {'prompt tok':>11} {'prefilled':>10} "
          f"{'shifted':>8}")
    for r in out["per_turn"]:
        print(f"{r['turn']:>4} {'yes' if r['tool_turn'] else '':>4} {r['ttft_ms_p50']:>12.1f} "
              f"{r['prompt_tokens']:>11} {r['prefilled_p50']:>10.0f} {r['shifted_p50']:>8.0f}")
    print(f"TTFT(turn {out['turns']}) / TTFT(turn 1): median of per-call ratios "
          f"{out['ratio_last_first_p50']:.2f}, ratio of medians {out['ratio_of_medians']:.2f} "
          f"(goal <= 1.1); KV state saves {out['kv_saves']}, restores {out['kv_restores']}; "
          f"RSS {out['rss_mb']:.0f} MB")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--interleave", type=int, default=1, help="calls at once (round robin)")
    ap.add_argument("--no-cache-key", action="store_true", help="control: send no cache_key")
    ap.add_argument("--flash-attn", action="store_true")
    ap.add_argument("--history-turns", type=int, default=0,
                    help="send only the last N caller turns of history (0: all), as "
                         "agent llm.history_turns does")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.turns < 2 or a.repeats < 1 or a.interleave < 1:
        sys.exit("--turns must be >= 2, --repeats and --interleave >= 1")
    res = asyncio.run(run(a.turns, a.repeats, a.interleave, not a.no_cache_key, a.flash_attn,
                          a.history_turns))
    print(json.dumps(res, indent=2) if a.json else "", end="\n" if a.json else "")
    if not a.json:
        print_report(res)
