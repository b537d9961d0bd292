"""Asking for a missing argument (:mod:`rejoinder.adapters._ask`): naming the arguments the
caller did not say, and the gate's one question for them with the real SmolLM2-135M."""

from __future__ import annotations

import pytest

from rejoinder.adapters._ask import argument_phrase, ask_note, missing_arguments
from rejoinder.ports import ToolCall

from test_tool_gate import _req, _run, gate_llm  # noqa: F401 — the fixture

MOVE = {"type": "object", "required": ["day", "time"], "properties": {
    "day": {"type": "string", "enum": ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"],
            "description": "the new weekday, e.g. \"Thursday\"."},
    "time": {"type": "string", "pattern": "^([01][0-9]|2[0-3]):[0-5][0-9]$",
             "description": "the new start time (24-hour)"},
    "service": {"type": "string", "description": "which appointment"}}}


@pytest.mark.parametrize("name,schema,want", [
    ("order_id", {"description": "the order number as the caller said it (four digits)."},
     "order number"),
    ("day", MOVE["properties"]["day"], "new weekday"),
    ("time", MOVE["properties"]["time"], "new start time"),
    ("order_id", {}, "order id"),
    ("x", {"description": "a value that the backend needs in order to find the record at all"},
     "x"),  # no short noun phrase: the name
])
def test_an_argument_is_named_by_its_descriptions_first_phrase(name, schema, want):
    assert argument_phrase(name, schema) == want


def test_only_the_required_typed_arguments_not_said_are_missing():
    assert missing_arguments(MOVE, "Can I move my haircut?") == ("new weekday", "new start time")
    assert missing_arguments(MOVE, "Move it to Thursday, please.") == ("new start time",)
    assert missing_arguments(MOVE, "Thursday at 15:00.") == ()
    # the rest of a restated request comes from the caller's message before
    assert missing_arguments(MOVE, "At 15:00 then.", "Could it be Thursday?") == ()
    assert missing_arguments({"type": "object", "properties": {}}, "Hello.") == ()


def test_the_note_names_what_is_missing():
    assert ask_note(("order number",)) == ("The caller did not say the order number. "
                                           "Ask for it in one short question.")
    assert ask_note(("day", "time", "service")).startswith("The caller did not say the day, time "
                                                           "and service. Ask for them")


async def test_a_lookup_without_its_number_gets_one_question_for_it(gate_llm):
    """The gate calls ``lookup_order`` (threshold forced low, small talk not competing) but no
    order number was said: the agent talks, and its reply is one question (the note and the
    question grammar); with ``ask_missing`` off the same decision gets a free reply."""
    engine = gate_llm.engine
    engine.talk_veto = False
    req = _req("Has my parcel been sent yet?", tool_threshold=-1e6, allowed_tools=("lookup_order",))
    try:
        out = await _run(gate_llm, req)
        engine.ask_missing = False
        free = await _run(gate_llm, req)
    finally:
        engine.talk_veto, engine.ask_missing = True, True
    decision, text = out[0], "".join(x for x in out if isinstance(x, str))
    assert (decision.chosen, decision.which, decision.ask_for) == (None, "grounding",
                                                                   ("4-digit order number",))
    assert decision.as_dict()["ask_for"] == ["4-digit order number"]
    assert decision.ask_tool == "lookup_order" and decision.as_dict()["ask_tool"] == "lookup_order"
    assert not any(isinstance(x, ToolCall) for x in out)
    assert text.startswith(("Could you ", "Can you ", "What is ", "What's ", "Which "))
    assert text.endswith("?") and text.count("?") == 1 and "number" in text.lower(), text
    assert free[0].ask_for == () and "".join(x for x in free if isinstance(x, str)) != text
