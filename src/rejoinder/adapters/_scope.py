"""A request no tool serves: the narrow step after the tool gate said *talk* to a caller who
asked for something ("Can you book me a table for tonight?").

The gate's ``none`` label covers small talk and requests no tool answers alike, so a request the
agent cannot serve got a free reply, and SmolLM2-135M's free replies to such requests were
rarely a refusal: "I'm sorry for your loss, but as a phone assistant …", or an offer of
services the agent does not have ("as a hair stylist, I specialize in custom haircare"; four
scenarios of the four suites failed so on 2026-12-05, run ``20261205-111532-2789``).

The step asks the model one more narrow question, with the gate's own machinery
(:class:`._gate.LabelGate`: label likelihoods in a few-shot prompt, contextually calibrated):
is the caller's message a **request** (:data:`REQUEST_EXAMPLES`) or **talk**
(:data:`TALK_EXAMPLES`)? When the request label leads by :data:`REQUEST_THRESHOLD` or more,
the reply is narrowed as the other steps of :mod:`._ask` are: a note after the caller's words
(:data:`DEFAULT_SCOPE_PROMPT`) and a grammar whose opener says what the agent can do
(:data:`SCOPE_GRAMMAR`: "I'm sorry, I can only help with " and the rest in the LLM's own words,
which take the scope from the agent's instructions).

Whether a request is *in* the agent's scope is not asked: SmolLM2-135M's label likelihoods do
not tell a request the tools serve from one they do not (a variant of this prompt with an in-scope
label beside the request label: request minus in-scope −0.87 … 1.03 for out-of-scope requests,
−0.49 … 1.01 for in-scope ones), as its sentence embeddings did not (2026-12-05). Request
against talk they tell apart: the step runs only where the gate already chose no tool, and a
request the gate missed gets the same reply.

Cost, measured 2026-12-05 on 2 cores: ≈ 30 ms on a talk turn (the bundled call's tool-choice
segment, median 54–59 → 82–93 ms); in the four suites the decision went from p50 101 to 123 ms.

Probe, 2026-12-05 (SmolLM2-135M Q4_1, this module's prompt, the support agent's greeting
before each message; 26 messages written for it, none from a suite; margin = corrected
``log P(request) − log P(none)``): 8 out-of-scope requests 3.11 … 5.69; 12 small-talk messages,
answers and goodbyes −1.20 … 1.85 ("Hmm, let me think." the highest); 6 in-scope requests
1.79 … 5.87. The threshold 2.5 lies midway between talk and out-of-scope requests.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from ..ports import ChatMessage, LLMRequest, ToolDecision, ToolSchema
from ._gate import DEFAULT_TALK_EXAMPLES, LabelGate

#: the request label's examples: things a caller asks a phone assistant for, none of them from a
#: suite (the label is "request", not "out of scope": see the module docstring)
REQUEST_EXAMPLES: tuple[str, ...] = (
    "Can you book me a hotel room?", "What's the weather like today?",
    "Could you order me a pizza?", "Please reset the password of my email.",
    "Can you get me a flight to Denver?", "Where can I buy concert tickets?")
#: the talk label's examples: the gate's small talk without its one request, and two more
TALK_EXAMPLES: tuple[str, ...] = tuple(
    x for x in DEFAULT_TALK_EXAMPLES if x != "Do you sell gift cards?"
) + ("Is anybody there?", "Alright, thank you.")
#: a request label lead (nats, corrected) at or over which the caller asked for something
REQUEST_THRESHOLD = 2.5

#: the note after the caller's words when no tool serves the request (``{scope}``: the agent's
#: :attr:`rejoinder.agent.LLMSettings.scope`)
DEFAULT_SCOPE_PROMPT = ("None of your tools does what the caller asked. Tell them in one short "
                        "sentence that you can only help with {scope}.")
#: that reply: an apology and "I can only help with", then the LLM's own words
SCOPE_GRAMMAR = ('root ::= ("I' "'" 'm sorry, " | "Sorry, " | "I' "'" 'm afraid ") '
                 '"I can only help with " [^.?!\\n]{1,80} "."')

_REQUEST = ToolSchema("request", "the caller asks the assistant to do or find something",
                      {"type": "object", "properties": {}}, REQUEST_EXAMPLES)


def request_margin(gate: LabelGate, llm: Any, messages: Sequence[ChatMessage]) -> float:
    """Corrected ``log P(request) − log P(none)`` of the caller's last message in ``messages``
    (blocking; ``llm``'s context is used freely: the caller activates the gate's KV state)."""
    scores = gate.score(llm, messages)
    return scores.tools[_REQUEST.name] - scores.none


class ScopeStep:
    """The step on :class:`._llama_engine.ChatEngine` (which provides ``_llm`` and ``gates``):
    after the gate's talk decision, is the caller's message a request? ``scope_note`` (default
    on, settable) turns it off."""

    scope_note = True
    _request_gate: LabelGate | None = None
    _llm: Any

    def request_gate(self) -> LabelGate:
        """The request-or-talk label prompt (one per engine, built on first use: it depends on
        no agent)."""
        if self._request_gate is None:
            self._request_gate = LabelGate([_REQUEST], TALK_EXAMPLES)
        return self._request_gate

    def asks_scope(self, request: LLMRequest, decision: ToolDecision) -> bool:
        """Whether the gate's ``decision`` is followed by :meth:`scope_decision`: no tool
        chosen, no confirmation question answered, no argument to ask for, the agent's scope
        declared (``request.scope``) and ``scope_note`` on."""
        return (self.scope_note and bool(request.scope) and decision.chosen is None
                and request.confirming is None and not decision.ask_for and self.gates(request))

    def scope_decision(self, request: LLMRequest, decision: ToolDecision) -> ToolDecision:
        """``decision`` with the request label's lead over talk and whether it reaches
        :data:`REQUEST_THRESHOLD` (``unserved``). Uses the model's context freely, like the
        gate: a caller that keeps KV states activates :meth:`request_gate`'s key first."""
        margin = request_margin(self.request_gate(), self._llm, request.messages)
        return replace(decision, request_margin=margin, unserved=margin >= REQUEST_THRESHOLD)
