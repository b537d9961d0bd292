"""Grounded replies (:mod:`rejoinder.adapters._grounded`) and the top-k-first grammar sampler
(:mod:`rejoinder.adapters._fastgrammar`): the vocabulary a reply after a tool result may use,
its grammar, and the real SmolLM2-135M answering a tool result under it."""

from __future__ import annotations

import json
import re
import threading

import numpy as np
import pytest

from rejoinder.adapters._fastgrammar import GrammarMask
from rejoinder.adapters._grounded import (COMMON_WORDS, after_tool_result, alternation,
                                          reply_facts, reply_grammar, reply_vocabulary)
from rejoinder.ports import ChatMessage, LLMRequest, ToolCall

from tool_cases import SUPPORT, TOOLS

GREETING = ChatMessage("assistant", "Thanks for calling. How can I help?")
CALL = ToolCall("c1", "lookup_order", {"order_id": "3602"})
RESULT = {"order_id": "3602", "item": "rain jacket", "status": "processing",
          "expected_arrival": "Friday, December 18"}


def _messages(result=RESULT, say="Order 3 6 0 2 please."):
    return (ChatMessage("system", "You help callers of shop 77. Orders and appointments."),
            GREETING, ChatMessage("user", say), ChatMessage("assistant", "", tool_calls=(CALL,)),
            ChatMessage("tool", json.dumps(result), name="lookup_order", tool_call_id="c1"))


def test_vocabulary_holds_the_results_the_callers_and_common_words_and_no_other_digits():
    words, phrases = reply_vocabulary(_messages())
    assert {"3602", "rain", "jacket", "processing", "friday", "december", "18"} <= words
    assert {"expected", "arrival", "item", "status"} <= words  # the result's keys, in words
    assert "lookup" not in words  # not the called tool's name
    assert {"please", "3", "6", "0", "2"} <= words  # the caller's own words
    assert set(COMMON_WORDS) <= words
    assert "77" not in words and "shop" not in words  # the instructions give no words here
    assert "Friday, December 18" in phrases and "rain jacket" in phrases
    assert not {w for w in words if w.isdigit()} - {"3602", "18", "3", "6", "0", "2"}


def test_vocabulary_reads_an_error_result_and_ignores_earlier_turns():
    earlier = (ChatMessage("user", "Is 9999 mine?"), ChatMessage("assistant", "Let me see."))
    msgs = _messages({"error": "you have no order 4008; your orders are: 1180, 3602"}, "Is 4008 mine?")
    words, _ = reply_vocabulary(msgs[:2] + earlier + msgs[2:])
    assert {"4008", "1180", "3602", "orders"} <= words
    assert "9999" not in words
    assert "error" not in words  # the failed call's key is not a word of the reply


def test_after_tool_result_is_the_last_message_only():
    msgs = _messages()
    assert after_tool_result(msgs)
    assert not after_tool_result(msgs[:3])
    assert not after_tool_result(())


def test_grammar_lists_each_word_capitalised_and_the_call_openers():
    gbnf = reply_grammar({"your", "order", "i'm"}, {"Friday, December 18"}, ("<tool_call>",))
    assert gbnf.startswith('root ::= sentence (" " sentence)? | "<tool_call>"')
    for piece in ('"your"', '"Your"', '"order"', '"Order"', '"I\'m"', '"Friday, December 18"'):
        assert piece in gbnf
    assert '"i\'m"' not in gbnf  # "I" is written capitalised only


def _as_regex(expr: str) -> str:
    """The GBNF subset ``alternation`` writes (JSON-quoted literals, groups, ``|``, ``?``) as a
    Python regular expression."""
    out, i = [], 0
    while i < len(expr):
        c = expr[i]
        if c == '"':
            lit, end = json.JSONDecoder().raw_decode(expr, i)
            out.append(re.escape(lit))
            i = end
            continue
        out.append({"(": "(?:", ")": ")", "|": "|", "?": "?", " ": ""}[c])
        i += 1
    return "".join(out)


def test_alternation_matches_exactly_its_pieces_as_a_trie():
    pieces = {"a", "able", "about", "above", "I'm", "I", "Friday, December 18", "Friday",
              'say "hi"', "4217", "42", "order"}
    expr = alternation(pieces)
    assert '"o" ("ut" | "ve")' in expr and expr.count("Friday") == 1  # shared prefixes, once
    rx = re.compile(_as_regex(expr))
    for p in pieces:
        assert rx.fullmatch(p), p
    for q in ("", "ab", "abl", "ables", "Able", "about ", "Frida", "Friday, December", "4",
              "421", "42171", "orders", "I'", 'say "hi'):
        assert not rx.fullmatch(q), q
    assert alternation({"x"}) == '"x"'
    with pytest.raises(ValueError, match="non-empty"):
        alternation({"", "a"})


def test_the_trie_grammar_accepts_the_tokens_a_flat_alternation_accepts(grounded_llm):
    """The same words as a flat alternation and as :func:`alternation`'s trie: llama.cpp's
    grammar takes or refuses the same real SmolLM2 tokens at every step of every probe."""
    from llama_cpp import llama_cpp as C

    llm = grounded_llm._llm
    words, phrases = reply_vocabulary(_messages())
    pieces = phrases | words | {w.capitalize() for w in words}
    flat = " | ".join(json.dumps(p) for p in sorted(pieces))
    grammars = [f'root ::= w (" " w)* "."\nw ::= {w}\n' for w in (flat, alternation(pieces))]

    def steps(gbnf: str, text: str) -> list[bool]:
        sampler = C.llama_sampler_init_grammar(llm._model.vocab, gbnf.encode(), b"root")
        took = []
        try:
            for tok in llm.tokenize(text.encode(), add_bos=False, special=False):
                arr = (C.llama_token_data * 1)(C.llama_token_data(tok, 0.0, 0.0))
                p = C.llama_token_data_array(arr, 1, -1, False)
                C.llama_sampler_apply(sampler, C.ctypes.byref(p))
                took.append(arr[0].logit != float("-inf"))
                if not took[-1]:
                    break
                C.llama_sampler_accept(sampler, tok)
        finally:
            C.llama_sampler_free(sampler)
        return took

    probes = ("Your rain jacket is still processing.", "Order 3602 is expected Friday, December 18.",
              "The rain coat is processing.", "Your order 3603 is here.", "I'm sorry, expected arrival")
    results = [[steps(g, t) for t in probes] for g in grammars]
    assert results[0] == results[1]
    assert all(results[0][0]) and all(results[0][1])  # the result's words, taken whole
    assert not all(results[0][2]) and not all(results[0][3])  # "coat" and 3603 are not its words


def test_facts_are_the_new_rounds_uncommon_value_words_in_order_once():
    msgs = _messages({"order 3602": "the rain jacket of order 3602 is still processing and "
                                    "should arrive Friday, December 18"})
    assert reply_facts(msgs) == ["rain", "jacket", "order", "3602", "processing", "arrive",
                                 "Friday", "December", "18"]
    assert reply_facts(_messages()) == ["3602", "rain", "jacket", "processing", "Friday",
                                        "December", "18"]  # values only, not the keys
    # an error's text is the fact to tell; an earlier round of the same reply is not
    err = ChatMessage("tool", json.dumps({"error": "Saturday at 10 AM is outside opening hours"}),
                      name="reschedule_appointment", tool_call_id="c2")
    later = _messages() + (ChatMessage("assistant", "Your rain jacket is processing.",
                                       tool_calls=(ToolCall("c2", "reschedule_appointment", {}),)),
                           err)
    assert reply_facts(later) == ["Saturday", "10", "outside", "opening", "hours"]  # ("am": common)
    assert reply_facts(_messages()[:3]) == []  # not after a tool result
    assert reply_facts(_messages(), skip={"lookup_order"}) == []  # e.g. call control's results
    assert len(reply_facts(_messages({"a": " ".join(f"w{i}" for i in range(40))}))) == 12


def test_with_facts_the_first_sentence_holds_each_in_order_with_bounded_words_around():
    gbnf = reply_grammar({"your", "order", "is", "the"}, {"Friday, December 18"}, ("<tool_call>",),
                         facts=["3602", "processing"])
    assert gbnf.startswith('root ::= first (" " sentence)? | "<tool_call>"')
    assert 'f0 ::= "3602"' in gbnf and 'f1 ::= "Processing" | "processing"' in gbnf
    assert ('first ::= (v sep){0,4} f0 sep (v sep){0,3} f1 (sep v){0,8} [.?!]') in gbnf
    v = next(line for line in gbnf.splitlines() if line.startswith("v ::="))
    assert '"Friday, December 18"' not in v and '"order"' in v  # words only
    assert '"processing"' not in v  # a fact is said at its place only


def test_the_fact_grammar_accepts_a_reply_with_the_facts_and_refuses_one_without(grounded_llm):
    from llama_cpp import llama_cpp as C

    llm = grounded_llm._llm
    gbnf = reply_grammar({"your", "order", "is", "still", "the"}, set(), facts=["3602", "processing"])

    def accepts(text: str) -> bool:
        sampler = C.llama_sampler_init_grammar(llm._model.vocab, gbnf.encode(), b"root")
        try:
            for tok in llm.tokenize(text.encode(), add_bos=False, special=False):
                arr = (C.llama_token_data * 1)(C.llama_token_data(tok, 0.0, 0.0))
                p = C.llama_token_data_array(arr, 1, -1, False)
                C.llama_sampler_apply(sampler, C.ctypes.byref(p))
                if arr[0].logit == float("-inf"):
                    return False
                C.llama_sampler_accept(sampler, tok)
            return True
        finally:
            C.llama_sampler_free(sampler)

    assert accepts("Your order 3602 is still processing.")
    assert not accepts("Your order is still processing.")  # 3602 left out
    assert not accepts("Your order 3602 is still.")  # ended before the last fact


@pytest.fixture(scope="module")
def grounded_llm():
    from rejoinder.adapters.llama_llm import LlamaLLM

    return LlamaLLM(tool_mode="lazy")


def _reply(llm, messages, max_tokens=48) -> str:
    req = LLMRequest(messages, tools=TOOLS, temperature=0.0, max_tokens=max_tokens)
    return "".join(d for d in llm._generate(req, threading.Event()) if isinstance(d, str))


def test_the_real_model_answers_a_result_in_its_words_only(grounded_llm):
    msgs = (SUPPORT,) + _messages()[1:]
    engine = grounded_llm.engine
    try:
        engine.grounded_replies = False
        free = _reply(grounded_llm, msgs)
        engine.grounded_replies = True
        grounded = _reply(grounded_llm, msgs)
    finally:
        engine.grounded_replies = True
    words, phrases = reply_vocabulary(msgs)
    text = grounded
    for p in sorted(phrases, key=len, reverse=True):
        text = text.replace(p, " ")
    used = re.findall(r"[A-Za-z]+(?:'[A-Za-z]+)?|\d+", text)
    assert used and all(w.lower() in words for w in used), (grounded, free)
    assert set(re.findall(r"\d+", grounded)) <= {"3602", "18", "3", "6", "0", "2"}
    assert re.search(r"[.?!]$", grounded)
    # SmolLM2-135M at temperature 0 answers this result free-form without its facts; grounded,
    # the reply carries one (the probe behind the module docstring: 6 → 9 of 10 results)
    facts = ("3602", "processing", "December 18", "rain jacket")
    assert any(f in grounded for f in facts), grounded


def test_top_k_first_matching_picks_what_the_whole_vocabulary_grammar_picks(grounded_llm):
    """Greedy under the mask = greedy over the tokens llama.cpp's grammar accepts: checked
    against llama.cpp's own grammar sampler over the whole vocabulary, step by step."""
    from llama_cpp import LlamaGrammar

    llm = grounded_llm._llm
    msgs = (SUPPORT,) + _messages()[1:]
    req = LLMRequest(msgs, tools=TOOLS, temperature=0.0, max_tokens=20)
    engine = grounded_llm.engine
    prompt = engine.prompt(req)
    gbnf = engine._reply_grammar(req, None)
    tokens = engine._tokens(prompt)
    with grounded_llm._lock:
        grounded_llm.cache.activate(None)
        mask = GrammarMask(llm, gbnf)
        ours = []
        for tok in llm.generate(tokens, temp=0.0, logits_processor=[mask]):
            if len(ours) >= 12:
                break
            ours.append(tok)
        mask.close()
        theirs = []
        for tok in llm.generate(tokens, temp=0.0, grammar=LlamaGrammar.from_string(gbnf, verbose=False)):
            if len(theirs) >= 12:
                break
            theirs.append(tok)
    assert ours == theirs and len(ours) == 12
    assert mask.steps >= 12 and mask.full_scans < mask.steps


def test_mask_keeps_only_accepted_tokens_and_scans_all_only_when_the_top_k_fail(grounded_llm):
    llm = grounded_llm._llm
    yes = llm.tokenize(b"yes", add_bos=False, special=False)[0]
    # ids whose text is letters that cannot start "yes" or "no": the top k of the first step
    others = [i for i in range(1000, 3000)
              if llm.detokenize([i]).decode("utf-8", "replace").strip().isalpha()
              and not llm.detokenize([i]).decode("utf-8", "replace").lstrip()[:1] in "yn"][:60]
    mask = GrammarMask(llm, 'root ::= "yes" | "no"')
    scores = np.zeros(llm.n_vocab(), dtype=np.float32)
    scores[others] = 10.0
    out = mask(np.array([1, 2, 3]), scores.copy())
    kept = np.flatnonzero(np.isfinite(out))
    texts = {llm.detokenize([int(t)]).decode("utf-8", "replace") for t in kept}
    assert kept.size > 0 and texts <= {"y", "ye", "yes", "n", "no"}, texts
    assert mask.full_scans == 1  # none of the top k was accepted: the whole vocabulary was
    mask.close()
    mask = GrammarMask(llm, 'root ::= "yes" | "no"')
    scores[yes] = 20.0
    out = mask(np.array([1, 2, 3]), scores.copy())
    assert np.flatnonzero(np.isfinite(out)).tolist() == [yes] and mask.full_scans == 0
    mask.close()


def test_a_call_after_a_tool_result_goes_only_to_tools_the_callers_words_ground(grounded_llm):
    # blind-cancel-friday-consultation-yes (2026-12-07): after the cancellation's result the
    # model opened a call and wrote lookup_order "1234", which the caller never said
    engine = grounded_llm.engine

    def request(say: str, *, after_result: bool = True) -> LLMRequest:
        msgs = (SUPPORT, GREETING, ChatMessage("user", say))
        if after_result:
            msgs = msgs + _messages()[3:]
        return LLMRequest(msgs, tools=TOOLS, temperature=0.0)

    yes = request("Yeah, definitely. Please do, there's no way round it.")
    follow = engine.follow_up_request(yes)
    # no order number and no weekday or time said: only the listing is left (every tool still
    # in the prompt); a step's own allowed tools are narrowed the same way
    assert [t.name for t in follow.callable_tools()] == ["list_appointments"]
    assert follow.tools == TOOLS
    step = LLMRequest(yes.messages, tools=TOOLS, temperature=0.0,
                      allowed_tools=("lookup_order", "reschedule_appointment"))
    assert engine.follow_up_request(step) is None
    # the number said: the lookup stays; a weekday and time: the move too (the request itself)
    said = request("Order 3602, and move me to Monday at 14:30 please.")
    assert engine.follow_up_request(said) is said
    # before any tool result the gate decides, not this rule
    first = request("Yeah, definitely.", after_result=False)
    assert engine.follow_up_request(first) is first
    # with no tool left the reply goes on as text (None), and grounding off keeps every tool
    only = LLMRequest(yes.messages, tools=TOOLS[:1], temperature=0.0)
    assert engine.follow_up_request(only) is None
    try:
        engine.ground_arguments = False
        assert engine.follow_up_request(only) is only
    finally:
        engine.ground_arguments = True
