"""The unseen suite: every scenario valid and fitting the reference support agent's demo data, no
caller utterance (nearly) one that a tool decision was tuned or calibrated on, nor one of the
``heldout`` suite (whose failures were read while the agent was fixed), and the suite bundled
and runnable with the others (``rejoinder bench reference,heldout,unseen``)."""

from __future__ import annotations

import fnmatch
import importlib
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from rejoinder.app import db
from rejoinder.app import support
from rejoinder.app.support import agent as support_agent
from rejoinder.harness.heldout import PROMPT_WORDS, caller_utterances, overlaps, prompt_words
from rejoinder.harness.suite import SUITES_DIR, bundled_suites, load_suite, suite_files
from rejoinder.scenario import Scenario, load_scenario

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
FILES = suite_files("unseen")[1]
#: the agent's tools that read or change the caller's records, or hand the call over
NOT_ON_A_FAREWELL = {"lookup_order", "list_appointments", "reschedule_appointment",
                     "cancel_appointment", "transfer_to_human"}
FAREWELL = re.compile(r"\b(bye|goodbye|take care|see you|have a (lovely|nice|good))\b", re.IGNORECASE)


def calibration_and_heldout() -> dict[str, list[str]]:
    """(a) the agent's tool examples and its no-tool talk examples, (b) bench/tool_choice.py's
    items, (c) the reference suite's caller turns (tuning runs were measured on them) and (d) the
    heldout suite's (its failures were read while the agent was fixed)."""
    sys.path.insert(0, str(BENCH))
    try:
        tool_choice = importlib.import_module("tool_choice")
    finally:
        sys.path.remove(str(BENCH))
    _, ref = load_suite("reference")
    _, heldout = load_suite("heldout")
    tools = list(support_agent.tools.values())
    assert len(tools) >= 4
    return {"tool examples": [e for t in tools for e in getattr(t, "examples", ())]
            + list(getattr(support, "TALK_EXAMPLES", ())),
            "bench/tool_choice.py": [item.say for item in tool_choice.ITEMS],
            "reference suite": [u for sc in ref for u in caller_utterances(sc)],
            "heldout suite": [u for sc in heldout for u in caller_utterances(sc)]}


def test_no_unseen_utterance_is_near_calibration_reference_or_heldout():
    _, unseen = load_suite("unseen")
    calib = calibration_and_heldout()
    assert len(calib["bench/tool_choice.py"]) >= 30  # the benchmark's items were found
    assert len(calib["heldout suite"]) >= 20 and len(calib["reference suite"]) >= 10
    found = overlaps(unseen, calib, max_wer=0.3)
    assert not found, "\n".join(map(str, found))


def sources_of_a_copy(say: str, sources: dict[str, list[str]]) -> set[str]:
    """The sources (keys of ``sources``) that a one-turn scenario saying ``say`` overlaps."""
    sc = Scenario.model_validate({"name": "copy", "turns": [{"audio": [{"say": say}]}]})
    return {o.source for o in overlaps([sc], sources)}


def test_a_heldout_utterance_copied_into_the_suite_is_caught():
    """Source (d) is read: a turn that repeats a heldout sentence with a word changed trips it."""
    assert sources_of_a_copy("Hi there! Quick question. Did my hiking backpack ever turn up?",
                             calibration_and_heldout()) == {"heldout suite"}


def test_unseen_suite_is_valid_bundled_and_apart_from_the_other_suites():
    _, unseen = load_suite("unseen")
    _, ref = load_suite("reference")
    _, heldout = load_suite("heldout")
    assert len(unseen) >= 14 and len(FILES) == len(unseen)
    names = {s.name for s in unseen}
    assert not names & {s.name for s in ref} and not names & {s.name for s in heldout}
    assert "unseen" in bundled_suites()
    _, all3 = load_suite("reference,heldout,unseen")  # one run over the three suites
    assert len(all3) == len(ref) + len(heldout) + len(unseen)
    assert (SUITES_DIR / "unseen" / "README.md").exists()
    suite_shape("unseen", unseen)


KINDS = ("tools", "reply_contains", "reply_contains_any", "reply_excludes", "not_echo", "no_tools",
         "tools_absent")


def suite_shape(label: str, scenarios: list[Scenario]) -> None:
    """Every scenario of suite ``label`` is named and tagged by it, leaves 5 s for a stalled reply
    and expects every caller turn answered; the suite uses every kind of check (:data:`KINDS`)
    and checks the database in at least half its calls."""
    kinds = set()
    for sc in scenarios:
        assert sc.name.startswith(f"{label}-") and label in sc.tags
        assert sc.tail_ms == 5000
        for turn in sc.turns:
            assert turn.expect.answered is True, sc.name
            kinds |= {k for k in KINDS if getattr(turn.expect, k)}
    assert kinds == set(KINDS)
    assert sum(bool(sc.final_db) for sc in scenarios) >= len(scenarios) // 2


def farewell_turns(suite: str) -> int:
    """Check that a caller's goodbye in ``suite`` may be answered with end_call: no farewell turn
    forbids it (no ``no_tools``, end_call not in ``tools_absent``), a call with one does not set
    ``only_expected_tools`` (end_call is not an expected tool there), and the domain tools stay
    forbidden on it. Returns the number of farewell turns."""
    farewells = 0
    for sc in load_suite(suite)[1]:
        for turn in sc.turns:
            words = " ".join(seg.say for seg in turn.audio if seg.say)
            if not FAREWELL.search(words):
                continue
            farewells += 1
            ex = turn.expect
            assert not ex.no_tools and "end_call" not in ex.tools_absent, (sc.name, words)
            assert not sc.only_expected_tools, sc.name
            assert set(ex.tools_absent) & NOT_ON_A_FAREWELL, (sc.name, words)
    return farewells


def test_a_farewell_may_end_the_call():
    assert farewell_turns("unseen") >= 3


def in_the_wheel(files: list[Path]) -> None:
    """Every file of ``files`` matches the package data globs of pyproject.toml."""
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["rejoinder"]
    for f in files:
        rel = f.relative_to(ROOT / "src" / "rejoinder").as_posix()
        assert any(fnmatch.fnmatch(rel, g) for g in globs), rel


def test_the_suite_ships_in_the_wheel():
    in_the_wheel(FILES + [SUITES_DIR / "unseen" / "README.md"])


def loaded_on_demo_data(path: Path, tmp_path: Path) -> tuple[Scenario, Any, dict]:
    """The scenario of ``path`` (raises when a prompt is not installed), checked to play prompts
    (each attributed, each known) and the caller voice only, with a fresh demo database and the
    caller's account in it: (scenario, connection, customer row)."""
    sc = load_scenario(path)
    text = path.read_text()
    if "asterisk:" in text:  # attribution of the real recordings stays with the file
        assert "Allison Smith" in text and "CC-BY-SA-3.0" in text
    for turn in sc.turns:
        for top in turn.audio:
            for seg in top.sources():
                assert seg.file is None, "the suite plays prompts and the caller voice only"
                if seg.asterisk:
                    assert seg.asterisk in PROMPT_WORDS or prompt_words(seg.asterisk), seg.asterisk
    conn = db.fresh_demo_db(tmp_path / "demo.sqlite")
    customer = db.customer_by_phone(conn, sc.caller_phone)
    assert customer is not None, sc.name  # every caller is on an account
    return sc, conn, customer


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_each_unseen_scenario_fits_the_demo_data(path, tmp_path):
    """Valid YAML; every recording exists and is attributed; the expected tools exist; expected
    order numbers are the caller's; final_db rows exist; expected days are weekdays."""
    sc, conn, customer = loaded_on_demo_data(path, tmp_path)
    tools = set(support_agent.tools)
    mine = {o["id"] for o in db.orders_of(conn, customer["id"])}
    for turn in sc.turns:
        for t in turn.expect.tools:
            assert t.name in tools, t.name
            if "order_id" in t.args:
                assert t.args["order_id"] in mine, (sc.name, t.args)
            if "day" in t.args:
                assert t.args["day"].lower() in db.WEEKDAYS[:5], (sc.name, t.args)
        assert set(turn.expect.tools_absent) <= tools
    state = db.db_state(conn)
    for table, rows in sc.final_db.items():
        for row_id, cols in rows.items():
            key = row_id if table == "orders" else int(row_id)
            assert key in state[table], (sc.name, table, row_id)
            assert set(cols) <= set(state[table][key]), (sc.name, table, row_id)
            if "slot" in cols:
                assert db.within_hours(cols["slot"]), (sc.name, row_id, cols["slot"])
    conn.close()
