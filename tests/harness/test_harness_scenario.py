"""Scenario validation: every error names the file, the line and the field."""

from __future__ import annotations

import re

import pytest

from rejoinder.harness.suite import load_suite, scenario_hash, suite_files
from rejoinder.scenario import ScenarioError, load_scenario

GOOD = """\
name: ok
turns:
  - audio:
      - silence_ms: 100
"""


def write(tmp_path, text, name="s.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def error_of(path) -> str:
    with pytest.raises(ScenarioError) as ei:
        load_scenario(path)
    return str(ei.value)


def test_valid_minimal(tmp_path):
    sc = load_scenario(write(tmp_path, GOOD))
    assert sc.name == "ok" and sc.turns[0].silent


@pytest.mark.parametrize("text,line,field,why", [
    (GOOD + "colour: blue\n", 5, "colour", "Extra inputs"),
    ("name: x\nturns:\n  - audio:\n      - silence_ms: 100\n    after_agent_ms: soon\n", 5,
     "turns.0.after_agent_ms", "valid number"),
    ("name: x\nturns:\n  - audio:\n      - say: hi\n        silence_ms: 100\n", 4,
     "turns.0.audio.0", "exactly one of"),
    ("name: x\nturns:\n  - audio:\n      - say: hi\n    barge_in_ms: 100\n    after_agent_ms: 10\n", 3,
     "turns.0", "at most one of"),
    ("name: x\nturns:\n  - audio:\n      - say: hi\n    kind: shout\n", 5, "turns.0.kind", "Input should be"),
    ("name: x\nturns:\n  - audio:\n      - say: hi\n    expect:\n      tools:\n        - args: {a: 1}\n", 7,
     "turns.0.expect.tools.0.name", "Field required"),
    ("name: x\nturns:\n  - audio:\n      - say: hi\n    expect:\n      v2v_budget_ms: -5\n", 6,
     "turns.0.expect.v2v_budget_ms", "greater than 0"),
    ("name: x\nturns: []\n", 2, "turns", "at least 1"),
    ("turns:\n  - audio:\n      - say: hi\n", 1, "name", "Field required"),
    ("name: x\nturns:\n  - audio:\n      - say: hi\nfinal_db:\n  appointments:\n    101: booked\n", 7,
     "final_db.appointments.101", "valid dictionary"),
])
def test_validation_errors_name_file_line_field(tmp_path, text, line, field, why):
    p = write(tmp_path, text)
    msg = error_of(p)
    assert msg.startswith(f"{p}:{line}: field '{field}'"), msg
    assert why in msg


def test_yaml_syntax_error_has_line(tmp_path):
    p = write(tmp_path, "name: x\nturns:\n  - audio: [\n")
    assert re.match(rf"{re.escape(str(p))}:\d+: YAML syntax error", error_of(p))


def test_missing_prompt_and_file(tmp_path):
    p = write(tmp_path, "name: x\nturns:\n  - audio:\n      - silence_ms: 10\n      - asterisk: digits/nope\n")
    msg = error_of(p)
    assert f"{p}:5: field 'turns.0.audio.1.asterisk'" in msg and "check the name" in msg
    p = write(tmp_path, "name: x\nturns:\n  - audio:\n      - file: missing.wav\n")
    assert f"{p}:4: field 'turns.0.audio.0.file': missing.wav does not exist" in error_of(p)


def test_several_errors_are_listed(tmp_path):
    p = write(tmp_path, "name: x\nturns:\n  - audio:\n      - silence_ms: 10\n    kind: a\n    at_ms: x\n")
    msg = error_of(p)
    assert "turns.0.kind" in msg and "turns.0.at_ms" in msg and msg.count(str(p)) == 2


def test_not_a_mapping(tmp_path):
    assert "a scenario is a mapping" in error_of(write(tmp_path, "- 1\n- 2\n"))


def test_final_db_ids_are_text(tmp_path):
    p = write(tmp_path, GOOD + "final_db:\n  appointments:\n    101: {slot: '2026-12-10T14:00'}\n")
    assert load_scenario(p).final_db == {"appointments": {"101": {"slot": "2026-12-10T14:00"}}}


def test_bundled_suite_covers_the_issue():
    label, scs = load_suite(None)
    assert label == "reference"
    by = {s.name: s for s in scs}
    assert {"order-digits-real", "reschedule-self-correction", "interruption-mid-answer",
            "backchannel-long-answer", "long-call", "silent-caller"} <= set(by)
    assert len(by["long-call"].turns) >= 20
    real = [seg for seg in by["order-digits-real"].turns[1].audio if seg.asterisk]
    assert [seg.asterisk for seg in real] == ["digits/4", "digits/2", "digits/1", "digits/7"]
    assert any(t.barge_in_ms and t.expect.interrupts for t in by["interruption-mid-answer"].turns)
    assert any(t.kind == "backchannel" and t.expect.interrupts is False
               for t in by["backchannel-long-answer"].turns)
    assert by["silent-caller"].agent_silent and all(t.silent for t in by["silent-caller"].turns)
    assert by["reschedule-self-correction"].final_db["appointments"]["101"]["slot"] == "2026-12-10T14:00"
    for path in suite_files(None)[1]:  # attribution of the real recordings stays with the files
        text = path.read_text()
        if "asterisk:" in text:
            assert "Allison Smith" in text and "CC-BY-SA-3.0" in text, path


def test_suite_selection_and_errors(tmp_path):
    _, scs = load_suite("reference", ["silent-caller"])
    assert [s.name for s in scs] == ["silent-caller"]
    with pytest.raises(ScenarioError, match="no scenario named nope"):
        load_suite("reference", ["nope"])
    with pytest.raises(ScenarioError, match="no such suite"):
        load_suite(str(tmp_path / "nowhere"))
    write(tmp_path, GOOD, "a.yaml")
    write(tmp_path, GOOD, "b.yaml")
    with pytest.raises(ScenarioError, match="duplicate scenario names: ok"):
        load_suite(str(tmp_path))


def test_scenario_hash_changes_with_the_script(tmp_path):
    a = load_scenario(write(tmp_path, GOOD, "a.yaml"))
    b = load_scenario(write(tmp_path, GOOD.replace("100", "200"), "b.yaml"))
    assert scenario_hash(a) != scenario_hash(b) and len(scenario_hash(a)) == 16
    assert scenario_hash(a) == scenario_hash(load_scenario(tmp_path / "a.yaml"))


def test_turn_policy_over_the_agent_is_validated_with_its_line(tmp_path):
    p = write(tmp_path, GOOD + "turn_policy:\n  idle: {reprompt_sec: 4}\n")
    msg = error_of(p)
    assert f"{p}:6: field 'turn_policy'" in msg and "idle.reprompt_sec" in msg
    sc = load_scenario(write(tmp_path, GOOD + "turn_policy:\n  idle: {reprompt_ms: 4000}\n", "b.yaml"))
    from rejoinder.turns import TurnPolicy
    assert TurnPolicy().merged(sc.turn_policy).idle.reprompt_ms == 4000


@pytest.mark.parametrize("segment,why", [
    ("{silence_ms: 100, level_dbfs: -40}", "silence_ms takes no"),
    ("{mix: []}", "at least 1 item"),
    ("{asterisk: hello, level_dbfs: 3}", "less than or equal to 0"),
    ("{mix: [{asterisk: nope}]}", "prompt 'nope' not found"),
])
def test_segment_errors(tmp_path, segment, why):
    p = write(tmp_path, f"name: x\nturns:\n  - audio:\n      - {segment}\n")
    assert why in error_of(p)


def test_cut_level_and_mix_render(tmp_path):
    import asyncio

    import numpy as np

    from rejoinder.harness.caller import render_turns
    text = """\
name: m
turns:
  - kind: noise
    audio:
      - asterisk: hello
        start_ms: 100
        duration_ms: 300
        level_dbfs: -30
  - audio:
      - mix:
          - asterisk: hello
          - asterisk: auth-thankyou
            level_dbfs: -20
        duration_ms: 2500
        level_dbfs: -40
"""
    sc = load_scenario(write(tmp_path, text))
    cut, mix = asyncio.run(render_turns(sc))
    rms = lambda x: 20 * np.log10(np.sqrt(np.mean((x.astype(np.float64) / 32768) ** 2)))  # noqa: E731
    assert len(cut.pcm) == 16000 * 300 // 1000 and abs(rms(cut.pcm) - -30) < 0.2
    assert len(mix.pcm) == 16000 * 2500 // 1000 and abs(rms(mix.pcm) - -40) < 0.2
    # each voice is looped to the mix's length: no silent tail after the shorter prompt
    assert np.abs(mix.pcm[-3200:].astype(np.int32)).max() > 0
    h1 = scenario_hash(sc)
    write(tmp_path, text.replace("auth-thankyou", "hello"))
    assert scenario_hash(load_scenario(tmp_path / "s.yaml")) != h1  # a prompt inside a mix counts


def test_the_caller_realism_set_is_in_the_bundled_suite():
    """Issue 12: a backchannel and a short noise during a reply, background babble, silence
    after a long reply, a 3-3-4 phone number read with 1 s pauses — real recordings."""
    _, scs = load_suite(None)
    by = {s.name: s for s in scs}
    bc = by["backchannel-mm-real"].turns[1]
    assert bc.barge_in_ms and bc.kind == "backchannel" and bc.expect.interrupts is False
    assert [seg.asterisk for seg in bc.audio] == ["letters/m"] and bc.audio[0].duration_ms <= 600
    noise = by["noise-during-reply-real"].turns[1]
    assert noise.kind == "noise" and noise.expect.interrupts is False
    assert noise.audio[0].file.startswith("audio/librivox") and noise.audio[0].duration_ms <= 400
    babble = by["background-babble"]
    stretches = [t for t in babble.turns if t.kind == "noise"]
    assert len(stretches) == 2 and all(t.expect.answered is False for t in stretches)
    for t in stretches:
        mix = t.audio[0]
        assert len(mix.mix) >= 6 and -45 <= mix.level_dbfs <= -35
    idle = by["idle-after-long-reply"]
    assert idle.hangs_up and idle.turn_policy["idle"]["reprompt_ms"] > 0
    assert idle.turns[1].silent and "still there" in idle.turns[1].expect.reply_contains
    phone = by["phone-number-pauses-real"].turns[0]
    digits = [seg.asterisk for seg in phone.audio if seg.asterisk]
    pauses = [seg.silence_ms for seg in phone.audio if seg.silence_ms]
    assert len(digits) == 11 and pauses == [300, 800, 800]
    assert phone.expect.transcript_contains == ["".join(d.split("/")[1] for d in digits[1:])]
    for path in suite_files(None)[1]:
        text = path.read_text()
        if "librivox" in text:
            assert "LibriVox" in text and "public domain" in text, path
