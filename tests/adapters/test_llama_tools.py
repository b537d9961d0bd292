"""The embedded llama.cpp adapter: per-conversation KV-cache reuse, prefix stability across tool
calls, tool modes and errors (real SmolLM2 model; token counts, never wall-clock)."""

from __future__ import annotations

import json

import pytest

from rejoinder.errors import ConfigError
from rejoinder.ports import ChatMessage, LLMRequest, PortError, ToolCall

from tool_cases import SUPPORT, TOOLS, assert_valid_call


async def _run(llm, req: LLMRequest) -> list:
    return [d async for d in llm.stream(req)]


def _new_tokens(llm, before: str, after: str) -> int:
    """Tokens of ``after`` beyond the prompt ``before`` (minus its open assistant turn)."""
    head = before[: before.rindex("<|im_start|>assistant\n")]
    assert after.startswith(head)
    return len(llm._llm.tokenize(after[len(head):].encode(), add_bos=False, special=True))


async def test_conversations_keep_their_kv_cache_when_interleaved(llama_llm):
    """Call B's request between two turns of call A does not evict A's cache: A's next turn
    prefills only its new tokens."""
    other = ChatMessage("system", "You are a pizza shop's phone agent. Menu: margherita, "
                                  "pepperoni, veggie. Answer in one sentence. " * 3)
    a = [SUPPORT, ChatMessage("user", "Hello, I have a question about my order.")]
    b = [other, ChatMessage("user", "Do you deliver to Main Street?")]
    reply = "".join(await _run(llama_llm, LLMRequest(tuple(a), tools=TOOLS, max_tokens=16,
                                                     temperature=0.0, cache_key="A")))
    await _run(llama_llm, LLMRequest(tuple(b), max_tokens=8, temperature=0.0, cache_key="B"))
    restores = llama_llm.cache.stats.restores
    before = llama_llm.engine.prompt(LLMRequest(tuple(a), tools=TOOLS))
    a += [ChatMessage("assistant", reply), ChatMessage("user", "It is order 4217.")]
    req = LLMRequest(tuple(a), tools=TOOLS, max_tokens=4, temperature=0.0, cache_key="A")
    await _run(llama_llm, req)
    stats = llama_llm.last_stats
    new = _new_tokens(llama_llm, before, llama_llm.engine.prompt(req))
    assert llama_llm.cache.stats.restores == restores + 1
    assert stats.prompt > 250 and stats.prefilled <= new + 2, (stats, new)
    # B comes back: its state is restored too
    b += [ChatMessage("assistant", "Yes."), ChatMessage("user", "Great.")]
    await _run(llama_llm, LLMRequest(tuple(b), max_tokens=4, temperature=0.0, cache_key="B"))
    assert llama_llm.last_stats.prefilled < llama_llm.last_stats.prompt // 3
    llama_llm.forget("A").result(timeout=30)
    llama_llm.forget("B").result(timeout=30)
    assert "A" not in llama_llm.cache.stats.keys or llama_llm.cache._saved.get("A") is None


async def test_a_finished_calls_state_buffer_is_reused_by_the_next_call(llama_llm):
    """A forgotten conversation's buffer (and the one reserved at warm-up) holds the next
    conversation's saved state: no new memory on a call's turn, and the state restores whole."""
    cache = llama_llm.cache
    msgs = (SUPPORT, ChatMessage("user", "Hello, I have a question about my order."))
    await _run(llama_llm, LLMRequest(msgs, tools=TOOLS, max_tokens=4, temperature=0.0,
                                     cache_key="first"))
    await _run(llama_llm, LLMRequest((ChatMessage("user", "Hi"),), max_tokens=2))  # saves "first"
    buf = cache._saved["first"].data
    assert len(buf) >= cache._saved["first"].size
    llama_llm.forget("first").result(timeout=30)
    assert "first" not in cache._saved and any(b is buf for b in cache._spare)
    await _run(llama_llm, LLMRequest(msgs, tools=TOOLS, max_tokens=4, temperature=0.0,
                                     cache_key="second"))
    await _run(llama_llm, LLMRequest((ChatMessage("user", "Hi"),), max_tokens=2))
    assert cache._saved["second"].data is buf  # the same memory, not a new buffer
    again = msgs + (ChatMessage("assistant", "Sure."), ChatMessage("user", "It is 4217."))
    req = LLMRequest(again, tools=TOOLS, max_tokens=2, temperature=0.0, cache_key="second")
    before = llama_llm.engine.prompt(LLMRequest(msgs, tools=TOOLS))
    await _run(llama_llm, req)  # restored from the reused buffer: only the new words prefilled
    assert llama_llm.last_stats.prefilled <= _new_tokens(llama_llm, before,
                                                         llama_llm.engine.prompt(req)) + 4
    llama_llm.forget("second").result(timeout=30)
    size = max(len(b) for b in cache._spare) + 1  # (spares are kept largest first, at most 4)
    cache.reserve(size)
    assert len(cache._spare) <= 4 and any(len(b) == size for b in cache._spare)


async def test_keyless_requests_and_warmup_do_not_evict_a_keyed_call(llama_llm):
    """A warm-up or a request without a key saves the current call's state first."""
    import asyncio

    a = [SUPPORT, ChatMessage("user", "Hello, I have a question about my order.")]
    await _run(llama_llm, LLMRequest(tuple(a), tools=TOOLS, max_tokens=4, temperature=0.0,
                                     cache_key="K"))
    before = llama_llm.engine.prompt(LLMRequest(tuple(a), tools=TOOLS))
    await asyncio.to_thread(llama_llm.warmup, "You sell pizza. " * 10)
    await _run(llama_llm, LLMRequest((ChatMessage("user", "Hi"),), max_tokens=2))
    a += [ChatMessage("assistant", "Sure."), ChatMessage("user", "It is order 4217.")]
    req = LLMRequest(tuple(a), tools=TOOLS, max_tokens=2, temperature=0.0, cache_key="K")
    await _run(llama_llm, req)
    new = _new_tokens(llama_llm, before, llama_llm.engine.prompt(req))
    assert llama_llm.last_stats.prefilled <= new + 4, llama_llm.last_stats
    llama_llm.forget("K")


async def test_without_cache_key_another_call_evicts_the_prefix(llama_llm):
    """The control for the test above: with no key, B's request replaces A's tokens and A's
    next turn re-prefills the part after the shared system prompt."""
    other = ChatMessage("system", "You are a pizza shop's phone agent. " * 6)
    a = [SUPPORT, ChatMessage("user", "Hello, I have a question about my order.")]
    await _run(llama_llm, LLMRequest(tuple(a), tools=TOOLS, max_tokens=4, temperature=0.0))
    await _run(llama_llm, LLMRequest((other, ChatMessage("user", "Hi")), max_tokens=4,
                                     temperature=0.0))
    a += [ChatMessage("assistant", "Sure."), ChatMessage("user", "It is order 4217.")]
    await _run(llama_llm, LLMRequest(tuple(a), tools=TOOLS, max_tokens=4, temperature=0.0))
    assert llama_llm.last_stats.prefilled > llama_llm.last_stats.prompt // 2


async def test_windowed_history_shifts_the_kept_turns_into_place(llama_llm):
    """When the oldest turns are dropped after the system prompt (a history window), the kept
    turns' KV entries are shifted into place: only the new turn is prefilled."""
    turns = [("Hi, I'm calling about the order I placed last week for two bottles of "
              "shampoo and a hair dryer.", "Sure, I can help with your order."),
             ("It was supposed to arrive on Monday but nothing came, and the tracking page "
              "says it is still being processed.", "I understand, let me look into it."),
             ("Also, I would like to know whether my haircut appointment is still on "
              "Thursday afternoon at three.", "Let me check your appointments.")]
    full = [SUPPORT]
    for say, reply in turns:
        full += [ChatMessage("user", say), ChatMessage("assistant", reply)]
    req = LLMRequest((*full, ChatMessage("user", "Thanks.")), tools=TOOLS, max_tokens=2,
                     temperature=0.0, cache_key="W")
    await _run(llama_llm, req)
    window = [SUPPORT, *full[3:], ChatMessage("user", "Thanks."),
              ChatMessage("assistant", "You're welcome."), ChatMessage("user", "Bye.")]
    await _run(llama_llm, LLMRequest(tuple(window), tools=TOOLS, max_tokens=2, temperature=0.0,
                                     cache_key="W"))
    stats = llama_llm.last_stats
    assert stats.shifted >= 40, stats
    assert stats.prefilled <= 24, stats  # the last reply and "Bye.", not the kept turns
    llama_llm.forget("W")


async def test_history_with_a_tool_call_reuses_the_cache(llama_llm):
    """The call is rendered back exactly as generated, so the turn after a tool result only
    prefills the result and the new assistant turn."""
    msgs = [SUPPORT, ChatMessage("user", "Can you check order 4217?")]
    req = LLMRequest(tuple(msgs), tools=TOOLS, tool_choice="required", temperature=0.0,
                     cache_key="T")
    calls = await _run(llama_llm, req)
    assert len(calls) == 1 and isinstance(calls[0], ToolCall)
    assert_valid_call(calls[0])
    before = llama_llm.engine.prompt(req)
    msgs += [ChatMessage("assistant", "", tool_calls=(calls[0],)),
             ChatMessage("tool", json.dumps({"status": "shipped"}), tool_call_id=calls[0].id)]
    nxt = LLMRequest(tuple(msgs), tools=TOOLS, temperature=0.0, max_tokens=4, cache_key="T")
    await _run(llama_llm, nxt)
    new = _new_tokens(llama_llm, before, llama_llm.engine.prompt(nxt))
    call_tokens = len(llama_llm._llm.tokenize(
        ("<tool_call>" + json.dumps([{"name": calls[0].name,
                                      "arguments": calls[0].arguments}])).encode(),
        add_bos=False, special=True))
    # at most the call's own last tokens (sampled or, for the grounded order number copied from
    # the caller's words, forced: not yet evaluated) plus the new turns
    value_tokens = len(llama_llm._llm.tokenize(json.dumps(calls[0].arguments).encode(),
                                               add_bos=False, special=True))
    assert llama_llm.last_stats.prefilled <= new - call_tokens + 8 + value_tokens, llama_llm.last_stats
    llama_llm.forget("T")


async def test_required_call_samples_only_names_and_values(llama_llm):
    """Keys and JSON punctuation are forced: a lookup_order call samples its name and a 4-digit
    value, far fewer tokens than the ≈30 of the whole call."""
    req = LLMRequest((SUPPORT, ChatMessage("user", "Check order 4217 please.")), tools=TOOLS,
                     tool_choice="required", temperature=0.0)
    calls = await _run(llama_llm, req)
    assert calls and calls[0].name == "lookup_order"
    assert llama_llm.last_stats.generated <= 14, llama_llm.last_stats


async def test_eager_mode_yields_a_call_or_plain_text(llama_llm):
    llama_llm.tool_mode = "eager"
    try:
        for say in ("Hello.", "What appointments do I have?"):
            out = await _run(llama_llm, LLMRequest((SUPPORT, ChatMessage("user", say)),
                                                   tools=TOOLS, temperature=0.0, max_tokens=24))
            calls = [d for d in out if isinstance(d, ToolCall)]
            text = "".join(d for d in out if isinstance(d, str))
            assert out and "<tool_call>" not in text
            for c in calls:
                assert_valid_call(c)
    finally:
        llama_llm.tool_mode = "lazy"


async def test_lazy_mode_switches_to_the_call_grammar_when_the_model_opens_a_call(llama_llm):
    """With the opener as the reply's prefix the model is in the call; lazy mode must turn the
    rest into a valid ToolCall (never stream the markup as text)."""
    few_shot = ChatMessage("system", SUPPORT.content + "\n\nExample:\nCaller: Check order 1234."
                           '\nYou: <tool_call>[{"name": "lookup_order", "arguments": '
                           '{"order_id": "1234"}}]</tool_call>')
    req = LLMRequest((few_shot, ChatMessage("user", "Check order 4217.")), tools=TOOLS,
                     temperature=0.0, max_tokens=48)
    out = await _run(llama_llm, req)
    text = "".join(d for d in out if isinstance(d, str))
    assert "<tool_call>" not in text and "</tool_call>" not in text
    for c in out:
        if isinstance(c, ToolCall):
            assert_valid_call(c)


async def test_context_overflow_is_a_clear_port_error(llama_llm):
    req = LLMRequest((ChatMessage("user", "word " * 9000),), max_tokens=4)
    with pytest.raises(PortError, match="over the LLM context of 8192; raise n_ctx"):
        await _run(llama_llm, req)


def test_bad_options_are_config_errors(llama_llm):
    from rejoinder.adapters._llama_engine import ChatEngine

    with pytest.raises(ConfigError, match="tool_mode"):
        llama_llm.tool_mode = "psychic"
    with pytest.raises(ConfigError, match="'{tools}'"):
        ChatEngine(llama_llm._llm, tool_prompt="no placeholder")
    assert llama_llm.tool_mode == "lazy"


def test_call_markup_is_never_spoken_when_calls_are_not_allowed(llama_llm, monkeypatch):
    """With tool_choice "none" (the reply loop's last step) a model that writes ``<tool_call>``
    anyway (it has seen calls in the history) ends its reply there: the markup is not text."""
    import threading

    engine = llama_llm.engine
    pieces = ["Let me", " check.", " <tool", "_call>[{\"name\": \"lookup_order\"", "}]</tool_call>"]
    monkeypatch.setattr(engine, "_pieces", lambda *a, **k: iter(pieces))
    req = LLMRequest((SUPPORT, ChatMessage("user", "Check order 4217.")), tools=TOOLS,
                     tool_choice="none", max_tokens=32)
    out = list(engine.generate(req, threading.Event()))
    assert all(isinstance(d, str) for d in out)
    assert "".join(out).strip() == "Let me check."


async def test_decoding_gives_up_a_thread_while_piper_claims_a_core(llama_llm, piper_tts,
                                                                     monkeypatch):
    """While a Piper synthesis runs (it claims a core: rejoinder._threads.CORES), llama.cpp
    decodes with one thread fewer (never under one) and keeps its batch threads; the threads
    come back when the claim ends. The reply decoded meanwhile is the same. (Another process's
    load, which sheds threads too, is left out: ``neighbours`` reads nothing here; its own
    tests are in tests/test_neighbours.py.)"""
    import threading

    from llama_cpp import llama_cpp as C

    from rejoinder._threads import CORES, BusyNeighbours

    ctx = llama_llm._llm._ctx.ctx
    eng = llama_llm.engine
    monkeypatch.setattr(eng, "neighbours", BusyNeighbours(read=lambda: None))
    eng.fit_threads()
    n, nb = C.llama_n_threads(ctx), C.llama_n_threads_batch(ctx)
    assert (n, nb) == (2, 2) and CORES.active == 0
    req = LLMRequest((ChatMessage("user", "Say hello."),), max_tokens=8, temperature=0.0,
                     cache_key="threads")
    alone = "".join(d for d in await _run(llama_llm, req) if isinstance(d, str))
    synth = piper_tts._synth("Hello there. This is a test.", threading.Event())
    try:
        assert next(synth).pcm.size > 0 and CORES.active == 1  # held while Piper synthesises
        eng.fit_threads()
        assert (C.llama_n_threads(ctx), C.llama_n_threads_batch(ctx)) == (1, nb)
        with CORES.claim():  # two claims on two threads: still one
            eng.fit_threads()
            assert C.llama_n_threads(ctx) == 1
        beside = "".join(d for d in await _run(llama_llm, req) if isinstance(d, str))
        assert beside == alone and beside.strip()
    finally:
        synth.close()  # (releases Piper's lock and the claim)
    assert CORES.active == 0
    eng.fit_threads()
    assert (C.llama_n_threads(ctx), C.llama_n_threads_batch(ctx)) == (n, nb)


def test_steps_on_fewer_threads_are_counted_for_the_bench(llama_llm, monkeypatch):
    """Every llama.cpp step counts in ``rejoinder._threads.FITS``, and so do those run with a
    thread shed for a busy neighbour (a scripted reading: one other process on a core of 2)
    and those with a thread given up to a claim; `rejoinder bench` reports the shares
    (``llm_thread_shares``). Threads shed and yielded are never more than the configured less
    one."""
    from llama_cpp import llama_cpp as C

    from rejoinder._threads import CORES, FITS, BusyNeighbours
    from rejoinder.harness.bench import llm_thread_shares

    ctx, eng = llama_llm._llm._ctx.ctx, llama_llm.engine
    clock, cpu = [0.0], [0.0, 0.0]  # wall s; (all processes', this one's) CPU s

    def read():
        return cpu[0], cpu[1], 2

    monkeypatch.setattr(eng, "neighbours", BusyNeighbours(read=read, now=lambda: clock[0]))
    before = FITS.snapshot()
    eng.fit_threads()
    clock[0], cpu[0], cpu[1] = 1.0, 2.0, 1.0  # a second: this process 1 core, another 1 core
    eng.fit_threads()
    assert (C.llama_n_threads(ctx), C.llama_n_threads_batch(ctx)) == (1, 1)
    with CORES.claim():  # shed already: nothing left to give up
        eng.fit_threads()
        assert C.llama_n_threads(ctx) == 1
    clock[0], cpu[1] = 2.0, 2.0  # the neighbour stopped
    with CORES.claim():
        eng.fit_threads()
        assert (C.llama_n_threads(ctx), C.llama_n_threads_batch(ctx)) == (1, 2)
    eng.fit_threads()
    assert (C.llama_n_threads(ctx), C.llama_n_threads_batch(ctx)) == (2, 2)
    shares = llm_thread_shares(before, FITS.snapshot())
    assert shares == {"llm_steps": 5, "llm_shed_pct": 40.0, "llm_yield_pct": 20.0}
    assert llm_thread_shares(FITS.snapshot(), FITS.snapshot()) == {
        "llm_steps": 0, "llm_shed_pct": None, "llm_yield_pct": None}


def test_one_thread_means_one_thread_for_batches_and_embeddings_too():
    """``n_threads: 1`` holds for prompt batches and for the embedding context as well, not only
    for decoding: llama-cpp-python's own default for batches is every CPU the machine reports,
    and two one-thread stacks on the CI's 2 shared cores then ran 2-thread teams at llama.cpp's
    barriers (two `rejoinder bench` runs at once took 260 s each instead of 75 s, and past 900 s
    on CI, stop 46)."""
    from llama_cpp import llama_cpp as C

    from rejoinder.adapters.llama_llm import LlamaLLM

    llm = LlamaLLM(n_threads=1, n_ctx=512)
    ctx = llm._llm._ctx.ctx
    assert (C.llama_n_threads(ctx), C.llama_n_threads_batch(ctx)) == (1, 1)
    assert len(llm._embed("Where is my order?")) > 0
    emb = llm._embedder._ctx.ctx
    assert (C.llama_n_threads(emb), C.llama_n_threads_batch(emb)) == (1, 1)


def test_every_support_tool_has_a_grammar_llama_cpp_takes(llama_llm):
    """The JSON-Schema converter writes a pattern's escaped dot (the ``time`` argument's
    "p.m.") as the GBNF literal ``"\\."``, which llama.cpp's parser rejects: every argument's
    grammar and every tool's whole-call grammar must parse, and the time grammar must take a
    time written with dots."""
    from llama_cpp import llama_cpp as C

    from rejoinder.adapters._toolcall import call_grammar, value_grammar
    from rejoinder.app.support import agent

    vocab = llama_llm._llm._model.vocab

    def parses(gbnf: str):
        sampler = C.llama_sampler_init_grammar(vocab, gbnf.encode(), b"root")
        return sampler or None

    for tool in agent.tools.values():
        sampler = parses(call_grammar((tool.schema,), "required", 1))
        assert sampler, tool.name
        C.llama_sampler_free(sampler)
        for key, sub in tool.schema.parameters.get("properties", {}).items():
            sampler = parses(value_grammar(sub, "}", lead=" "))
            assert sampler, (tool.name, key)
            C.llama_sampler_free(sampler)
    time = agent.tools["reschedule_appointment"].schema.parameters["properties"]["time"]
    sampler = parses(value_grammar(time, "}", lead=" "))
    try:
        for tok in llama_llm._llm.tokenize(b' "at 3 p.m."}', add_bos=False, special=False):
            arr = (C.llama_token_data * 1)(C.llama_token_data(tok, 0.0, 0.0))
            p = C.llama_token_data_array(arr, 1, -1, False)
            C.llama_sampler_apply(sampler, C.ctypes.byref(p))
            assert arr[0].logit != float("-inf"), llama_llm._llm.detokenize([tok])
            C.llama_sampler_accept(sampler, tok)
    finally:
        C.llama_sampler_free(sampler)


def test_the_reading_prior_scales_smollm2s_measured_wait_by_parameter_count(llama_llm):
    from rejoinder.adapters.llama_llm import LlamaLLM, reading_prior_ms
    from rejoinder.reply import FillerPolicy

    # the bundled 135M model: its measured wait, under the filler's bound, so the first lookup
    # of a process (an unobserved quick tool) is not filled; a 1.5B model's is over it
    assert llama_llm.reading_prior_ms == LlamaLLM.READING_PRIOR_MS < FillerPolicy().tool_wait_ms
    assert reading_prior_ms(1_540_000_000) == pytest.approx(400.0 * 1.54e9 / 134_515_008)
    assert reading_prior_ms(1_540_000_000) > FillerPolicy().tool_wait_ms
    assert reading_prior_ms(50_000_000) == LlamaLLM.READING_PRIOR_MS  # never below SmolLM2's
