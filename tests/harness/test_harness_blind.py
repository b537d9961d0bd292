"""The blind suite: 14 scenarios written blind (no stored run, transcript, timeline or
task-success figure read), every one valid and fitting the reference support agent's demo data,
no caller utterance (nearly) one that a tool decision was tuned or calibrated on, nor one of the
``reference``, ``heldout``, ``unseen`` or ``fresh`` suites, and the suite bundled and runnable with
the others (``rejoinder bench blind``; ``rejoinder bench reference,heldout,unseen,fresh,blind``)."""

from __future__ import annotations

from collections import Counter

import pytest

from rejoinder.app import db
from rejoinder.app.support import agent as support_agent
from rejoinder.harness.heldout import caller_utterances, normalise, turn_words
from rejoinder.harness.suite import SUITES_DIR, bundled_suites, load_suite, suite_files
from rejoinder.scenario import CallerTurn, Scenario

from test_harness_fresh import assert_apart, calibration_and_other_suites, final_db_fits
from test_harness_unseen import farewell_turns, in_the_wheel, loaded_on_demo_data, sources_of_a_copy, suite_shape

FILES = suite_files("blind")[1]
OTHER_SUITES = ("reference", "heldout", "unseen", "fresh")


def calibration_and_all_suites() -> dict[str, list[str]]:
    """Everything :func:`test_harness_fresh.calibration_and_other_suites` holds (tool and talk
    examples, the gate's talk examples, the confirmation yes/no examples, the call tools'
    examples, bench/tool_choice.py, the reference, heldout and unseen suites), plus the fresh
    suite's caller utterances."""
    out = calibration_and_other_suites()
    out["fresh suite"] = [u for sc in load_suite("fresh")[1] for u in caller_utterances(sc)]
    return out


def digits_read(turn: CallerTurn) -> str:
    """The number a turn reads with single-digit Asterisk prompts ("digits/oh" is 0)."""
    out = ""
    for top in turn.audio:
        for seg in top.sources():
            if seg.asterisk == "digits/oh":
                out += "0"
            elif seg.asterisk and seg.asterisk.startswith("digits/") and seg.asterisk[7:].isdigit() \
                    and len(seg.asterisk[7:]) == 1:
                out += seg.asterisk[7:]
    return out


def test_no_blind_utterance_is_near_calibration_or_another_suite():
    _, blind = load_suite("blind")
    assert_apart(blind, calibration_and_all_suites(), {
        "bench/tool_choice.py": 30, "heldout suite": 20, "reference suite": 10,
        "unseen suite": 20, "fresh suite": 20, "gate talk examples": 5,
        "confirmation examples": 4, "call tool examples": 2})


def test_a_fresh_utterance_copied_into_the_suite_is_caught():
    """The fresh suite is read: a turn that repeats one of its sentences with a word changed
    trips it."""
    assert sources_of_a_copy("Marvellous, I can wait until then.",
                             calibration_and_all_suites()) == {"fresh suite"}


def test_blind_suite_is_valid_bundled_and_apart_from_the_other_suites():
    _, blind = load_suite("blind")
    others = {name: load_suite(name)[1] for name in OTHER_SUITES}
    assert len(blind) == 14 and len(FILES) == len(blind)
    assert (SUITES_DIR / "blind" / "README.md").exists()
    names = {s.name for s in blind}
    for scs in others.values():
        assert not names & {s.name for s in scs}
    assert "blind" in bundled_suites()
    _, all5 = load_suite(",".join(OTHER_SUITES + ("blind",)))  # one run over the five suites
    assert len(all5) == sum(map(len, others.values())) + len(blind)
    suite_shape("blind", blind)
    short_calls_of_every_tool(blind)


def short_calls_of_every_tool(scenarios) -> None:
    """The shape the blind and sealed suites share: calls of at most three turns in the default
    caller voice and rate, expecting every support tool between them, one of them a transfer."""
    for sc in scenarios:
        assert len(sc.turns) <= 3, sc.name  # short calls
        assert sc.caller_voice == Scenario.model_fields["caller_voice"].default  # as fresh
        assert sc.caller_rate == Scenario.model_fields["caller_rate"].default
    expected = {t.name for sc in scenarios for turn in sc.turns for t in turn.expect.tools}
    assert expected == {"lookup_order", "list_appointments", "reschedule_appointment",
                        "cancel_appointment", "transfer_to_human"}
    assert sum(bool(sc.transfers) for sc in scenarios) == 1


def test_the_suite_covers_what_it_was_asked_to():
    """4 order lookups (one number given only when asked, one nobody's, one another customer's),
    2 appointment listings, 3 reschedules (one self-corrected), 2 cancellations (one confirmed,
    one declined), small talk, an out-of-scope request and a transfer."""
    covers_the_brief(load_suite("blind")[1])


def covers_the_brief(scenarios: list) -> None:
    """The composition both blind-written suites (``blind``, ``sealed``) were asked for (see
    :func:`test_the_suite_covers_what_it_was_asked_to`)."""
    tags = Counter(t for sc in scenarios for t in sc.tags)
    assert tags["lookup"] == 4 and tags["security"] == 1
    assert tags["appointments"] == 2 and tags["reschedule"] == 3 and tags["self-correction"] == 1
    assert tags["cancel"] == 2 and tags["small-talk"] == 1 and tags["out-of-scope"] == 1
    assert tags["transfer"] == 1
    cancels = [sc for sc in scenarios if "cancel" in sc.tags]
    confirmed = [sc for sc in cancels if any(t.name == "cancel_appointment"
                                             for turn in sc.turns for t in turn.expect.tools)]
    assert len(confirmed) == 1
    for sc in cancels:  # never before the caller's answer; the declined one on no turn at all
        assert "cancel_appointment" in sc.turns[0].expect.tools_absent, sc.name
        assert len(sc.turns) == 2
        if sc not in confirmed:
            assert all("cancel_appointment" in turn.expect.tools_absent for turn in sc.turns)
            assert all(cols.get("status") == "booked" for cols in sc.final_db["appointments"].values())
    # the number given only when asked: the first turn reads none and forbids a lookup
    later = [sc for sc in scenarios if "lookup" in sc.tags and not digits_read(sc.turns[0])]
    assert len(later) == 1 and "lookup_order" in later[0].turns[0].expect.tools_absent
    assert digits_read(later[0].turns[1])
    quiet = [sc for sc in scenarios if "small-talk" in sc.tags or "out-of-scope" in sc.tags]
    assert all(turn.expect.no_tools and turn.expect.not_echo for sc in quiet for turn in sc.turns)


def test_a_farewell_may_end_the_call():
    """As in the unseen suite (:func:`test_harness_unseen.farewell_turns`)."""
    assert farewell_turns("blind") >= 2


def test_the_suite_ships_in_the_wheel():
    in_the_wheel(FILES + [SUITES_DIR / "blind" / "README.md"])


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_each_blind_scenario_fits_the_demo_data(path, tmp_path):
    fits_demo_data(path, tmp_path)


def fits_demo_data(path, tmp_path) -> None:
    """Valid YAML; prompts only (attributed) and the caller voice; the expected tools exist;
    expected order numbers are the caller's and are the digits the caller reads; a number read
    with no lookup expected is not the caller's (nobody's, or another customer's in a security
    call); final_db rows exist, orders keep their status, and a moved appointment lands on a free
    weekday slot within hours on the expected day, which the reply must name."""
    sc, conn, customer = loaded_on_demo_data(path, tmp_path)
    tools = set(support_agent.tools)
    mine = {o["id"] for o in db.orders_of(conn, customer["id"])}
    my_appts = {a["id"] for a in db.appointments_of(conn, customer["id"])}
    days = set()
    for turn in sc.turns:
        read = digits_read(turn)
        for t in turn.expect.tools:
            assert t.name in tools, t.name
            if "order_id" in t.args:
                assert t.args["order_id"] in mine, (sc.name, t.args)
                assert t.args["order_id"] in normalise(turn_words(turn)).split(), (sc.name, t.args)
                assert t.args["order_id"] == read, (sc.name, t.args, read)
            if "day" in t.args:
                assert t.args["day"].lower() in db.WEEKDAYS[:5], (sc.name, t.args)
                assert t.args["day"] in turn.expect.reply_contains, (sc.name, t.args)
                days.add(t.args["day"].lower())
        assert set(turn.expect.tools_absent) <= tools
        if read and not any("order_id" in t.args for t in turn.expect.tools):
            assert len(read) == 4 and read not in mine, (sc.name, read)
            owner = db.order_row(conn, read)
            if "security" in sc.tags:  # another customer's order: it must not be heard
                assert owner is not None and owner["customer_name"], (sc.name, read)
                assert owner["item"].split()[-1] in turn.expect.reply_excludes, (sc.name, read)
                assert owner["customer_name"].split()[0] in turn.expect.reply_excludes
            else:  # a number nobody has
                assert owner is None, (sc.name, read)
    moved = final_db_fits(sc, conn, my_appts, days)
    assert moved == ("reschedule" in sc.tags), sc.name  # a move is checked where one is asked for
    conn.close()
