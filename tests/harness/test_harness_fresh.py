"""The fresh suite: 14 scenarios written blind (without reading any stored run, transcript or
task-success figure), every one valid and fitting the reference support agent's demo data, no
caller utterance (nearly) one that a tool decision was tuned or calibrated on, nor one of the
``reference``, ``heldout`` or ``unseen`` suites, and the suite bundled and runnable with the others
(``rejoinder bench reference,heldout,unseen,fresh``)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from rejoinder import calltools
from rejoinder.adapters import _gate, _which
from rejoinder.app import db
from rejoinder.app.support import agent as support_agent
from rejoinder.harness.heldout import caller_utterances, normalise, overlaps, turn_words
from rejoinder.harness.suite import bundled_suites, load_suite, suite_files
from rejoinder.scenario import Scenario

from test_harness_unseen import (calibration_and_heldout, farewell_turns, in_the_wheel,
                                 loaded_on_demo_data, sources_of_a_copy, suite_shape)

ROOT = Path(__file__).resolve().parents[2]
FILES = suite_files("fresh")[1]


def calibration_and_other_suites() -> dict[str, list[str]]:
    """Everything :func:`test_harness_unseen.calibration_and_heldout` holds (tool examples, talk
    examples, bench/tool_choice.py, the reference and heldout suites), plus the tool gate's default
    talk examples, the confirmation matcher's yes/no examples, the call tools' own examples and
    the unseen suite's caller utterances."""
    out = calibration_and_heldout()
    out["gate talk examples"] = list(_gate.DEFAULT_TALK_EXAMPLES)
    out["confirmation examples"] = list(_which.CONFIRM_YES) + list(_which.CONFIRM_NO)
    out["call tool examples"] = list(calltools.END_CALL_EXAMPLES) + list(calltools.TRANSFER_EXAMPLES)
    out["unseen suite"] = [u for sc in load_suite("unseen")[1] for u in caller_utterances(sc)]
    return out


def test_no_fresh_utterance_is_near_calibration_or_another_suite():
    _, fresh = load_suite("fresh")
    assert_apart(fresh, calibration_and_other_suites(), {
        "bench/tool_choice.py": 30, "heldout suite": 20, "reference suite": 10,
        "unseen suite": 20, "gate talk examples": 5})


def assert_apart(suite: list, calib: dict[str, list[str]], least: dict[str, int]) -> None:
    """No caller utterance of ``suite`` within 0.3 WER of ``calib``, whose sources named in
    ``least`` were found with at least that many utterances each."""
    for source, n in least.items():
        assert len(calib[source]) >= n, source
    found = overlaps(suite, calib, max_wer=0.3)
    assert not found, "\n".join(map(str, found))


def test_an_unseen_utterance_copied_into_the_suite_is_caught():
    """The unseen suite is read: a turn that repeats one of its sentences with a word changed
    trips it."""
    assert sources_of_a_copy("Go on then, tell me a good joke.",
                             calibration_and_other_suites()) == {"unseen suite"}


def test_fresh_suite_is_valid_bundled_and_apart_from_the_other_suites():
    _, fresh = load_suite("fresh")
    others = {name: load_suite(name)[1] for name in ("reference", "heldout", "unseen")}
    assert len(fresh) == 14 and len(FILES) == len(fresh)
    names = {s.name for s in fresh}
    for scs in others.values():
        assert not names & {s.name for s in scs}
    assert "fresh" in bundled_suites()
    _, all4 = load_suite("reference,heldout,unseen,fresh")  # one run over the four suites
    assert len(all4) == sum(map(len, others.values())) + len(fresh)
    suite_shape("fresh", fresh)
    for sc in fresh:
        assert len(sc.turns) <= 3, sc.name  # short calls: a 4-turn scenario fails here
        assert sc.caller_voice == Scenario.model_fields["caller_voice"].default  # as unseen
    expected = {t.name for sc in fresh for turn in sc.turns for t in turn.expect.tools}
    assert expected == {"lookup_order", "list_appointments", "reschedule_appointment",
                        "cancel_appointment", "transfer_to_human"}
    assert any(sc.transfers for sc in fresh)


def test_a_farewell_may_end_the_call():
    """As in the unseen suite (:func:`test_harness_unseen.farewell_turns`)."""
    assert farewell_turns("fresh") >= 2


def test_the_suite_ships_in_the_wheel():
    in_the_wheel(FILES + [FILES[0].parent / "README.md"])


def final_db_fits(sc: Scenario, conn, my_appts: set, days: set[str]) -> int:
    """``sc``'s final_db on the demo data: its rows exist, orders keep their status, another
    customer's appointment stays as it is, and an appointment that moves is the caller's own and
    lands on a free weekday slot within opening hours on one of ``days`` (weekdays, lower case).
    Returns how many move."""
    state = db.db_state(conn)
    booked = db.booked_slots(conn)
    moved = 0
    for table, rows in sc.final_db.items():
        for row_id, cols in rows.items():
            key = row_id if table == "orders" else int(row_id)
            assert key in state[table], (sc.name, table, row_id)
            assert set(cols) <= set(state[table][key]), (sc.name, table, row_id)
            if table == "orders" or key not in my_appts:  # no tool changes an order or another's
                assert all(state[table][key][c] == v for c, v in cols.items()), (sc.name, row_id)
                continue
            slot = cols.get("slot")
            if slot is None or slot == state[table][key]["slot"]:
                continue
            moved += 1
            assert db.within_hours(slot), (sc.name, row_id, slot)
            assert db.WEEKDAYS[datetime.fromisoformat(slot).weekday()] in days, (sc.name, slot)
            assert not any(db.overlaps(other, slot) for other, other_id in booked.items()
                           if other_id != key), (sc.name, row_id, slot)
    return moved


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_each_fresh_scenario_fits_the_demo_data(path, tmp_path):
    """Valid YAML; prompts only (attributed) and the caller voice; the expected tools exist;
    expected order numbers are the caller's and are the digits the caller reads; final_db rows
    exist, orders keep their status, and a moved appointment lands on a free weekday slot within
    hours on the expected day."""
    sc, conn, customer = loaded_on_demo_data(path, tmp_path)
    tools = set(support_agent.tools)
    mine = {o["id"] for o in db.orders_of(conn, customer["id"])}
    my_appts = {a["id"] for a in db.appointments_of(conn, customer["id"])}
    days = set()
    for turn in sc.turns:
        for t in turn.expect.tools:
            assert t.name in tools, t.name
            if "order_id" in t.args:
                assert t.args["order_id"] in mine, (sc.name, t.args)
                assert t.args["order_id"] in normalise(turn_words(turn)).split(), (sc.name, t.args)
            if "day" in t.args:
                assert t.args["day"].lower() in db.WEEKDAYS[:5], (sc.name, t.args)
                days.add(t.args["day"].lower())
        assert set(turn.expect.tools_absent) <= tools
    final_db_fits(sc, conn, my_appts, days)
    conn.close()
