"""pass@1 and pass^k per scenario, the suite's figures with their n, and where they are shown."""

from __future__ import annotations

import math

import pytest

from harness_fakes import FakeAgent, tone_suite
from rejoinder.harness.bench import BenchOptions, run_bench
from rejoinder.harness.report import render_html
from rejoinder.harness.success import pass_hat_k, scenario_success, suite_success, wilson
from rejoinder.harness.suite import load_suite
from rejoinder.harness.summary import run_summary


def test_pass_hat_k_is_the_chance_that_k_calls_all_pass():
    assert pass_hat_k(3, 3, 3) == 1.0 and pass_hat_k(2, 3, 3) == 0.0  # n == k: all or nothing
    assert pass_hat_k(2, 3, 1) == pytest.approx(2 / 3)               # pass^1 is pass@1
    assert pass_hat_k(4, 6, 3) == pytest.approx(math.comb(4, 3) / math.comb(6, 3))  # 4/20
    assert pass_hat_k(1, 2, 3) is None                                # too few calls to say
    with pytest.raises(ValueError, match="0 ≤ c ≤ n"):
        pass_hat_k(4, 3, 1)
    with pytest.raises(ValueError, match="k ≥ 1"):
        pass_hat_k(1, 3, 0)


def test_wilson_interval():
    assert wilson(0, 0) == (None, None)
    lo, hi = wilson(5, 10)
    assert lo == pytest.approx(0.237, abs=1e-3) and hi == pytest.approx(0.763, abs=1e-3)
    assert wilson(10, 10)[1] == 1.0 and wilson(0, 10)[0] == 0.0


def call(name, ok, *failures, causes=None, error=None):
    return {"scenario": name, "success": ok, "failures": list(failures), "error": error,
            "extra": {"causes": causes if causes is not None else ["no tool"] * len(failures)}}


def test_scenario_and_suite_figures_with_causes():
    calls = [call("a", True), call("a", False, "caller turn 1: expected lookup_order", causes=["no tool"]),
             call("a", True), call("b", False, "x", "y", causes=["echo", "not said"]),
             call("b", False, "the call did not complete: timed out", causes=[], error="timed out"),
             call("b", False, "x", causes=["echo"])]
    per = scenario_success(calls, 3)
    assert per["a"] == {"ok": 2, "n": 3, "rate": 0.667, "pass_at_1": 0.667, "pass_k": 0.0, "k": 3,
                        "causes": {"no tool": 1}, "failures": ["caller turn 1: expected lookup_order"]}
    assert per["b"]["causes"] == {"echo": 2, "not said": 1, "call failed": 1}
    assert per["b"]["pass_k"] == 0.0 and per["b"]["failures"] == [
        "the call did not complete: timed out", "x", "y"]
    suite = suite_success(per, 3)
    assert suite == {"k": 3, "scenarios": 2, "calls": 6, "calls_ok": 2, "calls_per_scenario": [3],
                     "pass_at_1": 0.333, "pass_at_1_ci95": list(wilson(2, 6)), "pass_k": 0.0,
                     "scenarios_all_passed": 0}
    # a scenario with fewer calls than k: no pass^k for it, so none for the suite
    short = scenario_success(calls[:2], 3)
    assert short["a"]["pass_k"] is None and suite_success(short, 3)["pass_k"] is None


class FlakyAgent(FakeAgent):
    """Fails the second call of scenario beta (a dead model server), passes everything else."""

    def __init__(self) -> None:
        super().__init__()
        self.beta = 0

    async def call(self, turns, *, call_id=None, **kw):
        if "beta" in (call_id or ""):
            self.beta += 1
            if self.beta == 2:
                self.calls += 1
                raise RuntimeError("model server went away")
        return await super().call(turns, call_id=call_id, **kw)


async def test_repeat_3_gives_pass_hat_3_per_scenario_and_in_every_view(store, tmp_path):
    _, scs = load_suite(str(tone_suite(tmp_path / "suite")))
    run_id = store.begin_run({"concurrency": [1], "repeat": 3}, suite="tones")
    await run_bench(FlakyAgent(), scs, store, run_id, BenchOptions(levels=[1], repeat=3, artifacts=None))
    lv = run_summary(store, run_id)["levels"][0]
    alpha, beta = lv["task_success"]["alpha"], lv["task_success"]["beta"]
    assert (alpha["ok"], alpha["n"], alpha["pass_at_1"], alpha["pass_k"], alpha["k"]) == (3, 3, 1.0, 1.0, 3)
    assert (beta["ok"], beta["n"], beta["pass_at_1"], beta["pass_k"]) == (2, 3, 0.667, 0.0)
    assert beta["causes"] == {"call failed": 1}
    assert lv["pass"]["pass_at_1"] == 0.833 and lv["pass"]["pass_k"] == 0.5
    assert lv["pass"]["calls"] == 6 and lv["pass"]["scenarios_all_passed"] == 1
    page = render_html(store, run_id)
    assert "Task success: pass@1 and pass^3" in page and "call failed ×1" in page
