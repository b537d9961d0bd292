"""Tool-call prompt rendering, grammars, parsing and the sentinel scanner (pure, no model)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rejoinder.adapters._toolcall import (DEFAULT_SYSTEM, TOOL_CALL_OPEN, SentinelScanner,
                                          argument_sources, call_grammar, check_tool_choice, choice_grammar,
                                          flatten_result, grounded_values, json_complete, value_alone, names_grammar, object_plan, parse_calls,
                                          render_prompt, tools_json, value_grammar)
from rejoinder.ports import ChatMessage, PortError, ToolCall, ToolSchema

ORDER = ToolSchema("lookup_order", "Look up an order.",
                   {"type": "object", "title": "LookupOrder",
                    "properties": {"order_id": {"type": "string", "title": "Order Id",
                                                "pattern": "^[0-9]{4}$"}},
                    "required": ["order_id"]})
LIST = ToolSchema("list_appointments", "List appointments.", {"type": "object", "properties": {}})
MOVE = ToolSchema("reschedule_appointment", "Move one.",
                  {"type": "object",
                   "properties": {"appointment_id": {"type": "integer"},
                                  "day": {"type": "string", "enum": ["Monday", "Friday"]}},
                   "required": ["appointment_id", "day"]})
TOOLS = (ORDER, LIST, MOVE)


def test_tools_json_drops_titles_and_keeps_order():
    listed = json.loads(tools_json(TOOLS))
    assert [t["name"] for t in listed] == ["lookup_order", "list_appointments",
                                           "reschedule_appointment"]
    assert "title" not in json.dumps(listed)
    assert listed[0]["parameters"]["properties"]["order_id"]["pattern"] == "^[0-9]{4}$"


def test_render_prompt_with_tools_calls_and_results():
    call = ToolCall("call_1", "lookup_order", {"order_id": "4217"})
    msgs = [ChatMessage("system", "Be brief."), ChatMessage("user", "Check 4217."),
            ChatMessage("assistant", "", tool_calls=(call,)),
            ChatMessage("tool", json.dumps({"status": "shipped", "eta": "Friday"}),
                        tool_call_id="call_1")]
    p = render_prompt(msgs, TOOLS)
    assert p.startswith("<|im_start|>system\nBe brief.\n\nYou have access to the following tools:")
    assert f"<tools>{tools_json(TOOLS)}</tools>" in p
    assert ('<|im_start|>assistant\n<tool_call>[{"name": "lookup_order", "arguments": '
            '{"order_id": "4217"}}]</tool_call><|im_end|>\n') in p
    assert ("<|im_start|>system\nlookup_order result: status: shipped, eta: Friday. Tell the "
            "caller what it says, in one short sentence.<|im_end|>\n") in p
    assert p.endswith("<|im_start|>assistant\n")
    # the exact text the model generated wins over the canonical JSON (KV-cache prefix match)
    raw = '[{"name": "lookup_order", "arguments": {"order_id":"4217"}}]</tool_call>'
    assert TOOL_CALL_OPEN + raw in render_prompt(msgs, TOOLS, raw_calls={("call_1",): raw})


def test_render_prompt_default_system_and_no_tools():
    p = render_prompt([ChatMessage("user", "hi")])
    assert p == (f"<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
                 "<|im_start|>assistant\n")


def test_render_prompt_is_append_only():
    """Each turn's prompt starts with the previous turn's prompt minus its open assistant turn:
    what makes the KV cache reusable across a call."""
    msgs = [ChatMessage("system", "S"), ChatMessage("user", "a")]
    before = render_prompt(msgs, TOOLS)
    msgs += [ChatMessage("assistant", "b"), ChatMessage("user", "c")]
    after = render_prompt(msgs, TOOLS)
    assert after.startswith(before) and after != before


def test_flatten_result():
    assert flatten_result('{"order_id": "4217", "items": [{"a": 1}, {"a": 2}], "x": []}') == \
        "order 4217, items: a: 1; a: 2, x: none"
    # an id names what it identifies ("order 4217"); a bare "id" key or an id holding an object
    # keeps the key: value form
    assert flatten_result('{"id": 7, "shop_id": {"n": 2}}') == "id: 7, shop id: n: 2"
    assert flatten_result("plain text") == "plain text"
    assert flatten_result("42") == "42"


def test_check_tool_choice():
    for ok in ("auto", "none", "required", "lookup_order"):
        check_tool_choice(TOOLS, ok)
    check_tool_choice((), "auto")
    with pytest.raises(PortError, match="not one of the declared tools: lookup_order"):
        check_tool_choice(TOOLS, "cancel_everything")
    with pytest.raises(PortError, match="needs tools"):
        check_tool_choice((), "required")


def test_call_grammar_shapes():
    g = call_grammar(TOOLS, "required")
    assert g.startswith('root ::= "[" "\\n"? call "\\n"? "]" "</tool_call>"')
    for name in ("lookup_order", "list_appointments", "reschedule_appointment"):
        assert f'\\"{name}\\"' in g
    assert 'space ::= ""' in g and ' space ":" space' not in g
    one = call_grammar(TOOLS, "list_appointments")
    assert "lookup_order" not in one and "list_appointments" in one
    empty_ok = call_grammar(TOOLS, "auto", 2, allow_empty=True)
    assert empty_ok.startswith('root ::= "[" ( "]" | ') and "{0,1}" in empty_ok


def test_value_and_names_grammar():
    g = value_grammar({"type": "string", "pattern": "^[0-9]{4}$"}, ",", lead=" ")
    assert g.startswith('root ::= " " arg ","\n') and "[0-9]" in g
    free = value_grammar({"type": "string"}, "}")
    assert free.count("(char") == 64  # free text is bounded (MAX_FREE_STRING)
    assert "\\x00-\\x1F" in free  # and holds no raw control characters
    assert value_grammar({"type": "integer"}, "}").startswith('root ::= integer "}"')
    assert value_grammar({"type": "integer", "minimum": 1, "maximum": 9999}, "}") == \
        'root ::= ("0" | [1-9] [0-9]{0,3}) "}"\n'
    assert names_grammar(["a", 'b"c']) == 'root ::= ("a" | "b\\"c") "\\""\n'


def test_object_plan():
    assert object_plan(ORDER.parameters) == [("order_id", {"type": "string",
                                                           "pattern": "^[0-9]{4}$"})]
    assert object_plan(LIST.parameters) == []
    optional = {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert object_plan(optional) is None
    assert object_plan({**MOVE.parameters, "additionalProperties": True}) is None


def test_json_complete():
    assert json_complete('"4217", ', ", ")
    assert not json_complete('"42, ', ", ")  # the comma is inside an open string
    assert json_complete("12}", "}") and not json_complete("1", "}")
    assert json_complete('{"a": [1, 2]}', "") and not json_complete('{"a": [1, 2]', "")


def test_parse_calls():
    calls = parse_calls('[{"name": "lookup_order", "arguments": {"order_id": "4217"}}]</tool_call>',
                        TOOLS)
    assert [(c.name, c.arguments) for c in calls] == [("lookup_order", {"order_id": "4217"})]
    assert calls[0].id.startswith("call_")
    assert parse_calls("[]</tool_call>", TOOLS) == []
    with pytest.raises(PortError, match="undeclared tool 'rm_rf'"):
        parse_calls('[{"name": "rm_rf", "arguments": {}}]', TOOLS)
    with pytest.raises(PortError, match="not valid JSON"):
        parse_calls('[{"name": "lookup_order", "arguments": {"order_id": "42', TOOLS)
    with pytest.raises(PortError, match="'lookup_order' are not a JSON object"):
        parse_calls('[{"name": "lookup_order", "arguments": [1]}]', TOOLS)


def test_sentinel_scanner_holds_back_split_opener():
    s = SentinelScanner([TOOL_CALL_OPEN])
    assert s.feed("Let me check. <") == ("Let me check. ", None)
    assert s.feed("tool_") == ("", None)
    assert s.feed("call>[{") == ("", TOOL_CALL_OPEN)
    s = SentinelScanner([TOOL_CALL_OPEN, "\n\n"])
    assert s.feed("a < b") == ("a < b", None)  # "<" followed by a space cannot be the opener
    assert s.feed(" and <t") == (" and ", None)
    assert s.flush() == "<t"
    assert s.feed("end\n\nmore") == ("end", "\n\n")


@given(st.lists(st.sampled_from(["a", "<", "tool", "_", "call", ">", "x<tool_c", " "]),
                max_size=12))
def test_sentinel_scanner_never_loses_or_leaks_text(pieces):
    """Whatever the split, the text shown is exactly the text before the first sentinel."""
    s = SentinelScanner([TOOL_CALL_OPEN])
    shown, hit = "", None
    for p in pieces:
        safe, hit = s.feed(p)
        shown += safe
        if hit:
            break
    if not hit:
        shown += s.flush()
    full = "".join(pieces)
    expect = full.split(TOOL_CALL_OPEN)[0]
    assert shown == expect and (hit is not None) == (TOOL_CALL_OPEN in full)


# --- grounded arguments: a patterned string is chosen among the caller's own spans -------------

SPOKEN_ORDER = {"type": "string", "pattern": r"^[0-9]([, -]{0,2}[0-9]){3}$"}


@pytest.mark.parametrize("said, spans", [
    ("4, 2, 1, 7.", ["4, 2, 1, 7"]),
    ("It's 4217, no wait, 4271.", ["4217", "4271"]),
    ("Order 3 3 0 9 please, 3 3 0 9.", ["3 3 0 9"]),   # repeats once
    ("42178", []),                                      # no span fits whole
    ("a4217", []),                                      # not at a word boundary
    ("Hello.", []),
    ("Four, two, one, seven.", ["4, 2, 1, 7"]),         # digits the recogniser wrote as words
    ("It's four two 1 7.", ["4 2 1 7"]),
    ("One of your staff, please.", []),                 # a word "one" is no order number
    ("Someone ate seventy-two.", []),                   # inside words: untouched
    ("The number is... 3... 6... 0... 7...", ["3, 6, 0, 7"]),  # read with long pauses (Whisper)
    ("four\u2026 two\u2026 one\u2026 seven", ["4, 2, 1, 7"]),
    ("It costs 3... 50 dollars.", []),                  # an ellipsis joins no wider span
])
def test_grounded_values_are_the_callers_spans_that_fit_the_pattern(said, spans):
    assert grounded_values(SPOKEN_ORDER, said) == spans


def test_grounding_needs_a_patterned_string():
    assert grounded_values({"type": "string"}, "4217") == []
    assert grounded_values({"type": "integer", "pattern": "^[0-9]+$"}, "4217") == []
    assert grounded_values({"type": "string", "pattern": "^([0-9]$"}, "4217") == []  # bad regex


def test_choice_grammar_allows_exactly_the_spans():
    from llama_cpp import LlamaGrammar

    gbnf = choice_grammar(["4, 2, 1, 7", "4217"], ",", lead=" ")
    assert gbnf == 'root ::= " " ("\\"4, 2, 1, 7\\"" | "\\"4217\\"") ","\n'
    LlamaGrammar.from_string(gbnf, verbose=False)  # llama.cpp parses it


def test_enum_values_the_caller_said_are_grounded_in_order_of_appearance():
    from rejoinder.adapters._toolcall import grounded_values
    day = {"type": "string", "enum": ["Monday", "Tuesday", "Wednesday"]}
    assert grounded_values(day, "Monday at 2. Sorry, I mean tuesday.") == ["Monday", "Tuesday"]
    assert grounded_values(day, "Mondays are busy") == []  # whole words only
    assert grounded_values({"type": "string", "enum": ["", "cut"]}, "a haircut") == []


def test_an_optional_groundable_property_is_written_only_when_the_caller_said_it():
    from rejoinder.adapters._toolcall import object_plan
    schema = {"type": "object", "additionalProperties": False, "required": ["day"],
              "properties": {"day": {"type": "string", "enum": ["Monday", "Friday"]},
                             "service": {"type": "string", "enum": ["haircut", "consultation"],
                                         "default": ""}}}
    assert object_plan(schema) is None  # without the caller's words: sample the whole object
    assert [k for k, _ in object_plan(schema, "Move it to Friday")] == ["day"]
    assert [k for k, _ in object_plan(schema, "Move my haircut to Friday")] == ["day", "service"]
    free = {**schema, "properties": {**schema["properties"], "note": {"type": "string"}}}
    assert object_plan(free, "Move my haircut to Friday") is None  # free text: the model decides


def test_a_tool_is_grounded_only_when_its_required_pattern_and_enum_arguments_were_said():
    from types import SimpleNamespace

    from rejoinder.adapters._llama_engine import ChatEngine
    from rejoinder.ports import ChatMessage, LLMRequest, ToolSchema
    move = ToolSchema("move", "Move it.", {
        "type": "object", "required": ["day", "time"],
        "properties": {"day": {"type": "string", "enum": ["Monday", "Wednesday"]},
                       "time": {"type": "string", "pattern": "^[0-9]{1,2} ?(am|pm)$"},
                       "service": {"type": "string", "enum": ["haircut", ""]}}})
    free = ToolSchema("list", "List them.", {"type": "object", "properties": {}})
    engine = SimpleNamespace(ground_arguments=True, _caller_said=ChatEngine._caller_said)

    engine._caller_before = ChatEngine._caller_before

    def grounding(said: str, before: str = "Can I book something?") -> dict:
        req = LLMRequest((ChatMessage("user", before), ChatMessage("assistant", "Sure."),
                          ChatMessage("user", said)), tools=(move, free))
        return ChatEngine._grounding(engine, req)
    assert grounding("Move it to Wednesday at 2 pm") == {"move": True, "list": None}
    # the recogniser lost "Wednesday": the day was not said, so no call
    assert grounding("Could I move my haircut to when they at 2 pm") == {"move": False, "list": None}
    assert grounding("Move it to Monday") == {"move": False, "list": None}  # no time
    # a message that restates part of the caller's request before it inherits the rest
    assert grounding("Make it 4 pm then", before="Wednesday at 2 pm?") == {"move": True, "list": None}
    assert grounding("Move it to Monday", before="Wednesday at 2 pm?") == {"move": True, "list": None}
    # one that grounds none of them inherits nothing: still no call
    assert grounding("Okay, thanks.", before="Wednesday at 2 pm?") == {"move": False, "list": None}
    engine.ground_arguments = False
    assert grounding("Move it") == {"move": None, "list": None}


def test_a_required_argument_the_last_message_lacks_is_read_from_the_one_before():
    schema = {"type": "object", "required": ["day", "time"],
              "properties": {"day": {"type": "string", "enum": ["Monday", "Thursday"]},
                             "time": {"type": "string", "pattern": "^[0-9]{1,2} ?(am|pm)$"},
                             "service": {"type": "string", "enum": ["haircut", ""]},
                             "note": {"type": "string"}}}
    before = "Thursday at 6 pm for the haircut?"
    # the time from this message, the day from the one before; an optional one is never inherited
    assert argument_sources(schema, "4 pm that same day, then.", before) == {
        "day": before, "time": "4 pm that same day, then.", "service": "4 pm that same day, then."}
    # both said now (a self-repair inside the message is read from the message alone)
    said = "Monday at 2 pm, sorry, Thursday at 3 pm"
    assert argument_sources(schema, said, before) == {"day": said, "time": said, "service": said}
    # nothing of it said now: nothing inherited
    assert argument_sources(schema, "Okay.", before) == {"day": "Okay.", "time": "Okay.",
                                                         "service": "Okay."}
    assert argument_sources(schema, "4 pm", "") == {"day": "4 pm", "time": "4 pm", "service": "4 pm"}


_OBJ = {"type": "object", "properties": {}}
_LOOKUP = ToolSchema("lookup_order", "", {"type": "object", "properties": {"order_id": SPOKEN_ORDER},
                                          "required": ["order_id"]})


@pytest.mark.parametrize("said, tool", [
    ("4, 2, 1, 7.", "lookup_order"),
    ("  4217 ", "lookup_order"),
    ("Four, two, one, seven.", "lookup_order"),      # digits the recogniser wrote as words
    ("3... 6... 0... 7...", "lookup_order"),         # read with long pauses (Whisper's ellipses)
    ("It's 4, 2, 1, 7.", None),                      # other words: the gate's decision stands
    ("8, 1, 4.", None),                              # three digits: no order number
    ("4217, 4271.", None),                           # two values: which one is not for us
    ("", None),
])
def test_a_tool_is_called_on_its_one_typed_argument_said_alone(said, tool):
    tools = (_LOOKUP, ToolSchema("list_appointments", "", _OBJ))
    assert value_alone(tools, said) == tool


def test_no_value_alone_when_two_tools_take_the_same_value_or_one_needs_two():
    twin = ToolSchema("track_parcel", "", _LOOKUP.parameters)
    assert value_alone((_LOOKUP, twin), "4, 2, 1, 7.") is None
    two = ToolSchema("move", "", {"type": "object", "required": ["order_id", "day"],
                                  "properties": {"order_id": SPOKEN_ORDER,
                                                 "day": {"type": "string", "enum": ["Monday"]}}})
    assert value_alone((two,), "4217") is None
