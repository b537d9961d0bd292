"""What the LLM server says it spent on a request, beside what the client waited.

Starts rejoinder's llama.cpp server (``rejoinder.adapters.llama_server``, SmolLM2-135M, its own
process on loopback) and sends ``--rounds`` pairs of requests through ``OpenAICompatLLM``: a
prompt the server has not seen (a fresh nonce in the system turn), then the same prompt again
(its KV prefix reused). For each request it prints the server's own report
(:class:`rejoinder.ports.ServerTiming`: prompt tokens evaluated and cached, prompt ms,
generated tokens and ms, from llama.cpp's performance counters) and the client's time to first
token and to the end (``time.perf_counter`` here, in the bench script: the adapter never times
itself). The gap between the client's TTFT and the server's prompt ms is HTTP, queueing and
the first token's own decode.

    .venv/bin/python bench/llm_server_timing.py --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

from rejoinder.adapters import llama_server
from rejoinder.adapters.openai_llm import OpenAICompatLLM
from rejoinder.ports import ChatMessage, LLMRequest, ServerTiming

USER = "My order number is 4217. Where is it, and when will it arrive?"


async def one(llm: OpenAICompatLLM, nonce: str) -> dict:
    req = LLMRequest((ChatMessage("system", f"You are a concise support agent for a small "
                                            f"business (session {nonce}). Answer in one sentence."),
                      ChatMessage("user", USER)), max_tokens=40, temperature=0.0)
    t0 = time.perf_counter()
    first = None
    report = ServerTiming()
    async for d in llm.stream(req):
        if isinstance(d, ServerTiming):
            report = d
        elif first is None:
            first = time.perf_counter()
    end = time.perf_counter()
    return {**report.as_dict(), "client_ttft_ms": round(1000 * ((first or end) - t0), 1),
            "client_total_ms": round(1000 * (end - t0), 1)}


async def main(rounds: int) -> None:
    server = llama_server.start(n_ctx=4096)
    llm = OpenAICompatLLM(server.base_url, "smollm2", timeout_s=120)
    rows = []
    try:
        await one(llm, "warm-up")
        for _ in range(rounds):
            nonce = uuid.uuid4().hex
            rows.append(("fresh", await one(llm, nonce)))
            rows.append(("cached", await one(llm, nonce)))
    finally:
        await llm.aclose()
        server.stop()
    keys = ("prompt_tokens", "cached_tokens", "prompt_ms", "client_ttft_ms", "generated_tokens",
            "generated_ms", "client_total_ms")
    print("kind    " + "  ".join(f"{k:>16}" for k in keys))
    for kind, r in rows:
        print(f"{kind:7} " + "  ".join(f"{r.get(k, '—')!s:>16}" for k in keys))
    for kind in ("fresh", "cached"):
        got = [r for k, r in rows if k == kind]
        med = {k: statistics.median(r[k] for r in got if k in r) for k in keys if all(k in r for r in got)}
        print(f"median {kind}: " + ", ".join(f"{k} {v:g}" for k, v in med.items()))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="fresh + cached request pairs")
    asyncio.run(main(ap.parse_args().rounds))
