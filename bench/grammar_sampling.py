"""Benchmark: grammar-constrained decoding with the top-k tokens matched first
(:class:`rejoinder.adapters._fastgrammar.GrammarMask`) against llama-cpp-python's own grammar
sampler, which matches the whole vocabulary at every step — side by side, in one process.

Two kinds of grammar the embedded agent samples under, on SmolLM2-135M at temperature 0:

- **grounded replies** (:mod:`rejoinder.adapters._grounded`): the reply to ten synthetic tool
  results (items and numbers that are in no scenario), under the word grammar the engine builds;
- **tool calls**: the whole call ``[{"name": …, "arguments": …}]</tool_call>`` for the reference
  support agent's tools (:func:`rejoinder.adapters._toolcall.call_grammar`), after ten caller
  utterances.

Each prompt is decoded by both samplers in alternation (A B B A …), ``--rounds`` times; reported
per kind: ms per generated token (median over prompts of each prompt's median), the ratio, and
how many outputs are token-for-token identical (greedy: they must all be).

A third kind, **grounded reply, trie vs flat**, decodes the reply grammar the engine builds (its
facts first, :func:`rejoinder.adapters._grounded.reply_facts`) top-k first twice: with the
allowed words written as a trie (:func:`rejoinder.adapters._grounded.alternation`, the default)
and as one flat alternation of every word (before 2026-12-05), same language.

    .venv/bin/python bench/grammar_sampling.py [--rounds 3] [--max-tokens 40] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from rejoinder.adapters import _grounded
from rejoinder.adapters._fastgrammar import GrammarMask
from rejoinder.adapters._grounded import reply_facts, reply_grammar, reply_vocabulary
from rejoinder.adapters._toolcall import call_grammar
from rejoinder.adapters.llama_llm import LlamaLLM
from rejoinder.app.support import agent
from rejoinder.ports import ChatMessage, LLMRequest, ToolCall

SYSTEM = ChatMessage("system", agent.instructions)
GREETING = ChatMessage("assistant", "Thanks for calling. How can I help?")
RESULTS = [
    ("Can you check order 1180?", "lookup_order", {"order_id": "1180", "item": "garden hose", "status": "shipped", "shipped_on": "Monday, December 7", "expected_arrival": "Thursday, December 10"}),
    ("Order 3 6 0 2.", "lookup_order", {"order_id": "3602", "item": "rain jacket", "status": "processing", "expected_arrival": "Friday, December 18"}),
    ("Has my kettle come? It's 5 5 1 9.", "lookup_order", {"order_id": "5519", "item": "kettle", "status": "delivered", "delivered_on": "Wednesday, December 2"}),
    ("Where's order 7733?", "lookup_order", {"order_id": "7733", "item": "tea set", "status": "cancelled"}),
    ("Is 4008 on its way?", "lookup_order", {"error": "you have no order 4008; your orders are: 1180, 3602"}),
    ("When's my appointment?", "list_appointments", {"appointments": [{"appointment_id": 7, "service": "manicure", "when": "Monday, December 14 at 11 AM"}]}),
    ("What have I got booked?", "list_appointments", {"appointments": [{"appointment_id": 7, "service": "manicure", "when": "Monday, December 14 at 11 AM"}, {"appointment_id": 9, "service": "colour", "when": "Wednesday, December 16 at 3 PM"}]}),
    ("Move my manicure to Wednesday at ten.", "reschedule_appointment", {"appointment_id": 7, "service": "manicure", "moved_from": "Monday, December 14 at 11 AM", "moved_to": "Wednesday, December 16 at 10 AM"}),
    ("Can I do Saturday instead?", "reschedule_appointment", {"error": "Saturday, December 19 at 10 AM is outside opening hours (Monday to Friday, 9 AM to 5 PM)"}),
    ("Shift it to Thursday at one.", "reschedule_appointment", {"error": "Thursday, December 17 at 1 PM is already taken"}),
]


def _decode(llm, tokens, gbnf: str, fast: bool, max_tokens: int) -> tuple[list[int], float]:
    from llama_cpp import LlamaGrammar
    from llama_cpp import llama_cpp as C

    mask = GrammarMask(llm, gbnf) if fast else None
    kw = {"logits_processor": [mask]} if fast else {"grammar": LlamaGrammar.from_string(gbnf, verbose=False)}
    out: list[int] = []
    gen = llm.generate(tokens, temp=0.0, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.0, **kw)
    t0 = None
    for tok in gen:
        if t0 is None:  # time from the first token on: the prompt's prefill is the same for both
            t0 = time.perf_counter()
        if C.llama_vocab_is_eog(llm._model.vocab, tok) or len(out) >= max_tokens:
            break
        out.append(tok)
    dt = time.perf_counter() - (t0 or time.perf_counter())
    gen.close()
    if mask is not None:
        mask.close()
    return out, dt / max(1, len(out) - 1) * 1000


def _flat_reply_grammar(words, phrases, facts) -> str:
    """The reply grammar with each word list as one flat alternation (the language is the same)."""
    trie = _grounded.alternation
    _grounded.alternation = lambda pieces: " | ".join(
        _grounded._literal(p) for p in sorted(pieces, key=lambda p: (-len(p), p)))
    try:
        return reply_grammar(words, phrases, facts=facts)
    finally:
        _grounded.alternation = trie


def main(rounds: int, max_tokens: int) -> dict:
    llm = LlamaLLM(tool_mode="lazy")
    engine = llm.engine
    tools = tuple(t.schema for t in agent.tools.values())
    cases = []
    for i, (say, name, result) in enumerate(RESULTS):
        call = ToolCall(f"c{i}", name, {})
        msgs = (SYSTEM, GREETING, ChatMessage("user", say),
                ChatMessage("assistant", "", tool_calls=(call,)),
                ChatMessage("tool", json.dumps(result), name=name, tool_call_id=call.id))
        words, phrases = reply_vocabulary(msgs)
        prompt = engine.prompt(LLMRequest(msgs, tools=tools))
        cases.append(("grounded reply", prompt, reply_grammar(words, phrases)))
        facts = reply_facts(msgs)
        cases.append(("trie vs flat", prompt, (reply_grammar(words, phrases, facts=facts),
                                               _flat_reply_grammar(words, phrases, facts))))
        req = LLMRequest(msgs[:3], tools=tools)
        cases.append(("tool call", engine.prompt(req) + engine.format.call_open,
                      call_grammar(tools, "required", 1)))
    rows: dict[str, dict[str, list[float]]] = {}
    same = {}
    for kind, prompt, gbnf in cases:
        tokens = engine._tokens(prompt)
        per = {"top-k first": [], "whole vocabulary": []}
        outs = {}
        for r in range(rounds):
            order = (True, False) if r % 2 == 0 else (False, True)
            for fast in order:
                if kind == "trie vs flat":  # both top-k first: the trie (A), the flat words (B)
                    toks, ms = _decode(llm._llm, tokens, gbnf[0 if fast else 1], True, max_tokens)
                else:
                    toks, ms = _decode(llm._llm, tokens, gbnf, fast, max_tokens)
                per["top-k first" if fast else "whole vocabulary"].append(ms)
                outs.setdefault(fast, toks)
        for k, v in per.items():
            rows.setdefault(kind, {}).setdefault(k, []).append(statistics.median(v))
        s = same.setdefault(kind, [0, 0])
        s[0] += outs[True] == outs[False]
        s[1] += 1
    report = {}
    for kind, arms in rows.items():
        a, b = statistics.median(arms["top-k first"]), statistics.median(arms["whole vocabulary"])
        if kind == "trie vs flat":
            report[kind] = {"trie_ms_per_token": round(a, 2), "flat_ms_per_token": round(b, 2),
                            "ratio": round(a / b, 3), "identical": f"{same[kind][0]}/{same[kind][1]}"}
            continue
        report[kind] = {"top_k_first_ms_per_token": round(a, 2), "whole_vocab_ms_per_token": round(b, 2),
                        "ratio": round(a / b, 3), "identical": f"{same[kind][0]}/{same[kind][1]}"}
    return report


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=40)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rep = main(a.rounds, a.max_tokens)
    if a.json:
        print(json.dumps(rep, indent=2))
    else:
        for kind, r in rep.items():
            if "trie_ms_per_token" in r:
                print(f"{kind:15s} trie {r['trie_ms_per_token']:6.2f} ms/token · flat words "
                      f"{r['flat_ms_per_token']:6.2f} ms/token · ratio {r['ratio']:.3f} · identical {r['identical']}")
                continue
            print(f"{kind:15s} top-k first {r['top_k_first_ms_per_token']:6.2f} ms/token · whole vocabulary "
                  f"{r['whole_vocab_ms_per_token']:6.2f} ms/token · ratio {r['ratio']:.3f} · identical {r['identical']}")
