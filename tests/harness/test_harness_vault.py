"""The vault suite: 14 scenarios written blind (no stored run, transcript, timeline or
task-success figure read), every one valid and fitting the reference support agent's demo data,
no caller utterance (nearly) one that a tool decision was tuned or calibrated on, nor one of the
``reference``, ``heldout``, ``unseen``, ``fresh``, ``blind`` or ``sealed`` suites, and the suite
bundled and runnable with the others (``rejoinder bench vault``;
``rejoinder bench reference,heldout,unseen,fresh,blind,sealed,vault``)."""

from __future__ import annotations

import pytest

from rejoinder.harness.heldout import caller_utterances
from rejoinder.harness.suite import SUITES_DIR, load_suite, suite_files

from test_harness_blind import fits_demo_data
from test_harness_fresh import assert_apart
from test_harness_sealed import (calibration_and_five_suites, covers_the_brief_with_database,
                                 valid_bundled_and_apart)
from test_harness_unseen import farewell_turns, in_the_wheel, sources_of_a_copy

SUITE = "vault"
FILES = suite_files(SUITE)[1]
OTHER_SUITES = ("reference", "heldout", "unseen", "fresh", "blind", "sealed")


def calibration_and_six_suites() -> dict[str, list[str]]:
    """Everything :func:`test_harness_sealed.calibration_and_five_suites` holds (tool and talk
    examples, the gate's talk examples, the confirmation yes/no examples, the call tools'
    examples, bench/tool_choice.py, the reference, heldout, unseen, fresh and blind suites), plus
    the sealed suite's caller utterances."""
    out = calibration_and_five_suites()
    out["sealed suite"] = [u for sc in load_suite("sealed")[1] for u in caller_utterances(sc)]
    return out


def test_no_vault_utterance_is_near_calibration_or_another_suite():
    _, vault = load_suite(SUITE)
    assert_apart(vault, calibration_and_six_suites(), {
        "tool examples": 10, "bench/tool_choice.py": 30, "heldout suite": 20,
        "reference suite": 10, "unseen suite": 20, "fresh suite": 20, "blind suite": 20,
        "sealed suite": 20, "gate talk examples": 5, "confirmation examples": 4,
        "call tool examples": 2})


def test_a_sealed_utterance_copied_into_the_suite_is_caught():
    """The sealed suite is read: a turn that repeats one of its sentences with a word changed
    trips it."""
    assert sources_of_a_copy("Ideal, I'll grab a sandwich on the way home.",
                             calibration_and_six_suites()) == {"sealed suite"}


def test_vault_suite_is_valid_bundled_and_apart_from_the_other_suites():
    valid_bundled_and_apart(SUITE, OTHER_SUITES)


def test_the_suite_covers_what_it_was_asked_to():
    """4 order lookups (one number given only when asked, one nobody's, one another customer's),
    2 appointment listings, 3 reschedules (one self-corrected), 2 cancellations (one confirmed,
    one declined), small talk, an out-of-scope request and a transfer."""
    covers_the_brief_with_database(load_suite(SUITE)[1])


def test_a_farewell_may_end_the_call():
    """As in the unseen suite (:func:`test_harness_unseen.farewell_turns`)."""
    assert farewell_turns(SUITE) >= 2


def test_the_suite_ships_in_the_wheel():
    in_the_wheel(FILES + [SUITES_DIR / SUITE / "README.md"])


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_each_vault_scenario_fits_the_demo_data(path, tmp_path):
    """As the blind suite's (:func:`test_harness_blind.fits_demo_data`): valid YAML, the caller's
    own orders and digits, nobody's or another customer's number where no lookup is expected, and
    every move on a free weekday slot within hours on the day named in the reply."""
    fits_demo_data(path, tmp_path)
