"""The tool gate (``tool_mode="gate"``): a calibrated talk-or-call decision from label
likelihoods, on the real SmolLM2-135M model (scores are deterministic), and its threshold fit."""

from __future__ import annotations

import math

import pytest

from rejoinder.adapters._gate import GateScores, LabelGate, label_of
from rejoinder.calibrate import Scored, choose_threshold
from rejoinder.errors import ConfigError
from rejoinder.ports import ChatMessage, LLMRequest, ToolCall, ToolDecision, ToolSchema

from tool_cases import SUPPORT, TOOLS

EXAMPLES = {"lookup_order": ("Could you find order 8812 for me?", "The number is 3 3 0 9."),
            "list_appointments": ("Am I booked in this week?", "What time is my visit?"),
            "reschedule_appointment": ("Push my appointment to Tuesday at noon.",)}
GATED = tuple(ToolSchema(t.name, t.description, t.parameters, EXAMPLES[t.name]) for t in TOOLS)


def _req(say: str, **kw) -> LLMRequest:
    return LLMRequest((SUPPORT, ChatMessage("user", say)), tools=GATED, temperature=0.0,
                      max_tokens=24, **kw)


async def _run(llm, req: LLMRequest) -> list:
    return [d async for d in llm.stream(req)]


@pytest.fixture
def gate_llm(llama_llm):
    llama_llm.tool_mode = "gate"
    yield llama_llm
    llama_llm.tool_mode = "lazy"


def test_margin_is_log_sum_of_tools_over_none():
    s = GateScores({"a": math.log(0.2), "b": math.log(0.3)}, math.log(0.5))
    assert s.margin == pytest.approx(0.0)
    assert s.best == "b" and s.chosen(0.0) == "b" and s.chosen(0.01) is None
    assert GateScores({}, 0.0).chosen(-100) is None


def test_labels_are_tool_names_in_words_and_prompt_holds_every_example():
    gate = LabelGate(GATED, ("Hi there.",))
    assert label_of("lookup_order") == "lookup order"
    for ex in (*EXAMPLES["lookup_order"], *EXAMPLES["list_appointments"], "Hi there."):
        assert f"Caller: {ex}\nLabel:" in gate.prefix
    assert "Label: lookup order\n" in gate.prefix and "Label: none\n" in gate.prefix
    with pytest.raises(ValueError, match="at least one tool"):
        LabelGate(())


def test_prompt_shows_the_first_shots_of_each_label_only():
    """Past ``max_shots`` an example is the matcher's and the calibration's, not the prompt's."""
    many = tuple(f"Where is order {1000 + i}?" for i in range(9))
    talk = tuple(f"Thanks {i} times." for i in range(5))
    tools = (ToolSchema("lookup_order", "Look up an order.", {"type": "object"}, many),)
    gate = LabelGate(tools, talk, max_shots=(4, 2))
    shown = [x for x in (*many, *talk) if f"Caller: {x}\nLabel:" in gate.prefix]
    assert shown == [*many[:4], *talk[:2]]
    assert gate.prefix.count("Label: lookup order\n") == 4
    full = LabelGate(tools, talk, max_shots=(9, 5))
    assert full.prefix.count("Caller: ") == 14 and full.key != gate.key

def test_context_is_the_assistants_last_words_before_the_caller():
    msgs = (SUPPORT, ChatMessage("assistant", "What is your order number?"),
            ChatMessage("user", "4217."))
    assert LabelGate.context(msgs) == ("What is your order number?", "4217.")
    assert LabelGate.context((SUPPORT, ChatMessage("user", "Hi"))) == ("", "Hi")


def test_threshold_keeps_spurious_calls_under_the_bound_and_maximises_right_calls():
    pts = [Scored("o1", "t", 9.0, "t"), Scored("o2", "t", 7.0, "t"), Scored("o3", "t", 5.0, "u"),
           Scored("n1", None, 6.0, "t"), Scored("n2", None, 2.0, "t"), Scored("n3", None, 1.0, "u")]
    cal = choose_threshold(pts, max_spurious=0.0)
    # above the highest talk margin (6.0), below the right calls at 7 and 9
    assert 6.0 < cal.threshold <= 7.0
    assert cal.right_tool == pytest.approx(2 / 3) and cal.spurious == 0.0
    loose = choose_threshold(pts, max_spurious=0.34)  # one talk example in three may call
    assert loose.threshold <= 6.0 and loose.spurious == pytest.approx(1 / 3)
    with pytest.raises(ConfigError, match="talk examples"):
        choose_threshold([p for p in pts if p.label])


def test_with_the_runtimes_pick_a_talk_example_kept_as_talk_is_no_spurious_call():
    # n1's margin (6.0) says call, but the matcher keeps it as talk (pick None): the threshold
    # may go under it; o3's label was wrong but the matcher picks right
    pts = [Scored("o1", "t", 9.0, "t", "t", True), Scored("o2", "t", 7.0, "t", "t", True),
           Scored("o3", "t", 5.0, "u", "t", True), Scored("n1", None, 6.0, "t", None, True),
           Scored("n2", None, 4.0, "t", "t", True), Scored("n3", None, 1.0, "u", None, True)]
    cal = choose_threshold(pts, max_spurious=0.0)
    assert 4.0 < cal.threshold <= 5.0  # over n2, which the matcher calls; under o3
    assert cal.right_tool == 1.0 and cal.spurious == 0.0
    assert [p.called for p in pts] == ["t", "t", "t", None, "t", None]
    assert Scored("x", None, 1.0, "u").called == "u"  # without the matcher: the gate's best
    assert cal.as_dict()["utterances"][3] == {"say": "n1", "label": None, "margin": 6.0,
                                              "best": "t", "pick": None}


async def test_gate_yields_its_decision_first_then_the_chosen_call(gate_llm):
    out = await _run(gate_llm, _req("I am calling about order 5566, where is it?",
                                    tool_threshold=-50.0))
    assert isinstance(out[0], ToolDecision)
    d = out[0]
    assert d.source == "request" and d.threshold == -50.0
    assert set(d.scores) == {"lookup_order", "list_appointments", "reschedule_appointment", "(none)"}
    assert d.chosen == max((k for k in d.scores if k != "(none)"), key=d.scores.get)
    calls = [x for x in out if isinstance(x, ToolCall)]
    assert len(calls) == 1 and calls[0].name == d.chosen
    assert d.chosen == "lookup_order" and calls[0].arguments == {"order_id": "5566"}


async def test_gate_talks_below_threshold_and_never_speaks_markup(gate_llm):
    out = await _run(gate_llm, _req("Thanks, that's all.", tool_threshold=1e6))
    assert isinstance(out[0], ToolDecision) and out[0].chosen is None
    assert not any(isinstance(x, ToolCall) for x in out)
    text = "".join(x for x in out if isinstance(x, str))
    assert text.strip() and "<tool_call>" not in text


async def test_an_order_number_alone_is_looked_up_without_scoring(gate_llm, monkeypatch):
    scored: list[str] = []
    score = LabelGate.score
    monkeypatch.setattr(LabelGate, "score", lambda self, llm, messages, allowed=None: (
        scored.append(messages[-1].content) or score(self, llm, messages, allowed)))
    owner = gate_llm.cache.owner
    # even with a threshold no margin reaches: the number alone is lookup_order's argument
    out = await _run(gate_llm, _req("5566.", tool_threshold=1e6))
    d = out[0]
    assert isinstance(d, ToolDecision) and (d.chosen, d.which) == ("lookup_order", "alone")
    assert d.scores == {} and d.margin == math.inf and d.as_dict()["margin"] is None
    assert scored == [] and gate_llm.cache.owner == owner  # no label pass, no KV-state swap
    calls = [x for x in out if isinstance(x, ToolCall)]
    assert [(c.name, c.arguments) for c in calls] == [("lookup_order", {"order_id": "5566"})]
    # one tool of two that take the same value alone is no decision: the gate scores it
    twin = ToolSchema("cancel_order", "Cancel an order.", GATED[0].parameters, ("Cancel 1234.",))
    out = await _run(gate_llm, LLMRequest((SUPPORT, ChatMessage("user", "5566.")),
                                          tools=(*GATED, twin), temperature=0.0, max_tokens=24))
    assert out[0].which != "alone" and scored == ["5566."]
    # with other words it is scored, and the nearest example decides, small talk competing
    # (which "said")
    out = await _run(gate_llm, _req("Is 5566 your number?", tool_threshold=1e6))
    assert out[0].chosen == "lookup_order" and out[0].which == "said" and len(scored) == 2
    out = await _run(gate_llm, _req("Ha, 5566 is my lucky number. Anyway, thanks, bye!",
                                    tool_threshold=1e6))
    assert out[0].chosen is None and not any(isinstance(x, ToolCall) for x in out)


async def test_talk_path_reply_is_the_reply_without_the_gate(gate_llm):
    """The gate swaps its own KV state in and out: the conversation's reply afterwards is the
    one the model writes with no gate at all (text-only request, same prompt)."""
    req = _req("Hello, how are you today?", tool_threshold=1e6, cache_key="G")
    gated = "".join(x for x in await _run(gate_llm, req) if isinstance(x, str))
    plain = "".join(x for x in await _run(gate_llm, _req("Hello, how are you today?",
                                                          tool_choice="none")) if isinstance(x, str))
    assert gated == plain
    # the next turn of the gated call prefills only its new tokens
    nxt = LLMRequest((*req.messages, ChatMessage("assistant", gated),
                      ChatMessage("user", "Good.")), tools=GATED, temperature=0.0, max_tokens=2,
                     tool_threshold=1e6, cache_key="G")
    await _run(gate_llm, nxt)
    assert gate_llm.last_stats.prefilled < 40, gate_llm.last_stats
    gate_llm.forget("G")


async def test_shipped_calibration_separates_a_request_from_thanks(gate_llm):
    """At the bundled model's calibrated threshold an order request calls lookup_order and a
    thank-you talks (the agent's own examples feed the gate, as in a call)."""
    calls = [x for x in await _run(gate_llm, _req("I am calling about order 7351, where is it?"))
             if isinstance(x, ToolDecision)]
    talks = [x for x in await _run(gate_llm, _req("Thank you, goodbye."))
             if isinstance(x, ToolDecision)]
    assert calls[0].source == "model" and calls[0].chosen == "lookup_order", calls[0]
    assert talks[0].chosen is None, talks[0]
    assert calls[0].margin > talks[0].margin


async def test_a_new_call_starts_from_the_warm_system_turn_not_the_gates_prompt(gate_llm):
    """The gate's own KV state holds the context between calls; a new call's first request
    still starts from the warmed system turn and prefills only the caller's turn."""
    import asyncio

    await asyncio.to_thread(gate_llm.warmup, SUPPORT.content, GATED)
    assert await asyncio.to_thread(gate_llm.warm_gate, GATED)
    req = _req("Hello there, how are you?", tool_threshold=1e6, cache_key="NEW")
    out = await _run(gate_llm, req)
    assert isinstance(out[0], ToolDecision) and out[0].chosen is None
    stats = gate_llm.last_stats
    warm = len(gate_llm.engine._tokens(gate_llm.engine.system_prefix(SUPPORT.content, GATED)))
    assert stats.prompt - stats.prefilled >= warm > 20 and 0 < stats.prefilled < 40, stats
    gate_llm.forget("NEW")


async def test_prefill_while_the_caller_speaks_leaves_the_request_only_the_callers_words(gate_llm):
    """``prefill`` evaluates the next request up to the caller's words, in the gate's KV state
    and the conversation's; the request then prefills only the caller's words, and decides and
    answers as the same request of a twin conversation that was not prefilled."""
    import asyncio

    said = {}
    for key in ("PF", "TWIN"):  # two conversations with the same first turn
        first = _req("Hello there.", tool_threshold=1e6, cache_key=key)
        said[key] = "".join(x for x in await _run(gate_llm, first) if isinstance(x, str))
    assert said["PF"] == said["TWIN"]
    history = (*first.messages, ChatMessage("assistant", said["PF"]))

    def nxt(text: str, key: str) -> LLMRequest:
        return LLMRequest((*history, ChatMessage("user", text)), tools=GATED, temperature=0.0,
                          max_tokens=12, cache_key=key, tool_threshold=1e6)  # it talks

    n = await asyncio.wrap_future(gate_llm.prefill(nxt("", "PF")))
    agent_words = len(gate_llm.engine._tokens(said["PF"], bos=False))
    # the gate's query up to the caller (the agent's words are new to it); the conversation
    # holds the reply it generated and adds only the turn markers
    assert agent_words < n < agent_words + 16
    assert await asyncio.wrap_future(gate_llm.prefill(nxt("", "PF"))) == 0  # already held
    words = "Good, thank you."
    primed = await _run(gate_llm, nxt(words, "PF"))
    caller = len(gate_llm.engine._tokens(words, bos=False))
    # the caller's words, the turn's end and the open assistant turn (≈ 7 markers)
    assert 0 < gate_llm.last_stats.prefilled <= caller + 8, gate_llm.last_stats
    twin = await _run(gate_llm, nxt(words, "TWIN"))
    assert gate_llm.last_stats.prefilled > caller + 8
    (a, *rest_a), (b, *rest_b) = primed, twin
    assert isinstance(a, ToolDecision) and a.chosen is None is b.chosen
    assert a.scores == pytest.approx(b.scores, abs=0.05)
    assert rest_a == rest_b and "".join(rest_a).strip()
    gate_llm.forget("PF")
    gate_llm.forget("TWIN")


def test_in_gate_mode_the_conversation_prompt_lists_no_tools_but_a_required_call_does(gate_llm):
    """The gate decides with its own prompt; the conversation's prompt (and its warm-up prefix)
    carries no tool list, unless a call is required; another mode lists the tools."""
    engine = gate_llm.engine
    auto = engine.prompt(_req("Check order 4217."))
    assert "<tools>" not in auto and "lookup_order" not in auto
    assert auto.startswith(engine.system_prefix(SUPPORT.content, GATED))
    assert "<tools>" in engine.prompt(_req("Check order 4217.", tool_choice="required"))
    gate_llm.tool_mode = "lazy"
    assert "<tools>" in engine.prompt(_req("Check order 4217."))
    assert "<tools>" in engine.system_prefix(SUPPORT.content, GATED)


SPOKEN = tuple(ToolSchema(t.name, t.description, {**t.parameters, "properties": {"order_id": {
    "type": "string", "pattern": r"^[0-9]([, -]{0,2}[0-9]){3}$"}}} if t.name == "lookup_order"
    else t.parameters, EXAMPLES[t.name]) for t in TOOLS)


async def test_a_day_said_in_the_callers_message_before_is_inherited(gate_llm):
    """"Thursday at 6 pm?" (closed), then "4 pm that same day, then.": the time is this
    message's, the day the one before's (``_toolcall.argument_sources``), copied, not sampled
    (the model alone wrote it in 3 sampled tokens here, and may write another day)."""
    move = ToolSchema("reschedule", "Move the appointment.", {
        "type": "object", "required": ["day", "time"],
        "properties": {"day": {"type": "string", "enum": ["Monday", "Tuesday", "Wednesday",
                                                          "Thursday", "Friday"]},
                       "time": {"type": "string", "pattern": "^[0-9]{1,2} ?(am|pm)$"}}})
    msgs = (SUPPORT, ChatMessage("user", "Can I come Thursday at 6 pm?"),
            ChatMessage("assistant", "Sorry, we close at 5 PM. Monday is free all day."),
            ChatMessage("user", "4 pm that same day, then."))
    out = await _run(gate_llm, LLMRequest(msgs, tools=(move,), tool_choice="reschedule",
                                          temperature=0.0, max_tokens=24))
    call = next(x for x in out if isinstance(x, ToolCall))
    assert call.arguments == {"day": "Thursday", "time": "4 pm"}
    assert gate_llm.last_stats.generated == 0  # both copied from the caller's words, none sampled


@pytest.mark.parametrize("ground, want", [(True, "4, 2, 1, 7"), (False, None)])
async def test_a_patterned_argument_is_copied_from_what_the_caller_said(gate_llm, ground, want):
    """Grounding (``ChatEngine.ground_arguments``) copies the caller's own span into a patterned
    argument; without it the model writes the value itself under the pattern."""
    gate_llm.engine.ground_arguments = ground
    try:
        out = await _run(gate_llm, LLMRequest(
            (SUPPORT, ChatMessage("user", "It's order 4, 2, 1, 7.")), tools=SPOKEN,
            tool_choice="lookup_order", temperature=0.0, max_tokens=24))
    finally:
        gate_llm.engine.ground_arguments = True
    call = next(x for x in out if isinstance(x, ToolCall))
    if want is not None:
        assert call.arguments == {"order_id": want}
    else:  # sampled under the pattern: valid, whatever the model chose
        import re
        assert re.fullmatch(r"[0-9]([, -]{0,2}[0-9]){3}", call.arguments["order_id"])


def test_the_shipped_thresholds_were_fitted_on_todays_support_agent():
    """Every threshold in ``CALIBRATED`` was fitted on the support agent's examples and the
    gate's prompt for them; when either changes, this fails until the models are re-fitted
    (Qwen2.5-Coder-1.5B's 4.77 outlived its examples: 2.47 on today's)."""
    from rejoinder import load_agent
    from rejoinder.adapters._gate import CALIBRATED_ON
    from rejoinder.calibrate import fingerprint

    assert fingerprint(load_agent("support")) == CALIBRATED_ON, (
        "the support agent's examples or the gate's prompt changed since the shipped thresholds "
        "were fitted: re-fit each model of _gate.CALIBRATED with `rejoinder calibrate "
        "[--llm-model …]`, then set CALIBRATED and CALIBRATED_ON")


def test_the_fingerprint_follows_examples_descriptions_and_talk_but_not_instructions():
    from rejoinder import Agent, tool
    from rejoinder.calibrate import fingerprint

    def agent(examples=("Where is order 1234?",), doc="Look up an order.",
              talk=("Nice weather.",), instructions="Be brief."):
        def lookup_order(order_id: str) -> str:
            return "shipped"
        lookup_order.__doc__ = doc
        return Agent(instructions, tools=[tool(examples=list(examples))(lookup_order)],
                     llm={"talk_examples": list(talk)})

    base = fingerprint(agent())
    assert len(base) == 16 and base == fingerprint(agent())
    assert fingerprint(agent(instructions="Be kind.")) == base
    changed = {fingerprint(agent(examples=("Where is order 1234?", "Track 9876."))),
               fingerprint(agent(doc="Find an order by its number.")),
               fingerprint(agent(talk=("Lovely day.",)))}
    assert base not in changed and len(changed) == 3
    with pytest.raises(ConfigError, match="no tools"):
        fingerprint(Agent("Be brief."))
