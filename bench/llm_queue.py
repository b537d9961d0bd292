"""How long a call's LLM request waits on the shared llama.cpp thread when several calls talk
at once: replies run to their end (``PAUSE_EVERY`` off) against replies that step aside every
few tokens for waiting requests (``rejoinder.adapters.llama_llm.PAUSE_EVERY``), side by side.

``--calls`` simulated calls share one embedded ``LlamaLLM`` (SmolLM2-135M unless ``--model``,
the support agent's instructions and tools, the tool gate). Each call sends a turn's request,
reads its whole reply (text and tool calls, as the runtime does), then waits a seeded 0.5–2 s
(the caller listening and speaking) before its next turn. Per request: the wait to its first
item (the gate's decision, else the first text: what the caller waits for in silence) and to
its end, p50/p95 over every request of an arm; the arms alternate round by round in one
process, on the same seeded schedule. The utterances are generic openers and requests written
for this bench (none is a scenario's or a calibration example's wording).

    .venv/bin/python bench/llm_queue.py [--calls 4] [--turns 6] [--rounds 4] [--model PATH]

This measures the LLM thread alone (no audio): what the scheduling changes, not a V2V figure.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time

from rejoinder.adapters import llama_llm as mod
from rejoinder.app.support import INSTRUCTIONS, agent
from rejoinder.ports import ChatMessage, LLMRequest, ToolDecision

UTTERANCES = ("Hello there, good afternoon.", "Could you tell me how your day is going?",
              "What appointments do I have coming up?", "I would like to hear about my order 4217.",
              "Thanks a lot, that helps.", "Is there anything else you can do for me today?",
              "Tell me a little about your shop, please.", "Okay, that sounds fine to me.")
OFF = 10 ** 9


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


async def one_call(llm, i: int, turns: int, seed: int, first_ms: list, end_ms: list) -> None:
    rng = random.Random(seed * 100 + i)
    tools = tuple(t.schema for t in agent.tools.values())
    msgs = [ChatMessage("system", INSTRUCTIONS),
            ChatMessage("assistant", "Hi, thanks for calling. How can I help?")]
    await asyncio.sleep(rng.uniform(0.0, 1.0))
    for t in range(turns):
        msgs.append(ChatMessage("user", rng.choice(UTTERANCES)))
        req = LLMRequest(tuple(msgs), tools=tools, max_tokens=60, temperature=0.0,
                         cache_key=f"q{seed}-{i}")
        t0 = time.perf_counter()
        first, text = None, ""
        async for d in llm.stream(req):
            if first is None:
                first = time.perf_counter() - t0
            if isinstance(d, str):
                text += d
            elif not isinstance(d, ToolDecision):
                text += " (a tool call)"
        end_ms.append(1000 * (time.perf_counter() - t0))
        first_ms.append(1000 * (first if first is not None else time.perf_counter() - t0))
        msgs.append(ChatMessage("assistant", text.strip() or "Okay."))
        await asyncio.sleep(rng.uniform(0.5, 2.0))
    await asyncio.wrap_future(llm.forget(f"q{seed}-{i}"))


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=4)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--model", default=None)
    ap.add_argument("--every", type=int, default=8, help="PAUSE_EVERY of the pausing arm")
    a = ap.parse_args()
    llm = mod.LlamaLLM(a.model) if a.model else mod.LlamaLLM()
    tools = tuple(t.schema for t in agent.tools.values())
    await asyncio.to_thread(llm.warmup, INSTRUCTIONS, tools)
    await asyncio.to_thread(llm.warm_gate, tools, agent.llm.talk_examples)
    every = a.every
    res: dict[str, tuple[list, list]] = {"run to end": ([], []), f"pause every {every}": ([], [])}
    for r in range(a.rounds):
        arms = list(res) if r % 2 == 0 else list(res)[::-1]
        for arm in arms:
            mod.PAUSE_EVERY = OFF if arm == "run to end" else every
            first, end = res[arm]
            await asyncio.gather(*(one_call(llm, i, a.turns, r, first, end) for i in range(a.calls)))
    mod.PAUSE_EVERY = 0
    print(f"{a.calls} calls × {a.turns} turns × {a.rounds} rounds per arm ({llm.model_name})")
    for arm, (first, end) in res.items():
        print(f"  {arm:>16}: first item p50/p95 {statistics.median(first):6.0f} / "
              f"{pct(first, 95):6.0f} ms · whole reply p50/p95 {statistics.median(end):6.0f} / "
              f"{pct(end, 95):6.0f} ms · n={len(first)}")


if __name__ == "__main__":
    asyncio.run(main())
