"""``bench/tool_choice.py --items``: labelled utterances from a file, and the blind set shipped
in ``bench/data/decisions_blind.tsv`` kept apart from the support agent's examples."""

from __future__ import annotations

import importlib
import sys
from collections import Counter
from pathlib import Path

import pytest

from rejoinder.app.support import agent as support
from rejoinder.harness.heldout import distance

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture(scope="module")
def tool_choice():
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("tool_choice")
    finally:
        sys.path.remove(str(BENCH))


def test_the_blind_set_loads_with_its_labels(tool_choice):
    items = tool_choice.load_items(str(BENCH / "data" / "decisions_blind.tsv"))
    kinds = Counter(item.expect[0][0] if item.expect else "none" for item in items)
    assert kinds == {"list_appointments": 67, "none": 62, "lookup_order": 15,
                     "reschedule_appointment": 15, "cancel_appointment": 14, "transfer_to_human": 12}
    assert set(kinds) - {"none"} <= set(support.tools)
    assert all(args is None for item in items for _, args in item.expect)  # arguments not graded


def test_the_third_set_loads_and_lies_apart_from_the_examples(tool_choice):
    """``decisions_blind3.tsv``: 90 that want no tool, 50 for the six tools; read and tuned on,
    and no calibration data: only two of its tool requests lie within 0.3 WER of an example (kept,
    as measured; the header names them)."""
    items = tool_choice.load_items(str(BENCH / "data" / "decisions_blind3.tsv"))
    kinds = Counter(item.expect[0][0] if item.expect else "none" for item in items)
    assert kinds == {"none": 90, "list_appointments": 12, "reschedule_appointment": 10,
                     "cancel_appointment": 10, "lookup_order": 8, "transfer_to_human": 5, "end_call": 5}
    examples = [e for t in support.tools.values() for e in t.schema.examples] + list(support.llm.talk_examples)
    near = {i.say for i in items for e in examples if distance(i.say, e) < 0.3}
    assert near == {"Could I move my haircut to Thursday at half two instead?",
                    "I need to cancel my haircut, I'm afraid."}


def test_a_malformed_line_names_its_line(tool_choice, tmp_path):
    path = tmp_path / "items.tsv"
    path.write_text("# a comment\nnone\tHello.\nlookup_order|list_appointments\tWhere is 4217?\n"
                    "no tab on this line\n", encoding="utf-8")
    with pytest.raises(SystemExit, match=r"items.tsv:4: expected 'TOOL\[\|TOOL…\] or none<TAB>utterance'"):
        tool_choice.load_items(str(path))
    path.write_text("none\tHello.\nlookup_order|list_appointments\tWhere is 4217?\n", encoding="utf-8")
    items = tool_choice.load_items(str(path))
    assert [i.kind for i in items] == ["none", "tool"]
    assert items[1].expect == (("lookup_order", None), ("list_appointments", None))


def test_any_arguments_grade_as_right_when_none_are_given(tool_choice):
    from rejoinder.ports import ToolCall
    item = tool_choice.Item("Where is 4217?", (("lookup_order", None),))
    assert tool_choice.grade(item, ToolCall("1", "lookup_order", {"order_id": "9999"}), {}) == (True, True)
    assert tool_choice.grade(item, ToolCall("1", "list_appointments", {}), {}) == (False, False)
    assert tool_choice.grade(item, None, {}) == (False, False)


def test_no_blind_utterance_is_near_an_example_of_the_agent(tool_choice):
    """The set measures wordings nobody tuned on: none lies within 0.3 WER of an example."""
    items = tool_choice.load_items(str(BENCH / "data" / "decisions_blind.tsv"))
    examples = [e for t in support.tools.values() for e in t.schema.examples] + list(support.llm.talk_examples)
    assert len(examples) > 100
    near = [(i.say, e) for i in items for e in examples if distance(i.say, e) < 0.3]
    assert not near, near


def test_a_design_names_its_chooser_and_checks(tool_choice):
    parts = tool_choice.chooser_parts
    assert parts("gate") == ("gate", None, False, False)
    assert parts("gate-probe-nocheck") == ("gate", "probe", True, False)
    assert parts("gate-nearest") == ("gate", "examples", False, False)
    assert parts("gate-labels-noveto") == ("gate", "labels", False, True)
    assert parts("eager-fewshot-strict") == ("eager-fewshot-strict", None, False, False)
    assert tool_choice.parse_design(parts("gate-fewshot-probe")[0]) == ("gate", "fewshot", "declared")


def test_extra_examples_join_the_tools_and_the_talk_examples(tool_choice):
    from _agent_requests import variant

    from rejoinder.app.support import agent

    extra = {"lookup_order": ("Any news on parcel 1234?",), "none": ("Nice weather.",)}
    v = variant(agent, extra=extra)
    before = agent.tools["lookup_order"].schema.examples
    assert v.tools["lookup_order"].schema.examples == (*before, "Any news on parcel 1234?")
    assert v.tools["end_call"].schema.examples == agent.tools["end_call"].schema.examples
    assert v.llm.talk_examples == [*agent.llm.talk_examples, "Nice weather."]
    assert agent.tools["lookup_order"].schema.examples == before  # the agent is left as it was
