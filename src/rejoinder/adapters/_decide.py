"""The embedded tool decision: talk or call, and which tool, for a caller's message.

:class:`DecideStep` is the part of :class:`._llama_engine.ChatEngine` that decides; the engine
writes the call or the reply afterwards. The decision combines, in order: a typed argument said
alone (:meth:`DecideStep.value_decision`), the label gate's calibrated margin
(:class:`._gate.LabelGate`), the nearest tool example in sentence embeddings
(:class:`._which.ExampleMatcher`, small talk competing), the arguments the caller actually said
(:meth:`DecideStep._grounding`), the yes or no an answer to a confirmation question opens with
(:mod:`._yesno`), an irreversible tool's clear lead (:func:`._which.clear_pick`)
and a withheld tool's cue (``LLMRequest.withheld``). Each rule's source and measured effect is
in its docstring or comment; the resulting :class:`~rejoinder.ports.ToolDecision` names the rule
that decided (``which``).

The mixin uses the engine's attributes: ``_llm``, ``embed``, ``check_embed``, ``which``,
``talk_veto``, ``irreversible_margin``, ``argument_lead``, ``ground_arguments``, ``ask_missing``,
``tool_threshold``, ``threshold_source``, ``_gates``, ``_matchers``, and its methods
``fit_threads``, ``gates``, ``_caller_said`` and ``_caller_before``.
"""

from __future__ import annotations

import math

from ..ports import LLMRequest, ToolDecision, ToolSchema
from ._ask import missing_arguments
from ._gate import DEFAULT_TALK_EXAMPLES, LabelGate
from ._probe import tool_chooser
from ._toolcall import groundable, value_alone
from ._yesno import answer_polarity
from ._which import (CONFIRM_NO, CONFIRM_YES, TALK, ExampleMatcher, TalkCheckedMatcher, clear_pick,
                     said_pick)


class DecideStep:
    """Talk or call, and which tool (mixed into :class:`._llama_engine.ChatEngine`)."""

    def gate_for(self, tools: tuple[ToolSchema, ...], talk_examples: tuple[str, ...] = ()) -> LabelGate:
        """The tool gate of ``tools`` and ``talk_examples`` (kept per tool set)."""
        key = (tuple((t.name, t.description, t.examples) for t in tools), talk_examples)
        gate = self._gates.get(key)
        if gate is None:
            gate = LabelGate(tools, DEFAULT_TALK_EXAMPLES + tuple(talk_examples))
            self._gates[key] = gate
            if len(self._gates) > 32:
                self._gates.popitem(last=False)
        self._gates.move_to_end(key)
        return gate

    def value_decision(self, request: LLMRequest) -> ToolDecision | None:
        """The decision when the caller said nothing but the one typed argument of one
        callable tool (``"4, 2, 1, 7."`` and ``lookup_order``'s ``order_id`` pattern,
        :func:`._toolcall.value_alone`): that tool, without scoring (``which="alone"``, no
        scores, an infinite margin). None otherwise, and always for an answer to a
        confirmation question or with ``ground_arguments`` off.

        Why: the answer to "what's the order number?" is the number alone, and the agent's
        instructions say a number alone is an order number. Scored, such a message was called
        anyway: by the gate and its nearest example when the margin passed, by the same rule
        (``which="value"``) when it did not (Qwen2.5-Coder-1.5B's bare "4, 2, 1, 7." scored
        4.35 against its 4.77). The scoring cost the bundled call's lookup turn ≈ 140 ms (a
        label pass, a sentence embedding and two KV-state swaps) on the caller's wait."""
        if not self.ground_arguments or request.confirming is not None or not self.gates(request):
            return None
        alone = value_alone(request.callable_tools(), self._caller_said(request))
        if alone is None:
            return None
        return ToolDecision(alone, {}, math.inf, *self._threshold(request), "alone")

    def answer_decision(self, request: LLMRequest) -> ToolDecision | None:
        """The decision on an answer to an irreversible tool's question
        (``request.confirming``) that opens with yes or no (:func:`._yesno.answer_polarity`):
        the tool on a yes, talk on a no (the reply then says nothing was done), without scoring
        (``which="yesno"``, no scores; margin +inf or −inf, recorded as null). None when the
        answer opens with neither, and the model decides (:meth:`decide`)."""
        if request.confirming is None:
            return None
        lead = answer_polarity(self._caller_said(request))
        if lead is None:
            return None
        return ToolDecision(request.confirming if lead else None, {}, math.inf if lead else -math.inf,
                            *self._threshold(request), "yesno")

    def unscored_decision(self, request: LLMRequest) -> ToolDecision | None:
        """The decision that needs no scoring (so no KV swap to the gate's state): a typed
        argument said alone (:meth:`value_decision`), else a yes or no lead answering a
        confirmation question (:meth:`answer_decision`); None when the gate must score."""
        alone = self.value_decision(request)
        return alone if alone is not None else self.answer_decision(request)

    def _threshold(self, request: LLMRequest) -> tuple[float, str]:
        """The gate's threshold for ``request`` and where it came from: the request's (the
        agent's), else this engine's (the model's calibration or the default)."""
        if request.tool_threshold is not None:
            return request.tool_threshold, "request"
        return self.tool_threshold, self.threshold_source

    def decide(self, request: LLMRequest, gate: LabelGate | None = None,
               matcher: ExampleMatcher | TalkCheckedMatcher | None = None) -> ToolDecision:
        """The gate's talk-or-call decision for ``request`` (its last message: the caller's).
        Uses the model's context freely: a caller that keeps conversations' KV states swaps the
        conversation out first (``LlamaLLM`` does, under the gate's own cache key). ``gate``
        and ``matcher``: built by the caller (calibration leaves an example out of both), else
        those of the request's tools and talk examples. A caller's message that is one tool's
        typed argument alone is decided without scoring (:meth:`value_decision`), and so is an
        answer to a confirmation question that opens with yes or no (:meth:`answer_decision`)."""
        if (unscored := self.unscored_decision(request)) is not None:
            return unscored
        self.fit_threads()
        gate = gate or self.gate_for(request.tools, request.talk_examples)
        # the margin is over the step's tools, as calibrated; the call goes only to a tool whose
        # required arguments the caller said (else the agent talks, and so asks for them)
        allowed = request.allowed_tools  # and the tools withheld for lack of a cue compete
        scores = gate.score(self._llm, request.messages,
                            None if allowed is None else allowed + request.withheld)
        grounding = self._grounding(request)
        cands = [n for n in scores.tools if n not in self._uncued(request)]
        said_all = [n for n in cands if grounding.get(n) is True]  # its pattern values were said
        threshold, source = self._threshold(request)
        chosen, which, sims = scores.chosen(threshold), "labels", None
        vetoed: str | None = None  # the tool the caller's words lacked an argument of
        aside: tuple[str, ...] = ()  # irreversible tools not clearly nearest (clear_pick)
        if matcher is None:
            matcher = self.matcher_for(request.tools, request.talk_examples)
        if chosen is not None and request.confirming is not None and self.embed is not None:
            # a yes/no answer to the tool's question: the margin and the nearer of the yes and
            # no examples must both say yes (an irreversible action)
            yes, sims = self.confirm_matcher(chosen).choose(self._caller_said(request), [chosen],
                                                            talk=True)
            chosen, which = yes, "confirm"
        elif chosen is not None and matcher is not None and matcher.covers(cands):
            # small talk competes unless a tool's typed arguments were said (an order number)
            picked, sims = matcher.choose(self._caller_said(request), cands,
                                          talk=self.talk_veto and not said_all)
            strict = [t.name for t in request.tools if t.irreversible]
            if picked in strict:  # an action that cannot be undone wants a clear nearest
                picked, aside = clear_pick(sims, strict, self.irreversible_margin)
            if picked is not None and said_all:  # the values said point at their tool
                picked = said_pick(sims, picked, said_all, self.argument_lead)
            # None with the talk similarity: a small-talk example lies nearest, so no call
            chosen, which = (None if TALK in sims and picked is None else picked or chosen), "examples"
        elif chosen is not None and grounding.get(chosen) is False:
            ok = [n for n in cands if grounding.get(n) is not False]
            best = max(ok, key=scores.tools.__getitem__) if ok else None
            vetoed, chosen, which = (chosen if best is None else None), best, "grounding"
        if chosen is not None and grounding.get(chosen) is False:
            # its argument was not said: a tool whose typed arguments were said instead (the
            # nearest), else talk and so ask for it
            rank = sims or scores.tools
            vetoed = None if said_all else chosen
            chosen = max(said_all, key=lambda n: rank.get(n, -math.inf)) if said_all else None
            which = "grounding"
        if chosen is not None and chosen in request.withheld:  # e.g. end_call on a thank-you
            chosen, which = None, "cue"
        if chosen is None and self.ground_arguments:  # a bare order number is its lookup
            alone = value_alone(request.callable_tools(), self._caller_said(request))
            if alone is not None:
                chosen, which = alone, "value"
        if (chosen is None and which == "labels" and said_all and request.confirming is None
                and matcher is not None and matcher.covers(cands)):
            # under the threshold, but the caller said every typed argument of a tool: called
            # when that tool's example lies nearest, small talk competing
            picked, near = matcher.choose(self._caller_said(request), cands, talk=True)
            strict = [t.name for t in request.tools if t.irreversible]
            if picked in strict:
                picked, aside = clear_pick(near, strict, self.irreversible_margin)
            if picked in said_all:
                chosen, which, sims = picked, "said", near
        ask: tuple[str, ...] = ()
        if chosen is None and vetoed is not None and self.ask_missing:  # a question for it
            tool = next(t for t in request.tools if t.name == vetoed)
            ask = missing_arguments(tool.parameters, self._caller_said(request),
                                    self._caller_before(request))
        return ToolDecision(chosen, {**scores.tools, "(none)": scores.none}, scores.margin,
                            threshold, source, which, sims, ask, aside, vetoed if ask else None)

    @staticmethod
    def _uncued(request: LLMRequest) -> set[str]:
        """The reversible tools withheld for want of their cue (``request.withheld``): set aside
        before the choice, so the tools the caller's words can ask for compete without them.
        An irreversible withheld tool stays in, and choosing it means talk (``which="cue"``).

        Why: a move (``reschedule_appointment``) was the nearest example for words about an
        appointment that asked for no move ("when's my consultation again?", "I won't make it
        to my consultation on Thursday, could you take it off the books?"); the agent then
        asked for a new day and time, or moved the booking to the slot it already had ("I'd better
        cancel my haircut on Tuesday morning": the day and time said made it the said tool,
        :func:`._which.said_pick`). In the read suites at 4 calls (run
        ``20261207-001617-eb14``) that failed 16 of 180 calls, every call of four scenarios.
        With its cue (:data:`rejoinder.app.examples.MOVE_CUE`) withheld and the next tool
        choosing, the listing or the cancellation's question comes instead. Talking in its
        place, as for ``end_call`` on a thank-you, left those callers unanswered too. A wrong
        listing costs one sentence; a call-ending tool or a cancellation picked in its place
        would not, so those keep the rule of talk."""
        if not request.withheld:
            return set()
        strict = {t.name for t in request.tools if t.irreversible}
        return {n for n in request.withheld if n not in strict}

    def confirm_matcher(self, tool: str) -> ExampleMatcher:
        """Yes or no to a confirmation question (:attr:`LLMRequest.confirming`), by the nearest of
        :data:`CONFIRM_YES` (the tool) and :data:`CONFIRM_NO` (talk) in ``check_embed``'s space
        when the engine has one (SmolLM2's PromptEOL, as measured in the suites before MiniLM
        chose the tools), else ``embed``'s. Neither space is good at it: on 12 answers written
        for a probe (2026-12-06) SmolLM2's said yes to 3 that meant no ("Please do not."),
        MiniLM's to 1, and no to 0 and 3 that meant yes ("Go ahead and cancel.").

        Only for an answer that opens with neither (:meth:`answer_decision`). Adding the tool's
        own examples to the yes side was tried: "Please cancel it." then confirmed, but three of
        seven no answers without a no lead ("I'll come after all.") did too, against two
        without them (SmolLM2-135M, 2026-12-06), and a wrong yes here cannot be undone."""
        embed = self.check_embed or self.embed
        key = (("(confirm)", tool), embed)  # (another embedding: another matcher)
        matcher = self._matchers.get(key)
        if matcher is None:
            schema = ToolSchema(tool, "", {"type": "object", "properties": {}}, CONFIRM_YES)
            matcher = ExampleMatcher(embed, [schema], CONFIRM_NO)
            self._matchers[key] = matcher
        return matcher

    def _grounding(self, request: LLMRequest) -> dict[str, bool | None]:
        """Per callable tool, whether the caller's words hold its required arguments that have
        a ``pattern`` or an ``enum``: True (all said: an order number read out; or some said
        and the rest in the caller's message before, :func:`._toolcall.argument_sources`),
        False (one is missing: called anyway, SmolLM2-135M wrote order "1234" for "I need to
        cancel my consultation", and a weekday of its own when the recogniser lost the caller's
        "Wednesday"), None (it has none, or ``ground_arguments`` is off)."""
        said = self._caller_said(request) if self.ground_arguments else None
        before = self._caller_before(request) if said else ""
        out: dict[str, bool | None] = {}
        for t in request.callable_tools():
            params = t.parameters or {}
            props = params.get("properties") or {}
            need = [k for k in params.get("required") or () if groundable(props.get(k) or {})]
            if said is None or not need:
                out[t.name] = None
                continue
            out[t.name] = not missing_arguments(params, said, before)
        return out

    def matcher_for(self, tools: tuple[ToolSchema, ...],
                    talk_examples: tuple[str, ...] = ()
                    ) -> ExampleMatcher | TalkCheckedMatcher | None:
        """The nearest-example tool chooser of ``tools`` (None without ``embed`` or examples),
        its small-talk verdict checked in ``check_embed``'s space when the engine has one."""
        if self.embed is None or self.which == "labels" or not any(t.examples for t in tools):
            return None
        key = (tuple((t.name, t.examples) for t in tools), talk_examples, self.embed,
               self.check_embed, self.which)
        matcher = self._matchers.get(key)
        if matcher is None:
            matcher = tool_chooser(self.which, self.embed, self.check_embed, tools,
                                   DEFAULT_TALK_EXAMPLES + tuple(talk_examples))
            self._matchers[key] = matcher
            if len(self._matchers) > 32:
                self._matchers.popitem(last=False)
        self._matchers.move_to_end(key)
        return matcher
