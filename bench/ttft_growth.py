"""Benchmark: does the embedded LLM's TTFT grow with the length of the call?

A scripted 30-turn call with the agent users run (default: the reference support agent, as the
runtime asks it: its instructions, its tools' schemas, its LLM settings, the greeting first; see
``_agent_requests.py``) is replayed at the LLM port. On the scripted tool turns the agent's real
tool runs on the demo caller's fresh database (lookups, a reschedule, a failed lookup, a cancel)
and the step after its result is timed, as the reply loop asks it; any other turn times the
reply's first step. Each request is the ``Conversation``'s, with ``cache_key`` = the call id, and
the time to its first delta (TTFT) is taken; the reply (temperature 0, and any call the model
makes, run like the runtime runs it) joins the history as heard. The system prompt is warmed once
first, as ``Runtime.warmup`` does. Printed per turn: TTFT (median over ``--repeats`` calls), prompt
tokens, tokens prefilled and the tools the model called on its own (its first delta is then that
call); then the ratio TTFT(turn 30) / TTFT(turn 1) (goal ≤ 1.1) and the process RSS. A call that
fails (e.g. it outgrew the LLM's context: ``--n-ctx``) is reported with the turn it failed at, and
the ratio is taken at the last turn every call completed.

``--history-turns N`` sends only the last N caller turns (the agent's ``llm.history_turns``): the
context then stops growing, and the adapter keeps the cache by shifting the kept turns into place.

``--interleave N`` runs N calls at once, turn by turn in round robin (A1 B1 C1 A2 …), as
concurrent calls share one LlamaLLM: each call's KV state is swapped out and back in, so its TTFT
must stay flat too. ``--no-cache-key`` sends no key (the control: calls evict each other).

    PYTHONPATH=src .venv/bin/python bench/ttft_growth.py [--turns 30] [--repeats 3]
        [--interleave 1] [--no-cache-key] [--history-turns N] [--flash-attn] [--n-ctx N]
        [--agent SPEC] [--json]

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
from dataclasses import replace

import psutil

from _agent_requests import DemoCall, agent_for, make_llm, variant, warm
from rejoinder.conversation import Step
from rejoinder.ports import ChatMessage, PortError, ToolCall, ToolDecision

#: (caller utterance, scripted tool call (name, args) or None); the demo caller's data: orders
#: 4217 (shipped) and 5031 (processing), a haircut on Tuesday at 10 AM.
SCRIPT: list[tuple[str, tuple[str, dict] | None]] = [
    ("Hi, I'm calling about an order.", None),
    ("The number is 4217.", ("lookup_order", {"order_id": "4217"})),
    ("Great. Will it come in the morning?", None),
    ("Okay. What appointments do I have?", ("list_appointments", {})),
    ("Can you move the haircut to Thursday at 3 pm?",
     ("reschedule_appointment", {"day": "Thursday", "time": "15:00", "service": "haircut"})),
    ("Thanks. Are you open on Saturday?", None),
    ("Until what time?", None),
    ("Do you also sell shampoo?", None),
    ("I have another order, 5031.", ("lookup_order", {"order_id": "5031"})),
    ("Why is it still processing?", None),
    ("Okay, I can wait.", None),
    ("Can I pay at the salon?", None),
    ("Is there parking nearby?", None),
    ("What was my appointment time again?", ("list_appointments", {})),
    ("Perfect, Thursday works.", None),
    ("How long does a haircut take?", None),
    ("And how much does it cost?", None),
    ("Do you take cards?", None),
    ("Can you check order 3085 too?", ("lookup_order", {"order_id": "3085"})),  # not hers
    ("Sorry, I meant 4217.", ("lookup_order", {"order_id": "4217"})),
    ("Oh right, the headphones.", None),
    ("Can my daughter book a haircut too?", None),
    ("She is free on Friday afternoon.", None),
    ("Never mind, she will call herself.", None),
    ("Actually, cancel my Thursday haircut.", ("cancel_appointment", {"service": "haircut"})),
    ("Sorry, I changed my mind about that.", None),
    ("Can I book it again for next week?", None),
    ("I will call back tomorrow then.", None),
    ("Is this the right number to call?", None),
    ("Thanks, I'm calling to say goodbye.", None),
]


def transcript(turns: int) -> list[tuple[str, tuple[str, dict] | None]]:
    """The first ``turns`` turns (the script repeats past 30)."""
    return [SCRIPT[i % len(SCRIPT)] for i in range(turns)]


class Call:
    """One scripted call of the agent: its conversation and per-turn measurements."""

    def __init__(self, agent, key: str, turns: int) -> None:
        self.demo = DemoCall(agent, key)
        self.key = key
        self.script = transcript(turns)
        self.rows: list[dict] = []

    async def _step(self, llm, say: str, pending: list[ChatMessage], final: bool,
                    use_key: bool) -> tuple[float, Step, list[ToolCall]]:
        req = self.demo.request(say, pending, final=final)
        req = req if use_key else replace(req, cache_key=None)
        t0 = time.perf_counter()
        c0 = time.process_time()
        ttft = None
        step, calls = Step(), []
        async for d in llm.stream(req):
            if isinstance(d, ToolDecision):  # the gate's verdict, before the first text or call
                continue
            if ttft is None:
                ttft = (time.perf_counter() - t0) * 1000
                self.cpu_ms = (time.process_time() - c0) * 1000
            if isinstance(d, ToolCall):
                calls.append(d)
            else:
                step.text += d
        self.empty = ttft is None
        if ttft is None:  # the model wrote nothing at all: the time to the stream's end
            ttft = (time.perf_counter() - t0) * 1000
            self.cpu_ms = (time.process_time() - c0) * 1000
        return ttft, step, calls

    async def turn(self, llm, i: int, use_key: bool) -> None:
        """Turn ``i``: the scripted tool run (if any), then the reply loop's steps; the first
        LLM step is timed."""
        say, scripted = self.script[i]
        if i == 0:  # a call's first request finds the warmed system turn, as after start-up
            await warm(llm, self.demo.agent)  # (not the previous call's identical first turn)
        pending: list[ChatMessage] = []
        steps: list[Step] = []
        if scripted:
            msgs, step = await self.demo.run_tool(*scripted)
            pending += msgs
            steps.append(step)
        ttft = None
        stats = None
        unscripted: list[str] = []
        max_steps = self.demo.agent.llm.max_steps
        calls_made: list[list] = []
        for k in range(len(steps), max_steps):
            ms, step, calls = await self._step(llm, say, pending, k == max_steps - 1, use_key)
            if ttft is None:
                ttft, stats, cpu, empty = ms, llm.last_stats, self.cpu_ms, self.empty
            steps.append(step)
            if not calls:
                break
            unscripted += [c.name for c in calls]  # called on its own: run as the runtime does
            calls_made += [[c.name, c.arguments] for c in calls]
            pending.append(ChatMessage("assistant", step.text, tool_calls=tuple(calls)))
            for c in calls:
                run = await self.demo.conv.run_tool(self.demo.turn, c)
                step.runs.append(run)
                pending.append(run.message())
        heard = " ".join(s.text.strip() for s in steps if s.text.strip())
        self.demo.turn += 1
        self.demo.conv.add_heard(self.demo.turn, say, steps, heard)
        self.rows.append({"turn": i + 1, "ttft_ms": ttft, "ttft_cpu_ms": cpu,
                          "prompt_tokens": stats.prompt,
                          "prefilled_tokens": stats.prefilled, "shifted": stats.shifted,
                          "tool_turn": bool(scripted), "unscripted_calls": unscripted,
                          "calls": calls_made, "heard": heard, "empty": empty})


async def run(turns: int, repeats: int, interleave: int, use_key: bool, flash_attn: bool,
              history_turns: int | None = None, agent_spec: str | None = None,
              n_ctx: int | None = None, threads: int | None = None) -> dict:
    base = agent_for(agent_spec)
    agent = variant(base, **({} if history_turns is None else {"history_turns": history_turns}))
    history_turns = agent.llm.history_turns
    llm = make_llm(flash_attn=flash_attn, **({"n_ctx": n_ctx} if n_ctx else {}),
                   **({"n_threads": threads} if threads else {}))
    await warm(llm, agent)
    calls: list[Call] = []
    failed: list[dict] = []
    for r in range(repeats):
        batch = [Call(agent, f"call-{r}-{c}", turns) for c in range(interleave)]
        for call in batch:
            await call.demo.open()
        live = list(batch)
        for i in range(turns):
            for call in list(live):
                try:
                    await call.turn(llm, i, use_key)
                except PortError as exc:  # e.g. the call outgrew the LLM's context
                    failed.append({"call": call.key, "turn": i + 1, "error": str(exc)})
                    print(f"  {call.key}: turn {i + 1} failed: {exc}", file=sys.stderr)
                    live.remove(call)
        for call in batch:
            await call.demo.close()
            llm.forget(call.key)
            if call.rows:
                print(f"  {call.key}: turn 1 {call.rows[0]['ttft_ms']:.0f} ms, turn "
                      f"{len(call.rows)} {call.rows[-1]['ttft_ms']:.0f} ms, prompt "
                      f"{call.rows[-1]['prompt_tokens']} tokens", file=sys.stderr)
        calls += batch
    done = min(len(c.rows) for c in calls)  # turns every call completed
    per_turn = []
    for i in range(done):
        rows = [c.rows[i] for c in calls]
        per_turn.append({"turn": i + 1, "tool_turn": rows[0]["tool_turn"],
                         "ttft_ms_p50": round(statistics.median(r["ttft_ms"] for r in rows), 1),
                         "ttft_cpu_ms_p50": round(statistics.median(r["ttft_cpu_ms"] for r in rows), 1),
                         "prompt_tokens": rows[0]["prompt_tokens"],
                         "prefilled_p50": statistics.median(r["prefilled_tokens"] for r in rows),
                         "shifted_p50": statistics.median(r["shifted"] for r in rows),
                         "own_calls": sorted({n for r in rows for n in r["unscripted_calls"]}),
                         "first_call": rows[0]["calls"], "first_heard": rows[0]["heard"],
                         "empty": any(r["empty"] for r in rows)})
    ratios = [c.rows[done - 1]["ttft_ms"] / c.rows[0]["ttft_ms"] for c in calls] if done > 1 else []
    cpu_ratios = ([c.rows[done - 1]["ttft_cpu_ms"] / c.rows[0]["ttft_cpu_ms"] for c in calls]
                  if done > 1 else [])
    # turns whose first delta was text (the model called no tool on its own): TTFT is then the
    # time to the first word, not to a whole tool call; the last such turn against turn 1
    text = [r for r in per_turn if not r["own_calls"] and not r["tool_turn"] and not r["empty"]]
    text_ratio = (round(text[-1]["ttft_cpu_ms_p50"] / per_turn[0]["ttft_cpu_ms_p50"], 3)
                  if len(text) > 1 and text[0] is per_turn[0] else None)
    return {"agent": agent.name, "tool_mode": llm.tool_mode, "n_ctx": llm._llm.n_ctx(),
            "last_text_turn": text[-1]["turn"] if text else None, "cpu_ratio_last_text_turn": text_ratio,
            "turns": turns, "turns_done": done, "failed": failed, "repeats": repeats,
            "interleave": interleave, "cache_key": use_key, "flash_attn": flash_attn,
            "history_turns": history_turns, "per_turn": per_turn,
            "ratio_last_first_p50": round(statistics.median(ratios), 3) if ratios else None,
            "cpu_ratio_last_first_p50": round(statistics.median(cpu_ratios), 3) if cpu_ratios else None,
            "threads": threads,
            "ratio_of_medians": (round(per_turn[-1]["ttft_ms_p50"] / per_turn[0]["ttft_ms_p50"], 3)
                                 if ratios else None),
            "kv_saves": llm.cache.stats.saves, "kv_restores": llm.cache.stats.restores,
            "rss_mb": round(psutil.Process().memory_info().rss / 2**20, 1)}


def print_report(out: dict) -> None:
    print(f"TTFT per turn (agent {out['agent']!r}, tool_mode {out['tool_mode']}, n_ctx "
          f"{out['n_ctx']}, {out['repeats']} repeats x {out['interleave']} interleaved call(s), "
          f"cache_key {'on' if out['cache_key'] else 'off'}, flash_attn "
          f"{'on' if out['flash_attn'] else 'off'}, history {out['history_turns'] or 'all'} turns):")
    print(f"{'turn':>4} {'tool':>4} {'TTFT p50 ms':>12} {'CPU ms':>7} {'prompt tok':>11} {'prefilled':>10} "
          f"{'shifted':>8}  model's own calls")
    for r in out["per_turn"]:
        print(f"{r['turn']:>4} {'yes' if r['tool_turn'] else '':>4} {r['ttft_ms_p50']:>12.1f} "
              f"{r['ttft_cpu_ms_p50']:>7.1f} "
              f"{r['prompt_tokens']:>11} {r['prefilled_p50']:>10.0f} {r['shifted_p50']:>8.0f}  "
              f"{', '.join(r['own_calls'])}{' (wrote nothing: time to its end)' if r['empty'] else ''}")
    for f in out["failed"]:
        print(f"{f['call']} failed at turn {f['turn']}: {f['error']}")
    if out["ratio_last_first_p50"] is not None:
        last = out["turns_done"]
        cut = "" if last == out["turns"] else f"; calls failed before turn {last + 1}"
        print(f"TTFT(turn {last}) / TTFT(turn 1): median of per-call ratios "
              f"{out['ratio_last_first_p50']:.2f}, ratio of medians {out['ratio_of_medians']:.2f} "
              f"(goal <= 1.1{cut}); in CPU time {out['cpu_ratio_last_first_p50']:.2f} (last turn "
              f"answered in text, {out['last_text_turn']}: {out['cpu_ratio_last_text_turn']}); KV state saves {out['kv_saves']}, restores "
              f"{out['kv_restores']}; RSS {out['rss_mb']:.0f} MB")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--interleave", type=int, default=1, help="calls at once (round robin)")
    ap.add_argument("--no-cache-key", action="store_true", help="control: send no cache_key")
    ap.add_argument("--flash-attn", action="store_true")
    ap.add_argument("--history-turns", type=int, default=None,
                    help="send only the last N caller turns of history (0: all; default: the "
                         "agent's llm.history_turns), plus earlier tool turns (keep_tool_turns)")
    ap.add_argument("--n-ctx", type=int, default=None,
                    help="LLM context length in tokens (default: LlamaOptions' default)")
    ap.add_argument("--agent", default=None,
                    help="agent spec (YAML, module:attribute or bundled name; default: support); "
                         "the script assumes the support agent's tools")
    ap.add_argument("--threads", type=int, default=None,
                    help="LLM threads (default: LlamaOptions'); 1 makes the CPU-time TTFT exact "
                         "on a loaded machine (no spinning worker threads)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.turns < 2 or a.repeats < 1 or a.interleave < 1:
        sys.exit("--turns must be >= 2, --repeats and --interleave >= 1")
    res = asyncio.run(run(a.turns, a.repeats, a.interleave, not a.no_cache_key, a.flash_attn,
                          a.history_turns, a.agent, a.n_ctx, a.threads))
    if a.json:
        print(json.dumps(res, indent=2))
    else:
        print_report(res)
