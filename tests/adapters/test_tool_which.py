"""Which tool the gate calls (:mod:`rejoinder.adapters._which`): the nearest-example matcher's
logic on a fixed embedding, and on the real SmolLM2-135M model with the reference support
agent's tools, where the label ranking picks the wrong tool for a request for a person."""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import replace

import numpy as np
import pytest

from rejoinder.adapters._which import (EMBED_TEMPLATE, TALK, ExampleMatcher, TalkCheckedMatcher,
                                      clear_pick, paired_matcher, said_pick)
from rejoinder.app.support import agent as support
from rejoinder.errors import ConfigError
from rejoinder.ports import ChatMessage, LLMRequest, ToolCall, ToolDecision, ToolSchema

AXES = {"order": 0, "appointment": 1, "person": 2, "hello": 3}


def _bag(text: str) -> np.ndarray:
    """A bag-of-keywords embedding: one axis per keyword, plus a shared offset."""
    v = np.full(5, 1.0)
    for word, axis in AXES.items():
        if word in text.lower():
            v[axis] += 3.0
    return v


TOOLS = (ToolSchema("lookup_order", "Look up an order.", {"type": "object", "properties": {}},
                    ("Where is my order?", "Order status please.")),
         ToolSchema("transfer_to_human", "Transfer to a person.",
                    {"type": "object", "properties": {}}, ("A person, please.",)),
         ToolSchema("note", "No examples.", {"type": "object", "properties": {}}))


def test_the_nearest_example_wins_in_the_centred_space():
    m = ExampleMatcher(_bag, TOOLS, ("hello there",))
    assert m.choose("I want a person", ["lookup_order", "transfer_to_human"])[0] == "transfer_to_human"
    tool, sims = m.choose("my order", ["lookup_order", "transfer_to_human"])
    assert tool == "lookup_order" and sims["lookup_order"] > sims["transfer_to_human"]
    assert all(-1.0 - 1e-9 <= s <= 1.0 + 1e-9 for s in sims.values())
    # only the allowed tools are candidates
    assert m.choose("my order", ["transfer_to_human"])[0] == "transfer_to_human"


def test_a_second_space_that_hears_small_talk_vetoes_the_call_but_never_picks_the_tool():
    """:class:`TalkCheckedMatcher`: the tool is the first space's; either space's small-talk
    verdict is talk. The second space here hears "please please" as a greeting."""
    def polite(text: str) -> np.ndarray:
        return _bag("hello" if "please please" in text.lower() else text)

    talk = ("hello there", "hello again")
    names = ["lookup_order", "transfer_to_human"]
    which = ExampleMatcher(_bag, TOOLS, talk)
    m = paired_matcher(_bag, polite, TOOLS, talk)
    assert isinstance(m, TalkCheckedMatcher)
    assert type(paired_matcher(_bag, None, TOOLS, talk)) is ExampleMatcher
    # both spaces: a tool; the first space's choice and similarities
    assert m.choose("a person", names, talk=True) == which.choose("a person", names, talk=True)
    # the second space hears small talk: no call, the similarities still the first space's
    tool, sims = m.choose("please please, a person", names, talk=True)
    assert which.choose("please please, a person", names, talk=True)[0] == "transfer_to_human"
    assert tool is None and sims == which.choose("please please, a person", names, talk=True)[1]
    # without small talk competing the second space is not asked
    assert m.choose("please please, a person", names)[0] == "transfer_to_human"
    assert m.covers(names) and not m.covers(["note"])


def test_small_talk_nearer_than_every_tool_vetoes_the_call():
    m = ExampleMatcher(_bag, TOOLS, ("hello there", "hello again"))
    names = ["lookup_order", "transfer_to_human"]
    tool, sims = m.choose("hello, hello", names, talk=True)
    assert tool is None and sims[TALK] > max(sims[n] for n in names)
    tool, sims = m.choose("where is my order", names, talk=True)
    assert tool == "lookup_order" and sims["lookup_order"] > sims[TALK]
    # the caller's text is embedded once per choice (a forward pass of the model each), small
    # talk competing or not
    seen: list[str] = []
    counted = ExampleMatcher(lambda t: seen.append(t) or _bag(t), TOOLS, ("hello there",))
    seen.clear()
    counted.choose("where is my order", names, talk=True)
    counted.choose("a person", names)
    assert [t for t in seen if "order" in t or "person" in t] == [
        EMBED_TEMPLATE.format("where is my order"), EMBED_TEMPLATE.format("a person")]
    # without ``talk`` small talk only centres the space, as before
    assert m.choose("hello, hello", names)[0] in names
    assert TALK not in m.choose("hello, hello", names)[1]


END = {"transfer_to_human", "end_call"}


@pytest.mark.parametrize("sims,want", [
    # a near tie with small talk: no call (a compliment nearly as near a transfer example)
    ({"transfer_to_human": 0.305, "lookup_order": 0.07, TALK: 0.300}, (None, ("transfer_to_human",))),
    # a near tie with another tool: that tool
    ({"transfer_to_human": 0.396, "list_appointments": 0.348, "reschedule_appointment": 0.17},
     ("list_appointments", ("transfer_to_human",))),
    # two call-ending tools near each other and small talk far: each set aside in turn
    ({"transfer_to_human": 0.40, "end_call": 0.38, "lookup_order": 0.36, TALK: 0.10},
     ("lookup_order", ("transfer_to_human", "end_call"))),
    # clearly nearest: kept; a reversible tool in a near tie: kept
    ({"transfer_to_human": 0.444, "lookup_order": 0.07, TALK: 0.338}, ("transfer_to_human", ())),
    ({"lookup_order": 0.31, "transfer_to_human": 0.30, TALK: 0.29}, ("lookup_order", ())),
    # the only candidate (small talk not competing): kept
    ({"end_call": 0.2}, ("end_call", ())),
    # small talk nearest from the start
    ({TALK: 0.5, "end_call": 0.2}, (None, ())),
])
def test_an_irreversible_tool_needs_a_clear_lead_to_be_picked(sims, want):
    assert clear_pick(sims, END, 0.05) == want


def test_a_margin_of_zero_keeps_the_nearest():
    assert clear_pick({"transfer_to_human": 0.305, TALK: 0.300}, END, 0.0) == ("transfer_to_human", ())


@pytest.mark.parametrize("sims,picked,said,want", [
    # a move said with its weekday and time, nearest a cancellation example by 0.067: the move
    ({"cancel_appointment": 0.41, "reschedule_appointment": 0.343, "lookup_order": 0.1},
     "cancel_appointment", ["reschedule_appointment"], "reschedule_appointment"),
    # an order number said, a listing nearer by 0.036: the lookup
    ({"list_appointments": 0.30, "lookup_order": 0.264}, "list_appointments", ["lookup_order"],
     "lookup_order"),
    # another tool far nearer (0.2 ≥ 0.15): kept
    ({"transfer_to_human": 0.5, "reschedule_appointment": 0.3}, "transfer_to_human",
     ["reschedule_appointment"], "transfer_to_human"),
    # the pick is a said tool, or nothing was said: kept
    ({"lookup_order": 0.2, "reschedule_appointment": 0.3}, "lookup_order",
     ["lookup_order", "reschedule_appointment"], "lookup_order"),
    ({"list_appointments": 0.3, "lookup_order": 0.29}, "list_appointments", [], "list_appointments"),
    # two said tools: the nearer of them
    ({"end_call": 0.4, "lookup_order": 0.3, "reschedule_appointment": 0.35}, "end_call",
     ["lookup_order", "reschedule_appointment"], "reschedule_appointment"),
])
def test_the_tool_whose_values_were_said_wins_a_near_tie(sims, picked, said, want):
    assert said_pick(sims, picked, said, 0.15) == want


def test_a_lead_of_zero_keeps_the_nearest():
    assert said_pick({"a": 0.31, "b": 0.30}, "a", ["b"], 0.0) == "a"


def test_only_tools_that_act_at_once_are_irreversible_in_their_schema():
    """``cancel_appointment`` is irreversible but asks first (its first call is a question)."""
    flags = {name: t.schema.irreversible for name, t in support.tools.items()}
    assert flags == {"lookup_order": False, "list_appointments": False,
                     "reschedule_appointment": False, "cancel_appointment": False,
                     "transfer_to_human": True, "end_call": True}
    assert not support.tools["cancel_appointment"].reversible


def test_it_stands_aside_when_an_allowed_tool_has_no_examples():
    m = ExampleMatcher(_bag, TOOLS)
    assert m.covers(["lookup_order", "transfer_to_human"])
    assert not m.covers(["lookup_order", "note"]) and not m.covers([])
    with pytest.raises(ValueError, match="no tool has examples"):
        ExampleMatcher(_bag, TOOLS[2:])


def test_decision_records_what_picked_the_tool():
    d = ToolDecision("a", {"a": -1.0, "(none)": -3.0}, 2.0, 1.0, "model", "examples",
                     {"a": 0.51234, "b": 0.1}, set_aside=("b",))
    assert d.as_dict()["which"] == "examples" and d.as_dict()["similarity"] == {"a": 0.512, "b": 0.1}
    assert d.as_dict()["set_aside"] == ["b"]
    assert "similarity" not in ToolDecision(None, {}, 0.0, 1.0).as_dict()
    assert "set_aside" not in ToolDecision(None, {}, 0.0, 1.0).as_dict()
    assert "ask_tool" not in ToolDecision(None, {}, 0.0, 1.0).as_dict()


def test_an_unknown_which_mode_names_the_choices():
    from rejoinder.adapters.llama_llm import LlamaLLM
    with pytest.raises(ConfigError, match="tool_which must be one of examples, probe, labels"):
        LlamaLLM(tool_which="nearest")


#: how many of each tool's examples, and of talk, the support agent had before 2026-12-06 (the
#: first ones of rejoinder.app.examples): ``_request(first=True)`` decides with those alone
FIRST = {"lookup_order": 4, "list_appointments": 4, "(talk)": 6}


def _request(say: str, first: bool = False) -> LLMRequest:
    tools = tuple(t.schema for t in support.tools.values())
    talk = tuple(support.llm.talk_examples)
    if first:
        tools = tuple(replace(t, examples=t.examples[:FIRST.get(t.name, 3)]) for t in tools)
        talk = talk[:FIRST["(talk)"]]
    return LLMRequest((ChatMessage("system", support.instructions),
                       ChatMessage("assistant", "Thanks for calling. How can I help?"),
                       ChatMessage("user", say)), tools=tools, temperature=0.0, max_tokens=24,
                      talk_examples=talk)


@pytest.mark.parametrize("say", ["Is there a human I can speak to?",
                                 "Let me talk to an actual person, please."])
def test_a_request_for_a_person_is_a_transfer_by_its_examples_and_grounded_labels(llama_llm, say):
    engine = llama_llm.engine
    req = _request(say)
    embed, ground = engine.embed, engine.ground_arguments
    try:
        engine.ground_arguments = False  # every tool a candidate, whatever the caller said
        engine.embed = None
        by_labels = engine.decide(req)
        engine.embed = llama_llm._embed
        by_examples = engine.decide(req)
        engine.ground_arguments, engine.embed = True, None
        grounded_labels = engine.decide(req)
    finally:
        engine.embed, engine.ground_arguments = embed, ground
    assert by_labels.which == "labels" and by_labels.similarity is None
    assert by_labels.chosen is not None  # the labels pick a tool too (the same gate said call)
    # without the tools whose required arguments the caller did not say (an order number, a
    # time), the labels pick the transfer (with the instructions of 2026-12-02 some pick it
    # alone; with the earlier ones SmolLM2's labels picked reschedule and grounding moved them)
    assert grounded_labels.chosen == "transfer_to_human"
    assert grounded_labels.which == ("labels" if by_labels.chosen == "transfer_to_human" else "grounding")
    assert by_examples.which == "examples" and by_examples.chosen == "transfer_to_human"
    assert by_examples.margin == pytest.approx(by_labels.margin)  # whether: the same gate
    assert max(by_examples.similarity, key=by_examples.similarity.get) == "transfer_to_human"


@contextmanager
def _smollm2_space(llm):
    """Decide by the nearest example in SmolLM2-135M's PromptEOL space alone
    (``embedder="gguf"``, ``tool_which="examples"``), as before 2026-12-06."""
    engine = llm.engine
    saved = engine.embed, engine.check_embed, engine.which
    engine.embed, engine.check_embed, engine.which = llm.gguf_embedding(), None, "examples"
    try:
        yield engine
    finally:
        engine.embed, engine.check_embed, engine.which = saved


def test_a_weekday_and_time_said_make_it_a_move_not_the_nearest_listing(llama_llm):
    """Among the support agent's first examples (:data:`FIRST`), SmolLM2-135M's nearest example
    of "Quick one, can the consultation be on Thursday at noon?" is a listing's, 0.021 nearer
    than a move's; the weekday and time said are the move's typed arguments (a wording written
    for this test). With all of today's examples the nearest is a move's already, and in
    MiniLM's space (the default) it is a move's with the first examples too."""
    engine = llama_llm.engine
    assert engine.decide(_request("Quick one, can the consultation be on Thursday at noon?")
                         ).chosen == "reschedule_appointment"
    req = _request("Quick one, can the consultation be on Thursday at noon?", first=True)
    lead = engine.argument_lead
    try:
        engine.argument_lead = 0.0
        minilm = engine.decide(req)
        with _smollm2_space(llama_llm):
            nearest = engine.decide(req)
            engine.argument_lead = 0.15
            said = engine.decide(req)
    finally:
        engine.argument_lead = lead
    assert lead == 0.15
    assert (minilm.which, minilm.chosen) == ("examples", "reschedule_appointment")
    assert nearest.which == "examples" and nearest.chosen == "list_appointments"
    assert said.chosen == "reschedule_appointment"
    assert said.margin == pytest.approx(nearest.margin) and said.margin >= said.threshold


def test_labels_mode_skips_the_embedding_but_a_confirmation_still_uses_it(llama_llm):
    engine = llama_llm.engine
    assert llama_llm.tool_which == "examples" and engine.which == "examples"  # SmolLM2's default
    seen: list[str] = []
    embed, check, which = engine.embed, engine.check_embed, engine.which

    def counted(text: str):
        seen.append(text)
        return check(text)
    try:  # (a confirmation is judged in the check space, SmolLM2's, when there is one)
        engine.embed, engine.check_embed, engine.which = counted, counted, "labels"
        asked = engine.decide(_request("Is there a human I can speak to?"))
        assert asked.chosen is not None and asked.which in ("labels", "grounding")
        assert asked.similarity is None and seen == []  # no forward pass of the embedding
        tools = tuple(t.schema for t in support.tools.values())
        confirm = LLMRequest((ChatMessage("system", support.instructions),
                              ChatMessage("user", "Please cancel my haircut."),
                              ChatMessage("assistant", "Shall I cancel your haircut on Friday at 2 PM?"),
                              ChatMessage("user", "I'm certain, cancel it.")),  # no yes lead
                             tools=tools, temperature=0.0, max_tokens=24,
                             allowed_tools=("cancel_appointment",), confirming="cancel_appointment",
                             talk_examples=tuple(support.llm.talk_examples))
        answered = engine.decide(confirm)
    finally:
        engine.embed, engine.check_embed, engine.which = embed, check, which
    assert answered.which == "confirm" and answered.chosen == "cancel_appointment"
    assert EMBED_TEMPLATE.format("I'm certain, cancel it.") in seen


def test_the_embeddings_may_come_from_another_gguf(tmp_path):
    from rejoinder.adapters.llama_llm import LlamaLLM, smollm2_model_path
    missing = tmp_path / "nope.gguf"
    with pytest.raises(ConfigError, match="nope.gguf"):
        LlamaLLM(embed_model=missing)
    other = tmp_path / "other.gguf"  # another file name for the same weights
    other.symlink_to(smollm2_model_path())
    llm = LlamaLLM(embed_model=str(other), n_ctx=512)
    assert llm.model_path == smollm2_model_path() and llm.embed_path == other
    assert llm._embedder is None  # opened on first use
    v = np.asarray(llm._embed(EMBED_TEMPLATE.format("Where is my order?")))
    assert v.ndim == 1 and v.size == llm._embedder.n_embd() and np.isfinite(v).all()
    assert llm._embedder.model_path == str(other)
    assert LlamaLLM(n_ctx=512).embed_path == smollm2_model_path()  # default: the chat model


def test_a_transfer_without_a_clear_lead_is_set_aside_with_the_real_model(llama_llm):
    """The same request for a person is a transfer at the default margin (its example lies
    clearly nearest) and set aside when the margin asks for more than its lead: the decision
    then goes to the rest and records what was set aside."""
    engine = llama_llm.engine
    req = _request("Let me talk to an actual person, please.")
    margin = engine.irreversible_margin
    try:
        clear = engine.decide(req)
        lead = clear.similarity["transfer_to_human"] - max(
            v for k, v in clear.similarity.items() if k != "transfer_to_human")
        engine.irreversible_margin = lead + 0.01
        unclear = engine.decide(req)
    finally:
        engine.irreversible_margin = margin
    assert margin == 0.05 and lead >= margin
    assert (clear.chosen, clear.which, clear.set_aside) == ("transfer_to_human", "examples", ())
    # (in MiniLM's space end_call lies next, within the raised margin too: set aside after it)
    assert unclear.chosen != "transfer_to_human" and unclear.set_aside[0] == "transfer_to_human"
    assert set(unclear.set_aside) <= {"transfer_to_human", "end_call"}
    assert "set_aside" in unclear.as_dict() and unclear.margin == pytest.approx(clear.margin)


@pytest.mark.parametrize("say, want", [
    ("It's 7, 7, 3, 1, sorry, 7, 7, 1, 3.", "lookup_order"),
    ("Could you move my haircut to Monday at 11? Sorry, Tuesday at 11.", "reschedule_appointment"),
    ("Thanks so much, see you Friday at 2!", None),
])
def test_under_the_threshold_the_values_said_call_their_tool_when_its_example_is_nearest(
        llama_llm, say, want):
    """The gate held to talk (a request threshold no margin reaches): a tool whose typed
    arguments were all said is still called when its example lies nearest with small talk
    competing (``which="said"``); a farewell that names a day and a time stays talk. Wordings
    written for this test."""
    req = replace(_request(say), tool_threshold=50.0)
    decision = llama_llm.engine.decide(req)
    assert decision.margin < decision.threshold
    assert decision.chosen == want
    if want is not None:
        assert decision.which == "said"
        assert max(decision.similarity, key=decision.similarity.get) == want
        assert TALK in decision.similarity


async def test_a_no_to_the_tools_question_is_answered_with_nothing_done(llama_llm):
    """The caller does not say yes to an irreversible tool's question: no call, and the reply
    says nothing was done (the note and its grammar: an acknowledgement, then "I won't" /
    "I'll leave" / "I'll keep" and the LLM's own words); with ``decline_note`` off the same
    decision gets the free reply. The caller's wording is not from any suite."""
    engine = llama_llm.engine
    tools = tuple(t.schema for t in support.tools.values())

    def answer(say: str) -> LLMRequest:
        return LLMRequest((ChatMessage("system", support.instructions),
                           ChatMessage("user", "I'd like to cancel the haircut."),
                           ChatMessage("assistant", "Shall I cancel your haircut on Friday at 2 PM?"),
                           ChatMessage("user", say)),
                          tools=tools, temperature=0.0, max_tokens=40,
                          allowed_tools=("cancel_appointment",), confirming="cancel_appointment",
                          talk_examples=tuple(support.llm.talk_examples))

    async def run(req: LLMRequest) -> tuple[ToolDecision, str]:
        out = [d async for d in llama_llm.stream(req)]
        assert not any(isinstance(x, ToolCall) for x in out)
        return out[0], "".join(x for x in out if isinstance(x, str))

    mode, llama_llm.tool_mode = llama_llm.tool_mode, "gate"
    try:
        decision, text = await run(answer("Hmm, actually no, forget about it."))
        engine.decline_note = False
        _, free = await run(answer("Hmm, actually no, forget about it."))
    finally:
        engine.decline_note, llama_llm.tool_mode = True, mode
    assert isinstance(decision, ToolDecision) and decision.chosen is None
    assert text.startswith(("Okay, ", "Alright, ", "No problem, ")), text
    assert any(w in text for w in ("I won't ", "I will not ", "I'll leave ", "I'll keep ")), text
    assert text.endswith(".") and "?" not in text and "caller" not in text.lower(), text
    assert free != text, (text, free)


def test_a_withheld_tool_still_competes_and_choosing_it_means_talk(llama_llm):
    """``LLMRequest.withheld`` (a tool the caller's words did not cue: ``end_call`` without a
    closing): the gate scores it and the matcher weighs it as before, and when it is the
    choice the agent talks (``which="cue"``) instead of the next tool taking its share. The
    same words with the tool allowed call it (a threshold every margin passes, so the choice is
    the matcher's)."""
    engine = llama_llm.engine
    base = replace(_request("No, nothing else. Goodbye!"), tool_threshold=-50.0)  # an example
    names = tuple(t.name for t in base.tools)
    offered = engine.decide(base)
    withheld = engine.decide(replace(base, allowed_tools=tuple(n for n in names if n != "end_call"),
                                     withheld=("end_call",)))
    assert (offered.chosen, offered.which) == ("end_call", "examples")
    assert (withheld.chosen, withheld.which) == (None, "cue")
    assert "end_call" in withheld.scores and withheld.similarity["end_call"] == pytest.approx(
        offered.similarity["end_call"])


def test_a_reversible_withheld_tool_is_set_aside_and_the_next_tool_chooses(llama_llm):
    """A move not asked for: "When's my consultation again?" lies nearest a move example in
    MiniLM's space, so with every tool offered the move is the choice (and, its new day and
    time unsaid, the agent asks for them). Withheld for want of its cue (``MOVE_CUE``), the
    reversible move is set aside, not turned into talk: the listing the words ask for is
    called, and the record keeps the move's gate score. The support agent's own request says
    so too (the cue left it out)."""
    from rejoinder.app.examples import MOVE_CUE

    engine = llama_llm.engine
    say = "And the second thing, when's my consultation again?"
    assert not re.search(MOVE_CUE, say, re.IGNORECASE)
    base = replace(_request(say), tool_threshold=-50.0)  # every margin passes: the matcher picks
    names = tuple(t.name for t in base.tools)
    offered = engine.decide(base)
    assert offered.similarity["reschedule_appointment"] > offered.similarity["list_appointments"]
    assert offered.chosen in ("reschedule_appointment", None) and offered.which != "cue"
    held = engine.decide(replace(base, allowed_tools=tuple(n for n in names if n != "reschedule_appointment"),
                                 withheld=("reschedule_appointment",)))
    assert (held.chosen, held.which) == ("list_appointments", "examples")
    assert "reschedule_appointment" in held.scores and "reschedule_appointment" not in held.similarity
