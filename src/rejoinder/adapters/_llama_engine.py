"""Chat generation with native tool calls on a llama.cpp model (llama-cpp-python ``Llama``).

:class:`ChatEngine` turns an :class:`~rejoinder.ports.LLMRequest` into text deltas and
:class:`~rejoinder.ports.ToolCall` objects on a given ``Llama``. It takes no lock and keeps no
per-conversation state: :class:`~rejoinder.adapters.llama_llm.LlamaLLM` (in-process) and the chat
handler of :mod:`rejoinder.adapters.llama_server` (behind llama-cpp-python's OpenAI-compatible
server) wrap it, so both behave alike. The chat and tool-call format (rendering, call opener and
closer, parsing) is a :class:`._chatformat.ChatFormat` read from the model's GGUF metadata;
grammars: :mod:`._toolcall`.
"""

from __future__ import annotations

import codecs
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any, Iterator

from .._threads import CORES, FITS, BusyNeighbours
from ..errors import ConfigError
from ..ports import ChatMessage, LLMDelta, LLMRequest, PortError, ToolCall, ToolDecision
from ._chatformat import ChatFormat, format_for
from ._decide import DecideStep
from ._echo import end_mask, is_echo, repeats_itself
from ._fastgrammar import GrammarMask
from ._gate import LabelGate
from ._scope import DEFAULT_SCOPE_PROMPT, SCOPE_GRAMMAR, ScopeStep
from ._grounded import after_tool_result, reply_facts, reply_grammar, reply_vocabulary
from ._which import ARGUMENT_LEAD, IRREVERSIBLE_MARGIN, ExampleMatcher
from ._ask import (DECLINED_GRAMMAR, DEFAULT_DECLINED_PROMPT, QUESTION_GRAMMAR, ask_note,
                   missing_arguments)
from ._kvcache import common_prefix, extend, reuse_shifted
from ._toolcall import (DEFAULT_TOOL_PROMPT, DEFAULT_TOOL_RESULT_PROMPT, TOOL_CALL_CLOSE,
                        SentinelScanner, argument_sources, call_grammar, check_tool_choice,
                        grounded_values, json_complete, names_grammar, object_plan,
                        value_grammar)

TOOL_MODES = ("gate", "lazy", "eager")


@dataclass
class RequestStats:
    """Token counts of the last request (counts, not times: adapters never time themselves).

    ``prefilled`` is how many prompt tokens were evaluated before the first sampled token, i.e.
    those not already in the KV cache; ``prompt`` is the prompt's length in tokens; ``shifted``
    how many cached tokens were moved into place after a dropped span of history."""

    prompt: int = 0
    prefilled: int = 0
    shifted: int = 0
    generated: int = 0
    tool_calls: int = 0
    echo_resumed: int = 0  # times an echo of the caller was not let end (._echo)
    loop_cut: int = 0  # 1 when the text reply was ended because it repeated itself (._echo)


class ChatEngine(ScopeStep, DecideStep):
    """Generates one assistant message on ``llm`` (a ``llama_cpp.Llama``).

    **Format.** ``chat_format`` (a :class:`._chatformat.ChatFormat`, a format name, or None: read
    from ``llm.metadata``, :func:`._chatformat.detect_format`) renders the prompt and gives the
    call opener (``format.call_open``; ``<tool_call>`` below), the call's layout and its parser;
    ``tool_prompt`` and ``tool_result_prompt`` shape the ``smollm2`` format only (a template
    lists tools and results its own way). Eager mode needs a format with an empty call list
    (``format.empty_call``); with the others it behaves as lazy.

    **Tool calling.** ``LLMRequest.tools`` are listed in the system prompt (``tool_prompt``)
    when ``tools_in_prompt`` (default: in every mode but ``"gate"``). In gate mode the
    conversation's prompt lists no tools: the gate decides with a prompt of its own, the call's
    name and argument keys are forced and its values grounded or grammar-held, and SmolLM2-135M's
    replies to small talk and out-of-scope requests read better without a tool list before the
    conversation (it answered "I'm here to help with your orders and appointments" in 2 of 8
    probes with none, 0 of 8 with one; 2026-12-03). A required or named call lists them. With
    ``tool_choice="required"`` or a tool's name the reply starts with ``<tool_call>`` and is
    sampled under grammars built from the declared tools' schemas, so each call names a declared
    tool with schema-valid arguments; it is yielded as one ToolCall. ``"none"`` samples text
    only (the tools stay in the system prompt, so the cached prefix stays the same). ``"auto"``
    depends on ``tool_mode``:

    - ``"gate"`` (default): when the last message is the caller's, the tool gate
      (:class:`._gate.LabelGate`: label likelihoods in a narrow few-shot prompt of the tools'
      examples, contextually calibrated) decides talk or call and which tool, against
      ``request.tool_threshold`` or, without one, ``tool_threshold`` (the model's calibration).
      With ``embed`` (a sentence-embedding function: MiniLM, or a GGUF's; ``check_embed``, a
      second one, may veto a call as small talk and judges confirmations) and ``tool_which``
      ``"examples"`` (default), *which* tool is the one whose example is nearest the caller's
      words (:mod:`._which`; ``"probe"``: the most probable under a logistic regression fitted
      on the examples' embeddings, :mod:`._probe`) when every allowed tool has examples; otherwise (or with
      ``"labels"``) the best label. A yes/no answer to a confirmation question is judged with
      ``embed`` in both modes. With ``talk_veto`` (default on) the small-talk
      examples compete there too: when one lies nearer than every tool's, no tool is called.
      A tool that acts at once and cannot be undone (``ToolSchema.irreversible``: hanging up,
      transferring) must lie nearer than every other candidate by ``irreversible_margin``
      (cosine, default 0.05), else it is set aside (:func:`._which.clear_pick`). When the
      caller said every typed argument of some tools (an order number; a weekday and a time),
      one of those is picked unless another leads it by ``argument_lead`` (cosine, default
      0.15; :func:`._which.said_pick`).
      The decision is yielded first as a :class:`~rejoinder.ports.ToolDecision` (``decision``
      passes one made beforehand); then either the chosen tool's call is written under its
      grammar, or text is sampled (call markup then ends the reply). After a tool result the
      reply goes on as in lazy mode.
    - ``"lazy"``: sample freely and stream text at once; only text that may be the start of
      ``<tool_call>`` is held back. If the model writes the opener, the rest is sampled under the
      call grammars (the KV cache holds everything so far, so the switch costs a token or two).
    - ``"eager"``: when the last message is the caller's, first sample ``<tool_call>[`` under a
      grammar that also allows ``[]`` (no call), as SmolLM2's function-calling data does; an
      empty list falls back to text. Text replies pay the 6-token opener and one
      grammar-constrained token before their first token. After a tool result the reply goes
      on as in lazy mode (SmolLM2-135M would otherwise call again at every step).

    One call per message (``max_tool_calls=1``) is written piece by piece: the JSON structure and
    argument keys are forced, only the tool name and the argument values are sampled. A string
    argument with a ``pattern`` or an ``enum`` is *grounded* (``ground_arguments``, default on):
    when spans of the caller's last message fit it whole, the value is the one said last
    (:func:`._toolcall.grounded_values`; a self-repair follows what it corrects), otherwise it
    is sampled under the schema. After a tool result, a call the model opens may only go to a
    tool whose typed arguments the caller said (:meth:`follow_up_request`): with none, the
    reply goes on as text (SmolLM2-135M called ``lookup_order`` with a made-up "1234" after
    reading a cancellation's result, 4 of 4 calls of the blind suite's
    ``blind-cancel-friday-consultation-yes``, 2026-12-07). A text reply to the caller may not
    end as a copy of the caller's words
    (``no_echo``, default on, :mod:`._echo`): sampling resumes with the end masked
    (``RequestStats.echo_resumed``). When the gate talks because its tool's typed argument
    was not said (an order number), the reply is one question for it (``ask_missing``, default
    on: a note of what is missing and a question grammar, :mod:`._ask`;
    ``ToolDecision.ask_for``); when the caller's answer to an irreversible tool's question
    (``LLMRequest.confirming``) is not a yes, the reply says nothing was done (``decline_note``,
    default on: a note and an acknowledgement grammar, :mod:`._ask`); when the agent declares
    its scope (``LLMRequest.scope``) and the gate said talk to a request, the reply says what
    the agent helps with (``scope_note``, :class:`._scope.ScopeStep`). A text reply after a
    tool result is *grounded* (``grounded_replies``, default on, :mod:`._grounded`): sampled under a grammar of the
    results' words and values, the caller's, the instructions' (no digits) and common words, so
    its numbers and dates come from the results, and (``facts_first``, default on) its first
    sentence says the result's fact words in order (:func:`._grounded.reply_facts`). A call is
    capped at ``max(request.max_tokens, tool_call_tokens)`` sampled tokens; one cut there is a
    :class:`PortError`. Sampling: top-k 40, top-p 0.95, min-p 0.05 at ``request.temperature``
    (greedy at 0), seeded with ``seed`` per request.

    Raises:
        ConfigError: an unknown ``tool_mode``, a ``tool_prompt`` without ``{tools}``, a format
            that cannot be determined, or ``max_tool_calls > 1`` with a format other than smollm2.
    """

    def __init__(self, llm: Any, *, seed: int = 0, tool_prompt: str = DEFAULT_TOOL_PROMPT,
                 tool_result_prompt: str = DEFAULT_TOOL_RESULT_PROMPT, tool_mode: str = "gate",
                 max_tool_calls: int = 1, tool_call_tokens: int = 128,
                 tool_threshold: float = 0.0, threshold_source: str = "default",
                 chat_format: ChatFormat | str | None = None, ground_arguments: bool = True,
                 no_echo: bool = True, embed: Any = None, check_embed: Any = None,
                 grounded_replies: bool = True,
                 talk_veto: bool = True, tools_in_prompt: bool | None = None,
                 facts_first: bool = True, tool_which: str = "examples",
                 ask_missing: bool = True, irreversible_margin: float = IRREVERSIBLE_MARGIN,
                 argument_lead: float = ARGUMENT_LEAD) -> None:
        if tool_mode not in TOOL_MODES:
            raise ConfigError(f"tool_mode must be one of {', '.join(TOOL_MODES)}, "
                              f"not {tool_mode!r}")
        if "{tools}" not in tool_prompt:
            raise ConfigError("tool_prompt must contain '{tools}' (where the tool list goes)")
        self._llm = llm
        self.format = (chat_format if isinstance(chat_format, ChatFormat)
                       else llama_format(llm, chat_format))
        if max_tool_calls > 1 and self.format.name != "smollm2":
            raise ConfigError(f"max_tool_calls > 1 is supported in the smollm2 format only, not "
                              f"{self.format.name!r}; set llama.max_tool_calls to 1")
        self.seed = seed
        self.tool_prompt = tool_prompt
        self.tool_result_prompt = tool_result_prompt
        self.tool_mode = tool_mode
        self.max_tool_calls = max(1, max_tool_calls)
        self.tool_call_tokens = tool_call_tokens
        self.tool_threshold = tool_threshold
        self.threshold_source = threshold_source
        self.ground_arguments = ground_arguments
        self.no_echo = no_echo
        self.grounded_replies = grounded_replies
        self.facts_first = facts_first
        self.ask_missing = ask_missing
        #: a caller's answer to an irreversible tool's question that is not a yes gets a reply
        #: saying nothing was done (:data:`._ask.DEFAULT_DECLINED_PROMPT`; settable)
        self.decline_note = True
        self.irreversible_margin = irreversible_margin
        self.argument_lead = argument_lead
        #: once the gate decides to call: "probe" (a logistic regression on ``embed``'s
        #: space, :mod:`._probe`), "examples" (the nearest example there, :mod:`._which`) or
        #: "labels" (the best label); a confirmation is answered with
        #: ``embed`` either way
        self.which = tool_which
        self.talk_veto = talk_veto
        self.tools_in_prompt = tools_in_prompt  # None: decided by the tool mode in use
        self.embed = embed
        #: a second embedding (or None) whose small-talk verdict can veto a call and that
        #: judges a yes or no answer (:class:`._which.TalkCheckedMatcher`)
        self.check_embed = check_embed
        self._matchers: OrderedDict[tuple, Any] = OrderedDict()
        self._eog: list[int] | None = None
        self._threads: tuple[int, int] | None = None  # (configured decode, batch) threads
        self._set: tuple[int, int] | None = None  # (decode, batch) threads set now (None: configured)
        #: sheds threads while other processes keep the cores busy
        self.neighbours = BusyNeighbours()
        self._gates: OrderedDict[tuple, LabelGate] = OrderedDict()
        self._gbnf: OrderedDict[str, str] = OrderedDict()
        self._checked: set[str] = set()
        self._raw_calls: OrderedDict[tuple[str, ...], str] = OrderedDict()
        self.last_stats = RequestStats()

    # -- prompt and grammars -------------------------------------------------------------
    def _grammar(self, gbnf: str) -> str:
        """``gbnf``, checked once to parse: :meth:`_pieces` builds its llama.cpp grammar sampler
        (:class:`._fastgrammar.GrammarMask`) for every request, and a grammar llama.cpp cannot
        parse would otherwise fail there.

        Raises:
            PortError: llama.cpp rejects the grammar.
        """
        from llama_cpp import llama_cpp as C

        if gbnf not in self._checked:
            sampler = C.llama_sampler_init_grammar(self._llm._model.vocab, gbnf.encode("utf-8"),
                                                   b"root")
            if not sampler:
                raise PortError(f"llama.cpp rejected the grammar: {gbnf[:300]!r}")
            C.llama_sampler_free(sampler)
            self._checked.add(gbnf)
            if len(self._checked) > 1024:
                self._checked.clear()
        return gbnf

    def _schema_grammar(self, schema: dict[str, Any]) -> str:
        from llama_cpp.llama_grammar import json_schema_to_gbnf

        key = json.dumps(schema, sort_keys=True)
        gbnf = self._gbnf.get(key)
        if gbnf is None:
            try:
                gbnf = json_schema_to_gbnf(json.dumps(schema))
            except Exception as exc:
                raise PortError(f"cannot build a grammar from the JSON schema: {exc}") from exc
            self._gbnf[key] = gbnf
            if len(self._gbnf) > 256:
                self._gbnf.popitem(last=False)
        return self._grammar(gbnf)

    def _tokens(self, text: str, bos: bool = True) -> list[int]:
        return self._llm.tokenize(text.encode("utf-8"), add_bos=bos, special=True)

    def prompt(self, request: LLMRequest) -> str:
        """The prompt text of ``request`` (ending with the open assistant turn and the prefix)."""
        tools = request.tools if self._lists_tools(request.tool_choice) else ()
        return self.format.render(request.messages, tools, tool_prompt=self.tool_prompt,
                                  tool_result_prompt=self.tool_result_prompt,
                                  raw_calls=self._raw_calls) + request.prefix

    def _lists_tools(self, tool_choice: str = "auto") -> bool:
        """Whether a prompt lists the tools (``tools_in_prompt``; a required or named call
        always does: the model then picks among them from their descriptions)."""
        listed = self.tool_mode != "gate" if self.tools_in_prompt is None else self.tools_in_prompt
        return listed or tool_choice not in ("auto", "none")

    def system_prefix(self, system: str, tools: Any = ()) -> str:
        """The system turn (``system`` and ``tools``) as every prompt of the conversation starts."""
        return self.format.system_prefix(system, tools if self._lists_tools() else (),
                                         tool_prompt=self.tool_prompt)

    # -- sampling -----------------------------------------------------------------------------
    def fit_threads(self) -> None:
        """Decode with one thread fewer per core another model of this process claims now
        (:class:`rejoinder._threads.CoreClaims`; batches, i.e. prompt evaluation, keep theirs),
        and decode and evaluate batches with the threads :attr:`neighbours` sheds while other
        processes keep the cores busy; never under one thread, the configured counts otherwise.
        Called on the llama.cpp thread between tokens and before prompt evaluation (a llama.cpp
        call per change)."""
        ctx = getattr(self._llm, "_ctx", None)
        params = getattr(self._llm, "context_params", None)
        if ctx is None or params is None:
            return
        if self._threads is None:
            self._threads = (int(params.n_threads), int(params.n_threads_batch))
        shed = self.neighbours.update(max(self._threads))
        yielded = min(CORES.active, max(0, self._threads[0] - shed - 1))
        FITS.add(shed, yielded)
        want = (max(1, self._threads[0] - shed - yielded), max(1, self._threads[1] - shed))
        if want != (self._set or self._threads):
            ctx.set_n_threads(*want)
            self._set = want

    def _pieces(self, tokens: list[int], temperature: float, grammar: str | None,
                max_tokens: int, stop: threading.Event, first: bool,
                echo_of: str = "") -> Iterator[str]:
        """Sample after ``tokens`` and yield decoded text pieces until an end-of-generation
        token, ``max_tokens`` or ``stop``; ``grammar`` (GBNF from :meth:`_grammar`) constrains
        every token (:class:`._fastgrammar.GrammarMask`: the likely tokens are matched first).
        With ``echo_of`` (the caller's words), an end while the text is still a copy of them
        resumes sampling with the end masked (:mod:`._echo`)."""
        from llama_cpp import llama_cpp as C

        llm = self._llm
        n_ctx = llm.n_ctx()
        if len(tokens) >= n_ctx:
            raise PortError(f"the conversation is {len(tokens)} tokens, over the LLM context of "
                            f"{n_ctx}; raise n_ctx (llama.n_ctx in the config) or shorten the "
                            f"history")
        if first:
            self.last_stats.shifted = reuse_shifted(llm, tokens)
            lcp = common_prefix(llm.input_ids[: llm.n_tokens], tokens)
            self.last_stats.prompt = len(tokens)
            self.last_stats.prefilled = max(1, len(tokens) - lcp)
        budget = min(max_tokens, n_ctx - len(tokens))
        vocab = llm._model.vocab
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        emitted: list[int] = []
        said = [""]
        mask = None
        constrain = GrammarMask(llm, grammar) if grammar else None
        while True:
            self.fit_threads()
            procs = [p for p in (constrain, mask) if p is not None] or None
            gen = llm.generate(tokens + emitted, temp=max(0.0, temperature), top_k=40, top_p=0.95,
                               min_p=0.05, repeat_penalty=1.0, logits_processor=procs)
            ended = False
            try:
                for token in gen:
                    if stop.is_set():
                        return
                    if C.llama_vocab_is_eog(vocab, token):
                        ended = True
                        break
                    emitted.append(token)
                    self.fit_threads()  # for the next token's decode
                    self.last_stats.generated += 1
                    piece = decoder.decode(llm.detokenize([token]))
                    if piece:
                        said[0] += piece
                        yield piece
                    if len(emitted) >= budget:
                        return
            finally:
                gen.close()
                if constrain is not None and not ended:
                    constrain.close()  # (an end resumed below keeps the grammar's state)
            if not (ended and mask is None and echo_of and is_echo(said[0], echo_of)):
                if constrain is not None:
                    constrain.close()
                return
            self.last_stats.echo_resumed += 1
            mask = end_mask(self._eog_ids(), lambda: is_echo(said[0], echo_of))

    def _eog_ids(self) -> list[int]:
        """The model's end-of-generation token ids (looked up once)."""
        if self._eog is None:
            from llama_cpp import llama_cpp as C

            vocab = self._llm._model.vocab
            self._eog = [i for i in range(self._llm.n_vocab()) if C.llama_vocab_is_eog(vocab, i)]
        return self._eog

    def gates(self, request: LLMRequest) -> bool:
        """Whether :meth:`generate` decides ``request`` with the tool gate."""
        return (self.tool_mode == "gate" and bool(request.tools) and request.tool_choice == "auto"
                and self._after_user(request))

    def _calls(self, head: list[int], request: LLMRequest, stop: threading.Event,
               allow_empty: bool, first: bool) -> list[ToolCall] | None:
        """Sample the calls that follow ``head`` (prompt tokens ending with the call opener).

        One call per message (the default) is written piece by piece: the JSON structure and the
        argument keys are forced (evaluated as one prompt batch), only the decision (``]`` or a
        call), the tool name and each argument value are sampled, each under its own grammar.
        That samples about a third of the tokens a whole-call grammar samples. With
        ``max_tool_calls > 1`` the whole list is sampled under :func:`._toolcall.call_grammar`.
        Returns the calls ([] for an empty list), or None when cancelled.
        """
        cap = max(request.max_tokens, self.tool_call_tokens)
        start = self.last_stats.generated
        state = {"first": first}

        def sample(text: str, gbnf: str, done: Any) -> str | None:
            left = cap - (self.last_stats.generated - start)
            out = ""
            if left > 0:
                tokens = head + self._tokens(text, bos=False) if text else head
                for piece in self._pieces(tokens, request.temperature, self._grammar(gbnf),
                                          left, stop, state["first"]):
                    out += piece
                    if done(out):
                        state["first"] = False
                        return out
            if stop.is_set():
                return None
            raise PortError(f"the model's tool call was cut at {cap} tokens: {text + out!r}")

        if self.max_tool_calls > 1:
            gbnf = call_grammar(request.callable_tools(), request.tool_choice, self.max_tool_calls,
                                allow_empty=allow_empty)
            raw = sample("", gbnf, lambda o: o.rstrip().endswith(TOOL_CALL_CLOSE))
        else:
            raw = self._one_call(request, allow_empty, sample)
        if raw is None:
            return None
        calls = self.format.parse(raw, request.tools)
        if calls:
            self._raw_calls[tuple(c.id for c in calls)] = raw
            if len(self._raw_calls) > 4096:
                self._raw_calls.popitem(last=False)
        self.last_stats.tool_calls = len(calls)
        return calls

    def _one_call(self, request: LLMRequest, allow_empty: bool, sample: Any) -> str | None:
        """One call in the format's layout after its opener (SmolLM2:
        ``[{"name": …, "arguments": …}]</tool_call>``, or ``[]</tool_call>``), forcing what the
        schemas fix and sampling the rest with ``sample(text_so_far, gbnf, done)``."""
        fmt = self.format
        if allow_empty and fmt.empty_call:
            out = sample(fmt.decide_text, fmt.decide_grammar,
                         lambda o: o.lstrip("\n")[:1] in ("]", "{"))
            if out is None:
                return None
            if out.lstrip("\n").startswith("]"):
                return fmt.empty_body
        tools = [t for t in request.callable_tools()  # allowed_tools: only these may be called
                 if request.tool_choice in ("auto", "required") or t.name == request.tool_choice]
        text = fmt.name_prefix
        if len(tools) == 1:
            name = tools[0].name
        else:
            out = sample(text, names_grammar([t.name for t in tools]), lambda o: o.endswith('"'))
            if out is None:
                return None
            name = out[:-1]
        # forced text ends before the space that precedes a value, so the model writes the
        # space-and-quote token it knows (` "`) instead of continuing an unusual lone space
        text += f'{name}", "{fmt.args_key}":'
        schema = next(t for t in tools if t.name == name).parameters
        said = self._caller_said(request) if self.ground_arguments else ""
        sources = argument_sources(schema, said, self._caller_before(request)) if said else {}
        plan = object_plan(schema, said if self.ground_arguments else None)
        if plan is None:  # free-text optional or extra properties: sample the whole object
            out = sample(text, value_grammar(schema, "}", lead=" "),
                         lambda o: json_complete(o, "}"))
            if out is None:
                return None
            return text + out + fmt.call_tail
        text += " {"
        for i, (key, sub) in enumerate(plan):
            text += (" " if i else "") + json.dumps(key) + ":"
            sep = "," if i < len(plan) - 1 else "}"
            source = sources.get(key, said)  # the last message, or the one before it
            spans = grounded_values(sub, source)
            if spans:  # the caller's own words, forced: the last said (a self-repair comes after
                # what it corrects, Levelt 1983: "Monday at 2. Sorry, I mean Tuesday")
                low = source.lower()
                value = max(spans, key=lambda v: (low.rfind(v.lower()), len(v)))
                text += f" {json.dumps(value)}{sep}"
                continue
            gbnf = value_grammar(sub, sep, lead=" ")
            out = sample(text, gbnf, lambda o, sep=sep: json_complete(o, sep))
            if out is None:
                return None
            text += out
        if not plan:
            text += "}"
        return text + "}" + fmt.call_tail

    @staticmethod
    def _caller_said(request: LLMRequest) -> str:
        """The caller's last message in ``request`` ("" when there is none)."""
        for m in reversed(request.messages):
            if m.role == "user":
                return m.content
        return ""

    def follow_up_request(self, request: LLMRequest) -> LLMRequest | None:
        """The request a call the model opens in the text of ``request`` is written under: after
        a tool result (with ``ground_arguments``), only the tools whose required typed arguments
        the caller's words ground (:func:`._ask.missing_arguments`: the last message, or the one
        before it as :func:`._toolcall.argument_sources` allows) — the gate's own rule for a
        first call (narrowing ``allowed_tools``); None when no tool is left. Otherwise
        ``request`` itself."""
        if not (self.ground_arguments and after_tool_result(request.messages)):
            return request
        said, before = self._caller_said(request), self._caller_before(request)
        callable_ = request.callable_tools()
        keep = tuple(t.name for t in callable_
                     if not missing_arguments(t.parameters or {}, said, before))
        if not keep:
            return None
        return request if len(keep) == len(callable_) else replace(request, allowed_tools=keep)

    @staticmethod
    def _caller_before(request: LLMRequest) -> str:
        """The caller's message before their last one ("" when there is none)."""
        said = [m.content for m in request.messages if m.role == "user"]
        return said[-2] if len(said) > 1 else ""

    def _reply_grammar(self, request: LLMRequest, opener: str | None) -> str | None:
        """The grammar of a text reply: the request's JSON schema, else after a tool result a
        grounded reply (:mod:`._grounded`, when ``grounded_replies``), else none."""
        if request.json_schema:
            return self._schema_grammar(request.json_schema)
        if not (self.grounded_replies and after_tool_result(request.messages)):
            return None
        words, phrases = reply_vocabulary(request.messages)
        opens = (self.format.call_open, *self.format.alt_opens) if opener == "call" else ()
        facts = (reply_facts(request.messages, skip={t.name for t in request.tools if not t.tells})
                 if self.facts_first else ())
        return self._grammar(reply_grammar(words, phrases, opens, facts=facts))

    def _text(self, prompt: str, request: LLMRequest, stop: threading.Event, *,
              opener: str | None, first: bool, echo_of: str = "",
              grammar: str | None = None) -> Iterator[LLMDelta]:
        """Stream text after ``prompt``. ``opener="call"``: the call opener switches to the call
        grammar; ``"stop"``: it ends the reply; None: it is plain text. ``grammar`` (GBNF)
        replaces the reply's own (:meth:`_reply_grammar`)."""
        grammar = self._grammar(grammar) if grammar else self._reply_grammar(request, opener)
        call_open = self.format.call_open
        openers = (call_open, *self.format.alt_opens)
        scanner = SentinelScanner((openers if opener else ()) + tuple(request.stop))
        said = ""
        for piece in self._pieces(self._tokens(prompt), request.temperature, grammar,
                                  request.max_tokens, stop, first, echo_of):
            safe, hit = scanner.feed(piece)
            if safe:
                said += safe
                yield safe
                if repeats_itself(said):  # greedy decoding fell into a loop: end the reply here
                    self.last_stats.loop_cut = 1
                    return
            if hit in openers and opener == "call":  # an alternative opener: written canonically
                callable_ = self.follow_up_request(request)
                if callable_ is None:  # no tool it could call with the caller's words: talk on
                    yield from self._text(prompt + said, request, stop, opener="stop",
                                          first=False)
                    return
                head = self._tokens(prompt + said + call_open)
                calls = self._calls(head, callable_, stop, True, False)
                if calls:
                    yield from calls
                elif calls is not None:  # "[]": the model chose no call after all
                    yield from self._text(prompt + said, request, stop, opener="stop",
                                          first=False)
                return
            if hit is not None:
                return
        if not stop.is_set():
            tail = scanner.flush()
            if tail:
                yield tail

    def prefill(self, request: LLMRequest) -> int:
        """Evaluate the conversation's prompt of ``request`` (its last message the caller's,
        still empty: the next turn's request, built while the caller speaks) up to where the
        caller's words go, so that the request itself only prefills them. Returns the tokens
        evaluated (blocking; the caller holds the model's lock with the conversation's cache key
        active). 0 when the format puts nothing before the caller's words that is not already
        cached."""
        last = request.messages[-1] if request.messages else None
        if last is None or last.role != "user":
            return 0
        mark = "\x00"
        probe = replace(request, messages=(*request.messages[:-1], replace(last, content=mark)))
        text = self.prompt(probe)
        if mark not in text:
            return 0
        tokens = self._tokens(text.split(mark, 1)[0])
        self.fit_threads()
        return extend(self._llm, tokens[:-1])  # the last token may merge with the caller's words

    @staticmethod
    def _after_user(request: LLMRequest) -> bool:
        """Eager decisions are taken on a caller's message only: after a tool result (or an
        assistant prefix) the reply goes on lazily, else a small model calls again and again."""
        return bool(request.messages) and request.messages[-1].role == "user" and not request.prefix

    @staticmethod
    def _answers_caller(request: LLMRequest) -> bool:
        """Whether the reply answers the caller's last message: it comes right after it, or after
        that turn's tool calls and results, with no assistant prefix. The no-echo rule
        (:mod:`._echo`) holds for both: after ``transfer_to_human``'s result Qwen2.5-Coder-1.5B
        said the caller's request back word for word ("Hi, I'd much rather talk this over with an
        actual member of your team, if that's all right."; ``fresh-team-member-please``,
        2026-12-07)."""
        if request.prefix:
            return False
        for m in reversed(request.messages):
            if m.role == "tool" or (m.role == "assistant" and m.tool_calls):
                continue
            return m.role == "user"
        return False

    @property
    def eager_decides(self) -> bool:
        """Eager mode decides inside the call (needs the format's empty call list)."""
        return self.tool_mode == "eager" and self.format.empty_call

    def generate(self, request: LLMRequest, stop: threading.Event,
                 decision: ToolDecision | None = None) -> Iterator[LLMDelta]:
        """Yield the reply's text deltas and ToolCalls; stop before the next token once ``stop``
        is set. The caller serialises calls (one ``Llama`` context).

        Raises:
            PortError: llama.cpp failed, a bad schema or ``tool_choice``, a call cut by its
                token budget, or a conversation longer than the context.
        """
        check_tool_choice(request.tools, request.tool_choice)
        prompt = self.prompt(request)
        echo = (self._caller_said(request) if self.no_echo and self._answers_caller(request)
                and not request.json_schema else "")
        choice = request.tool_choice if request.tools else "none"
        self.last_stats = RequestStats()
        try:
            self._llm.set_seed(self.seed)
            if choice not in ("auto", "none"):
                head = self._tokens(prompt + self.format.call_open)
                yield from self._calls(head, request, stop, False, True) or ()
            elif self.gates(request):
                if decision is None:
                    decision = self.decide(request)
                    if self.asks_scope(request, decision):
                        decision = self.scope_decision(request, decision)
                yield decision
                if decision.chosen is not None:
                    head = self._tokens(prompt + self.format.call_open)
                    forced = replace(request, tool_choice=decision.chosen)
                    yield from self._calls(head, forced, stop, False, True) or ()
                elif request.confirming is not None and self.decline_note:
                    # not a yes to the tool's question: nothing was done, and the reply says so
                    declined = replace(request, messages=(
                        *request.messages, ChatMessage("system", DEFAULT_DECLINED_PROMPT)))
                    yield from self._text(self.prompt(declined), request, stop, opener="stop",
                                          first=True, echo_of=echo, grammar=DECLINED_GRAMMAR)
                elif decision.ask_for:  # a typed argument is missing: one question for it
                    asked = replace(request, messages=(
                        *request.messages, ChatMessage("system", ask_note(decision.ask_for))))
                    yield from self._text(self.prompt(asked), request, stop, opener="stop",
                                          first=True, echo_of=echo, grammar=QUESTION_GRAMMAR)
                elif decision.unserved:  # a request no tool serves: what the agent helps with
                    scoped = replace(request, messages=(
                        *request.messages,
                        ChatMessage("system", DEFAULT_SCOPE_PROMPT.format(scope=request.scope))))
                    yield from self._text(self.prompt(scoped), request, stop, opener="stop",
                                          first=True, echo_of=echo, grammar=SCOPE_GRAMMAR)
                else:  # (the gate's prompt is its own: this is the conversation's first sample)
                    yield from self._text(prompt, request, stop, opener="stop", first=True,
                                          echo_of=echo)
            elif choice == "auto" and self.eager_decides and self._after_user(request):
                head = self._tokens(prompt + self.format.call_open)
                calls = self._calls(head, request, stop, True, True)
                if calls:
                    yield from calls
                elif calls is not None:
                    yield from self._text(prompt, request, stop, opener="stop", first=False,
                                          echo_of=echo)
            else:
                # with tool_choice "none" (or no tools), call markup the model writes anyway
                # (it has seen calls in the history) ends the reply: never spoken to the caller
                yield from self._text(prompt, request, stop,
                                      opener="call" if choice == "auto" else "stop", first=True,
                                      echo_of=echo)
        except PortError:
            raise
        except Exception as exc:
            raise PortError(f"llama.cpp failed: {type(exc).__name__}: {exc}") from exc


def llama_format(llm: Any, chat_format: str | None = None) -> ChatFormat:
    """The :class:`ChatFormat` of a loaded ``Llama``: from its GGUF metadata (``llm.metadata``)
    unless ``chat_format`` names one; the BOS/EOS texts from its vocabulary.

    Raises:
        ConfigError: the format cannot be determined (see :func:`._chatformat.detect_format`).
    """
    meta = dict(getattr(llm, "metadata", None) or {})

    def text(token: int) -> str:
        try:
            return llm.detokenize([token], special=True).decode("utf-8", "replace") if token >= 0 else ""
        except Exception:  # noqa: BLE001 — a vocabulary without that token
            return ""

    return format_for(meta, chat_format, source=str(getattr(llm, "model_path", "the model")),
                      bos_token=text(llm.token_bos()), eos_token=text(llm.token_eos()))
