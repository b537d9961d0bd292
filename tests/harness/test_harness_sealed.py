"""The sealed suite: 14 scenarios written blind (no stored run, transcript, timeline or
task-success figure read), every one valid and fitting the reference support agent's demo data,
no caller utterance (nearly) one that a tool decision was tuned or calibrated on, nor one of the
``reference``, ``heldout``, ``unseen``, ``fresh`` or ``blind`` suites, and the suite bundled and
runnable with the others (``rejoinder bench sealed``;
``rejoinder bench reference,heldout,unseen,fresh,blind,sealed``)."""

from __future__ import annotations

import pytest

from rejoinder.harness.heldout import caller_utterances
from rejoinder.harness.suite import SUITES_DIR, bundled_suites, load_suite, suite_files

from test_harness_blind import (calibration_and_all_suites, covers_the_brief, fits_demo_data,
                                short_calls_of_every_tool)
from test_harness_fresh import assert_apart
from test_harness_unseen import farewell_turns, in_the_wheel, sources_of_a_copy, suite_shape

SUITE = "sealed"
FILES = suite_files(SUITE)[1]
OTHER_SUITES = ("reference", "heldout", "unseen", "fresh", "blind")


def calibration_and_five_suites() -> dict[str, list[str]]:
    """Everything :func:`test_harness_blind.calibration_and_all_suites` holds (tool and talk
    examples, the gate's talk examples, the confirmation yes/no examples, the call tools'
    examples, bench/tool_choice.py, the reference, heldout, unseen and fresh suites), plus the
    blind suite's caller utterances."""
    out = calibration_and_all_suites()
    out["blind suite"] = [u for sc in load_suite("blind")[1] for u in caller_utterances(sc)]
    return out


def test_no_sealed_utterance_is_near_calibration_or_another_suite():
    _, sealed = load_suite(SUITE)
    assert_apart(sealed, calibration_and_five_suites(), {
        "tool examples": 10, "bench/tool_choice.py": 30, "heldout suite": 20,
        "reference suite": 10, "unseen suite": 20, "fresh suite": 20, "blind suite": 20,
        "gate talk examples": 5, "confirmation examples": 4, "call tool examples": 2})


def test_a_blind_utterance_copied_into_the_suite_is_caught():
    """The blind suite is read: a turn that repeats one of its sentences with a word changed
    trips it."""
    assert sources_of_a_copy("Fab, I'll set an early alarm for this.",
                             calibration_and_five_suites()) == {"blind suite"}


def test_sealed_suite_is_valid_bundled_and_apart_from_the_other_suites():
    valid_bundled_and_apart(SUITE, OTHER_SUITES)


def valid_bundled_and_apart(suite: str, other_suites: tuple[str, ...]) -> None:
    """What the blind-written held-out suites (``sealed``, ``vault``) share: 14 scenarios with a
    README, names and file names new to ``other_suites``, bundled, loadable in one run with them,
    and the blind suites' shape (:func:`test_harness_blind.short_calls_of_every_tool`)."""
    _, scenarios = load_suite(suite)
    files = suite_files(suite)[1]
    others = {name: load_suite(name)[1] for name in other_suites}
    assert len(scenarios) == 14 and len(files) == len(scenarios)
    assert (SUITES_DIR / suite / "README.md").exists()
    names = {s.name for s in scenarios}
    stems = {p.stem for p in files}
    for name, scs in others.items():
        assert not names & {s.name for s in scs}, name
        assert not stems & {p.stem for p in suite_files(name)[1]}, name  # new file names too
    assert suite in bundled_suites()
    _, every = load_suite(",".join(other_suites + (suite,)))  # one run over all of them
    assert len(every) == sum(map(len, others.values())) + len(scenarios)
    suite_shape(suite, scenarios)
    short_calls_of_every_tool(scenarios)


def test_the_suite_covers_what_it_was_asked_to():
    """4 order lookups (one number given only when asked, one nobody's, one another customer's),
    2 appointment listings, 3 reschedules (one self-corrected), 2 cancellations (one confirmed,
    one declined), small talk, an out-of-scope request and a transfer."""
    covers_the_brief_with_database(load_suite(SUITE)[1])


def covers_the_brief_with_database(scenarios: list) -> None:
    """:func:`test_harness_blind.covers_the_brief`, and every lookup, move, listing,
    cancellation (kept or not) and out-of-scope call checks the database."""
    covers_the_brief(scenarios)
    for sc in scenarios:
        if {"lookup", "reschedule", "appointments", "cancel", "out-of-scope"} & set(sc.tags):
            assert sc.final_db, sc.name


def test_a_farewell_may_end_the_call():
    """As in the unseen suite (:func:`test_harness_unseen.farewell_turns`)."""
    assert farewell_turns(SUITE) >= 2


def test_the_suite_ships_in_the_wheel():
    in_the_wheel(FILES + [SUITES_DIR / SUITE / "README.md"])


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_each_sealed_scenario_fits_the_demo_data(path, tmp_path):
    """As the blind suite's (:func:`test_harness_blind.fits_demo_data`): valid YAML, the caller's
    own orders and digits, nobody's or another customer's number where no lookup is expected, and
    every move on a free weekday slot within hours on the day named in the reply."""
    fits_demo_data(path, tmp_path)
