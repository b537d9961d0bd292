"""Yes or no from an answer's opening (:mod:`rejoinder.adapters._yesno`), and the decision it
makes on an irreversible tool's question with the real SmolLM2-135M engine. The answers were
written for these tests, apart from every benchmark scenario."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from rejoinder.adapters._yesno import answer_polarity
from rejoinder.app.support import agent as support
from rejoinder.ports import ChatMessage, LLMRequest


@pytest.mark.parametrize("say", ["Yes.", "Yeah, go for it.", "Sure thing.", "Please do, nothing to be done.",
                                 "Go ahead.", "Correct, that's the one.", "Um, yes please.", "Mm-hmm.",
                                 "Absolutely, I can't make it.", "No problem, go ahead.",
                                 "Actually, yes, cancel it.", "Okay, yes."])
def test_an_answer_that_opens_with_yes_is_a_yes(say):
    assert answer_polarity(say) is True


@pytest.mark.parametrize("say", ["No.", "Hmm, no. On second thought I'll keep it.", "Nope, keep the booking.",
                                 "Actually, don't. I'll manage to come.", "Wait, not that one.",
                                 "Leave it as it is, please.", "Uh, no, sorry, I'll be there after all.",
                                 "On reflection I'll keep it.", "I've changed my mind, keep it.",
                                 "Hang on, which one is that?", "Okay, no, leave it."])
def test_an_answer_that_opens_with_no_is_a_no(say):
    assert answer_polarity(say) is False


@pytest.mark.parametrize("say", ["Yeah, no.", "Fine, but keep the other one.", "I'd like a coffee.", "Um.", "",
                                 "Ja, bitte.", "Okay.", "Great, I'll pop it in my diary.",
                                 "Please cancel it."])  # a yes without a yes lead: the model's
def test_an_answer_with_neither_or_both_is_left_to_the_model(say):
    assert answer_polarity(say) is None


def test_only_the_first_sentence_and_its_lead_count():
    assert answer_polarity("Yes. No idea why I booked it.") is True
    assert answer_polarity("No. Yes, I know, I said otherwise.") is False
    assert answer_polarity("Cancel the haircut? Yes.") is None  # the lead is not a yes or no


def _answer(say: str) -> LLMRequest:
    tools = tuple(t.schema for t in support.tools.values())
    return LLMRequest((ChatMessage("system", support.instructions),
                       ChatMessage("user", "I'd like to cancel the haircut."),
                       ChatMessage("assistant", "Shall I cancel your haircut on Friday at 2 PM?"),
                       ChatMessage("user", say)),
                      tools=tools, temperature=0.0, max_tokens=24, allowed_tools=("cancel_appointment",),
                      confirming="cancel_appointment", talk_examples=tuple(support.llm.talk_examples))


def test_a_plain_yes_confirms_and_a_no_lead_declines_without_scoring(llama_llm):
    """A plain "Yes." scored under the calibrated threshold (3.57 against 4.16 on 2026-12-06)
    and was not taken as a yes; an answer opening with no is a no whatever its margin."""
    engine = llama_llm.engine
    yes, no = engine.decide(_answer("Yes.")), engine.decide(_answer("Hmm, no. On reflection I'll find a way."))
    assert (yes.chosen, yes.which, yes.scores, yes.margin) == ("cancel_appointment", "yesno", {}, math.inf)
    assert (no.chosen, no.which, no.scores, no.margin) == (None, "yesno", {}, -math.inf)
    assert yes.as_dict()["margin"] is None and no.as_dict()["margin"] is None
    unsure = engine.decide(_answer("I'd rather keep it."))  # no lead: the model's margin decides
    assert unsure.which in ("labels", "confirm") and unsure.scores and unsure.chosen is None
    asked = engine.decide(replace(_answer("Yes."), confirming=None))  # not an answer to a question
    assert asked.which != "yesno"


async def test_a_yes_lead_costs_no_kv_swap_to_the_gate(llama_llm, monkeypatch):
    """In-process, a yes or no lead is decided before the gate's KV state is put in place (as a
    typed argument said alone is): only the conversation's own state is activated, and the
    decision is the first thing the stream yields."""
    from rejoinder.ports import ToolCall, ToolDecision

    activated: list = []
    activate = llama_llm.cache.activate

    def seen(key):
        activated.append(key)
        return activate(key)

    monkeypatch.setattr(llama_llm.cache, "activate", seen)
    mode, llama_llm.tool_mode = llama_llm.tool_mode, "gate"
    try:
        req = replace(_answer("Yes please."), cache_key="yes-lead")
        out = [d async for d in llama_llm.stream(req)]
    finally:
        llama_llm.tool_mode = mode
    assert isinstance(out[0], ToolDecision) and out[0].which == "yesno"
    assert any(isinstance(d, ToolCall) and d.name == "cancel_appointment" for d in out)
    assert activated == ["yes-lead"]
