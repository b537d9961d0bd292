"""Concurrency sweeps with the fake agent (real sessions and callers on virtual clocks)."""

from __future__ import annotations

import asyncio

from harness_fakes import FakeAgent, tone_suite
from rejoinder.harness.bench import BenchOptions, run_bench
from rejoinder.harness.suite import load_suite
from rejoinder.harness.summary import run_summary
from rejoinder.timeline import SEGMENTS


async def sweep(store, tmp_path, agent, levels=(1, 2), repeat=1, **kw):
    _, scs = load_suite(str(tone_suite(tmp_path / "suite")))
    run_id = store.begin_run({"concurrency": list(levels)}, suite="tones")
    seen = []
    opts = BenchOptions(levels=list(levels), repeat=repeat, artifacts=tmp_path / "art", on_call=seen.append, **kw)
    status = await run_bench(agent, scs, store, run_id, opts)
    return run_id, status, seen


async def test_sweep_runs_every_level_and_stores_every_call(store, tmp_path):
    agent = FakeAgent()
    run_id, status, seen = await sweep(store, tmp_path, agent, levels=(1, 2, 3))
    assert status == "finished" and agent.warmed == 1
    assert len(seen) == agent.calls == (1 + 2 + 3) * 2
    calls = store.calls(run_id)
    assert sorted({c["concurrency"] for c in calls}) == [1, 2, 3]
    assert all(c["success"] for c in calls), [c["failures"] for c in calls]
    s = run_summary(store, run_id)
    assert [lv["concurrency"] for lv in s["levels"]] == [1, 2, 3]
    lv = s["levels"][0]
    assert set(lv["v2v_ms"]) == {"p50", "p90", "p95", "p99"} and lv["v2v_ms"]["p50"] > 0
    assert set(lv["segments"]) == set(SEGMENTS)
    one = {"ok": 1, "n": 1, "rate": 1.0, "pass_at_1": 1.0, "pass_k": 1.0, "k": 1, "causes": {}, "failures": []}
    assert lv["task_success"] == {"alpha": one, "beta": one}
    assert lv["pass"] == {"k": 1, "scenarios": 2, "calls": 2, "calls_ok": 2, "calls_per_scenario": [1],
                          "pass_at_1": 1.0, "pass_at_1_ci95": [0.342, 1.0], "pass_k": 1.0,
                          "scenarios_all_passed": 2}
    assert lv["stalls"] == {"count": 0, "total_ms": 0.0, "turns_with_stalls": 0}
    res = lv["resources"]
    assert res["rss_peak_mb"] > 0 and res["cpu_s"] > 0 and res["caller_cpu_s"] > 0
    assert lv["ear_check_max_ms"] is not None and lv["ear_check_max_ms"] <= 1.0  # ears agree with the line
    # virtual clocks: every turn of every level waits exactly as long (the scripted stages), so
    # no level is slower than the first and the capacity is the highest level
    v2v = {t["v2v_ms"] for t in store.turns(run_id)}
    assert len(v2v) == 1 and 900 < v2v.pop() < 1100
    assert all(x["v2v_ms"]["p95"] == lv["v2v_ms"]["p50"] for x in s["levels"])
    assert s["capacity"]["concurrency"] == 3
    assert lv["time_to_answer_ms"] == lv["v2v_ms"]  # the LLM wrote every word
    assert lv["failure_causes"] == {}
    assert store.run(run_id)["status"] == "finished"
    # per call: the artifacts, without the audio unless asked for
    art = tmp_path / "art" / run_id
    folders = list(art.iterdir())
    assert len(folders) == 12 and all((f / "timeline.jsonl").exists() for f in folders)
    assert not any((f / "call.wav").exists() for f in folders)
    turns = store.turns(run_id)
    assert {t["caller_turn"] for t in turns} == {0, 1}


async def test_a_failing_call_is_recorded_and_the_sweep_goes_on(store, tmp_path):
    run_id, status, _ = await sweep(store, tmp_path, FakeAgent(fail_on=("beta",)), levels=(1, 2))
    assert status == "finished"
    calls = store.calls(run_id)
    bad = [c for c in calls if c["scenario"] == "beta"]
    assert len(bad) == 3 and all(not c["success"] for c in bad)
    assert bad[0]["failures"] == ["the call did not complete: RuntimeError('model server went away')"]
    assert all(c["success"] for c in calls if c["scenario"] == "alpha")
    s = run_summary(store, run_id)
    assert s["levels"][1]["task_success"]["beta"]["rate"] == 0.0
    assert store.search("model server went away")


class HangingAgent(FakeAgent):
    async def call(self, turns, **kw):
        await asyncio.sleep(30)


async def test_a_call_over_its_timeout_is_a_failed_call(store, tmp_path):
    run_id, status, _ = await sweep(store, tmp_path, HangingAgent(), levels=(2,), call_timeout_s=0.2)
    assert status == "finished"
    calls = store.calls(run_id)
    assert len(calls) == 4 and all(c["error"] == "timed out" for c in calls)
    assert run_summary(store, run_id)["levels"][0]["v2v_ms"]["p50"] is None


async def test_cancelling_a_sweep_keeps_finished_calls(store, tmp_path):
    done = []

    class SlowSecond(FakeAgent):
        async def call(self, turns, **kw):
            if self.calls >= 1:
                await asyncio.sleep(30)
            return await super().call(turns, **kw)

    task = asyncio.ensure_future(sweep(store, tmp_path, SlowSecond(), levels=(1,)))
    while not store.runs() or not store.calls(store.runs()[0]["id"]):
        await asyncio.sleep(0.02)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        done.append(True)
    run = store.runs()[0]
    assert done and run["status"] == "cancelled" and len(store.calls(run["id"])) == 1


def test_turn_taking_summary_counts_and_endpointing_after_dictation():
    from rejoinder.harness.summary import turn_taking_summary

    def t(text, endpointing, v2v=900.0):
        return {"transcript": text, "v2v_ms": v2v, "segments": {"endpointing": endpointing}}
    turns = [t("4, 1, 5, 8, 6, 2, 3, 0, 7, 9.", 600.0), t("Order 4217", 200.0), t("order 42", 1500.0),
             t("Hello.", 250.0), t("4 2 1 7", 9999.0, v2v=None), t("Thank you", 240.0)]
    calls = [{"extra": {"turn_taking": {"resumed": {"backchannel": 1, "unclear": 2}, "rejected_noise": 2,
                                        "idle_prompts": 2, "hangup": "no_input"}}},
             {"extra": {"turn_taking": {"resumed": {"unclear": 1}, "rejected_noise": 0,
                                        "idle_prompts": 0, "hangup": None}}},
             {"extra": {}}]
    s = turn_taking_summary(turns, calls)
    assert s["resumed"] == {"backchannel": 1, "unclear": 3}
    assert (s["rejected_noise"], s["idle_prompts"], s["hangups"]) == (2, 2, 1)
    # answered turns ending in a number of ≥ 3 digits: 600, 200 (and not "order 42", not unanswered)
    d = s["dictation_endpointing_ms"]
    assert d["n"] == 2 and d["p50"] == 400.0 and d["p95"] == 580.0
