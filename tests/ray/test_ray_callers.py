"""The distributed callers end to end on a small local Ray cluster: zero-cost models, real
sessions and simulated callers in real time, two actor processes, every call in the store."""

from __future__ import annotations

import os

import numpy as np

from rejoinder.config import AgentConfig
from rejoinder.harness.bench import BenchOptions
from rejoinder.harness.ray_load import run_ray_bench
from rejoinder.harness.store import SQLiteStore
from rejoinder.harness.suite import load_suite
from rejoinder.harness.summary import run_summary


async def test_callers_on_two_actors_land_in_one_run(ray_cluster, tmp_path):
    assert ray_cluster.cpus == 2 and ray_cluster.info["n_nodes"] == 1 and ray_cluster.info["ray"]
    _, scs = load_suite(None, ["order-digits-real"])
    store = SQLiteStore(tmp_path / "runs.sqlite")
    run_id = store.begin_run({"ray": ray_cluster.info, "concurrency": [3]}, suite="reference")
    spec = {"kind": "runtime", "cfg": AgentConfig().model_dump(mode="json"), "zero_cost": True}
    ready, levels = [], []
    status = await run_ray_bench(spec, scs, store, run_id, BenchOptions(levels=[3], call_timeout_s=120),
                                 n_workers=2, cores=2, on_workers=ready.extend,
                                 on_level=lambda n, s: levels.append(s))
    assert status == "finished"
    pids = {w["pid"] for w in ready}
    assert len(pids) == 2 and os.getpid() not in pids  # two actor processes, not this one
    calls = store.calls(run_id)
    assert sorted(c["worker"] for c in calls) == [0, 1, 2] and all(c["error"] is None for c in calls)
    stats = store.run(run_id)["levels"][3]
    assert [(w["worker"], w["callers"]) for w in stats["workers"]] == [(0, 2), (1, 1)]  # caller w → actor w mod 2
    assert {w["pid"] for w in stats["workers"]} == pids and stats["calls"] == 3
    turns = [t for t in store.turns(run_id) if t["v2v_ms"] is not None]
    assert len(turns) >= 6 and all(t["transcript"] == "Where is my order?" for t in turns)
    lv = run_summary(store, run_id)["levels"][0]
    assert lv["v2v_ms"]["p99"] == round(float(np.percentile([t["v2v_ms"] for t in turns], 99)), 3)
    assert 0 < lv["v2v_ms"]["p50"] < 2000  # zero-cost models: the end-of-turn silence and playout
    assert store.run(run_id)["status"] == "finished"
    store.close()


def test_bench_ray_on_the_command_line_records_the_cluster(ray_cluster, tmp_path):
    """`rejoinder bench --ray … --zero-cost`: the run's conditions describe the cluster and the
    workers, its level keeps each worker's figures (this process is connected already, so the
    command uses the test's cluster and leaves it running)."""
    import sys
    from pathlib import Path

    from typer.testing import CliRunner

    sys.path.insert(0, str(Path(__file__).parent.parent / "harness"))
    from harness_fakes import tone_suite

    from rejoinder.cli import app

    suite = tone_suite(tmp_path / "suite", names=("alpha",))
    res = CliRunner().invoke(app, ["bench", str(suite), "--zero-cost", "--ray", "local", "--concurrency", "2",
                                   "--store", str(tmp_path / "cli.sqlite"), "--json"])
    assert res.exit_code == 0, res.output
    st = SQLiteStore(tmp_path / "cli.sqlite")
    [run] = st.runs(5)
    info = st.run(run["id"])
    assert info["conditions"]["ray"]["workers"] == 2 and info["conditions"]["ray"]["cpus"] == 2
    assert info["conditions"]["models"]["name"] == "zero-cost"
    assert len(info["levels"][2]["workers"]) == 2 and run["n_calls"] == 2
    st.close()
    import ray
    assert ray.is_initialized()  # the test's cluster is still up for the next test
