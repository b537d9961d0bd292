"""The held-out suite: every scenario valid, run against the reference support agent's demo data,
and no caller utterance (nearly) one that a tool decision was tuned or calibrated on."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from rejoinder.app import db
from rejoinder.app.support import agent as support_agent
from rejoinder.harness.heldout import (PROMPT_WORDS, caller_utterances, distance, normalise, overlaps,
                                       prompt_words)
from rejoinder.harness.suite import SUITES_DIR, load_suite, suite_files
from rejoinder.scenario import Scenario, load_scenario

BENCH = Path(__file__).resolve().parents[2] / "bench"
FILES = suite_files("heldout")[1]


def calibration() -> dict[str, list[str]]:
    """(a) the agent's tool examples, (b) bench/tool_choice.py's items; plus the reference
    suite's caller turns, which tuning runs were measured on."""
    sys.path.insert(0, str(BENCH))
    try:
        tool_choice = importlib.import_module("tool_choice")
    finally:
        sys.path.remove(str(BENCH))
    _, ref = load_suite("reference")
    tools = list(support_agent.tools.values())
    assert len(tools) >= 4
    return {"tool examples": [e for t in tools for e in getattr(t, "examples", ())],
            "bench/tool_choice.py": [item.say for item in tool_choice.ITEMS],
            "reference suite": [u for sc in ref for u in caller_utterances(sc)]}


def test_normalise_and_distance():
    assert normalise("It's 4, 2, 1, 7 — OK?") == "its 4217 ok"
    assert distance("Can you check order 4217?", "can you check order 2459") == pytest.approx(0.2)
    assert distance("Thank you.", "thank you!") == 0.0
    assert distance("Thank you.", "Thank you for your patience") == pytest.approx(0.6)
    assert prompt_words("digits/7") == "7" and prompt_words("digits/day-4") == "thursday"
    assert prompt_words("queue-thankyou") == "thank you for your patience" and prompt_words("nope") is None


def test_the_overlap_check_catches_a_copied_utterance():
    sc = Scenario.model_validate({"name": "copy", "turns": [
        {"audio": [{"say": "Can you check order 2459?"}]},
        {"audio": [{"asterisk": "auth-thankyou"}]},
        {"audio": [{"say": "Where did my parcel go? The one with the blender. Hm."}]}]})
    assert caller_utterances(sc) == ["Can you check order 2459?", "thank you",
                                     "Where did my parcel go? The one with the blender. Hm.",
                                     "Where did my parcel go?", "The one with the blender."]
    found = overlaps([sc], {"bench/tool_choice.py": ["Can you check order 4217?", "Thank you."]})
    assert [(o.utterance, o.calibration, o.distance) for o in found] == [
        ("Can you check order 2459?", "Can you check order 4217?", 0.2), ("thank you", "Thank you.", 0.0)]
    assert "copy: 'thank you' is 0.00 from the calibration utterance 'Thank you.' (bench/tool_choice.py)" \
        in [str(o) for o in found]


def test_no_heldout_utterance_is_a_calibration_utterance():
    _, heldout = load_suite("heldout")
    calib = calibration()
    assert len(calib["bench/tool_choice.py"]) >= 30  # the benchmark's items were found
    found = overlaps(heldout, calib, max_wer=0.3)
    assert not found, "\n".join(map(str, found))


def test_heldout_suite_is_valid_and_apart_from_the_reference_suite():
    _, heldout = load_suite("heldout")
    _, ref = load_suite("reference")
    assert len(heldout) >= 12 and len(FILES) == len(heldout)
    assert not {s.name for s in heldout} & {s.name for s in ref}
    _, both = load_suite("reference,heldout")  # one run over both suites
    assert len(both) == len(heldout) + len(ref)
    assert (SUITES_DIR / "heldout" / "README.md").exists()
    kinds = set()
    for sc in heldout:
        assert sc.name.startswith("heldout-") and "heldout" in sc.tags
        for turn in sc.turns:
            ex = turn.expect
            kinds |= {k for k in ("tools", "reply_contains", "reply_contains_any", "reply_excludes",
                                  "not_echo", "no_tools", "tools_absent") if getattr(ex, k)}
    assert kinds == {"tools", "reply_contains", "reply_contains_any", "reply_excludes", "not_echo",
                     "no_tools", "tools_absent"}
    assert any(sc.final_db for sc in heldout)


def test_a_tool_example_copied_from_the_suite_is_caught(monkeypatch):
    """Source (a) is read: a tool example that repeats a held-out turn trips the check."""
    _, heldout = load_suite("heldout")
    copied = "Did my backpack ever arrive?"  # one sentence of a turn, one word dropped
    monkeypatch.setattr(support_agent.tools["lookup_order"], "examples", (copied,), raising=False)
    found = overlaps(heldout, calibration())
    assert [(o.scenario, o.source) for o in found] == [("heldout-backpack-delivered", "tool examples")]


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_each_heldout_scenario_fits_the_demo_data(path, tmp_path):
    """Valid YAML; known prompt words; the expected tools exist; the caller is the customer the
    comment names (or nobody); expected order numbers are the caller's; final_db rows exist."""
    sc = load_scenario(path)
    text = path.read_text()
    if "asterisk:" in text:  # attribution of the real recordings stays with the file
        assert "Allison Smith" in text and "CC-BY-SA-3.0" in text
    for turn in sc.turns:
        for seg in turn.audio:
            if seg.asterisk:
                assert seg.asterisk in PROMPT_WORDS or prompt_words(seg.asterisk), seg.asterisk
    tools = set(support_agent.tools)
    conn = db.fresh_demo_db(tmp_path / "demo.sqlite")
    customer = db.customer_by_phone(conn, sc.caller_phone)
    mine = {o["id"] for o in db.orders_of(conn, customer["id"])} if customer else set()
    for turn in sc.turns:
        for t in turn.expect.tools:
            assert t.name in tools, t.name
            if "order_id" in t.args:
                assert t.args["order_id"] in mine, (sc.name, t.args)
        assert set(turn.expect.tools_absent) <= tools
    state = db.db_state(conn)
    for table, rows in sc.final_db.items():
        for row_id in rows:
            key = row_id if table == "orders" else int(row_id)
            assert key in state[table], (sc.name, table, row_id)
    conn.close()
