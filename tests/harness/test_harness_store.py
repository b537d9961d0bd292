"""The run store: round trip, search, run references, crash safety and schema versions."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness_fakes import synthetic_run
from rejoinder.harness.store import SCHEMA_VERSION, RunStore, StoreError, default_store_path


def test_round_trip(store):
    run_id = synthetic_run(store, tts="piper", seed=0, levels=(1,), calls_per_worker=2)
    run = store.run(run_id)
    assert run["status"] == "finished" and run["ended_at"] and run["conditions"]["config"]["stack"]["tts"] == "piper"
    assert run["levels"][1]["rss_peak_mb"] == 700.0
    calls, turns = store.calls(run_id), store.turns(run_id)
    assert len(calls) == 2 and len(turns) == 6
    t = turns[0]
    assert sum(t["segments"].values()) == pytest.approx(t["v2v_ms"], abs=0.01)
    assert run["summary"]["levels"][0]["concurrency"] == 1


def test_wal_and_version(store):
    assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.version == SCHEMA_VERSION


def test_search_transcripts_failures_notes_and_conditions(store):
    a = synthetic_run(store, tts="piper", seed=0, levels=(1,), calls_per_worker=2)
    b = synthetic_run(store, tts="espeak", seed=1, levels=(1,), calls_per_worker=2)
    store.add_note(a, "Piper voice sounds clipped at the start of replies")
    hits = store.search("espeak")
    assert {h["run_id"] for h in hits} == {b}
    assert {h["kind"] for h in hits} >= {"conditions", "transcript"}
    assert [h["run_id"] for h in store.search("clipped replies")] == [a]
    assert store.search("clipped replies")[0]["kind"] == "note"
    assert all(h["kind"] == "failure" for h in store.search("final_db appointments"))
    assert store.search('"sounds clipped"')[0]["run_id"] == a  # FTS5 phrase syntax passes through
    assert store.search("clip*")  # prefix
    assert store.search("haircut")  # porter stemming: "haircut" in transcripts
    assert store.search("nothing-like-this-anywhere") == []
    with pytest.raises(StoreError, match="invalid search"):
        store.search('"unbalanced')


def test_resolve_run_references(store):
    a = store.begin_run({}, run_id="20250101-000000-aaaa")
    b = store.begin_run({}, run_id="20250102-000000-bbbb")
    assert store.resolve("20250101") == a
    assert store.resolve("last") == b and store.resolve("last~1") == a
    with pytest.raises(StoreError, match="ambiguous"):
        store.resolve("2025")
    with pytest.raises(StoreError, match="no run matches"):
        store.resolve("1999")
    with pytest.raises(StoreError, match="fewer runs"):
        store.resolve("last~5")


CRASHER = textwrap.dedent("""
    import os, sys
    sys.path[:0] = [{tests!r}, {tests_root!r}]
    from rejoinder.harness.store import RunStore
    from harness_fakes import synthetic_run
    store = RunStore({path!r})
    run_id = synthetic_run(store, tts="piper", seed=0, levels=(1, 2), calls_per_worker=3, crash_after=2)
    print(run_id, flush=True)
    os._exit(17)  # killed midway: no close, no finish, no cleanup
""")


def test_a_run_killed_midway_keeps_every_finished_call(tmp_path):
    path = tmp_path / "runs.sqlite"
    script = CRASHER.format(tests=str(Path(__file__).parent), tests_root=str(Path(__file__).parent.parent),
                            path=str(path))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).parent)
    assert proc.returncode == 17, proc.stderr
    run_id = proc.stdout.strip()
    with RunStore(path) as store:
        run = store.run(run_id)
        assert run["status"] == "interrupted"  # "running", but its process is gone
        assert run["ended_at"] is None
        calls = store.calls(run_id)
        assert len(calls) == 2
        assert len(store.turns(run_id)) == 6
        assert store.search("haircut")  # and the finished calls are searchable


def test_opens_and_migrates_a_store_written_by_an_older_version(tmp_path):
    path = tmp_path / "old.sqlite"
    with RunStore(path, upto=1) as old:  # what version 1 wrote: no search index yet
        assert old.version == 1
        run_id = synthetic_run(old, tts="piper", seed=0, levels=(1,), calls_per_worker=2)
        old.conn.execute("INSERT INTO notes (run_id, at, text) VALUES (?, 'now', 'written by v1')", (run_id,))
        with pytest.raises(StoreError, match="no search index"):
            old.search("anything")
    with RunStore(path) as new:
        assert new.version == SCHEMA_VERSION
        assert len(new.calls(run_id)) == 2
        assert [h["kind"] for h in new.search("written v1")] == ["note"]  # migration indexed old rows
        assert new.search("haircut")


def test_a_newer_store_errors_clearly(tmp_path):
    path = tmp_path / "new.sqlite"
    RunStore(path).close()
    con = sqlite3.connect(path)
    con.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    con.commit()
    con.close()
    with pytest.raises(StoreError, match=r"newer rejoinder .*upgrade rejoinder"):
        RunStore(path)


def test_not_a_store(tmp_path):
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(StoreError, match="not a rejoinder run store"):
        RunStore(junk)
    other = tmp_path / "other.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE orders (id)")
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="not a rejoinder run store.*orders"):
        RunStore(other)


def test_default_location(monkeypatch, tmp_path):
    monkeypatch.setenv("REJOINDER_STORE", str(tmp_path / "x.sqlite"))
    assert default_store_path() == tmp_path / "x.sqlite"
    monkeypatch.delenv("REJOINDER_STORE")
    p = default_store_path()
    assert p.name == "runs.sqlite" and "rejoinder" in str(p)
