"""The harness commands, driven through typer (fake agent; synthetic stored runs)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from harness_fakes import FakeAgent, synthetic_run, tone_suite
from rejoinder.cli import app

runner = CliRunner()


def run(*args, store=None):
    argv = list(args) + (["--store", str(store)] if store else [])
    res = runner.invoke(app, argv, catch_exceptions=False)
    return res


@pytest.fixture
def fake_agent(monkeypatch):
    import rejoinder.runtime

    class FakeRuntime(FakeAgent):
        def __init__(self, cfg):
            super().__init__()
            from rejoinder.agent import load_agent
            self.agent = load_agent(cfg.agent)
    monkeypatch.setattr(rejoinder.runtime, "Runtime", FakeRuntime)


def test_bench_json_summary_and_store(tmp_path, fake_agent):
    suite = tone_suite(tmp_path / "suite")
    store = tmp_path / "runs.sqlite"
    res = run("bench", str(suite), "--concurrency", "1,2,3", "--json", "--note", "fake sweep", store=store)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert [lv["concurrency"] for lv in out["levels"]] == [1, 2, 3]
    for lv in out["levels"]:
        assert set(lv["v2v_ms"]) == {"p50", "p90", "p95", "p99"}
        assert {"endpointing", "transcription", "tts_ttfb", "playout"} <= set(lv["segments"])
        assert set(lv["stalls"]) >= {"count", "total_ms"}
        assert lv["task_success"]["alpha"]["rate"] == 1.0
        assert lv["resources"]["rss_peak_mb"] > 0
        # end of turn against the callers' audio, speculation, longest silence (issue 18)
        assert lv["endpointing"]["utterances"] >= 1 and lv["endpointing"]["delay_ms"]["n"] >= 1
        assert lv["speculation"]["unconfirmed_words"] == 0 and lv["speculation"]["turns"] >= 1
        assert lv["silence"]["longest_silence_ms"]["n"] >= 1
    assert out["capacity"]["factor"] == 1.5 and len(out["curve"]) == 3
    listed = json.loads(run("runs", "list", "--json", store=store).stdout)
    assert listed[0]["id"] == out["run_id"] and listed[0]["status"] == "finished" and listed[0]["n_calls"] == 12
    shown = json.loads(run("runs", "show", out["run_id"][:15], "--json", store=store).stdout)
    cond = shown["run"]["conditions"]
    for key in ("code", "software", "models", "machine", "config", "hosting", "network", "concurrency", "scenarios"):
        assert key in cond, key
    assert cond["machine"]["cores_logical"] >= 1 and cond["software"]["python"]
    assert set(cond["scenarios"]) == {"alpha", "beta"} and cond["concurrency"] == [1, 2, 3]
    assert shown["run"]["notes"][0]["text"] == "fake sweep"
    # the data-boundary ledger: in the run's conditions and in every call's record
    assert {e["data"] for e in cond["data_boundary"]["entries"]} >= {"caller_audio", "prompts", "generated_text"}
    from rejoinder.harness.store import open_store
    calls = open_store(str(store)).calls(out["run_id"])
    assert calls and all(c["extra"]["ledger"]["entries"] for c in calls)


def test_bench_rejects_a_bad_suite_clearly(tmp_path, fake_agent):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nturns:\n  - audio:\n      - say: hi\n    kind: shout\n")
    res = run("bench", str(bad), store=tmp_path / "s.sqlite")
    assert res.exit_code == 2 and f"{bad}:5: field 'turns.0.kind'" in res.output
    res = run("bench", "--scenarios", "nope", store=tmp_path / "s.sqlite")
    assert res.exit_code == 2 and "no scenario named nope" in res.output
    res = run("bench", "--concurrency", "1,x", store=tmp_path / "s.sqlite")
    assert res.exit_code != 0


def test_runs_show_search_note_compare_and_report(tmp_path, store):
    a = synthetic_run(store, tts="piper", seed=1)
    b = synthetic_run(store, tts="espeak", seed=2, tts_shift_ms=120.0)
    path = store.path
    res = run("runs", "list", store=path)
    assert a in res.stdout and b in res.stdout and "espeak" in res.stdout
    res = run("runs", "show", b, store=path)
    assert res.exit_code == 0 and "p95" in res.stdout and "final_db" in res.stdout
    assert run("runs", "note", a, "warm cache, quiet machine", store=path).exit_code == 0
    hits = json.loads(run("runs", "search", "quiet machine", "--json", store=path).stdout)
    assert [(h["run_id"], h["kind"]) for h in hits] == [(a, "note")]
    assert "no matches" in run("runs", "search", "zebra", store=path).stdout
    cmp = json.loads(run("runs", "compare", a, b, "--json", store=path).stdout)
    assert [lv["real"] for lv in cmp["levels"]] == [["v2v", "tts_ttfb"], ["v2v", "tts_ttfb"]]
    text = run("runs", "compare", a, b, "--concurrency", "1", store=path).stdout
    assert "config.stack.tts" in text and "real differences: v2v, tts_ttfb" in text
    out = tmp_path / "r.html"
    res = run("report", a, "--out", str(out), store=path)
    assert res.exit_code == 0 and out.exists() and 'id="plot-waterfall"' in out.read_text()
    assert run("runs", "show", "nope", store=path).exit_code == 2


def test_scenarios_lists_the_bundled_suite():
    res = run("scenarios")
    assert res.exit_code == 0 and "long-call" in res.stdout and "silent-caller" in res.stdout


def test_public_names_resolve():
    import rejoinder.harness as h
    assert all(callable(getattr(h, name)) for name in h.__all__)


def test_call_reports_the_scenario_expectations(tmp_path, fake_agent):
    suite = tone_suite(tmp_path / "suite", names=("alpha",))
    res = run("call", str(suite / "alpha.yaml"), "--out", str(tmp_path / "out"))
    assert res.exit_code == 0, res.output
    assert "✓ alpha: all 4 expectations met" in res.output
    res = run("call", str(suite / "alpha.yaml"), "--out", str(tmp_path / "out"), "--json")
    lines = [json.loads(x) for x in res.stdout.strip().splitlines()]
    assert [x["turn_id"] for x in lines] == [1, 2]  # stdout: one object per turn, nothing else
    saved = json.loads((tmp_path / "out" / "expectations.json").read_text())
    assert saved == {"scenario": "alpha", "success": True, "checks": 4, "failures": [], "causes": []}
    # a budget no reply can meet: reported like bench does, and the exit status says so
    tight = tone_suite(tmp_path / "tight", names=("gamma",), budget=1)
    res = run("call", str(tight / "gamma.yaml"), "--out", str(tmp_path / "out"))
    assert res.exit_code == 3 and "✗ gamma: 1 of 4 expectations failed" in res.output
    assert "caller turn 1: V2V" in res.output and "over the budget of 1 ms" in res.output


def test_bench_prints_each_scenario_outcome_and_the_turn_taking_table(tmp_path, fake_agent):
    suite = tone_suite(tmp_path / "suite", names=("alpha",))
    tone_suite(suite, names=("gamma",), budget=1)
    res = run("bench", str(suite), "--concurrency", "1", store=tmp_path / "runs.sqlite")
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "scenario outcomes" in out and "turn-taking with real callers" in out
    row = next(line for line in out.splitlines() if line.strip().startswith("gamma"))
    assert "0/1" in row and "over the budget of 1 ms" in row
    assert "1/1" in next(line for line in out.splitlines() if line.strip().startswith("alpha"))


def test_bench_repeat_reports_pass_hat_k_in_bench_show_and_json(tmp_path, fake_agent):
    suite = tone_suite(tmp_path / "suite")
    store = tmp_path / "runs.sqlite"
    res = run("bench", "--suite", str(suite), "--concurrency", "1", "--repeat", "3", store=store)
    assert res.exit_code == 0, res.output
    assert "pass^3" in res.stdout and "pass@1 100% over 2 scenario(s), 6 call(s)" in res.stdout
    shown = run("runs", "show", "last", store=store)
    assert "pass^3 100%" in shown.stdout
    lv = json.loads(run("runs", "show", "last", "--json", store=store).stdout)["summary"]["levels"][0]
    assert lv["task_success"]["alpha"]["pass_k"] == 1.0 and lv["task_success"]["alpha"]["n"] == 3
    assert lv["pass"]["k"] == 3 and lv["pass"]["calls_per_scenario"] == [3]
    res = run("bench", "reference", "--suite", "heldout", store=store)
    assert res.exit_code == 2 and "two suites given" in res.output
