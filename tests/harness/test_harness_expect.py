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


def test_a_tool_run_in_a_false_cut_off_counts_for_the_caller_turn_being_spoken():
    """The turn was decided while the caller was still reading the number (a false cut-off);
    it looked the order up, and the caller's last words got the answer. The lookup was made on
    this caller turn's words, so it counts for it; the cut-off turn's words do not."""
    sc = scenario(turns=[{"audio": [{"silence_ms": 1}], "expect": {
        "tools": [{"name": "lookup_order", "args": {"order_id": "2459"}}],
        "reply_contains": ["processing"]}}])
    truth = [(0, 500.0, 4000.0)]
    turns = [rec(1, 1200, cut=1300, said="the order number is"),
             rec(2, 2600, cut=2700, said="2, 4, 5, 9.", heard="processing",
                 tools=[("lookup_order", {"order_id": "2459"})]),
             rec(3, 4300, pb=4700, said="When will it get here?", heard="It is still processing.")]
    v = evaluate(sc, result(turns), truth)
    assert v.success, v.failures
    # the cut-off turn's words are no answer: without the last turn's reply it fails
    v = evaluate(sc, result(turns[:2] + [rec(3, 4300, pb=4700, heard="Sorry?")]), truth)
    assert v.failures == ["caller turn 1: the caller did not hear 'processing' (heard: 'sorry')"]
    # a tool it must not run counts against this caller turn too
    sc = scenario(turns=[{"audio": [{"silence_ms": 1}], "expect": {"no_tools": True}}])
    v = evaluate(sc, result(turns), truth)
    assert not v.success and v.causes == ["unexpected tool"]
    # a turn decided after the caller turn ended stays that turn's (owners), cut off or not
    late = [rec(1, 4200, cut=4500, tools=[("lookup_order", {"order_id": "2459"})])]
    assert evaluate(scenario(turns=[{"audio": [{"silence_ms": 1}], "expect": {"no_tools": True}}]),
                    result(late), truth).causes == ["unexpected tool"]


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


def test_an_argument_the_caller_never_says_is_not_blamed_on_recognition():
    # "my other order": the number comes from the caller's account, not from the caller's words
    sc = scenario(turns=[{"audio": [{"say": "Actually, what about my other order?"}], "expect": {
        "tools": [{"name": "lookup_order", "args": {"order_id": "5031"}}]}}])

    def causes(said, tools=()):
        return evaluate(sc, result([rec(1, 1800, usend=1500, pb=2000, said=said, tools=tools)]),
                        TRUTH[:1]).causes

    assert causes("Actually, what about my other order?") == ["no tool"]
    assert causes("what about my other order", [("list_appointments", {})]) == ["wrong tool"]
    assert causes("what about my other order", [("lookup_order", {"order_id": "4217"})]) == [
        "wrong argument"]
    # a number the script does say and the recogniser lost is still a recognition error
    said = scenario(turns=[{"audio": [{"say": "Order"}, {"asterisk": "digits/5"}, {"asterisk": "digits/0"},
                                      {"asterisk": "digits/3"}, {"asterisk": "digits/1"}],
                            "expect": {"tools": [{"name": "lookup_order", "args": {"order_id": "5031"}}]}}])
    v = evaluate(said, result([rec(1, 1800, usend=1500, pb=2000, said="Order 5, 0, 3.")]), TRUTH[:1])
    assert v.causes == ["recognition error"]


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


# --- caller realism: noise not answered, one turn per dictated number, idle, hang-up -----------
def cues(*ats):
    return [{"turn": i, "cue": "at", "at_ms": a, "missed": False} for i, a in enumerate(ats)]


def test_noise_must_not_be_answered():
    sc = scenario(turns=[{"kind": "noise", "audio": [{"silence_ms": 1}], "expect": {"answered": False}},
                         {"at_ms": 4000, "audio": [{"silence_ms": 1}], "expect": {"answered": True}}])
    truth = [(1, 4000.0, 5000.0)]
    rejected = rec(1, 2500)  # babble committed, then rejected: no playback
    rejected.status = "rejected_noise"
    v = evaluate(sc, result([rejected, rec(2, 5300, pb=5800)]), truth, cues(500, 4000))
    assert v.success, v.failures
    answered = rec(1, 2500, pb=3100, heard="Sorry, I didn't catch that.")
    answered.transcript = "The"
    v = evaluate(sc, result([answered, rec(2, 5300, pb=5800)]), truth, cues(500, 4000))
    assert v.failures == ["caller turn 1: a noise was answered (heard as 'The'; the agent said "
                          "\"Sorry, I didn't catch that.\")"]
    v = evaluate(sc, result([rejected]), truth, cues(500, 4000))
    assert v.failures == ["caller turn 2: the agent did not answer it"]


def test_a_dictated_number_must_be_heard_in_one_turn():
    sc = scenario(turns=[{"audio": [{"silence_ms": 1}]},
                         {"audio": [{"silence_ms": 1}], "expect": {"transcript_contains": ["415 862 3079"]}}])
    one = rec(2, 5300, pb=5800)
    one.transcript = "4, 1, 5, 8, 6, 2, 3, 0, 7, 9."
    assert evaluate(sc, result([rec(1, 1800), one]), TRUTH).success
    words = rec(2, 5300, pb=5800)
    words.transcript = "four one five eight six two three oh seven nine"
    assert evaluate(sc, result([rec(1, 1800), words]), TRUTH).success
    # committed after "415 862": the rest is another turn
    a, b = rec(2, 5050, pb=5600), rec(3, 5300, pb=5800)
    a.transcript, b.transcript = "415 862", "3079."
    v = evaluate(sc, result([rec(1, 1800), a, b]), [(0, 500.0, 1500.0), (1, 4000.0, 5000.0)])
    assert v.failures == ["caller turn 2: no single turn heard '415 862 3079' (transcripts: "
                          "['415 862', '3079.'])"]


def idle_turns(reprompt_at: float, answer_end: float = 9000.0):
    answer = rec(1, 1800, pb=2300, end=answer_end)
    prompt = TurnRecord(2)
    prompt.initiated = "idle_prompt"
    prompt.stamps.update({"first_speakable_text": reprompt_at - 200, "playback_start": reprompt_at,
                          "playback_end": reprompt_at + 1200})
    prompt.heard_text = "Are you still there?"
    return [answer, prompt]


def test_idle_reprompt_belongs_to_the_silent_turn_and_must_wait_for_playback():
    sc = scenario(turn_policy={"idle": {"reprompt_ms": 4000, "hangup_ms": 4000}},
                  turns=[{"audio": [{"silence_ms": 1}]},
                         {"audio": [{"silence_ms": 20000}], "after_agent_ms": 0,
                          "expect": {"reply_contains": ["still there"]}}], hangs_up=False)
    truth = [(0, 500.0, 1500.0)]
    turns = idle_turns(13_300)
    assert owners(turns, truth, cues(500, 9300)) == {1: 0, 2: 1}
    assert evaluate(sc, result(turns), truth, cues(500, 9300)).success
    # fired 4 s after the reply was *generated*, not after it finished playing
    v = evaluate(sc, result(idle_turns(7_000)), truth, cues(500, 9300))
    assert any("too soon" in f and "-2000 ms after" in f for f in v.failures), v.failures


def test_hang_up_expectation():
    sc = scenario(hangs_up=True)
    ok = SimpleNamespace(turns=[], error=None, app=None, hangup="no_input")
    assert evaluate(sc, ok, []).success
    v = evaluate(sc, result([]), [])
    assert v.failures == ["the agent did not end the call"]
    v = evaluate(scenario(hangs_up=False), ok, [])
    assert v.failures == ["the agent ended the call (no_input)"]
