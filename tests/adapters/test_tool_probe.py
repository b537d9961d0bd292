"""The linear probe that picks the tool (:mod:`rejoinder.adapters._probe`): its logic on a
bag-of-keywords embedding, and on the real all-MiniLM-L6-v2 with the reference support agent's
examples, where the nearest example picked a reschedule for a question about a booking."""

from __future__ import annotations

import numpy as np
import pytest

from rejoinder.adapters._probe import ProbeMatcher, tool_chooser
from rejoinder.adapters._which import TALK, ExampleMatcher, TalkCheckedMatcher
from rejoinder.adapters.minilm_embed import MiniLMEmbedding
from rejoinder.app.support import agent as support
from rejoinder.ports import ToolSchema

WORDS = ("order", "parcel", "person", "human", "hello", "thanks", "when", "move")


def _bag(text: str) -> np.ndarray:
    """One axis per keyword and one shared axis (so no text embeds to zero)."""
    low = text.lower()
    return np.array([1.0] + [3.0 if w in low else 0.0 for w in WORDS])


_bag.template = None  # the words alone, as MiniLMEmbedding declares


def _schema(name: str, *examples: str) -> ToolSchema:
    return ToolSchema(name, name, {"type": "object", "properties": {}}, examples)


TOOLS = (_schema("lookup_order", "Where is my order?", "My parcel, please.", "Order status."),
         _schema("transfer_to_human", "A person, please.", "Put me through to a human."),
         _schema("note"))  # no examples: it is never a class
TALK_EX = ("hello there", "thanks a lot", "hello, thanks")
NAMES = ["lookup_order", "transfer_to_human"]


def test_the_probe_picks_the_tool_whose_examples_share_the_request_and_gives_probabilities():
    m = ProbeMatcher(_bag, TOOLS, TALK_EX)
    tool, p = m.choose("has my parcel left", NAMES)
    assert tool == "lookup_order" and set(p) == set(NAMES)
    assert sum(p.values()) == pytest.approx(1.0) and p["lookup_order"] > 0.5
    assert m.choose("a human being", NAMES)[0] == "transfer_to_human"
    # only the allowed tools are candidates, renormalised over them
    tool, p = m.choose("has my parcel left", ["transfer_to_human"])
    assert tool == "transfer_to_human" and p == {"transfer_to_human": pytest.approx(1.0)}
    assert m.similarities("order", NAMES) == pytest.approx(m.choose("order", NAMES)[1])
    assert m.covers(NAMES) and not m.covers(["lookup_order", "note"]) and not m.covers([])


def test_small_talk_is_a_class_that_wins_only_when_it_competes():
    m = ProbeMatcher(_bag, TOOLS, TALK_EX)
    tool, p = m.choose("hello and thanks", NAMES, talk=True)
    assert tool is None and TALK in p and p[TALK] > max(p["lookup_order"], p["transfer_to_human"])
    assert sum(p.values()) == pytest.approx(1.0)
    # without talk competing the most probable tool is chosen, and TALK is not reported
    tool, p = m.choose("hello and thanks", NAMES)
    assert tool in NAMES and TALK not in p
    # a request still calls with talk competing
    assert m.choose("where is my order", NAMES, talk=True)[0] == "lookup_order"


def test_one_tool_and_no_talk_is_always_that_tool_and_no_examples_is_an_error():
    m = ProbeMatcher(_bag, TOOLS[:1])
    assert m.choose("hello", ["lookup_order"], talk=True) == ("lookup_order", {"lookup_order": 1.0})
    with pytest.raises(ValueError, match="no tool has examples"):
        ProbeMatcher(_bag, (TOOLS[2],), TALK_EX)


def test_the_chooser_lets_the_probe_pick_and_the_nearest_examples_judge_small_talk():
    def polite(text: str) -> np.ndarray:  # hears "please please" as a greeting
        return _bag("hello" if "please please" in text.lower() else text)

    m = tool_chooser("probe", _bag, polite, TOOLS, TALK_EX)
    assert isinstance(m, TalkCheckedMatcher) and isinstance(m.which, ProbeMatcher)
    assert not m.own_talk and [type(c) for c in m.checks] == [ExampleMatcher, ExampleMatcher]
    assert m.choose("my order please please", NAMES, talk=True)[0] is None  # the second space
    assert m.choose("my order please please", NAMES)[0] == "lookup_order"
    tool, p = m.choose("where is my order", NAMES, talk=True)
    assert tool == "lookup_order" and TALK in p  # the probe's probabilities, talk included
    alone = tool_chooser("probe", _bag, None, TOOLS, TALK_EX)
    assert isinstance(alone, TalkCheckedMatcher) and len(alone.checks) == 1
    assert type(tool_chooser("examples", _bag, None, TOOLS, TALK_EX)) is ExampleMatcher


class _Says:
    """A matcher stub: always ``tool`` (None: small talk nearest), with ``sims``."""

    tools: dict = {}

    def __init__(self, tool, sims):
        self.tool, self.sims = tool, sims

    def choose(self, text, names, talk=False):
        return (self.tool if talk else next(iter(names))), dict(self.sims)


def test_without_its_own_talk_verdict_the_picker_only_ranks_the_tools():
    probs = {"lookup_order": 0.2, "transfer_to_human": 0.3, TALK: 0.5}
    says_talk, says_tool = _Says(None, probs), _Says("lookup_order", {})
    # the picker's talk class is the most probable, but no check hears small talk: a call, to
    # the most probable tool
    m = TalkCheckedMatcher(says_talk, says_tool, own_talk=False)
    assert m.choose("x", NAMES, talk=True) == ("transfer_to_human", probs)
    # with its own verdict it would talk
    assert TalkCheckedMatcher(says_talk, says_tool).choose("x", NAMES, talk=True)[0] is None
    # any check that hears small talk vetoes the call
    m = TalkCheckedMatcher(says_talk, says_tool, _Says(None, {}), own_talk=False)
    assert m.choose("x", NAMES, talk=True) == (None, probs)


@pytest.fixture(scope="module")
def support_probe():
    a = support
    tools = [t.schema for t in a.tools.values()]
    from rejoinder.adapters._gate import DEFAULT_TALK_EXAMPLES
    talk = DEFAULT_TALK_EXAMPLES + tuple(a.llm.talk_examples)
    mini = MiniLMEmbedding()
    return (ProbeMatcher(mini, tools, talk), ExampleMatcher(mini, tools, talk),
            [t.name for t in tools])


@pytest.mark.parametrize("say, want", [
    # the read suites' question the nearest example sent to reschedule_appointment (0.66
    # against the listing's 0.60, run 20261207-001617-eb14)
    ("And the second thing, when's my consultation again?", "list_appointments"),
    # written for this test
    ("Sorry, remind me what day my appointment is?", "list_appointments"),
    ("Could I push my haircut back to Friday morning?", "reschedule_appointment"),
    ("Where has my parcel got to? It's order 7 7 1 2.", "lookup_order"),
])
def test_the_real_probe_reads_the_request_not_the_topic(support_probe, say, want):
    probe, nearest, names = support_probe
    assert probe.choose(say, names)[0] == want
    if say.startswith("And the second thing"):
        assert nearest.choose(say, names)[0] == "reschedule_appointment"  # what it fixes


@pytest.mark.parametrize("say", ["Lovely, thanks ever so much.", "Hiya, are you there?"])
def test_the_real_probe_keeps_small_talk_as_talk(support_probe, say):
    probe, _, names = support_probe
    tool, p = probe.choose(say, names, talk=True)
    assert tool is None and p[TALK] > 0.5, p
