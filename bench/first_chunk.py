"""Benchmark: how long run-on LLM text holds up the first audio, with and without the first-chunk
budget of :class:`rejoinder.text.SpeakableChunker` (issue 8, item 3).

For each text, the SmolLM2 tokenizer (the embedded LLM's own, so the deltas are its real tokens)
splits it into deltas. The chunker is fed token by token; the time the first chunk waits is the
number of tokens it needs times the LLM's time per token (``--tokens-per-s``, default 106, the
embedded model's measured rate in MODELS.md). Piper then synthesises that first chunk; its time to
first audio is measured (median of ``--repeat`` runs). Their sum is the text path's share of the
time to first audio.

    .venv/bin/python bench/first_chunk.py [--repeat 5] [--tokens-per-s 106] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

from rejoinder.adapters.llama_llm import smollm2_model_path
from rejoinder.adapters.piper_tts import PiperTTS
from rejoinder.text import SpeakableChunker, SpeechNormalizer

TEXTS = {
    "run-on": ("the smallest model sometimes writes a very long answer without any punctuation at all and "
               "it keeps going and going with more words about your order and the delivery date and the "
               "address we have on file for you so you can check it"),
    "path": ("The file you need is located at /home/user/documents/reports/quarterly/summary_final_v2.pdf "
             "and you can open it with any viewer you like once it has finished downloading."),
    "long sentence": ("I have checked the status of your order and I can see that it left our warehouse "
                      "yesterday afternoon and it should reach you by Thursday at the latest."),
    "short clause": "Sure, I can help with that. Your order shipped yesterday and arrives on Thursday.",
}
CONFIGS = {"budget (default)": {}, "no budget": {"first_max_words": 10_000, "first_max_chars": 10_000}}


def llm_deltas(text: str) -> list[str]:
    """``text`` as the embedded LLM's token deltas."""
    from llama_cpp import Llama
    llm = Llama(model_path=str(smollm2_model_path()), vocab_only=True, verbose=False)
    ids = llm.tokenize(text.encode(), add_bos=False, special=False)
    out, prev = [], b""
    for i in range(len(ids)):
        cur = llm.detokenize(ids[: i + 1])
        out.append(cur[len(prev):].decode("utf-8", "ignore"))
        prev = cur
    assert "".join(out) == text
    return out


def first_chunk(deltas: list[str], **kw: int) -> tuple[str, int]:
    """The first chunk and how many deltas had to arrive before it was out."""
    ch = SpeakableChunker(**kw)
    for i, d in enumerate(deltas):
        if got := ch.push(d):
            return got[0], i + 1
    return ch.flush()[0], len(deltas)


async def piper_ttfa_ms(tts: PiperTTS, text: str, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        async for _piece in tts.stream(text):
            times.append(1000 * (time.perf_counter() - t0))
            break
    return statistics.median(times)


async def main(repeat: int, tokens_per_s: float) -> list[dict]:
    tts = PiperTTS()
    await piper_ttfa_ms(tts, "Warm up the voice.", 1)
    rows = []
    for name, text in TEXTS.items():
        deltas = llm_deltas(text)
        for label, kw in CONFIGS.items():
            chunk, n = first_chunk(deltas, **kw)
            wait = 1000 * n / tokens_per_s
            ttfa = await piper_ttfa_ms(tts, SpeechNormalizer().feed(chunk), repeat)
            rows.append({"text": name, "chunker": label, "first_chunk_chars": len(chunk.strip()),
                         "tokens_waited": n, "wait_ms": round(wait), "piper_ttfa_ms": round(ttfa),
                         "total_ms": round(wait + ttfa), "first_chunk": chunk.strip()})
    return rows


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--tokens-per-s", type=float, default=106.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    result = asyncio.run(main(args.repeat, args.tokens_per_s))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{'text':<14} {'chunker':<17} {'chars':>5} {'tokens':>6} {'wait ms':>7} {'piper ms':>8} "
              f"{'total ms':>8}  first chunk")
        for r in result:
            print(f"{r['text']:<14} {r['chunker']:<17} {r['first_chunk_chars']:>5} {r['tokens_waited']:>6} "
                  f"{r['wait_ms']:>7} {r['piper_ttfa_ms']:>8} {r['total_ms']:>8}  {r['first_chunk'][:60]}")
