"""compare: a change in one component shows up in that segment only."""

from __future__ import annotations

from harness_fakes import synthetic_run
from rejoinder.harness.compare import compare_runs, compare_turns


def test_only_the_tts_segment_and_v2v_differ(store, two_runs):
    a, b = two_runs
    res = compare_runs(store, a, b)
    assert [lv["concurrency"] for lv in res["levels"]] == [1, 2]
    for lv in res["levels"]:
        assert lv["real"] == ["v2v", "tts_ttfb"], lv["rows"]
        tts = next(r for r in lv["rows"] if r["boundary"] == "tts_ttfb")
        assert 80 < tts["diff"] < 160 and tts["ci95"][0] < 120 < tts["ci95"][1]
        others = [r for r in lv["rows"] if r["boundary"] not in ("v2v", "tts_ttfb")]
        assert all(r["verdict"] in ("no difference", "small", "uncertain", "n/a") for r in others)
    assert {"key": "config.stack.tts", "a": "piper", "b": "espeak"} in res["conditions_differ"]


def test_identical_settings_show_no_real_difference(store):
    a = synthetic_run(store, tts="piper", seed=10)
    b = synthetic_run(store, tts="piper", seed=11)
    res = compare_runs(store, a, b, concurrency=2)
    assert [lv["concurrency"] for lv in res["levels"]] == [2]
    assert res["levels"][0]["real"] == []
    assert res["conditions_differ"] == []


def test_concurrency_shows_up_in_endpointing_within_one_run(store):
    a = synthetic_run(store, tts="piper", seed=3, queue_ms=80.0)
    turns = store.turns(a)
    rows = compare_turns([t for t in turns if t["concurrency"] == 1], [t for t in turns if t["concurrency"] == 2])
    real = [r["boundary"] for r in rows if r["verdict"] == "real"]
    assert "endpointing" in real and "tts_ttfb" not in real


def test_too_few_turns_is_not_applicable():
    t = [{"v2v_ms": 500.0, "segments": {"endpointing": 500.0}}]
    rows = compare_turns(t, t)
    assert all(r["verdict"] == "n/a" for r in rows)
