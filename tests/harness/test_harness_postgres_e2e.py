"""A team's shared store, end to end: two real `rejoinder bench` processes (embedded models, real
time) write into one PostgreSQL store at once; then `runs list | search | compare | show` work on
it, and after `runs export | import` into a SQLite file they answer exactly the same there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import rejoinder

pytest.importorskip("rejoinder.adapters.registry")
REJOINDER = [sys.executable, "-m", "rejoinder"]
SCENARIO = "order-digits-real"  # real speech: Asterisk prompts (Allison Smith, CC-BY-SA-3.0)
ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(Path(rejoinder.__file__).parents[1])}


def cli(*args: str, store: str, timeout: int = 180) -> subprocess.CompletedProcess:
    proc = subprocess.run(REJOINDER + list(args) + ["--store", store], capture_output=True, text=True,
                          timeout=timeout, env=ENV)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


# Two full model stacks on the CI machine's 2 shared cores: one thread each for llama.cpp and
# CTranslate2, so that neither process's OpenMP team spins at a barrier while the other holds the
# core it waits for (a team of one has no barriers; see rejoinder._threads).
ONE_THREAD = "stack:\n  whisper:\n    cpu_threads: 1\n  llama:\n    n_threads: 1\n"


def _communicate(proc: subprocess.Popen, timeout: int) -> tuple[str, str]:
    """``proc.communicate``; past ``timeout`` its Python stacks (py-spy, when installed) go into
    the failure, so a slow run and a stuck one can be told apart."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        spy = Path(sys.executable).with_name("py-spy")
        dump = (subprocess.run([str(spy), "dump", "--pid", str(proc.pid)], capture_output=True,
                               text=True, timeout=60).stdout if spy.exists() else "(no py-spy)")
        proc.kill()
        pytest.fail(f"{' '.join(map(str, proc.args))} ran past {timeout} s; its stacks:\n{dump}")


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    from pgserver import PgServer
    tmp = tmp_path_factory.mktemp("pg-e2e")
    config = tmp / "one-thread.yaml"
    config.write_text(ONE_THREAD)
    with PgServer() as pg:
        url = pg.new_database()
        benches = [subprocess.Popen(REJOINDER + ["bench", "--scenarios", SCENARIO, "--concurrency", "1",
                                                 "--tts", tts, "--store", url, "--artifacts", str(tmp / tts),
                                                 "--config", str(config), "--json"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, env=ENV) for tts in ("piper", "espeak")]
        outs = [_communicate(p, 900) for p in benches]
        for p, (_, err) in zip(benches, outs):
            assert p.returncode == 0, err[-3000:]
        runs = [json.loads(out)["run_id"] for out, _ in outs]
        yield url, runs, tmp


def test_two_benches_at_once_lose_nothing(shared):
    url, (piper, espeak), _ = shared
    rows = json.loads(cli("runs", "list", "--json", store=url).stdout)
    by_id = {r["id"]: r for r in rows}
    assert set(by_id) == {piper, espeak}
    for run_id in (piper, espeak):
        assert by_id[run_id]["status"] == "finished" and by_id[run_id]["n_calls"] == 1
    from rejoinder.harness.store import open_store
    with open_store(url) as st:
        for run_id in (piper, espeak):
            assert len(st.turns(run_id)) >= 2
            assert st.run(run_id)["levels"][1]["cpu_s"] > 0


def test_list_search_compare_show_match_sqlite_after_export_import(shared):
    url, (piper, espeak), tmp = shared
    assert "4217" in cli("runs", "search", "4217", store=url).stdout
    dump = tmp / "runs.jsonl"
    cli("runs", "export", "--out", str(dump), store=url)
    sqlite = str(tmp / "copy.sqlite")
    imported = cli("runs", "import", str(dump), store=sqlite)
    assert "imported 2 run(s)" in imported.stderr
    same = lambda *a: [json.loads(cli(*a, store=s).stdout) for s in (url, sqlite)]  # noqa: E731
    pg_list, lite_list = same("runs", "list", "--json")
    assert pg_list == lite_list
    pg_cmp, lite_cmp = same("runs", "compare", piper, espeak, "--json")
    assert pg_cmp == lite_cmp
    assert "config.stack.tts" in {d["key"] for d in pg_cmp["conditions_differ"]}
    pg_show, lite_show = same("runs", "show", espeak, "--json")
    assert pg_show == lite_show
    for query in ("4217", "espeak", "order* OR haircut"):
        pg_hits, lite_hits = same("runs", "search", query, "--json")
        assert pg_hits and {(h["run_id"], h["call_id"], h["kind"]) for h in pg_hits} == \
            {(h["run_id"], h["call_id"], h["kind"]) for h in lite_hits}, query
