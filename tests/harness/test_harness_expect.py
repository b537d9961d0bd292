"""Task success: expectations checked against measured turns and the final database."""

from __future__ import annotations

from types import SimpleNamespace

from rejoinder.app.db import fresh_demo_db
from rejoinder.harness.expect import evaluate, owners
from rejoinder.scenario import Scenario
from rejoinder.timeline import TurnRecord


def rec(turn_id, eot, *, pb=None, end=None, cut=None, tools=(), heard="", usend=None, said=""):
    r = TurnRecord(turn_id)
    r.transcript = said
    r.stamps["eot_decided"] = eot
    if usend is not None:
        r.stamps["user_speech_end"] = usend
    if pb is not None:
        r.stamps["playback_start"] = pb
    if end is not None:
        r.stamps["playback_end"] = end
    if cut is not None:
        r.stamps["interrupted_at"] = cut
        r.status = "interrupted"
    r.tools = [{"name": t[0], "args": t[1], **({"error": t[2]} if len(t) > 2 else {})} for t in tools]
    r.heard_text = heard
    return r


def scenario(**kw) -> Scenario:
    base = {"name": "t", "turns": [{"audio": [{"silence_ms": 1}]}, {"audio": [{"silence_ms": 1}]}]}
    base.update(kw)
    return Scenario.model_validate(base)


def result(turns, state=None, error=None):
    return SimpleNamespace(turns=turns, error=error, final_state=state)


TRUTH = [(0, 500.0, 1500.0), (1, 4000.0, 5000.0)]


def test_owners_follow_the_caller_truth():
    turns = [rec(1, 1800), rec(2, 5300), rec(3, 900)]
    assert owners(turns, TRUTH) == {1: 0, 2: 1, 3: None}


def test_tools_args_reply_words_and_budget():
    sc = scenario(turns=[{"audio": [{"silence_ms": 1}], "expect": {
        "tools": [{"name": "lookup_order", "args": {"order_id": 4217}}],
        "reply_contains": ["4217", "has shipped"], "v2v_budget_ms": 800}}])
    good = [rec(1, 1800, usend=1500, pb=2200, tools=[("lookup_order", {"order_id": "4217"})],
                heard="Order 4217 has shipped, it arrives Friday.")]
    v = evaluate(sc, result(good), TRUTH[:1])
    assert v.success and v.checks == 5, v.failures
    bad = [rec(1, 1800, usend=1500, pb=2600, tools=[("lookup_order", {"order_id": "4271"})], heard="Order 4271")]
    v = evaluate(sc, result(bad), TRUTH[:1])
    assert not v.success
    text = " | ".join(v.failures)
    assert "expected lookup_order({'order_id': 4217}), got lookup_order({'order_id': '4271'})" in text
    assert "did not hear '4217'" in text and "did not hear 'has shipped'" in text
    assert "V2V 1100 ms over the budget of 800 ms" in text


def test_a_tool_in_another_turn_does_not_count():
    sc = scenario(turns=[{"audio": [{"silence_ms": 1}], "expect": {"tools": [{"name": "lookup_order"}]}},
                         {"audio": [{"silence_ms": 1}]}])
    v = evaluate(sc, result([rec(1, 1800), rec(2, 5200, tools=[("lookup_order", {})])]), TRUTH)
    assert v.failures == ["caller turn 1: expected lookup_order({}), got no tool (transcript: '')"]
    assert v.causes == ["no tool"]


def test_each_failure_is_attributed_to_its_cause():
    sc = scenario(turns=[{"audio": [{"silence_ms": 1}], "expect": {
        "tools": [{"name": "lookup_order", "args": {"order_id": "4217"}}],
        "reply_contains": ["shipped"], "v2v_budget_ms": 800}}])

    def causes(**kw):
        kw.setdefault("said", "Where is order 4217?")
        kw.setdefault("pb", 2000)
        return evaluate(sc, result([rec(1, 1800, usend=1500, **kw)]), TRUTH[:1]).causes

    # the recogniser lost the number: the LLM never had a chance
    assert causes(said="Where is order 42 17 please", tools=[("lookup_order", {"order_id": "4217"})],
                  heard="It has shipped.") == []  # "42 17" still holds the digits in order
    assert causes(said="Where is order 217?", heard="Which order?")[:1] == ["recognition error"]
    assert causes(tools=[("list_appointments", {})], heard="You have a haircut.") == [
        "wrong tool", "wrong tool"]
    assert causes(tools=[("lookup_order", {"order_id": "4271"})], heard="Order 4271 has shipped.") == [
        "wrong argument"]
    assert causes(tools=[("lookup_order", {"order_id": "4217"}, "database down")],
                  heard="Sorry.") == ["tool failed", "tool failed"]
    assert causes(tools=[("lookup_order", {"order_id": "4217"})], heard="It is on its way.") == ["not said"]
    assert causes(heard="", pb=None)[:1] == ["no tool"] and "timeout" in causes(heard="", pb=None)
    late = evaluate(sc, result([rec(1, 1800, usend=1500, pb=2600, said="order 4217",
                                    tools=[("lookup_order", {"order_id": "4217"})], heard="shipped")]),
                    TRUTH[:1])
    assert late.causes == ["timeout"]


def test_reply_excludes_catches_a_leak():
    sc = scenario(turns=[{"audio": [{"silence_ms": 1}], "expect": {"reply_excludes": ["coffee grinder"]}}])
    assert evaluate(sc, result([rec(1, 1800, heard="I can't share that order.")]), TRUTH[:1]).success
    v = evaluate(sc, result([rec(1, 1800, heard="Order 3388, a coffee grinder, was delivered.")]), TRUTH[:1])
    assert v.causes == ["leak"]


def test_interrupts_true_and_false():
    cut_reply = [rec(1, 1800, pb=2000, cut=4100), rec(2, 5200, pb=5600, end=7000)]
    played_on = [rec(1, 1800, pb=2000, end=9000)]
    cues = [{"turn": 0, "cue": "start", "at_ms": 500.0, "missed": False},
            {"turn": 1, "cue": "barge_in", "at_ms": 4000.0, "missed": False}]
    barge = scenario(turns=[{"audio": [{"silence_ms": 1}]},
                            {"audio": [{"silence_ms": 1}], "barge_in_ms": 2000, "expect": {"interrupts": True}}])
    assert evaluate(barge, result(cut_reply), TRUTH, cues).success
    v = evaluate(barge, result(played_on), TRUTH, cues)
    assert v.failures == ["caller turn 2: expected to cut the agent off, but its reply played on"]
    back = scenario(turns=[{"audio": [{"silence_ms": 1}]},
                           {"audio": [{"silence_ms": 1}], "barge_in_ms": 2000, "kind": "backchannel",
                            "expect": {"interrupts": False}}])
    assert evaluate(back, result(played_on), TRUTH, cues).success
    v = evaluate(back, result(cut_reply), TRUTH, cues)
    assert v.failures == ["caller turn 2: a backchannel cut the agent off (it should have talked on)"]
    missed = [cues[0], {"turn": 1, "cue": "timeout", "at_ms": 12000.0, "missed": True}]
    v = evaluate(back, result([rec(1, 1800)]), TRUTH, missed)
    assert any("never spoke" in f for f in v.failures) and any("was not speaking" in f for f in v.failures)


def test_silent_agent_and_unexpected_tools():
    sc = scenario(agent_silent=True, only_expected_tools=True)
    assert evaluate(sc, result([]), []).success
    v = evaluate(sc, result([rec(1, 900, pb=1500, tools=[("cancel_appointment", {"appointment_id": 101})])]), [])
    assert "unexpected tool calls: cancel_appointment" in v.failures
    assert any("should have stayed silent" in f for f in v.failures)


def test_final_db_against_the_real_database(tmp_path):
    conn = fresh_demo_db(tmp_path / "demo.sqlite")
    sc = scenario(final_db={"appointments": {101: {"slot": "2026-12-10T14:00", "status": "booked"}},
                            "orders": {"4217": {"status": "shipped"}, "0000": {"status": "x"}}})
    from rejoinder.app.support import final_state
    from rejoinder.tools import CallContext
    ctx = CallContext("c", state={"db": conn})
    v = evaluate(sc, result([], final_state(ctx)), [])
    assert v.failures == [
        "final_db: appointments 101 has {'slot': '2026-12-08T10:00'}, expected {'slot': '2026-12-10T14:00'}",
        "final_db: orders 0000 does not exist"]
    assert v.causes == ["state", "state"]
    conn.execute("UPDATE appointments SET slot = '2026-12-10T14:00' WHERE id = 101")
    v = evaluate(sc, result([], final_state(ctx)), [])
    assert v.failures == ["final_db: orders 0000 does not exist"]
    v = evaluate(sc, result([], None), [])
    assert any("reported no final state" in f for f in v.failures)


def test_a_failed_call_fails_the_task():
    v = evaluate(scenario(), result([], error="RuntimeError('boom')"), [])
    assert v.failures == ["the call failed: RuntimeError('boom')"]


def test_numbers_may_be_heard_as_spoken():
    sc = scenario(turns=[{"audio": [{"silence_ms": 1}], "expect": {"reply_contains": ["order 5031"]}}])
    for heard in ("your other order five thousand and thirty one is", "Order five zero three one.",
                  "order fifty thirty-one", "Order 5031 is", "order five oh three one"):
        assert evaluate(sc, result([rec(1, 1800, heard=heard)]), TRUTH[:1]).success, heard
    assert not evaluate(sc, result([rec(1, 1800, heard="order five thousand and thirty two")]), TRUTH[:1]).success
