"""Replies that answer: no echo of the caller's words, one of the expected facts heard, no tool
on small talk, no tool that must wait (rejoinder.harness.answers, through evaluate)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rejoinder.harness.answers import is_echo, small_talk_counts
from rejoinder.harness.summary import small_talk_summary
from rejoinder.harness.expect import evaluate
from rejoinder.scenario import Scenario
from rejoinder.timeline import TurnRecord

TRUTH = [(0, 500.0, 1500.0)]


def rec(heard="", said="", tools=()):
    r = TurnRecord(1)
    r.stamps.update(eot_decided=1800.0, playback_start=2200.0, user_speech_end=1500.0)
    r.transcript, r.heard_text = said, heard
    r.tools = [{"name": t[0], "args": t[1], **({"error": t[2]} if len(t) > 2 else {})} for t in tools]
    return r


def check(expect, *turns, observable=None):
    sc = Scenario.model_validate({"name": "t", "turns": [{"audio": [{"silence_ms": 1}], "expect": expect}]})
    return evaluate(sc, SimpleNamespace(turns=list(turns), error=None, final_state=None), TRUTH,
                    observable=observable)


@pytest.mark.parametrize("reply,caller,echo", [
    ("Hello.", "Hello.", True),                      # the demo's failure, word for word
    ("Thank you!", "Thank you.", True),
    ("thank you", "Okay, thank you so much.", True),  # contained in what the caller said
    ("4217.", "4, 2, 1, 7.", True),                   # digits read one by one are the number
    ("Four two one seven?", "4217", False),           # spoken digits are other words
    ("You're welcome, Maria. Anything else?", "Thank you.", False),
    ("Hi Maria, how can I help you today?", "Hello.", False),
    ("Thank you, Maria.", "Thank you.", False),       # one word in two differs: WER 0.5
    ("4, 2, 1, 7 is a palindrome.", "4, 2, 1, 7.", False),  # not an echo (the tool check fails it)
    ("", "Hello.", False),                            # nothing heard echoes nothing
    ("Hello.", "", False),
])
def test_is_echo(reply, caller, echo):
    assert is_echo(reply, caller) is echo


def test_not_echo_fails_a_reply_that_repeats_the_caller():
    assert check({"not_echo": True}, rec(heard="Hi Maria, how can I help?", said="Hello.")).success
    v = check({"not_echo": True}, rec(heard="Hello.", said="Hello."))
    assert v.causes == ["echo"]
    assert v.failures == ["caller turn 1: the reply echoed the caller's words (caller: 'Hello.'; agent: 'Hello.')"]
    assert check({"not_echo": True}, rec(heard="", said="Hello.")).success  # answered: says if one must be


def test_reply_contains_any_needs_one_of_the_words():
    ex = {"reply_contains_any": ["shipped", "December 9"]}
    assert check(ex, rec(heard="It arrives Wednesday, December nine.")).success  # numbers as spoken
    assert check(ex, rec(heard="Your headphones have shipped.")).success
    v = check(ex, rec(heard="4, 2, 1, 7 is a palindrome.", said="4, 2, 1, 7."))
    assert v.causes == ["not said"]
    assert v.failures == ["caller turn 1: the caller heard none of ['shipped', 'December 9'] "
                          "(heard: '4, 2, 1, 7 is a palindrome.')"]
    assert check(ex, rec(heard="")).causes == ["timeout"]
    # the agent heard nothing of the turn ("Sorry, I didn't catch that."): recognition, not wording
    assert check(ex, rec(heard="Sorry, I didn't catch that.", said="")).causes == ["recognition error"]
    # the expected tool was not called: the words are missing because of it
    v = check({**ex, "tools": [{"name": "lookup_order", "args": {"order_id": "4217"}}]},
              rec(heard="Okay.", said="order 4217"))
    assert v.causes == ["no tool", "no tool"]


def test_no_tools_on_small_talk_and_tools_absent():
    assert check({"no_tools": True}, rec(heard="You're welcome!", said="Thank you.")).success
    v = check({"no_tools": True}, rec(heard="Order 4217 has shipped.", said="Thank you.",
                                      tools=[("lookup_order", {"order_id": "4217"})]))
    assert v.causes == ["unexpected tool"]
    assert v.failures == ["caller turn 1: expected no tool call, got lookup_order({'order_id': '4217'})"]
    ex = {"tools_absent": ["cancel_appointment"]}
    assert check(ex, rec(heard="Shall I cancel it?", tools=[("list_appointments", {})])).success
    v = check(ex, rec(heard="Cancelled.", tools=[("cancel_appointment", {"service": "haircut"})]))
    assert v.failures == ["caller turn 1: cancel_appointment must not be called here, got "
                          "cancel_appointment({'service': 'haircut'})"] and v.causes == ["unexpected tool"]
    # an agent that does not report its tool calls: skipped, not failed
    v = check({"no_tools": True, "tools_absent": ["cancel_appointment"]},
              rec(heard="Sure.", tools=[("cancel_appointment", {})]), observable={"db"})
    assert v.success and v.skipped == ["caller turn 1: no_tools/tools_absent (the agent does not report "
                                       "its tool calls)"]


def test_the_bundled_demo_call_rejects_the_echoing_agent():
    """The demo's expectations fail the agent of issue 16 ("Hello." → "Hello.", the palindrome,
    "Thank you." → "Thank you.") and pass one that answers every turn."""
    from rejoinder.cli import BUNDLED_CALL
    from rejoinder.scenario import load_scenario
    sc = load_scenario(BUNDLED_CALL)
    truth = [(0, 500.0, 1000.0), (1, 4000.0, 6000.0), (2, 9000.0, 9600.0)]

    def turn(i, eot, said, heard, tools=()):
        r = TurnRecord(i)
        r.stamps.update(eot_decided=eot, playback_start=eot + 400, playback_end=eot + 1400)
        r.transcript, r.heard_text = said, heard
        r.tools = [{"name": n, "args": a} for n, a in tools]
        return r

    cues = [{"turn": i, "cue": "after_agent", "at_ms": a, "missed": False} for i, a in enumerate((500, 4000, 9000))]
    echo = [turn(1, 1200, "Hello.", "Hello."), turn(2, 6300, "4, 2, 1, 7.", "4, 2, 1, 7 is a palindrome."),
            turn(3, 9900, "Thank you.", "Thank you.")]
    v = evaluate(sc, SimpleNamespace(turns=echo, error=None, final_state=None), truth, cues)
    assert not v.success
    assert v.causes.count("echo") == 2 and "no tool" in v.causes and "not said" in v.causes
    good = [turn(1, 1200, "Hello.", "Hi Maria! How can I help you today?"),
            turn(2, 6300, "4, 2, 1, 7.", "Order 4217, your wireless headphones, shipped and arrives "
                 "Wednesday, December 9.", [("lookup_order", {"order_id": "4217"})]),
            turn(3, 9900, "Thank you.", "You're welcome, Maria. Have a great day!")]
    v = evaluate(sc, SimpleNamespace(turns=good, error=None, final_state=None), truth, cues)
    assert v.success, v.failures


def test_tool_calls_on_small_talk_are_counted():
    sc = Scenario.model_validate({"name": "t", "turns": [
        {"audio": [{"silence_ms": 1}], "expect": {"no_tools": True}},
        {"audio": [{"silence_ms": 1}], "expect": {"tools": [{"name": "lookup_order"}]}},
        {"audio": [{"silence_ms": 1}], "expect": {"no_tools": True}}]})
    fails = ["caller turn 3: expected no tool call, got lookup_order({'order_id': '4217'})",
             "caller turn 2: expected lookup_order({}), got no tool (transcript: '')"]
    assert small_talk_counts(sc, fails, []) == {"turns": 2, "with_tool": 1}
    assert small_talk_counts(sc, [], []) == {"turns": 2, "with_tool": 0}
    assert small_talk_counts(sc, [], ["caller turn 1: no_tools/tools_absent (the agent does not report "
                                      "its tool calls)"]) is None
    plain = Scenario.model_validate({"name": "p", "turns": [{"audio": [{"silence_ms": 1}]}]})
    assert small_talk_counts(plain, [], []) is None
    calls = [{"extra": {"small_talk": {"turns": 2, "with_tool": 1}}}, {"extra": {}},
             {"extra": {"small_talk": {"turns": 3, "with_tool": 0}}}]
    assert small_talk_summary(calls) == {"turns": 5, "with_tool": 1, "rate": 0.2}
    assert small_talk_summary([]) == {"turns": 0, "with_tool": 0, "rate": None}
